"""Packing, like for like on real text: every side cuts, packs and batches the same documents inside its clock.

(a) **rows built** from documents to batches, per corpus (benchmarks/corpora.py: real text, real token ids) and
    ctx. Every side starts from the same documents in its native form and stops at batches of ``--batch`` rows:

    * ``datatools bfd``: ``pack_lengths`` (best fit decreasing; documents longer than ctx split inside it), then
      ``materialize`` of each batch (a fresh batch each): int32 (batch, ctx) ``tokens``, ``segment_ids``,
      ``positions``, ``loss_mask``.
    * ``grain first_fit/256``, ``grain best_fit/256``: a list of the documents' token arrays, cut into pieces of
      at most ctx tokens (Grain's packers refuse longer ones) inside the clock, ``MapDataset.source`` ->
      ``FirstFitPackIterDataset`` / ``BestFitPackIterDataset`` (256 bins) -> ``.batch(batch)``: ``tokens``,
      ``tokens_segment_ids``, ``tokens_positions`` (batch, ctx). Grain writes no loss mask (a trainer derives
      it from the segment ids); that is the one thing it leaves out.
    * ``trl pack_dataset bfd_split``, when ``--peers`` names a Python with TRL (``make bench-peers``):
      ``pack_dataset(strategy="bfd_split")`` on a ``datasets.Dataset`` of the documents' ``input_ids`` (made
      before the clock), then per batch the collator's step TRL leaves to the trainer: rows padded to ctx with
      segment ids and positions from ``seq_lengths`` (benchmarks/pack_peers.py ``--rows``).

    Each side runs in its own process (``--side``; the parent starts them), pinned to one core, with an untimed
    warm-up on the first 500 documents (numba's cache loaded, Grain's code paths run), then one timed run:
    CPU seconds (``time.process_time``: every thread of the process) and wall seconds, rows used, the peak
    resident memory of the run (``ru_maxrss`` less the resident memory before it). Sides are interleaved in
    ``--rounds`` rounds, each round in a rotated order; the tables give medians. Ratios are per CPU-second.
(b) **copy path**: ``materialize`` into a caller's batch (``out=``) against ``np.copyto`` of the same output bytes
    (16 per slot), at 32 x 1024 and 256 x 8192, same run: *warm* (the same rows again: the source in the caches,
    like the copy's) and *cold* (rows taken in turn through the plan; the copy's source in turn through a buffer
    as large as the tokens).
(c) **plan-only** documents/s of datatools' planners at ``--scale-docs`` synthetic documents (the lengths of
    benchmarks/_common.py), against the lower bound on rows.

Every table prints the machine, the load and the rounds.

    python benchmarks/pack.py [--corpus man stdlib docstrings] [--rounds 3] [--max-docs 0] [--peers PYTHON]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _common import DISTRIBUTIONS, announce, distribution, fmt_rate, median_time, one_core, print_table, write_json

one_core()

HERE = Path(__file__).resolve().parent
SIDES = ("datatools bfd", "grain first_fit/256", "grain best_fit/256")
TRL = "trl pack_dataset bfd_split"
REF = "grain best_fit/256"
CTXS = {"man": (1024, 2048, 8192), "stdlib": (1024, 2048, 8192), "docstrings": (1024,)}
WARMUP_DOCS = 500


def rss_kb() -> int:
    """Resident memory of this process now (KiB), from /proc/self/statm."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def datatools_side(tokens: np.ndarray, lengths: np.ndarray, ctx: int, batch: int) -> tuple[int, int]:
    """Plan (BFD, long documents split), then build every batch: (rows, real tokens)."""
    from datatools import materialize, pack_lengths

    offsets = np.concatenate(([0], np.cumsum(lengths)))
    plan = pack_lengths(lengths, ctx)
    real = 0
    for lo in range(0, plan.num_rows, batch):
        b = materialize(plan, tokens, offsets, np.arange(lo, min(lo + batch, plan.num_rows)), check_values=False)
        real += int(np.count_nonzero(b["segment_ids"]))
    return plan.num_rows, real


def grain_side(cls, tokens: np.ndarray, lengths: np.ndarray, ctx: int, batch: int) -> tuple[int, int]:
    """Cut to ctx, pack with Grain's packer (256 bins), batch: (rows, real tokens)."""
    import grain

    offsets = np.concatenate(([0], np.cumsum(lengths))).tolist()
    pieces = [
        {"tokens": tokens[s : min(s + ctx, e)]} for b, e in zip(offsets[:-1], offsets[1:]) for s in range(b, e, ctx)
    ]
    ds = grain.MapDataset.source(pieces).to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
    ds = cls(ds, length_struct={"tokens": ctx}, num_packing_bins=256, shuffle_bins=False).batch(batch)
    rows = real = 0
    for b in ds:
        seg = b["tokens_segment_ids"]
        rows += seg.shape[0]
        real += int(np.count_nonzero(seg))
    return rows, real


def run_side(side: str, corpus: str, ctx: int, batch: int, max_docs: int | None) -> dict:
    """One side, in this process: load the corpus, warm up untimed, time one run."""
    from corpora import load

    tokens, lengths = load(corpus)
    if max_docs:
        lengths = lengths[:max_docs]
        tokens = tokens[: int(lengths.sum())]
    if side == "datatools bfd":

        def fn(t, n):
            return datatools_side(t, n, ctx, batch)
    else:
        import grain

        cls = {
            "grain first_fit/256": grain.experimental.FirstFitPackIterDataset,
            "grain best_fit/256": grain.experimental.BestFitPackIterDataset,
        }[side]

        def fn(t, n):
            return grain_side(cls, t, n, ctx, batch)

    w = lengths[:WARMUP_DOCS]
    fn(tokens[: int(w.sum())], w)
    before = rss_kb()
    c0, t0 = time.process_time(), time.perf_counter()
    rows, real = fn(tokens, lengths)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"cpu_s": cpu, "wall_s": wall, "rows": rows, "real_tokens": real, "peak_mib": max(peak - before, 0) / 1024}


def rows_built(args) -> dict:
    """(a): every (corpus, ctx), sides interleaved in rotated rounds, each in its own process."""
    from corpora import CORPORA, describe, load

    out = {}
    if not Path(args.peers).exists():
        print(f"peers: {args.peers} not found (make bench-peers): the TRL side is left out")
    for corpus in args.corpus:
        _, lengths = load(corpus)
        if args.max_docs:
            lengths = lengths[: args.max_docs]
        total = int(lengths.sum())
        print(describe(corpus, lengths))
        sides = SIDES + ((TRL,) if Path(args.peers).exists() else ())
        for ctx in CTXS[corpus]:
            runs: dict[str, list[dict]] = {s: [] for s in sides}
            loads = []
            for r in range(args.rounds):
                order = sides[r % len(sides) :] + sides[: r % len(sides)]
                for side in order:
                    loads.append(os.getloadavg()[0])
                    if side == TRL:
                        cmd = [args.peers, str(HERE / "pack_peers.py"), "--rows", str(CORPORA / f"{corpus}.npz")]
                        cmd += [str(ctx), str(args.batch), str(args.max_docs or 0)]
                    else:
                        cmd = [sys.executable, __file__, "--side", side, "--corpus", corpus, "--ctx", str(ctx)]
                        cmd += ["--batch", str(args.batch), "--max-docs", str(args.max_docs or 0)]
                    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
                    if proc.returncode:
                        raise SystemExit(f"{side} on {corpus} ctx {ctx} failed: {proc.stderr.strip()[-2000:]}")
                    runs[side].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            lb = -(-total // ctx)
            entries = {}
            for side, rs in runs.items():
                med = {k: float(np.median([x[k] for x in rs])) for k in ("cpu_s", "wall_s", "peak_mib")}
                entries[side] = {**med, "rows": rs[0]["rows"], "real_tokens": rs[0]["real_tokens"], "runs": rs}
            ref = entries[REF]
            table = []
            for side, e in entries.items():
                e["tokens_per_cpu_s"] = e["real_tokens"] / e["cpu_s"]
                e["x_ref_cpu"] = ref["cpu_s"] / e["cpu_s"]
                e["x_ref_wall"] = ref["wall_s"] / e["wall_s"]
                e["rows_over_bound"] = e["rows"] / lb - 1
                table.append(
                    [
                        side,
                        fmt_rate(e["tokens_per_cpu_s"]),
                        f"{e['cpu_s']:.3f}",
                        f"{e['wall_s']:.3f}",
                        f"{e['x_ref_cpu']:.1f}x",
                        f"{e['x_ref_wall']:.1f}x",
                        e["rows"],
                        f"{e['rows_over_bound']:.2%}",
                        f"{e['peak_mib']:.0f}",
                    ]
                )
            print_table(
                f"(a) rows built, {corpus} at ctx {ctx}: {lengths.size:,} documents, {total:,} tokens, lower bound "
                f"{lb:,} rows; batches of {args.batch}; load {min(loads):.2f}-{max(loads):.2f}; medians of "
                f"{args.rounds} interleaved rounds",
                [
                    "side",
                    "real tokens / CPU s",
                    "CPU s",
                    "wall s",
                    f"x {REF} (CPU)",
                    "(wall)",
                    "rows",
                    "rows over bound",
                    "peak MiB",
                ],
                table,
            )
            out[f"{corpus}/{ctx}"] = {
                "corpus": corpus,
                "ctx": ctx,
                "documents": int(lengths.size),
                "tokens": total,
                "lower_bound_rows": lb,
                "load_1min": [min(loads), max(loads)],
                "sides": entries,
            }
    return out


def copy_path(args) -> dict:
    """(b): materialize into ``out=`` against np.copyto of the same output bytes, warm and cold, same run."""
    from corpora import load

    from datatools import materialize, pack_lengths

    tokens, lengths = load("man")
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    table, out = [], {}
    for batch, ctx in ((32, 1024), (256, 8192)):
        plan = pack_lengths(lengths, ctx)
        nbytes = batch * ctx * 16
        src = np.ones((4, batch, ctx), np.int32)
        dst = np.empty_like(src)
        big = np.ones(max(tokens.size, 4 * src.size), np.int32)  # the cold copy's source: as large as the tokens
        spans = max((big.size - src.size) // src.size, 1)
        pre = {k: np.empty((batch, ctx), np.int32) for k in ("tokens", "segment_ids", "positions", "loss_mask")}
        starts = np.arange(0, plan.num_rows - batch, batch)
        k = iter(range(10**9))
        warm_rows = np.arange(starts[len(starts) // 2], starts[len(starts) // 2] + batch)
        materialize(plan, tokens, offsets, warm_rows, out=pre)  # load numba's cache
        rounds: dict[str, list[float]] = {"copy warm": [], "mat warm": [], "copy cold": [], "mat cold": []}
        for _ in range(args.copy_repeats):
            t0 = time.perf_counter()
            np.copyto(dst, src)
            t1 = time.perf_counter()
            materialize(plan, tokens, offsets, warm_rows, check_values=False, out=pre)
            t2 = time.perf_counter()
            i = next(k)
            s = (i % spans) * src.size
            np.copyto(dst.reshape(-1), big[s : s + src.size])
            t3 = time.perf_counter()
            lo = starts[(i * 7919) % len(starts)]
            materialize(plan, tokens, offsets, np.arange(lo, lo + batch), check_values=False, out=pre)
            t4 = time.perf_counter()
            for key, dt in zip(rounds, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                rounds[key].append(dt)
        med = {key: float(np.median(v)) for key, v in rounds.items()}
        entry = {"batch_rows": batch, "ctx": ctx, "bytes": nbytes, "seconds": med}
        for mode in ("warm", "cold"):
            m, c = med[f"mat {mode}"], med[f"copy {mode}"]
            entry[f"{mode}_ratio"] = c / m
            table.append(
                [
                    f"{batch} x {ctx} ({nbytes / 1e6:.1f} MB), {mode}",
                    f"{m * 1e6:.1f}",
                    f"{c * 1e6:.1f}",
                    f"{nbytes / m / 1e9:.2f}",
                    f"{nbytes / c / 1e9:.2f}",
                    f"{c / m:.2f}x",
                ]
            )
        out[f"{batch}x{ctx}"] = entry
    print_table(
        f"(b) copy path (man): materialize(out=) against np.copyto of the same output bytes; load "
        f"{os.getloadavg()[0]:.2f}; medians of {args.copy_repeats}, interleaved",
        ["batch, source", "materialize us", "copyto us", "materialize GB/s", "copy GB/s", "materialize / copy"],
        table,
    )
    return out


def scale(args) -> dict:
    """(c): plan-only at ``--scale-docs`` synthetic documents, datatools alone, against the lower bound."""
    from datatools import pack_lengths

    targets, table = {}, []
    for name in DISTRIBUTIONS:
        lengths, ctx = distribution(name, args.scale_docs, seed=1)
        for algorithm in ("best_fit_decreasing", "first_fit", "best_fit"):
            secs, plan = median_time(lambda: pack_lengths(lengths, ctx, algorithm=algorithm), 5)
            table.append(
                [
                    f"({name}) {algorithm}",
                    fmt_rate(args.scale_docs / secs),
                    f"{plan.efficiency:.3%}",
                    plan.num_rows,
                    plan.lower_bound_rows,
                    f"{plan.num_rows / plan.lower_bound_rows - 1:.3%}",
                ]
            )
            targets[f"{name}/{algorithm}"] = {
                "docs_per_s": args.scale_docs / secs,
                "efficiency": plan.efficiency,
                "rows": plan.num_rows,
                "lower_bound_rows": plan.lower_bound_rows,
            }
    print_table(
        f"(c) plan-only, synthetic lengths: {args.scale_docs:,} documents; load {os.getloadavg()[0]:.2f}; medians of 5",
        ["distribution / algorithm", "docs/s", "efficiency", "rows", "lower bound", "rows over bound"],
        table,
    )
    return targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", nargs="+", default=["man", "stdlib", "docstrings"], choices=list(CTXS))
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians)")
    parser.add_argument("--batch", type=int, default=256, help="rows per batch")
    parser.add_argument("--max-docs", type=int, default=0, help="the first N documents of each corpus (0: all)")
    parser.add_argument("--copy-repeats", type=int, default=51, help="repeats in (b)")
    parser.add_argument("--scale-docs", type=int, default=1_000_000, help="documents of the plan-only table (c)")
    parser.add_argument(
        "--peers",
        default=str(HERE.parent / ".clients" / "peers" / "bin" / "python"),
        help="python of the peers venv with TRL (make bench-peers); its side is left out, with a note, when absent",
    )
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # a child: one side, one JSON line
    parser.add_argument("--ctx", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(run_side(args.side, args.corpus[0], args.ctx, args.batch, args.max_docs or None)))
        return
    announce(args.rounds, "every side pinned to one core, in its own process; ratios per CPU-second")
    results = {"rounds": args.rounds, "batch": args.batch, "max_docs": args.max_docs}
    results["rows_built"] = rows_built(args)
    results["copy_path"] = copy_path(args)
    results["scale_docs"] = args.scale_docs
    results["plan_only"] = scale(args)
    checks = {
        f"materialize(out=) >= 0.5x np.copyto, {k}, {mode}": e[f"{mode}_ratio"] >= 0.5
        for k, e in results["copy_path"].items()
        for mode in ("warm", "cold")
    }
    for k, v in checks.items():
        print(f"  [{'PASS' if v else 'FAIL'}] {k}")
    results["targets"] = checks
    print(f"wrote {write_json('pack', results)}")


if __name__ == "__main__":
    sys.exit(main())
