"""Compile datatools' numba kernels into the cache (``NUMBA_CACHE_DIR``) on a small workload, so later processes load
them in milliseconds.

``make test`` runs it while ruff, mypy and the docs build use the other core: on a fresh clone the suite's two
workers and the commands its tests start otherwise each compile the same kernels on first use (~40 s of the
suite on 2 cores). It exercises what the tests call most: every packing algorithm and option, materializing rows
of each token width, the pipelines (planned, streaming, lanes, bucketing; every shuffle and format; attention
tiles; document loss weights) over a small store, the padding analyzer and the shuffle report. A kernel it does
not reach compiles on first use as before; a failure here fails nothing (the tests find it).

    python scripts/warm_kernels.py
"""

from __future__ import annotations

import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np


def _try(what: str, fn) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001 -- a cache warm-up: the tests report what is wrong, where it is called
        print(f"warm_kernels: {what} failed:\n{traceback.format_exc(limit=3)}", file=sys.stderr)


def _packing(lengths: np.ndarray) -> None:
    from datatools import materialize, pack_lengths
    from datatools.kernels.packing.algorithms import ALGORITHMS

    for algorithm in ALGORITHMS:
        for options in ({}, {"max_segments": 4}, {"align": 8}, {"overflow": "truncate"}):
            _try(f"{algorithm} {options}", lambda a=algorithm, o=options: pack_lengths(lengths, 256, algorithm=a, **o))
    plan = pack_lengths(lengths, 256)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    for dtype in (np.int32, np.uint16, np.uint32):
        materialize(plan, np.zeros(int(lengths.sum()), dtype), offsets)


def _pipelines(store: str) -> None:
    from datatools.pipeline import build

    base = {"source": {"path": store}, "batch_size": 4, "num_epochs": 1, "workers": 0, "seed": 0}
    shuffles = [{"kind": "none"}, {"kind": "full"}, {"kind": "block", "io_block_size": 8, "window_blocks": 16}]
    packings = [
        {"packing": {"mode": "planned", "ctx": 256}},
        {"packing": {"mode": "streaming", "ctx": 256, "window": 64}},
        {"bucketing": {"num_buckets": 2, "tile": 64, "max_len": 256, "token_budget": 1024, "overflow": "split"}},
    ]
    for shuffle in shuffles:
        for packing in packings:
            for fmt in ("datatools", "maxtext", "levanter", "hf"):
                cfg = {**base, **packing, "shuffle": shuffle, "format": fmt}
                _try(f"pipeline {shuffle['kind']} {list(packing)} {fmt}", lambda c=cfg: next(iter(build(c))))
    extras = [{"attention_block": 64}, {"loss_weighting": "document"}]
    for extra in extras:
        cfg = {**base, **packings[0], "shuffle": shuffles[1], "format": "datatools", **extra}
        _try(f"pipeline {extra}", lambda c=cfg: next(iter(build(c))))


def _analysis(lengths: np.ndarray) -> None:
    from datatools.analysis.padding import PaddingOptions, analyze

    analyze(lengths, PaddingOptions(contexts=(256, 1024)))


def _shuffle_report() -> None:
    from datatools.analysis.shuffle_quality import shuffle_report

    shuffle_report(4096, io_block_size=8, window_blocks=16, group_size=64, batch_size=8, lanes=8, lane_window=64)


def main() -> int:
    from datatools.io.formats.store import write_store

    rng = np.random.default_rng(0)
    lengths = np.minimum(rng.lognormal(4.5, 1.0, 3000).astype(np.int64) + 1, 2000)
    tokens = rng.integers(0, 1000, int(lengths.sum())).astype(np.uint16)
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "store")
        write_store(
            store,
            [(tokens, lengths)],
            num_tokens=tokens.size,
            num_documents=lengths.size,
            dtype=np.dtype(np.uint16),
            manifest={"vocab_size": 1000},
        )
        _try("packing", lambda: _packing(lengths))
        _try("pipelines", lambda: _pipelines(store))
        _try("analysis", lambda: _analysis(lengths))
        _try("shuffle report", _shuffle_report)
    return 0  # a warm-up never fails make test: the tests say what is wrong


if __name__ == "__main__":
    sys.exit(main())
