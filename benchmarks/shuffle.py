"""Shuffling: datatools' Feistel permutation against Grain's index_shuffle.

indices/s, one core, for n in {999, 65537, 10^6, 10^9}:
- datatools FeistelPermutation, vectorized (an int64 array of up to 10M indices per call);
- datatools per call (one Python int at a time: the same calling pattern as Grain's);
- grain.experimental.index_shuffle, per call;
- grain MapDataset.range(n).shuffle(seed)[i], per element;
- datatools BlockShuffle(io_block_size=64, window_blocks=1024), vectorized.
The ratio column is datatools vectorized over Grain's index_shuffle per call.
Target: >= 100M indices/s for n >= 10^6.

    python benchmarks/shuffle.py
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import announce, fmt_rate, median_time, one_core, print_table, write_json

one_core()

import grain  # noqa: E402
from datatools import BlockShuffle, FeistelPermutation  # noqa: E402

SIZES = [999, 65537, 10**6, 10**9]
VECTOR = 10_000_000
PER_CALL = 100_000


REPEATS = {"n": 3}


def rate(count, fn):
    secs, _ = median_time(fn, REPEATS["n"])
    return count / secs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    REPEATS["n"] = parser.parse_args().repeats
    announce(REPEATS["n"], "one core")
    results = []
    FeistelPermutation(10, 0)(np.arange(10)), FeistelPermutation(10, 0)(3)  # compile / load the cache
    BlockShuffle(1000, io_block_size=64, window_blocks=4, seed=0).indices()
    for n in SIZES:
        perm = FeistelPermutation(n, 1234)
        m = min(n, VECTOR)
        idx = np.arange(m, dtype=np.int64)
        ours = rate(m, lambda: perm(idx))
        k = min(n, PER_CALL)
        ours_call = rate(k, lambda: [perm(i) for i in range(k)])
        index_shuffle = grain.experimental.index_shuffle
        theirs_call = rate(k, lambda: [index_shuffle(i, max_index=n - 1, seed=1234, rounds=4) for i in range(k)])
        ds = grain.MapDataset.range(n).shuffle(seed=1234)
        ds[0]
        theirs_ds = rate(k, lambda: [ds[i] for i in range(k)])
        bs = BlockShuffle(n, io_block_size=64, window_blocks=1024, seed=1234)
        block = rate(m, lambda: bs.index(idx))
        results.append(
            dict(
                n=n,
                datatools_vectorized=ours,
                datatools_per_call=ours_call,
                grain_index_shuffle_per_call=theirs_call,
                grain_mapdataset_shuffle=theirs_ds,
                datatools_block_shuffle_vectorized=block,
                ratio_vs_grain_index_shuffle=ours / theirs_call,
            )
        )
    print_table(
        "indices/s, one core (median of runs)",
        [
            "n",
            "datatools vectorized",
            "datatools per call",
            "grain index_shuffle",
            "grain MapDataset.shuffle",
            "datatools BlockShuffle",
            "ratio vs index_shuffle",
        ],
        [
            [
                f"{r['n']:,}",
                fmt_rate(r["datatools_vectorized"]),
                fmt_rate(r["datatools_per_call"]),
                fmt_rate(r["grain_index_shuffle_per_call"]),
                fmt_rate(r["grain_mapdataset_shuffle"]),
                fmt_rate(r["datatools_block_shuffle_vectorized"]),
                f"{r['ratio_vs_grain_index_shuffle']:.0f}x",
            ]
            for r in results
        ],
    )
    target = all(r["datatools_vectorized"] >= 100e6 for r in results if r["n"] >= 10**6)
    print(f"  [{'PASS' if target else 'FAIL'}] >= 100M indices/s on one core for n >= 10^6")
    print(f"wrote {write_json('shuffle', {'results': results, 'target_100M_per_s': target})}")


if __name__ == "__main__":
    main()
