"""Packing, like for like: rows-built against rows-built, plan-only against plan-only, and the copy path.

One run, the same documents for everyone, on the length distributions of benchmarks/_common.py:

(a) **rows-built** tokens/s: datatools (``pack_lengths`` + ``materialize`` of every row, in batches of
    ``--batch`` rows, a fresh batch each: the four int32 (batch, ctx) arrays ``tokens``, ``segment_ids``,
    ``positions``, ``loss_mask``) against Grain's packing iterators in this process (per row: ``tokens``,
    ``tokens_segment_ids``, ``tokens_positions``, each (ctx,)) and, when ``.clients/peers`` exists
    (``make bench-peers``), TRL's ``pack_dataset(strategy="bfd_split")`` (packed unpadded ``input_ids`` and
    ``seq_lengths`` per row, in Arrow). Grain's first/best fit refuse documents longer than ctx, so they get the
    pieces datatools' overflow="split" makes, cut before the clock starts.
(b) **copy path**: ``materialize`` output bytes/s (16 bytes per slot) against ``np.copyto`` of the same number of
    bytes, same sizes, same run: into a preallocated batch (``out=``) against ``np.copyto`` into a preallocated
    array, and allocating a fresh batch against ``ndarray.copy()``.
(c) **plan-only** documents/s: datatools' planners against OLMo-core's OBFD (``InstancePacker``, from the peers
    venv when there).

Every table prints the machine, the load (``os.getloadavg()``) and the repeats; times are medians.

    python benchmarks/pack.py [--docs 100000] [--repeats 3] [--peers .clients/peers/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import DISTRIBUTIONS, distribution, fmt_rate, median_time, one_core, print_table, write_json

one_core()

import grain  # noqa: E402
from datatools import materialize, pack_lengths  # noqa: E402

HERE = Path(__file__).resolve().parent
GRAIN_PACKERS = [
    ("grain first_fit/256", grain.experimental.FirstFitPackIterDataset, 256),
    ("grain best_fit/256", grain.experimental.BestFitPackIterDataset, 256),
    ("grain concat_then_split", grain.experimental.ConcatThenSplitIterDataset, None),
]
DATATOOLS_ALGORITHMS = ("best_fit_decreasing", "best_fit", "first_fit", "concat_split")
REF = "grain best_fit/256"


def machine() -> str:
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores (pinned to one), "
        f"python {platform.python_version()}"
    )


def load() -> str:
    return "load " + " / ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1/5/15 min)"


def run_grain(cls, bins, docs, ctx):
    source = grain.MapDataset.source(docs).to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
    if bins is None:
        packed = cls(source, length_struct={"tokens": ctx})
    else:
        packed = cls(source, length_struct={"tokens": ctx}, num_packing_bins=bins, shuffle_bins=False)
    rows = real = 0
    for ex in packed:
        rows += 1
        real += int(np.count_nonzero(ex["tokens_segment_ids"]))
    return rows, real


def build_all(lengths, ctx, algorithm, flat, offsets, batch):
    """Plan, then build every row a batch at a time (a fresh batch each, as a pipeline hands them out)."""
    plan = pack_lengths(lengths, ctx, algorithm=algorithm)
    for lo in range(0, plan.num_rows, batch):
        materialize(plan, flat, offsets, np.arange(lo, min(lo + batch, plan.num_rows)), check_values=False)
    return plan


def run_peers(python: str, lengths: np.ndarray, ctx: int, repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lengths.npy"
        np.save(path, lengths)
        proc = subprocess.run(
            [python, str(HERE / "pack_peers.py"), str(path), str(ctx), str(repeats)], capture_output=True, text=True
        )
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def copy_path(args) -> dict:
    """(b): materialize against np.copyto of the same bytes, on distribution (b)'s plan."""
    lengths, ctx = distribution("b", args.docs)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    flat = (np.arange(offsets[-1]) % 50_000).astype(np.int32)
    plan = pack_lengths(lengths, ctx)
    table, out = [], {}
    for batch in args.copy_batches:
        nbytes = batch * ctx * 16
        src = np.ones((4, batch, ctx), np.int32)
        dst = np.empty_like(src)
        pre = {k: np.empty((batch, ctx), np.int32) for k in ("tokens", "segment_ids", "positions", "loss_mask")}
        starts = [(i * batch) % max(plan.num_rows - batch, 1) for i in range(args.copy_repeats)]
        sel = [np.arange(s, s + batch) for s in starts]
        k = iter(range(10**9))
        materialize(plan, flat, offsets, sel[0], out=pre)  # compile / load the cache
        t_copy, _ = median_time(lambda: np.copyto(dst, src), args.copy_repeats)
        t_mat, _ = median_time(
            lambda: materialize(plan, flat, offsets, sel[next(k) % len(sel)], check_values=False, out=pre),
            args.copy_repeats,
        )
        t_new_copy, _ = median_time(lambda: src.copy(), args.copy_repeats)
        t_new_mat, _ = median_time(
            lambda: materialize(plan, flat, offsets, sel[next(k) % len(sel)], check_values=False), args.copy_repeats
        )
        entry = {
            "batch_rows": batch,
            "ctx": ctx,
            "bytes": nbytes,
            "preallocated": {
                "materialize_bytes_per_s": nbytes / t_mat,
                "copyto_bytes_per_s": nbytes / t_copy,
                "ratio": t_copy / t_mat,
            },
            "allocating": {
                "materialize_bytes_per_s": nbytes / t_new_mat,
                "copy_bytes_per_s": nbytes / t_new_copy,
                "ratio": t_new_copy / t_new_mat,
            },
        }
        out[str(batch)] = entry
        for mode, m, c in (
            ("into a preallocated batch (out=) / np.copyto(dst, src)", t_mat, t_copy),
            ("fresh batch / src.copy()", t_new_mat, t_new_copy),
        ):
            table.append(
                [
                    f"{batch} x {ctx} ({nbytes / 1e6:.1f} MB): {mode}",
                    f"{nbytes / m / 1e9:.2f}",
                    f"{nbytes / c / 1e9:.2f}",
                    f"{c / m:.2f}x",
                ]
            )
    print_table(
        f"(b) copy path: materialize output bytes/s against a copy of the same bytes; {machine()}; "
        f"{load()}; medians of {args.copy_repeats}",
        ["batch: mode", "materialize GB/s", "copy GB/s", "materialize / copy"],
        table,
    )
    return out


def scale(args, results) -> dict:
    """Plan-only at ``--scale-docs`` documents, datatools alone, and the planner's targets."""
    targets, table = {}, []
    for name in DISTRIBUTIONS:
        lengths, ctx = distribution(name, args.scale_docs, seed=1)
        for algorithm in ("best_fit_decreasing", "first_fit", "best_fit"):
            secs, plan = median_time(lambda: pack_lengths(lengths, ctx, algorithm=algorithm), max(args.repeats, 5))
            gap = plan.num_rows / plan.lower_bound_rows - 1
            table.append(
                [
                    f"({name}) {algorithm}",
                    fmt_rate(args.scale_docs / secs),
                    f"{plan.efficiency:.3%}",
                    plan.num_rows,
                    plan.lower_bound_rows,
                    f"{gap:.3%}",
                ]
            )
            targets[f"{name}/{algorithm}"] = {
                "docs_per_s": args.scale_docs / secs,
                "efficiency": plan.efficiency,
                "rows": plan.num_rows,
                "lower_bound_rows": plan.lower_bound_rows,
            }
    print_table(
        f"plan-only at scale: {args.scale_docs:,} documents, datatools; {machine()}; {load()}; "
        f"medians of {max(args.repeats, 5)}",
        ["distribution / algorithm", "docs/s", "efficiency", "rows", "lower bound", "rows over bound"],
        table,
    )
    bfd = {n: targets[f"{n}/best_fit_decreasing"] for n in DISTRIBUTIONS}
    checks = {
        "bfd >= 10M docs/s at ctx 2048 (plan-only)": bfd["b"]["docs_per_s"] >= 10e6,
        "bfd rows within 0.5% of bound on (b)": bfd["b"]["rows"] <= 1.005 * bfd["b"]["lower_bound_rows"],
        "bfd rows within 0.5% of bound on (c)": bfd["c"]["rows"] <= 1.005 * bfd["c"]["lower_bound_rows"],
        "bfd efficiency >= 99.5% on (a)": bfd["a"]["efficiency"] >= 0.995,
    }
    for name, d in results["rows_built"].items():
        dt = next(e for e in d["packers"] if e["packer"] == "datatools best_fit_decreasing")
        checks[f"({name}) rows-built datatools bfd >= 20x grain best_fit/256"] = dt["x_grain_best_fit_256"] >= 20
        trl = next((e for e in d["packers"] if e["packer"].startswith("trl")), None)
        if trl:
            checks[f"({name}) rows-built datatools bfd >= 5x trl pack_dataset"] = trl["seconds"] / dt["seconds"] >= 5
    for batch, e in results["copy_path"].items():
        checks[f"materialize into out= >= 0.5x np.copyto, {batch} rows"] = e["preallocated"]["ratio"] >= 0.5
    for k, v in checks.items():
        print(f"  [{'PASS' if v else 'FAIL'}] {k}")
    return {"scale_docs": args.scale_docs, "scale": targets, "targets": checks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000, help="documents per distribution")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of every timed packer (median)")
    parser.add_argument("--batch", type=int, default=256, help="rows per materialized batch in (a)")
    parser.add_argument("--copy-batches", type=int, nargs="+", default=[256, 1024], help="batch rows in (b)")
    parser.add_argument("--copy-repeats", type=int, default=21, help="repeats in (b)")
    parser.add_argument(
        "--peers",
        default=str(HERE.parent / ".clients" / "peers" / "bin" / "python"),
        help="python of the peers venv (make bench-peers); skipped with a note when absent",
    )
    parser.add_argument("--scale-docs", type=int, default=1_000_000, help="documents of the plan-only scale table")
    parser.add_argument("--distributions", nargs="+", default=list(DISTRIBUTIONS), choices=list(DISTRIBUTIONS))
    args = parser.parse_args()
    print(f"machine: {machine()}; {load()}; repeats {args.repeats} (medians)")
    have_peers = Path(args.peers).exists()
    if not have_peers:
        print(f"peers: {args.peers} not found (make bench-peers): TRL and OLMo-core rows are left out")

    t0 = time.perf_counter()
    for algorithm in DATATOOLS_ALGORITHMS:
        pack_lengths(np.array([3, 900, 5000, 7]), 2048, algorithm=algorithm)
    materialize(pack_lengths([3, 5], 16), np.ones(8, np.int32), np.array([0, 3, 8]))
    compile_s = time.perf_counter() - t0
    print(f"numba first call (compile, or load from the cache=True cache): {compile_s:.2f} s")

    results = {
        "docs": args.docs,
        "repeats": args.repeats,
        "load_at_start": os.getloadavg(),
        "compile_or_cache_load_s": compile_s,
        "rows_built": {},
        "plan_only": {},
    }
    for name in args.distributions:
        spec = DISTRIBUTIONS[name]
        lengths, ctx = distribution(name, args.docs)
        total = int(lengths.sum())
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        flat = np.ones(total, dtype=np.int32)
        docs = [{"tokens": flat[offsets[i] : offsets[i + 1]]} for i in range(len(lengths))]
        pieces = [{"tokens": d["tokens"][s : s + ctx]} for d in docs for s in range(0, len(d["tokens"]), ctx)]
        built, planned = [], []
        for label, cls, bins in GRAIN_PACKERS:
            secs, (rows, real) = median_time(
                lambda: run_grain(cls, bins, docs if bins is None else pieces, ctx), args.repeats
            )
            built.append(
                dict(
                    packer=label,
                    mode="rows-built",
                    seconds=secs,
                    rows=rows,
                    real_tokens=real,
                    arrays="tokens, tokens_segment_ids, tokens_positions: (ctx,) per row",
                )
            )
        for algorithm in DATATOOLS_ALGORITHMS:
            secs, plan = median_time(
                lambda: build_all(lengths, ctx, algorithm, flat, offsets, args.batch), args.repeats
            )
            built.append(
                dict(
                    packer=f"datatools {algorithm}",
                    mode="rows-built",
                    seconds=secs,
                    rows=plan.num_rows,
                    real_tokens=plan.kept_tokens,
                    arrays=f"tokens, segment_ids, positions, loss_mask: int32 ({args.batch}, ctx) per batch",
                )
            )
            secs, plan = median_time(lambda: pack_lengths(lengths, ctx, algorithm=algorithm), max(args.repeats, 5))
            planned.append(
                dict(
                    packer=f"datatools {algorithm}",
                    mode="plan-only",
                    seconds=secs,
                    rows=plan.num_rows,
                    real_tokens=plan.kept_tokens,
                )
            )
        if Path(args.peers).exists():
            have_peers = True
            for label, e in run_peers(args.peers, lengths, ctx, args.repeats).items():
                if "error" in e:
                    print(f"peer {label}: {e['error']}")
                    continue
                (planned if e["mode"] == "plan-only" else built).append(dict(packer=label, **e))
        ref = next(e for e in built if e["packer"] == REF)["seconds"]
        obfd = next((e["seconds"] for e in planned if e["packer"] == "olmo-core OBFD"), None)
        for e in built + planned:
            e.update(
                docs_per_s=args.docs / e["seconds"],
                tokens_per_s=total / e["seconds"],
                efficiency=e["real_tokens"] / (e["rows"] * ctx),
            )
            if e["mode"] == "rows-built":
                e["x_grain_best_fit_256"] = ref / e["seconds"]
            elif obfd:
                e["x_olmo_core_obfd"] = obfd / e["seconds"]
        lb = -(-total // ctx)
        head = f"({name}) {spec['label']}: {args.docs:,} docs, {total:,} tokens, lower bound {lb:,} rows"
        print_table(
            f"(a) rows-built, {head}; {machine()}; {load()}; medians of {args.repeats}",
            ["packer (rows-built)", "tokens/s", "docs/s", "efficiency", "rows", "x grain best_fit/256"],
            [
                [
                    e["packer"],
                    fmt_rate(e["tokens_per_s"]),
                    fmt_rate(e["docs_per_s"]),
                    f"{e['efficiency']:.2%}",
                    e["rows"],
                    f"{e['x_grain_best_fit_256']:.1f}x",
                ]
                for e in built
            ],
        )
        print_table(
            f"(c) plan-only, {head}; {machine()}; {load()}; medians of {max(args.repeats, 5)}",
            ["packer (plan-only)", "docs/s", "efficiency", "rows", "x olmo-core OBFD"],
            [
                [
                    e["packer"],
                    fmt_rate(e["docs_per_s"]),
                    f"{e['efficiency']:.2%}",
                    e["rows"],
                    f"{e['x_olmo_core_obfd']:.0f}x" if "x_olmo_core_obfd" in e else "-",
                ]
                for e in planned
            ],
        )
        results["rows_built"][name] = {"ctx": ctx, "tokens": total, "lower_bound_rows": lb, "packers": built}
        results["plan_only"][name] = {"ctx": ctx, "tokens": total, "lower_bound_rows": lb, "packers": planned}

    results["copy_path"] = copy_path(args)
    results.update(scale(args, results))
    results["load_at_end"] = os.getloadavg()
    results["peers"] = args.peers if have_peers else None
    print(f"load at the end: {load()}")
    print(f"wrote {write_json('pack', results)}")


if __name__ == "__main__":
    sys.exit(main())
