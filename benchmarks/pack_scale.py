"""`datatools pack` at scale: wall time, peak RSS, rows over the bound and plan bytes per document, for 10^7, 10^8
(and 10^9) documents.

    .venv/bin/python benchmarks/pack_scale.py [--sizes 1e7 1e8 1e9] [--dir /tmp/pack_scale] [--repeats 1]
        [--lengths lognormal|man|stdlib|docstrings] [--ctx 2048] [--group-docs N]

``--lengths`` other than lognormal draws the documents' lengths (seeded, with replacement) from a real corpus of
benchmarks/corpora.py: ``stdlib`` gives long documents (mean ~4,700 tokens, a tail past 150k), whose pieces fill
rows unevenly. ``--group-docs`` sets how many documents `pack` plans at once (default 50,000,000: 10^9 documents are
planned as 20 groups, each group's under-filled rows carried into the next; a smaller value shows what grouping
costs at a size that fits one group).

Each size: lengths.npy (uint32, lognormal, mean ~230 tokens) is written once, then `datatools pack DIR OUT --ctx
2048 --json -` runs under /usr/bin/time -v in a fresh process (peak RSS = its "Maximum resident set size",
memory-mapped lengths pages included). Prints the machine, the load (os.getloadavg()) and the repeats; medians.
10^9 needs ~4 GB of disk for the lengths, ~7 GB for the plan, and about 10 GB of memory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

CTX = 2048


def make_lengths(path: Path, n: int, seed: int = 0, source: str = "lognormal") -> None:
    """uint32 lengths, written in slices (10^9 never in memory as float64): lognormal (mean ~230), or drawn with
    replacement from the lengths of a corpus of benchmarks/corpora.py."""
    path.mkdir(parents=True, exist_ok=True)
    out = np.lib.format.open_memmap(path / "lengths.npy", mode="w+", dtype=np.uint32, shape=(n,))
    rng = np.random.default_rng(seed)
    corpus = None
    if source != "lognormal":
        from corpora import load

        corpus = load(source)[1].astype(np.uint32)
    step = 1 << 24
    for a in range(0, n, step):
        b = min(n, a + step)
        if corpus is None:
            out[a:b] = np.maximum(1, rng.lognormal(np.log(230) - 0.5, 1.0, b - a))
        else:
            out[a:b] = corpus[rng.integers(0, corpus.size, b - a)]
    out.flush()
    del out


def run_pack(data: Path, out: Path, ctx: int = CTX, group_docs: int | None = None) -> dict:
    cmd = [
        "/usr/bin/time",
        "-v",
        sys.executable,
        "-m",
        "datatools",
        "pack",
        str(data),
        str(out),
        "--ctx",
        str(ctx),
        "--json",
        "-",
        "--overwrite",
    ] + (["--group-docs", str(group_docs)] if group_docs else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "TERM": "dumb"})
    if proc.returncode:
        raise SystemExit(f"pack failed ({proc.returncode}): {proc.stderr[-2000:]}")
    report = json.loads(proc.stdout)
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", proc.stderr).group(1)
    secs = sum(float(x) * 60**i for i, x in enumerate(reversed(wall.split(":"))))
    return {
        "rows": report["num_rows"],
        "lower_bound_rows": report["lower_bound_rows"],
        "efficiency": report["efficiency"],
        "wall_s": secs,
        "peak_rss_gb": rss_kb / 2**20,
        "plan_bytes": sum(f.stat().st_size for f in out.iterdir()),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", type=float, default=[1e7, 1e8])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/pack_scale"))
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--lengths", default="lognormal", choices=["lognormal", "man", "stdlib", "docstrings"])
    ap.add_argument("--ctx", type=int, default=CTX)
    ap.add_argument("--group-docs", type=int, default=None, help="documents planned at once (pack's default)")
    args = ap.parse_args()
    print(
        f"machine: {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cpus; "
        f"load before: {os.getloadavg()}; repeats: {args.repeats} (median)"
    )
    rows = []
    for size in args.sizes:
        n = int(size)
        data = args.dir / f"lengths_{args.lengths}_{n}"
        if not (data / "lengths.npy").exists():
            make_lengths(data, n, source=args.lengths)
        runs = [run_pack(data, args.dir / f"plan_{n}", args.ctx, args.group_docs) for _ in range(args.repeats)]
        med = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
        med.update(documents=n, over_bound=med["rows"] / med["lower_bound_rows"] - 1, load=os.getloadavg())
        med.update(plan_bytes_per_doc=med["plan_bytes"] / n, lengths=args.lengths, group_docs=args.group_docs)
        rows.append(med)
        shutil.rmtree(args.dir / f"plan_{n}", ignore_errors=True)
    print(f"lengths: {args.lengths}, ctx {args.ctx}, group_docs {args.group_docs or 'default (50,000,000)'}")
    print(
        f"{'documents':>14} {'wall s':>8} {'peak RSS GB':>12} {'rows':>12} {'over bound':>11} {'plan GB':>8} "
        f"{'plan B/doc':>10}  load"
    )
    for r in rows:
        print(
            f"{r['documents']:>14,} {r['wall_s']:>8.1f} {r['peak_rss_gb']:>12.2f} {int(r['rows']):>12,} "
            f"{r['over_bound']:>11.4%} {r['plan_bytes'] / 2**30:>8.2f} {r['plan_bytes_per_doc']:>10.2f}  "
            f"{tuple(round(x, 2) for x in r['load'])}"
        )
    if args.json:
        args.json.write_text(json.dumps({"ctx": args.ctx, "load": os.getloadavg(), "results": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
