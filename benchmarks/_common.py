"""Helpers shared by the benchmark scripts: timing medians, the tables, the JSON."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

# where results are written: benchmarks/results/, or DATATOOLS_BENCH_RESULTS (a smoke run leaves the figures alone)
RESULTS = Path(os.environ.get("DATATOOLS_BENCH_RESULTS") or Path(__file__).resolve().parent / "results")
LOAD_AT_START = os.getloadavg()  # (1, 5, 15 min) load averages when the benchmark started
_RUN = {"repeats": None}


def machine() -> dict:
    """What the figures were measured on: host, CPU, cores, Python."""
    return {
        "host": platform.node(),
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
    }


def announce(repeats: int, note: str = "") -> None:
    """Print the machine, the load and the number of repeats before any table (every benchmark does, first), and
    remember ``repeats`` for :func:`write_json`. ``note`` says what else the reader must know (e.g. one core)."""
    _RUN["repeats"] = repeats
    m = machine()
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"machine: {m['host']} {m['cpu']}, {m['cores']} cores, Python {m['python']}; load {load} (1/5/15 min); "
        f"repeats: {repeats}, times are medians{'; ' + note if note else ''}"
    )


def median_time(fn, repeats: int = 5) -> tuple[float, object]:
    """Median wall time (seconds) of ``fn()`` over ``repeats`` runs, and its last result."""
    times = []
    result = None
    for _ in range(repeats):
        result = None  # free the previous result first: steady state reuses its memory
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), result


def one_core() -> None:
    """Pin the process to one core and one numba/BLAS thread so figures are per core."""
    for var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    if hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        except OSError:
            pass


def lognormal_lengths(n: int, *, median: float, mean: float, low: int, high: int, seed: int) -> np.ndarray:
    """Document lengths (tokens): lognormal with the given median and (unclipped) mean, clipped to [low, high]."""
    sigma = float(np.sqrt(2 * np.log(mean / median)))
    rng = np.random.default_rng(seed)
    return rng.lognormal(np.log(median), sigma, size=n).round().clip(low, high).astype(np.int64)


# The three length distributions every benchmark uses (packing, bucketing, pipeline).
DISTRIBUTIONS = {
    "a": dict(ctx=1024, median=170, mean=230, low=1, high=1024, label="ctx 1024, lognormal mean~230, <=1024"),
    "b": dict(
        ctx=2048, median=400, mean=800, low=1, high=8192, label="ctx 2048, lognormal median 400 mean~800, <=8192"
    ),
    "c": dict(ctx=8192, median=400, mean=800, low=1, high=8192, label="ctx 8192, same lengths as (b)"),
}


def distribution(name: str, n: int, seed: int = 0) -> tuple[np.ndarray, int]:
    d = DISTRIBUTIONS[name]
    return lognormal_lengths(n, median=d["median"], mean=d["mean"], low=d["low"], high=d["high"], seed=seed), d["ctx"]


def print_table(title: str, columns: list[str], rows: list[list], console: Console | None = None) -> None:
    table = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        table.add_column(c, justify="left" if i == 0 else "right")
    for r in rows:
        table.add_row(*[x if isinstance(x, str) else f"{x:,}" if isinstance(x, int) else f"{x:.4g}" for x in r])
    (console or Console(width=200)).print(table)


def write_json(name: str, payload: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {
        "machine": machine(),
        "load_at_start": LOAD_AT_START,
        "load_at_end": os.getloadavg(),
        "repeats": _RUN["repeats"],
        **payload,
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=float))
    tmp.replace(path)
    return path


def fmt_rate(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.1f}"
