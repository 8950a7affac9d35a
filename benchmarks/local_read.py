"""Local reads, before and after the object-storage work: the users' pipeline over a token store on local disk.

Issue 31 changed how a pipeline reads a token store (store v3: zarr v3 shards of inner chunks; lanes; a slab of
extents read concurrently and ahead of need). From a bucket that is the difference between unusable and fed; this
script checks what it does to the *local* case, against the code as it was (``--baseline``, default ``ae0bc95``,
the commit the issue was filed against), unpacked from git into a temporary folder and run by the same Python.

The same documents (``remote_read.build_store``: ``--tokens`` tokens, lognormal lengths, mean ~800, at most 8192,
random ids below 50,257) are written by each version's own ``write_store`` (the baseline writes its version-2
layout, today's code version 3) to local disk. The pipeline: the users' shape (ctx 8192, global batch 128,
streaming packing, block shuffle 64 x 1024), as 1 host with 0 workers and as host 0 of 4 with 2 workers; each
version reads in its default order (the baseline: the window order; today: lanes). Each run is a fresh process;
an untimed warm-up run of each first (numba compiles into its cache); versions alternate, ``--repeats`` rounds,
medians: seconds to the first batch (config to batch: open, offsets, first plan and read), batches/s over
``--batches`` batches after it, taken as fast as they come, and the CPU those batches took (user + system, the
process and its worker processes) per batch.

Usage::

    python benchmarks/local_read.py [--tokens 100000000] [--batches 60] [--repeats 3] [--baseline ae0bc95 66e3881]

Today's code reads a store with its one reader per host (``workers: 0``; a store refuses workers); a baseline
runs each shape with the workers it was measured with (host 0 of 4: 2).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import announce, print_table, write_json  # noqa: E402

SHAPES = [("1 host", 1, 0), ("host 0 of 4", 4, 2)]  # (label, hosts, a baseline's workers; today's: the one reader)


def config(path: str, hosts: int, workers: int) -> dict:
    return {
        "source": {"path": path},
        "shuffle": {"kind": "block", "io_block_size": 64, "window_blocks": 1024},
        "packing": {"mode": "streaming", "ctx": 8192, "window": 1024},
        "batch_size": 128,
        "drop_remainder": True,
        "num_epochs": None,
        "workers": workers,
        "shard": {"index": 0, "count": hosts},
        "seed": 0,
        "format": "datatools",
    }


def child(spec: dict) -> dict:
    """In a fresh process whose ``datatools`` is the version under test: write the store (``spec['write']``) or
    time one pipeline run."""
    if spec.get("write"):
        from remote_read import build_store

        return build_store(spec["write"], spec["tokens"])
    import numpy as np

    from datatools.pipeline import build_canonical
    from datatools.pipeline.config import parse_config

    t0 = time.perf_counter()
    it = iter(build_canonical(parse_config(spec["config"])).dataset)
    batch = next(it)
    first_s = time.perf_counter() - t0
    tokens = int(np.count_nonzero(batch["segment_ids"]))
    t1, c1 = time.perf_counter(), cpu_s()
    for _ in range(spec["batches"]):
        tokens += int(np.count_nonzero(next(it)["segment_ids"]))
    span, cpu = time.perf_counter() - t1, cpu_s() - c1
    close = getattr(it, "close", None)
    if close:
        close()
    return {
        "first_s": first_s,
        "batches_per_s": spec["batches"] / span,
        "cpu_ms_per_batch": cpu / spec["batches"] * 1e3,
        "tokens": tokens,
    }


MEASURES = ("first_s", "batches_per_s", "cpu_ms_per_batch")


def cpu_s() -> float:
    """CPU seconds (user + system) of this process and its live children (a baseline's Grain workers)."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for c in me.children(recursive=True):
        try:
            total += sum(c.cpu_times()[:2])
        except psutil.Error:
            continue
    return total


def run(tree: Path, spec: dict) -> dict:
    """``child(spec)`` in a fresh process with ``tree``'s ``datatools`` first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(Path(__file__).resolve().parent)])}
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        cwd=tree,
    )
    if out.returncode:
        raise SystemExit(f"{tree.name}: {spec.get('label', 'write')} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def unpack(ref: str, into: Path) -> Path:
    """``datatools/`` of git revision ``ref`` unpacked into ``into`` (no worktree left behind)."""
    blob = subprocess.run(["git", "archive", ref, "datatools"], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    return into


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=100_000_000)
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--baseline", nargs="+", default=["ae0bc95", "66e3881"], help="git revisions of the code to compare against"
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return
    announce(args.repeats, "each run a fresh process; versions alternate; medians")
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"today": ROOT}
        for ref in args.baseline:
            trees[f"baseline ({ref})"] = unpack(ref, Path(tmp) / f"baseline-{ref}")
        stores = {}
        for name, tree in trees.items():
            stores[name] = str(Path(tmp) / f"store-{len(stores)}")
            made = run(tree, {"write": stores[name], "tokens": args.tokens})
            print(
                f"{name}: wrote {made['documents']:,} documents, {made['tokens']:,} tokens in {made['write_s']:.0f} s"
            )

        def workers_of(name: str, workers: int) -> int:
            return 0 if name == "today" else workers

        for label, hosts, workers in SHAPES:  # untimed: each version compiles its numba kernels into the cache
            for name in trees:
                cfg = config(stores[name], hosts, workers_of(name, workers))
                run(trees[name], {"label": label, "config": cfg, "batches": 2})
        runs: dict[tuple[str, str], list[dict]] = {}
        for r in range(args.repeats):
            for label, hosts, workers in SHAPES:
                for name in list(trees)[:: 1 if r % 2 == 0 else -1]:
                    cfg = config(stores[name], hosts, workers_of(name, workers))
                    spec = {"label": label, "config": cfg, "batches": args.batches}
                    runs.setdefault((label, name), []).append(run(trees[name], spec))
                    print(f"  round {r + 1} {label}, {name}: {runs[label, name][-1]}", flush=True)
    rows, results = [], []
    for label, _, _ in SHAPES:
        med = {name: {k: statistics.median(m[k] for m in runs[label, name]) for k in MEASURES} for name in trees}
        today = med["today"]
        for name in trees:
            w = workers_of(name, dict((s[0], s[2]) for s in SHAPES)[label])
            m = med[name]
            rows.append(
                [
                    label,
                    f"{name}, workers {w}",
                    f"{m['first_s']:.2f} s",
                    f"{m['batches_per_s']:.2f}",
                    f"{m['cpu_ms_per_batch']:.1f} ms",
                ]
            )
        for ref in args.baseline:
            base = med[f"baseline ({ref})"]
            rows.append(
                [
                    label,
                    f"today / {ref}",
                    f"{today['first_s'] / base['first_s']:.2f}x the time",
                    f"{today['batches_per_s'] / base['batches_per_s']:.2f}x the rate",
                    f"{today['cpu_ms_per_batch'] / base['cpu_ms_per_batch']:.2f}x the CPU",
                ]
            )
        results.append({"shape": label, "medians": med, "runs": {n: runs[label, n] for n in trees}})
    print_table(
        f"Local token store, {args.tokens / 1e6:,.0f}M tokens, ctx 8192, global batch 128, streaming packing, "
        f"block shuffle 64 x 1024 ({args.repeats} rounds, medians)",
        ["pipeline", "code", "first batch", "batches/s", "CPU / batch (all processes)"],
        rows,
    )
    print(f"wrote {write_json('local_read', {'rows': results, 'args': vars(args)})}")


if __name__ == "__main__":
    main()
