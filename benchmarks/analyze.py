"""analyze-padding at scale: 100M document lengths from a token store, and Parquet token-column reading.

1. A token store holding 100M documents (lengths of distribution (b): lognormal
   median 400, mean ~800, up to 8192): only its offsets are written (the token array
   is left unwritten, which zarr reads as fill value; the analysis never reads it).
   Timed: reading the lengths from the offsets, and analyzing all 8 strategies at
   one ctx (2048) with 2 threads, as `datatools analyze-padding STORE --ctx 2048` does.
   Target: under 30 s on 2 cores. The default 4 contexts are timed too, for information.
2. A Parquet file with a list<int32> token column (~300 MB on disk). Timed: reading
   every row group's lengths (values read and checked for negatives). Target:
   >= 200 MB/s (file bytes / seconds). For comparison: pyarrow reading the column alone.

    python benchmarks/analyze.py [--docs 100000000] [--parquet-mb 300]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _common import distribution, print_table, write_json

from datatools.analysis.padding import PaddingOptions, analyze  # noqa: E402
from datatools.io.formats import store  # noqa: E402
from datatools.io.sources.inputs import open_input, read_lengths  # noqa: E402


def offsets_only_store(path: Path, lengths: np.ndarray) -> None:
    """A token store (the version ``pretokenize`` writes, its chunks recorded in the manifest) whose token array is
    created but never written: only ``offsets/`` holds data (100M documents' tokens would be ~160 GB). Opened with
    ``check=False`` (the open check lists every token chunk, and there are none); the lengths path timed is the one
    ``analyze-padding STORE`` takes after that check."""
    path.mkdir(parents=True)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    store._create(path / "tokens", np.dtype("uint16"), int(offsets[-1]), store.TOKEN_CHUNK, store.READ_CHUNK)
    store._create(path / "offsets", np.dtype("int64"), offsets.shape[0], store.OFFSET_CHUNK)[:].write(offsets).result()
    manifest = {
        "format": store.FORMAT,
        "version": store.VERSION,
        "dtype": "uint16",
        "vocab_size": 32000,
        "num_documents": int(lengths.shape[0]),
        "num_tokens": int(offsets[-1]),
        **store.record_contents(path),
    }
    (path / "manifest.json").write_text(json.dumps(manifest))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000_000)
    parser.add_argument("--parquet-mb", type=int, default=300)
    args = parser.parse_args()
    results = {"docs": args.docs}
    rows = []
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        tmp = Path(tmp)
        lengths, _ = distribution("b", args.docs)
        offsets_only_store(tmp / "store", lengths)
        del lengths
        analyze(np.array([5, 900, 3000]), PaddingOptions(contexts=(2048,)))  # load the numba cache before timing
        t0 = time.perf_counter()
        got = store.TokenStore(tmp / "store", check=False).lengths()
        read_s = time.perf_counter() - t0
        rep = analyze(got, PaddingOptions(contexts=(2048,)))
        one_ctx = time.perf_counter() - t0
        t1 = time.perf_counter()
        rep4 = analyze(got)
        four_ctx = time.perf_counter() - t1 + read_s
        results["store"] = {
            "read_lengths_s": read_s,
            "total_one_ctx_s": one_ctx,
            "total_default_contexts_s": four_ctx,
            "default_contexts": rep4.contexts,
            "per_strategy_s": {s.name: s.seconds for s in rep.strategies},
        }
        rows.append(
            [
                f"{args.docs:,} lengths from a token store, ctx 2048, 8 strategies",
                f"{one_ctx:.1f} s",
                "< 30 s",
                "PASS" if one_ctx < 30 else "FAIL",
            ]
        )
        rows.append([f"  same, default contexts {rep4.contexts}", f"{four_ctx:.1f} s", "(info)", ""])
        rows.append(["  of which reading the offsets", f"{read_s:.1f} s", "", ""])
        del got

        rng = np.random.default_rng(0)
        target_tokens = args.parquet_mb * (1 << 20) // 4
        doc_len, _ = distribution("a", max(1, target_tokens // 230))
        values = rng.integers(0, 1 << 31, int(doc_len.sum()), dtype=np.int32)
        col = pa.ListArray.from_arrays(pa.array(np.concatenate(([0], np.cumsum(doc_len))).astype(np.int32)), values)
        pq.write_table(pa.table({"input_ids": col}), tmp / "t.parquet", row_group_size=65536)
        size = (tmp / "t.parquet").stat().st_size
        times, arrow_times = [], []
        for _ in range(3):
            t0 = time.perf_counter()
            n = read_lengths(open_input(tmp / "t.parquet"))
            times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            pq.read_table(tmp / "t.parquet", columns=["input_ids"])
            arrow_times.append(time.perf_counter() - t0)
        assert n.shape[0] == doc_len.shape[0]
        secs, arrow_secs = float(np.median(times)), float(np.median(arrow_times))
        mbps = size / secs / 1e6
        results["parquet"] = {
            "bytes": size,
            "seconds": secs,
            "mb_per_s": mbps,
            "pyarrow_read_s": arrow_secs,
            "pyarrow_mb_per_s": size / arrow_secs / 1e6,
        }
        rows.append(
            [
                f"Parquet token column, {size / 1e6:.0f} MB, {n.shape[0]:,} rows",
                f"{mbps:.0f} MB/s",
                ">= 200 MB/s",
                "PASS" if mbps >= 200 else "FAIL",
            ]
        )
        rows.append(["  pyarrow.parquet.read_table alone (peer)", f"{size / arrow_secs / 1e6:.0f} MB/s", "(info)", ""])
    print_table("analyze-padding at scale (2 cores)", ["measure", "result", "target", ""], rows)
    print(f"wrote {write_json('analyze', results)}")


if __name__ == "__main__":
    main()
