"""Reading inputs: throughput and peak memory of datatools' streaming readers against the plain library call.

1. The same documents (distribution (b): lognormal median 400, mean ~800 tokens, ids
   < 50,000) written as Parquet (list<int32>, row groups of 16k rows), JSON Lines,
   an Arrow IPC file, a Hugging Face ``save_to_disk`` directory and a NumPy
   directory. For each: datatools' lengths pass (``read_lengths(open_input(PATH))``,
   what ``analyze-padding`` runs: values checked, bounded memory) against the best
   plain call for the same column: ``pyarrow.parquet.read_table(columns=[...])``,
   ``pyarrow.json.read_json`` (threaded, explicit schema, block size above the
   longest line), ``pyarrow.ipc.open_file(memory_map).read_all()``,
   ``datasets.load_from_disk``, ``numpy.load``; each followed by the list lengths.
   Every measurement runs in a fresh process (peak RSS = its ru_maxrss), 3 runs,
   median. Target: >= 0.8x the plain call's MB/s for Parquet and JSON Lines.
2. A 1 GB JSON Lines file through ``datatools analyze-padding`` (the CLI, all 8
   strategies at ctx 2048): seconds and peak RSS. Bound: peak RSS minus the CLI's
   baseline (the same command on a 1-line file) <= 1.5 x the lengths' bytes + 256 MiB.
3. A Parquet source of 500M tokens (2.0 GB as int32) through a streaming pipeline
   (storage order, best fit decreasing within windows of 1024 documents whose rows are
   mixed, ctx 2048, batch 32): startup (the lengths pass), batches/s and peak RSS of
   the process against the data size. (Shuffled access to a table decodes a row group
   per read: pre-tokenize large data into a token store for that.)

    python benchmarks/read.py [--mb 400] [--jsonl-gb 1] [--pipeline-tokens 500000000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import distribution, print_table, write_json

HERE = Path(__file__).resolve().parent
COLUMN = "input_ids"
MiB = 1 << 20


# --------------------------------------------------------------------------- one measurement (child process)


def peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited from the parent across exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(fmt: str, path: str, who: str) -> dict:
    import datasets  # noqa: F401  (imports are not timed)
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    from datatools.io import open_input, read_lengths

    t0 = time.perf_counter()
    if who == "datatools":
        lengths = read_lengths(open_input(path))
        n_docs, n_tokens = int(lengths.size), int(lengths.sum())
    else:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            col = pq.read_table(path, columns=[COLUMN]).column(0)
        elif fmt == "jsonl":
            import pyarrow.json as pj

            longest = int(os.environ.get("LONGEST_LINE", 1 << 20))
            col = pj.read_json(path, read_options=pj.ReadOptions(block_size=max(1 << 20, 2 * longest)),
                               parse_options=pj.ParseOptions(
                                   explicit_schema=pa.schema([(COLUMN, pa.list_(pa.int64()))]),
                                   unexpected_field_behavior="ignore")).column(0)
        elif fmt == "arrow":
            col = pa.ipc.open_file(pa.memory_map(path)).read_all().column(COLUMN)
        elif fmt == "hf":
            import datasets

            col = datasets.load_from_disk(path).data.column(COLUMN)
        else:
            lengths = np.diff(np.load(Path(path) / "offsets.npy", allow_pickle=False))
            col = None
        if col is not None:
            lengths = pc.list_value_length(col).to_numpy()
        n_docs, n_tokens = int(lengths.size), int(lengths.sum())
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "rss_mib": peak_rss_mib(), "docs": n_docs, "tokens": n_tokens}


def run_child(args: list[str], env: dict | None = None) -> dict:
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if proc.returncode:
        raise SystemExit(f"child {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- data


def make_docs(target_bytes: int, seed: int = 0) -> list[np.ndarray]:
    """Documents of distribution (b) until about ``target_bytes`` of JSON text (6 bytes a token)."""
    n = max(10, target_bytes // (6 * 800))
    lengths, _ = distribution("b", n, seed=seed)
    rng = np.random.default_rng(seed)
    flat = rng.integers(0, 50000, int(lengths.sum()), dtype=np.int32)
    return np.split(flat, np.cumsum(lengths)[:-1])


def write_jsonl(path: Path, docs) -> None:
    with open(path, "w") as f:
        for i, d in enumerate(docs):
            f.write('{"id": %d, "%s": [%s]}\n' % (i, COLUMN, ",".join(map(str, d.tolist()))))


def write_all(tmp: Path, docs) -> dict[str, Path]:
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({COLUMN: pa.array(docs, pa.list_(pa.int32()))})
    pq.write_table(table, tmp / "t.parquet", row_group_size=16384)
    write_jsonl(tmp / "t.jsonl", docs)
    with pa.OSFile(str(tmp / "t.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table, max_chunksize=16384)
    datasets.Dataset(table).save_to_disk(str(tmp / "hf"))
    (tmp / "np").mkdir()
    lengths = np.array([d.size for d in docs])
    np.save(tmp / "np" / "tokens.npy", np.concatenate(docs))
    np.save(tmp / "np" / "offsets.npy", np.concatenate(([0], np.cumsum(lengths))))
    return {"parquet": tmp / "t.parquet", "jsonl": tmp / "t.jsonl", "arrow": tmp / "t.arrow", "hf": tmp / "hf",
            "numpy": tmp / "np"}


def size_of(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# --------------------------------------------------------------------------- sections


def formats_section(tmp: Path, mb: int, runs: int) -> dict:
    docs = make_docs(mb * MiB)
    paths = write_all(tmp, docs)
    os.sync()  # written data reaches the disk before timing: writeback would slow whichever runs first
    time.sleep(2)
    want_docs, want_tokens = len(docs), int(sum(d.size for d in docs))
    longest = str(max(len(line) for line in open(paths["jsonl"], "rb")))
    rows, out = [], {}
    for fmt, path in paths.items():
        nbytes = size_of(path)
        runs_of: dict[str, list[dict]] = {"datatools": [], "peer": []}
        for _ in range(runs):  # alternate, so that both see the same machine state
            for who in runs_of:
                m = run_child(["--measure", fmt, str(path), who], env={"LONGEST_LINE": longest})
                assert (m["docs"], m["tokens"]) == (want_docs, want_tokens), (fmt, who, m)
                runs_of[who].append(m)
        res = {}
        for who, ms in runs_of.items():
            res[who] = {"seconds": float(np.median([m["seconds"] for m in ms])),
                        "rss_mib": float(np.median([m["rss_mib"] for m in ms]))}
            res[who]["mb_s"] = nbytes / MiB / res[who]["seconds"]
        ratio = res["datatools"]["mb_s"] / res["peer"]["mb_s"]
        target = "PASS" if ratio >= 0.8 else "FAIL"
        out[fmt] = {"bytes": nbytes, **res, "ratio": ratio, "target": target if fmt in ("parquet", "jsonl") else None}
        rows.append([fmt, f"{nbytes / MiB:,.0f}", f"{res['datatools']['mb_s']:,.0f}", f"{res['peer']['mb_s']:,.0f}",
                     f"{ratio:.2f}x" + (f" ({target})" if fmt in ("parquet", "jsonl") else ""),
                     f"{res['datatools']['rss_mib']:,.0f}", f"{res['peer']['rss_mib']:,.0f}"])
    print_table(f"Lengths of {want_docs:,} documents ({want_tokens:,} tokens), {runs} runs each, median",
                ["format", "MiB", "datatools MB/s", "plain call MB/s", "ratio", "datatools peak RSS MiB",
                 "plain peak RSS MiB"], rows)
    return {"docs": want_docs, "tokens": want_tokens, "formats": out}


def big_jsonl_section(tmp: Path, gb: float) -> dict:
    f = tmp / "big.jsonl"
    rng = np.random.default_rng(1)
    n_docs = n_tokens = 0
    with open(f, "w") as out:
        while out.tell() < gb * (1 << 30):
            for d in make_docs(32 * MiB, seed=int(rng.integers(1 << 30))):
                out.write('{"id": %d, "%s": [%s]}\n' % (n_docs, COLUMN, ",".join(map(str, d.tolist()))))
                n_docs += 1
                n_tokens += d.size
    tiny = tmp / "tiny.jsonl"
    tiny.write_text('{"input_ids": [1, 2, 3]}\n')
    base = run_child(["--cli-rss", str(tiny)])
    big = run_child(["--cli-rss", str(f)])
    rep = json.loads(big["stdout"])
    assert rep["num_sequences"] == n_docs and rep["num_tokens"] == n_tokens, (rep["num_sequences"], n_docs)
    lengths_mib = n_docs * 8 / MiB
    bound = base["rss_mib"] + 1.5 * lengths_mib + 256
    ok = big["rss_mib"] <= bound
    print_table("A 1 GB JSON Lines file through `datatools analyze-padding --ctx 2048` (one run)",
                ["file", "documents", "tokens", "seconds", "MB/s", "peak RSS MiB", "baseline RSS MiB", "bound MiB"],
                [[f"{size_of(f) / MiB:,.0f} MiB", n_docs, n_tokens, f"{big['seconds']:.1f}",
                  f"{size_of(f) / MiB / big['seconds']:,.0f}", f"{big['rss_mib']:,.0f}", f"{base['rss_mib']:,.0f}",
                  f"{bound:,.0f} ({'PASS' if ok else 'FAIL'})"]])
    return {"bytes": size_of(f), "docs": n_docs, "tokens": n_tokens, "seconds": big["seconds"],
            "rss_mib": big["rss_mib"], "baseline_rss_mib": base["rss_mib"], "bound_mib": bound, "pass": ok}


def cli_rss(path: str) -> dict:
    """analyze-padding in this process (the child): seconds, its stdout JSON, peak RSS."""
    import contextlib
    import io

    from datatools.cli import main

    buf = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(buf):
        status = main(["analyze-padding", path, "--ctx", "2048", "--json", "-"])
    if status:
        raise SystemExit(f"analyze-padding {path} exited {status}")
    return {"seconds": time.perf_counter() - t0, "stdout": buf.getvalue(),
            "rss_mib": peak_rss_mib()}


def pipeline_section(tmp: Path, tokens: int, steps: int) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = tmp / "large.parquet"
    schema = pa.schema([(COLUMN, pa.list_(pa.int32()))])
    written, seed = 0, 0
    with pq.ParquetWriter(f, schema, compression="none") as w:
        while written < tokens:
            lengths, _ = distribution("b", 65536, seed=seed)
            rng = np.random.default_rng(seed)
            flat = rng.integers(0, 50000, int(lengths.sum()), dtype=np.int32)
            offsets = pa.array(np.concatenate(([0], np.cumsum(lengths))).astype(np.int32))
            w.write_table(pa.table({COLUMN: pa.ListArray.from_arrays(offsets, pa.array(flat))}),
                          row_group_size=16384)
            written += flat.size
            seed += 1
    res = run_child(["--pipeline", str(f), str(steps)])
    data_mib = written * 4 / MiB
    print_table(f"A streaming pipeline over a Parquet source of {written:,} tokens (one run, {steps} batches of 32 x 2048)",
                ["source", "tokens as int32 MiB", "file MiB", "startup s", "batches/s", "peak RSS MiB",
                 "RSS / data"],
                [["parquet", f"{data_mib:,.0f}", f"{size_of(f) / MiB:,.0f}", f"{res['startup_s']:.1f}",
                  f"{steps / res['steps_s']:.1f}", f"{res['rss_mib']:,.0f}", f"{res['rss_mib'] / data_mib:.2f}"]])
    return {"tokens": written, "data_mib": data_mib, "file_mib": size_of(f) / MiB, **res}


def run_pipeline(path: str, steps: int) -> dict:
    from datatools.pipeline import build

    t0 = time.perf_counter()
    it = iter(build({"source": {"path": path}, "packing": {"ctx": 2048, "mode": "streaming", "window": 1024},
                     "shuffle": {"kind": "none"}, "batch_size": 32,
                     "num_epochs": 1}))
    first = next(it)
    startup = time.perf_counter() - t0
    real = int((first["segment_ids"] > 0).sum())
    t1 = time.perf_counter()
    for _ in range(steps - 1):
        real += int((next(it)["segment_ids"] > 0).sum())
    return {"startup_s": startup, "steps_s": time.perf_counter() - t1, "real_tokens": real,
            "rss_mib": peak_rss_mib()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=400, help="JSON Lines size of the format comparison (MiB)")
    parser.add_argument("--jsonl-gb", type=float, default=1.0)
    parser.add_argument("--pipeline-tokens", type=int, default=500_000_000)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sections", default="formats,jsonl,pipeline",
                        help="comma-separated: formats, jsonl, pipeline (a partial run updates those keys)")
    parser.add_argument("--measure", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--cli-rss", help=argparse.SUPPRESS)
    parser.add_argument("--pipeline", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return
    if args.cli_rss:
        print(json.dumps(cli_rss(args.cli_rss)))
        return
    if args.pipeline:
        print(json.dumps(run_pipeline(args.pipeline[0], int(args.pipeline[1]))))
        return
    sections = set(args.sections.split(","))
    previous = HERE / "results" / "read.json"
    results = json.loads(previous.read_text()) if previous.exists() and sections != {"formats", "jsonl", "pipeline"} \
        else {}
    results.pop("machine", None)
    with tempfile.TemporaryDirectory(dir=HERE.parent) as tmp:
        tmp = Path(tmp)
        if "formats" in sections:
            results["formats"] = formats_section(tmp, args.mb, args.runs)
        if "jsonl" in sections:
            results["jsonl_1gb"] = big_jsonl_section(tmp, args.jsonl_gb)
        if "pipeline" in sections:
            results["pipeline_parquet"] = pipeline_section(tmp, args.pipeline_tokens, args.steps)
    print(f"results written to {write_json('read', results)}")


if __name__ == "__main__":
    main()
