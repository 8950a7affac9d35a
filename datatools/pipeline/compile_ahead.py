"""``datatools warm``: compile datatools' numba kernels into numba's cache ahead of their first use.

numba compiles a ``cache=True`` kernel the first time a process calls it with new argument types and keeps the
machine code in its cache (``NUMBA_CACHE_DIR``, else ``__pycache__`` beside the installed modules): later processes
load it in milliseconds. On a fresh install the first pipeline therefore spends ~7 s of CPU compiling before its
first batch (a streaming block-shuffled pipeline, measured on 2 cores at load ~4: 14 kernels and the 22 of numba's
own overloads they call, ~10.5 s before issue 52 cut the wrappers and helpers compiled as kernels of their own; the
analyzer's ~30 s). Run once after the install (or in a container's build step), this does that work ahead, in
parallel processes: numba compiles under the GIL, so threads would not overlap it, but processes do (each writes
the kernels it compiled into the same cache, atomically). A kernel a later call needs with other argument types
still compiles on first use.

Each *part* is one group of kernels reached through the public API on a small synthetic workload (a store of
3,000 documents), so the argument types are the ones real calls use: the pipelines (planned, streaming, bucketed;
every shuffle and output format; uint16 and uint32 stores), every packing algorithm and option, the padding
analyzer and the shuffle report. ``make test`` runs it beside lint and docs (``make warm-kernels``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SHUFFLES = ({"kind": "none"}, {"kind": "full"}, {"kind": "block", "io_block_size": 8, "window_blocks": 16})
FORMATS = ("datatools", "maxtext", "levanter", "hf")


def _base(store: str) -> dict[str, Any]:
    """The keys every warm-up pipeline shares: ``store``, 4 rows a batch, one epoch, no workers."""
    return {"source": {"path": store}, "batch_size": 4, "num_epochs": 1, "workers": 0, "seed": 0}


def _pipelines(store: str, packing: dict[str, Any]) -> None:
    """The first batches of ``packing`` under every shuffle and output format."""
    from datatools.pipeline import build

    base = _base(store)
    for shuffle in SHUFFLES:
        for fmt in FORMATS:
            it = iter(build({**base, **packing, "shuffle": shuffle, "format": fmt}))
            next(it)
            next(it)


def _streaming(store: str) -> None:
    _pipelines(store, {"packing": {"mode": "streaming", "ctx": 256, "window": 64}})


def _planned(store: str) -> None:
    from datatools.pipeline import build

    _pipelines(store, {"packing": {"mode": "planned", "ctx": 256}})
    base = _base(store)
    for extra in ({"attention_block": 64}, {"loss_weighting": "document"}):
        next(iter(build({**base, "packing": {"mode": "planned", "ctx": 256}, "shuffle": SHUFFLES[1], **extra})))


def _bucketing(store: str) -> None:
    buckets = {"num_buckets": 2, "tile": 64, "max_len": 256, "token_budget": 1024, "overflow": "split"}
    _pipelines(store, {"bucketing": buckets})


def _packing(store: str) -> None:
    """Every packing algorithm with each option, and rows materialized at every token width."""
    from datatools import materialize, pack_lengths
    from datatools.kernels.packing.algorithms import ALGORITHMS

    lengths = _lengths()
    for algorithm in ALGORITHMS:
        for options in ({}, {"max_segments": 4}, {"align": 8}, {"overflow": "truncate"}):
            pack_lengths(lengths, 256, algorithm=algorithm, **options)
    plan = pack_lengths(lengths, 256)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    for dtype in (np.int32, np.uint16, np.uint32):
        materialize(plan, np.zeros(int(lengths.sum()), dtype), offsets)


def _analysis(store: str) -> None:
    """The padding analyzer's strategies and the shuffle report."""
    from datatools.analysis.padding import PaddingOptions, analyze
    from datatools.analysis.shuffle_quality import shuffle_report

    analyze(_lengths(), PaddingOptions(contexts=(256, 1024)))
    shuffle_report(4096, io_block_size=8, window_blocks=16, group_size=64, batch_size=8, lanes=8, lane_window=64)


# name -> what it compiles (each part runs in a process of its own; the heaviest first)
PARTS: dict[str, Callable[[str], None]] = {
    "streaming": _streaming,
    "planned": _planned,
    "packing": _packing,
    "analysis": _analysis,
    "bucketing": _bucketing,
}
WIDTHS = ("streaming", "planned")  # parts run on a uint16 and a uint32 store (rows are gathered at each width)
# a child process runs main(its arguments) (not `-m` this module: datatools.pipeline imports it first, and runpy warns)
CHILD = [sys.executable, "-c", "import sys; from datatools.pipeline.compile_ahead import main; main(sys.argv[1:])"]


def _lengths() -> np.ndarray:
    """3,000 document lengths (lognormal, 1 to 2,000 tokens): every packer path is taken."""
    rng = np.random.default_rng(0)
    return np.minimum(rng.lognormal(4.5, 1.0, 3000).astype(np.int64) + 1, 2000)


def _write_store(path: str, vocab: int) -> None:
    from datatools.io.formats.store import token_dtype, write_store

    lengths = _lengths()
    dtype = token_dtype(vocab)
    tokens = np.random.default_rng(1).integers(0, vocab, int(lengths.sum())).astype(dtype)
    write_store(
        path,
        [(tokens, lengths)],
        num_tokens=tokens.size,
        num_documents=lengths.size,
        dtype=dtype,
        manifest={"vocab_size": vocab},
    )


@dataclass
class WarmReport:
    """What :func:`warm` did: the parts run, their seconds (wall, each in its own process), the failures."""

    parts: list[str]
    jobs: int
    seconds: float
    part_seconds: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # part -> the last line of its error


def warm(
    parts: list[str] | None = None, jobs: int | None = None, done: Callable[[str], None] | None = None
) -> WarmReport:
    """Compile the kernels of ``parts`` (default all of :data:`PARTS`) into numba's cache, ``jobs`` processes at a
    time (default the CPUs this process may run on; 1: every part in this process, one after the other);
    ``done(part)`` is called as each part ends."""
    names = list(PARTS) if parts is None else parts
    unknown = [p for p in names if p not in PARTS]
    if unknown:
        raise ValueError(f"unknown warm-up part {unknown[0]!r}; one of {', '.join(PARTS)}")
    jobs = max(1, min(jobs or len(os.sched_getaffinity(0)), len(names)))
    report = WarmReport(names, jobs, 0.0)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="datatools-warm-") as tmp:
        stores = {16: str(Path(tmp) / "store16"), 32: str(Path(tmp) / "store32")}
        _write_store(stores[16], 1000)
        _write_store(stores[32], 70_000)  # token ids past uint16: the uint32 kernels

        def run(name: str) -> None:
            started = time.perf_counter()
            paths = [stores[16]] + ([stores[32]] if name in WIDTHS else [])
            if jobs == 1:  # one at a time: in this process (no second import, no kernel compiled twice)
                try:
                    for path in paths:
                        PARTS[name](path)
                except Exception as exc:  # noqa: BLE001 -- reported per part, as a child's last line is
                    report.failed[name] = f"{type(exc).__name__}: {exc}"
            else:
                argv = [*CHILD, name, *paths]
                proc = subprocess.run(argv, capture_output=True, text=True)
                if proc.returncode != 0:
                    lines = (proc.stderr or proc.stdout).strip().splitlines()
                    report.failed[name] = lines[-1] if lines else f"exit {proc.returncode}"
            report.part_seconds[name] = time.perf_counter() - started
            if done is not None:
                done(name)

        with ThreadPoolExecutor(jobs) as pool:
            list(pool.map(run, names))
    report.seconds = time.perf_counter() - t0
    return report


def main(argv: list[str]) -> None:
    """A child's work: ``PART STORE...``, a part of :data:`PARTS` on each store."""
    for store in argv[1:]:
        PARTS[argv[0]](store)
