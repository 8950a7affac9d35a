"""Whole pipelines on real text, like for like: from the same Parquet file to batches, against Grain's own pipeline
and against a plain pyarrow read of the token column (the floor).

The corpus (benchmarks/corpora.py: real text, a published tokenizer) is one Parquet file with a ``tokens``
list<int32> column in row groups of 1024 documents, the form a MaxText user's Grain pipeline reads. Every side reads
that file itself, inside its clock, for one epoch in storage order (no shuffle), and stops at batches of
``--batch`` rows of ``--ctx`` tokens with segment ids and positions:

* ``pyarrow read (floor)``: ``pq.ParquetFile.read_row_group`` of the token column, one row group at a time, its
  values as a numpy array (no packing): what reading the tokens costs at least. The column holds token ids, so the
  floor is the read alone (a text column's floor would add its tokenizing: a pipeline must tokenize it too).
* ``pyarrow read, column held``: the same read, every row group's values kept to the end (``x held``): the floor of
  a pipeline that draws documents from anywhere in the file (a full shuffle, a plan over every document), which must
  hold the whole column (its pages faulted in once; the floor reuses one row group's buffers).
* ``pyarrow iter_batches (65,536 rows)``: the same column by ``iter_batches`` at its default batch size, which
  stitches row groups of 1024 lists into batches of 65,536: 3-4x the floor's CPU (the floor of issue 34's table,
  kept to show the difference).
* ``grain first_fit/32``, ``grain best_fit/32``: what a MaxText Grain pipeline does: ``ParquetIterDataset`` ->
  each row's tokens as an int32 array -> cut into pieces of at most ctx (``FlatMapIterDataset``) ->
  ``FirstFitPackIterDataset`` / ``BestFitPackIterDataset`` (32 bins) -> ``.batch(batch)``: ``tokens``,
  ``tokens_segment_ids``, ``tokens_positions``.
* ``datatools streaming``, ``datatools planned``: ``datatools.pipeline.build`` of a config reading the same file
  (``shuffle: none``, packing BFD within windows of 1024 documents / over all documents: planned is the default
  mode; format ``datatools``: ``tokens``, ``segment_ids``, ``positions``, ``loss_mask``) with an empty lengths
  cache (``DATATOOLS_CACHE_DIR``, a fresh folder each run): a first run, its pass over the file for the lengths
  included. ``..., lengths cached``: the same after an untimed run filled the lengths cache (a second run, a
  restart).
* ``datatools streaming, token store``: streaming from a token store written from the corpus before the clock.

Each side runs in its own process pinned to one core, after an untimed warm-up (one batch of a 2,000-document
file), and is timed for CPU seconds (every thread of the process) and wall seconds, with its peak resident
memory. Sides are interleaved in ``--rounds`` rounds, each in a rotated order; medians. With ``--hog`` (the
default) the benchmark also runs every round with a busy loop pinned to the *other* core (``while True: pass``
in a child process, started and stopped by this script): the machine is busy, as a training host's is.

``--parquet-only`` runs the Parquet rows that the issue-58 targets compare (the floor, datatools streaming and
planned, lengths cached or not) and leaves out Grain's, ``iter_batches`` and the token store (minutes of a loaded
machine): the targets' rows, each against the floor, in the same run.

    python benchmarks/pipeline.py [--corpus man] [--ctx 1024] [--batch 32] [--rounds 3] [--no-hog] [--parquet-only]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import announce, fmt_rate, one_core, print_table, write_json

one_core()

FLOOR = "pyarrow read (floor)"
HELD = "pyarrow read, column held"
CACHED = ", lengths cached"
SIDES = (
    FLOOR,
    HELD,
    "pyarrow iter_batches (65,536 rows)",
    "grain first_fit/32",
    "grain best_fit/32",
    "datatools streaming",
    "datatools streaming" + CACHED,
    "datatools planned",
    "datatools planned" + CACHED,
    "datatools streaming, token store",
)
REF = "grain first_fit/32"
PARQUET_TARGETS = (FLOOR, HELD, *(s for s in SIDES if s.startswith("datatools") and "token store" not in s))


def rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _row_group_values(path: str, held: list | None) -> int:
    """Tokens of the token column, read one row group at a time as numpy; each group's values appended to ``held``
    when given (kept to the end), else let go."""
    import pyarrow.parquet as pq

    real = 0
    f = pq.ParquetFile(path)
    for k in range(f.num_row_groups):
        for chunk in f.read_row_group(k, columns=["tokens"]).column(0).chunks:
            values = chunk.values.to_numpy(zero_copy_only=False)
            real += values.shape[0]
            if held is not None:
                held.append(values)
    return real


def floor_side(path: str, ctx: int, batch: int) -> tuple[int, int]:
    """The token column read one row group at a time, its values as numpy: the cheapest plain read."""
    return 0, _row_group_values(path, None)


def held_side(path: str, ctx: int, batch: int) -> tuple[int, int]:
    """The floor's read, every row group's values kept until the end: what a pipeline that draws documents from the
    whole file (a full shuffle, a plan over every document) must hold, its memory faulted in once (~2 bytes a token
    more than the floor, which reuses one row group's buffers)."""
    held: list = []
    return 0, _row_group_values(path, held)


def iter_batches_side(path: str, ctx: int, batch: int) -> tuple[int, int]:
    """The token column by ``iter_batches`` at its default batch size (65,536 rows, across row groups)."""
    import pyarrow.parquet as pq

    real = 0
    for b in pq.ParquetFile(path).iter_batches(columns=["tokens"]):
        real += b.column(0).values.to_numpy(zero_copy_only=False).shape[0]
    return 0, real


def grain_side(path: str, ctx: int, batch: int, best: bool) -> tuple[int, int]:
    import grain.experimental as ge

    import grain

    class Tokens(grain.transforms.Map):
        def map(self, row):
            return {"tokens": np.asarray(row["tokens"], np.int32)}

    class Cut(ge.FlatMapTransform):
        max_fan_out = 1 << 20

        def flat_map(self, x):
            t = x["tokens"]
            return [{"tokens": t[s : s + ctx]} for s in range(0, t.shape[0], ctx)]

    ds = ge.FlatMapIterDataset(ge.ParquetIterDataset(path).map(Tokens()), Cut())
    cls = ge.BestFitPackIterDataset if best else ge.FirstFitPackIterDataset
    ds = cls(ds, length_struct={"tokens": ctx}, num_packing_bins=32, shuffle_bins=False).batch(batch)
    rows = real = 0
    for b in ds:
        seg = b["tokens_segment_ids"]
        rows += seg.shape[0]
        real += int(np.count_nonzero(seg))
    return rows, real


def datatools_side(path: str, ctx: int, batch: int, mode: str) -> tuple[int, int]:
    from datatools.pipeline import build

    packing = {"mode": mode, "ctx": ctx, "algorithm": "best_fit_decreasing", "overflow": "split"}
    cfg = {
        "source": {"path": path},
        "shuffle": {"kind": "none"},
        "packing": packing,
        "batch_size": batch,
        "drop_remainder": False,
        "format": "datatools",
        "num_epochs": 1,
        "workers": 0,
        "seed": 0,
    }
    rows = real = 0
    for b in build(cfg):
        seg = b["segment_ids"]
        rows += int(np.count_nonzero(seg.max(axis=1)))
        real += int(np.count_nonzero(seg))
    return rows, real


def side_fn(side: str):
    return {
        FLOOR: floor_side,
        HELD: held_side,
        "pyarrow iter_batches (65,536 rows)": iter_batches_side,
        "grain first_fit/32": lambda p, c, b: grain_side(p, c, b, best=False),
        "grain best_fit/32": lambda p, c, b: grain_side(p, c, b, best=True),
        "datatools streaming": lambda p, c, b: datatools_side(p, c, b, "streaming"),
        "datatools streaming" + CACHED: lambda p, c, b: datatools_side(p, c, b, "streaming"),
        "datatools planned": lambda p, c, b: datatools_side(p, c, b, "planned"),
        "datatools planned" + CACHED: lambda p, c, b: datatools_side(p, c, b, "planned"),
        "datatools streaming, token store": lambda p, c, b: datatools_side(p, c, b, "streaming"),
    }[side]


def run_side(side: str, path: str, warm: str, ctx: int, batch: int) -> dict:
    """One side in this process (its lengths cache: the empty folder the parent named in DATATOOLS_CACHE_DIR)."""
    fn = side_fn(side)
    fn(warm, ctx, batch)
    if side.endswith(CACHED):  # an earlier run's lengths pass, untimed: it fills the lengths cache
        from datatools.io.sources.inputs import open_input, read_lengths

        read_lengths(open_input(path))
        folder = os.environ["DATATOOLS_CACHE_DIR"]
        if importlib.util.find_spec("datatools.io.formats.lengths_cache") and not list(Path(folder).rglob("*.npz")):
            raise SystemExit(f"{side}: the untimed run left no lengths cache entry in {folder}")
    before = rss_kb()
    c0, t0 = time.process_time(), time.perf_counter()
    rows, real = fn(path, ctx, batch)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"cpu_s": cpu, "wall_s": wall, "rows": rows, "real_tokens": real, "peak_mib": max(peak - before, 0) / 1024}


def write_inputs(corpus: str, tmp: Path, max_docs: int | None) -> dict[str, tuple[str, str]]:
    """The Parquet file (and a 2,000-document one for the warm-up), and a token store of the same documents."""
    import pyarrow.parquet as pq
    from corpora import CORPORA, load

    from datatools.io.formats.store import write_store

    tokens, lengths = load(corpus)
    if max_docs:
        lengths = lengths[:max_docs]
        tokens = tokens[: int(lengths.sum())]
    table = pq.read_table(CORPORA / f"{corpus}.parquet").slice(0, lengths.size)
    pq.write_table(table, tmp / "corpus.parquet", row_group_size=1024)
    pq.write_table(table.slice(0, 2000), tmp / "warm.parquet", row_group_size=1024)
    for name, n in (("store", lengths.size), ("warm_store", 2000)):
        ln = lengths[:n]
        t = tokens[: int(ln.sum())]
        write_store(
            tmp / name, [(t, ln)], num_tokens=t.size, num_documents=ln.size, dtype=np.dtype(np.uint32), manifest={}
        )
    parquet = (str(tmp / "corpus.parquet"), str(tmp / "warm.parquet"))
    return {s: (str(tmp / "store"), str(tmp / "warm_store")) if "token store" in s else parquet for s in SIDES}


def start_hog() -> subprocess.Popen | None:
    """A busy loop pinned to the core this process is not on (None on a one-core machine)."""
    cores = sorted(os.sched_getaffinity(0) | set(range(os.cpu_count() or 1)))
    mine = sorted(os.sched_getaffinity(0))[0]
    other = next((c for c in cores if c != mine), None)
    if other is None:
        return None
    code = f"import os; os.sched_setaffinity(0, {{{other}}})\nwhile True: pass"
    return subprocess.Popen([sys.executable, "-c", code])


def measure(args, inputs, hog: bool) -> dict:
    sides = PARQUET_TARGETS if args.parquet_only else SIDES
    runs: dict[str, list[dict]] = {s: [] for s in sides}
    loads = []
    proc_hog = start_hog() if hog else None
    try:
        time.sleep(1.0 if proc_hog else 0)
        for r in range(args.rounds):
            order = sides[r % len(sides) :] + sides[: r % len(sides)]
            for side in order:
                loads.append(os.getloadavg()[0])
                path, warm = inputs[side]
                cmd = [sys.executable, __file__, "--side", side, "--path", path, "--warm", warm]
                cmd += ["--ctx", str(args.ctx), "--batch", str(args.batch)]
                with tempfile.TemporaryDirectory() as cache:  # every run starts with an empty lengths cache
                    env = {**os.environ, "DATATOOLS_CACHE_DIR": cache}
                    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
                if proc.returncode:
                    raise SystemExit(f"{side} failed: {proc.stderr.strip()[-2000:]}")
                runs[side].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    finally:
        if proc_hog is not None:
            proc_hog.kill()
            proc_hog.wait()
    entries = {}
    for side, rs in runs.items():
        med = {k: float(np.median([x[k] for x in rs])) for k in ("cpu_s", "wall_s", "peak_mib")}
        entries[side] = {**med, "rows": rs[0]["rows"], "real_tokens": rs[0]["real_tokens"], "runs": rs}
        entries[side]["tokens_per_cpu_s"] = rs[0]["real_tokens"] / med["cpu_s"]
    floor, ref = entries[FLOOR], entries.get(REF)
    table = []
    for side, e in entries.items():
        e["x_floor_cpu"] = e["tokens_per_cpu_s"] / floor["tokens_per_cpu_s"]
        e["x_held_cpu"] = e["tokens_per_cpu_s"] / entries[HELD]["tokens_per_cpu_s"] if HELD in entries else float("nan")
        e["x_ref_cpu"] = ref["cpu_s"] / e["cpu_s"] if ref else float("nan")
        e["x_ref_wall"] = ref["wall_s"] / e["wall_s"] if ref else float("nan")
        table.append(
            [
                side,
                fmt_rate(e["tokens_per_cpu_s"]),
                f"{e['x_floor_cpu']:.2f}x",
                f"{e['x_held_cpu']:.2f}x",
                f"{e['cpu_s']:.2f}",
                f"{e['wall_s']:.2f}",
                f"{e['x_ref_cpu']:.2f}x" if ref else "-",
                f"{e['x_ref_wall']:.2f}x" if ref else "-",
                e["rows"] or "-",
                f"{e['peak_mib']:.0f}",
            ]
        )
    what = "a busy loop on the other core" if hog else "no hog"
    print_table(
        f"{args.corpus}, ctx {args.ctx}, batches of {args.batch}; {what}; load {min(loads):.2f}-{max(loads):.2f}; "
        f"medians of {args.rounds} interleaved rounds",
        [
            "side",
            "real tokens / CPU s",
            "x floor",
            "x held",
            "CPU s",
            "wall s",
            f"x {REF} CPU",
            "wall",
            "rows",
            "peak MiB",
        ],
        table,
    )
    return {"hog": hog, "load_1min": [min(loads), max(loads)], "uptime": uptime(), "sides": entries}


def uptime() -> str:
    """``uptime``'s line: the machine's load when a table ends (the benchmark shares it)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="man", choices=["man", "stdlib", "docstrings"])
    parser.add_argument("--max-docs", type=int, default=0, help="the first N documents (0: all)")
    parser.add_argument("--ctx", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-hog", action="store_true", help="skip the runs with a busy loop on the other core")
    parser.add_argument(
        "--parquet-only", action="store_true", help="only the floor and the datatools Parquet rows (the 0.8x targets)"
    )
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # a child: one side, one JSON line
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--warm", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(run_side(args.side, args.path, args.warm, args.ctx, args.batch)))
        return
    from corpora import describe, load

    announce(args.rounds, "every side pinned to one core, in its own process; ratios per CPU-second")
    _, lengths = load(args.corpus)
    print(describe(args.corpus, lengths[: args.max_docs or None]))
    results: dict = {"corpus": args.corpus, "ctx": args.ctx, "batch": args.batch, "rounds": args.rounds}
    results["sides"] = "parquet-only" if args.parquet_only else "all"
    with tempfile.TemporaryDirectory() as tmp:
        inputs = write_inputs(args.corpus, Path(tmp), args.max_docs or None)
        results["quiet"] = measure(args, inputs, hog=False)
        if not args.no_hog:
            results["hog"] = measure(args, inputs, hog=True)
    checks = {}
    for key in ("quiet", "hog"):
        if key in results:
            s = results[key]["sides"]
            print(f"  {key}: {results[key]['uptime']}")
            for side in ("datatools planned", "datatools streaming"):
                for which in (side, side + CACHED):
                    checks[f"{key}: {which} >= 0.8x the pyarrow read per CPU-second"] = s[which]["x_floor_cpu"] >= 0.8
                    if which.startswith("datatools planned") and HELD in s:  # a plan over every document holds all
                        held = f"{key}: {which} >= 0.8x the pyarrow read with the column held"
                        checks[held] = s[which]["x_held_cpu"] >= 0.8
            if REF in s:
                wall = s["datatools streaming"]["x_ref_wall"]
                checks[f"{key}: datatools streaming >= 1x {REF} in wall time"] = wall >= 1
    for k, v in checks.items():
        print(f"  [{'PASS' if v else 'FAIL'}] {k}")
    results["targets"] = checks
    print(f"wrote {write_json('pipeline_parquet' if args.parquet_only else 'pipeline', results)}")


if __name__ == "__main__":
    main()
