"""Did the step wait for its batch? :class:`StallMeter` times every ``next()`` of a pipeline and, with the
readers' counters (:mod:`datatools.io.storage.read_stats`), makes a :class:`LoaderReport`; it warns, at most every
:data:`WARN_EVERY_S` seconds, when the loader falls behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from datatools.base.reports import Report
from datatools.io.storage import read_stats

WAIT_THRESHOLD_S = 0.010  # a step that waited longer than this counts as stalled
WARN_EVERY_S = 5.0
FLUSH_MARGIN_S = 0.2  # how much longer than a worker's flush interval a report waits for its counts (seconds)


@dataclass(frozen=True)
class LoaderReport(Report):
    """What the step waited for and what the readers fetched (every reader process). Times in milliseconds; the
    first step is ``first_batch_ms``, left out of the wait quantiles."""

    steps: int
    first_batch_ms: float
    wait_p50_ms: float
    wait_p99_ms: float
    wait_max_ms: float
    threshold_ms: float
    steps_waited: int  # steps after the first that waited more than the threshold
    requests: int
    late_reads: int  # extents a batch needed that the read-ahead had not asked for (0: every read was ahead)
    bytes_fetched: int
    bytes_delivered: int
    fetched_per_delivered: float  # NaN when nothing was delivered through a counting reader
    requests_per_step: float
    request_latency_p50_ms: float
    request_latency_p99_ms: float


T = TypeVar("T")


class StallMeter(Generic[T]):
    """An iterator over ``it`` that times each ``next()``: a wait over ``threshold_s`` is a stalled step, and
    ``warn`` gets one line when the loader falls behind (at most every :data:`WARN_EVERY_S` seconds);
    ``stats_folder``: where the worker processes write their read counters (None: this process only)."""

    def __init__(
        self,
        it: Iterator[T],
        *,
        stats_folder: str | None = None,
        threshold_s: float = WAIT_THRESHOLD_S,
        warn: Callable[[str], None] | None = None,
    ):
        self._it, self._folder, self.threshold_s, self._warn = it, stats_folder, float(threshold_s), warn
        self.waits: list[float] = []
        self._last_batch_at = time.monotonic()
        self._before = read_stats.collect(stats_folder)
        self._warned_at = time.monotonic()
        self._stalls_since_warning = 0

    def __iter__(self) -> StallMeter[T]:
        return self

    def __next__(self) -> T:
        t0 = time.perf_counter()
        batch = next(self._it)
        wait = time.perf_counter() - t0
        self._last_batch_at = time.monotonic()
        self.waits.append(wait)
        if len(self.waits) > 1 and wait > self.threshold_s:
            self._stalls_since_warning += 1
            now = time.monotonic()
            if self._warn is not None and now - self._warned_at >= WARN_EVERY_S:
                self._warn(
                    f"loader: the step waited {wait * 1e3:.0f} ms for batch {len(self.waits) - 1} "
                    f"({self._stalls_since_warning} steps waited > {self.threshold_s * 1e3:.0f} ms in the last "
                    f"{now - self._warned_at:.0f} s): reads are behind the step"
                )
                self._warned_at, self._stalls_since_warning = now, 0
        return batch

    def close(self) -> None:
        close = getattr(self._it, "close", None)
        if close:
            close()

    def report(self) -> LoaderReport:
        """The report so far; with worker processes, once their counts of the batches taken have reached their files
        (at most :data:`~datatools.io.storage.read_stats.FLUSH_EVERY_S` after a batch was taken, plus a margin)."""
        read_stats.flush()
        if self._folder is not None:
            time.sleep(max(0.0, self._last_batch_at + read_stats.FLUSH_EVERY_S + FLUSH_MARGIN_S - time.monotonic()))
        counts = read_stats.subtract(read_stats.collect(self._folder), self._before)
        later = np.asarray(self.waits[1:], np.float64) * 1e3
        p50, p99, top = (float(np.quantile(later, q)) for q in (0.5, 0.99, 1.0)) if later.size else (float("nan"),) * 3
        lat50, lat99 = counts.latency_quantiles()
        steps = len(self.waits)
        return LoaderReport(
            steps=steps,
            first_batch_ms=self.waits[0] * 1e3 if self.waits else float("nan"),
            wait_p50_ms=p50,
            wait_p99_ms=p99,
            wait_max_ms=top,
            threshold_ms=self.threshold_s * 1e3,
            steps_waited=int((later > self.threshold_s * 1e3).sum()),
            requests=counts.requests,
            late_reads=counts.late_reads,
            bytes_fetched=counts.bytes_fetched,
            bytes_delivered=counts.bytes_delivered,
            fetched_per_delivered=counts.bytes_fetched / counts.bytes_delivered
            if counts.bytes_delivered
            else float("nan"),
            requests_per_step=counts.requests / steps if steps else float("nan"),
            request_latency_p50_ms=lat50 * 1e3,
            request_latency_p99_ms=lat99 * 1e3,
        )
