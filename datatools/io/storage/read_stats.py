"""What the readers of a process fetched, and how long reads took: the loader's side of "did the step wait?".

Every read a document source issues to storage is counted here, per process. A process given a folder
(:func:`share_in`) writes its counters there (``<pid>.json``, replaced at most every :data:`FLUSH_EVERY_S` seconds,
at most that long after a count, and at each :func:`flush`); :func:`collect` adds up every process's file (the main
process reads its workers').
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TypedDict, TypeVar, Unpack

import numpy as np

FLUSH_EVERY_S = 0.5
LATENCIES_KEPT = 4096  # most recent request latencies kept per process (seconds)
T = TypeVar("T")


@dataclass
class ReadCounters:
    """Counters of one process (or the sum of several). Bytes in bytes, times in seconds."""

    requests: int = 0  # reads issued to storage, one per extent (an object store may serve adjacent ones at once)
    bytes_fetched: int = 0  # decoded bytes of every extent read (read-ahead included), at the store's token width
    bytes_delivered: int = 0  # bytes of the pieces handed to batches, at the same width
    prefetched_requests: int = 0  # of ``requests``, issued ahead of need (read-ahead)
    late_reads: int = 0  # extents a batch needed that no read-ahead had asked for: read only when it was built
    wait_s: float = 0.0  # time batch builders spent waiting for reads that were not yet done
    latencies: list[float] = field(default_factory=list)  # the most recent request latencies

    def add(self, other: ReadCounters) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))  # latencies: lists, joined

    def latency_quantiles(self) -> tuple[float, float]:
        """(p50, p99) of the request latencies kept, NaN when none."""
        if not self.latencies:
            return float("nan"), float("nan")
        p50, p99 = np.quantile(np.asarray(self.latencies), [0.5, 0.99])
        return float(p50), float(p99)

    def to_json(self) -> dict[str, int | float | list[float]]:
        """The counters as JSON-ready values (what a process's file holds, :func:`collect` reads back)."""
        return dict(self.__dict__)


class _ProcessStats:
    """This process's counters, written to ``folder`` when one is set (see the module docstring)."""

    def __init__(self) -> None:
        self.counters = ReadCounters()
        self.lock = threading.Lock()
        self.folder: str | None = None
        self.pid = os.getpid()
        self._flushed = 0.0
        self._trailing: threading.Timer | None = None  # the flush of counts made since the last one

    def record(
        self,
        *,
        requests: int = 0,
        bytes_fetched: int = 0,
        bytes_delivered: int = 0,
        prefetched: int = 0,
        late_reads: int = 0,
        wait_s: float = 0.0,
        latency_s: float | None = None,
    ) -> None:
        with self.lock:
            c = self.counters
            c.requests += requests
            c.bytes_fetched += bytes_fetched
            c.bytes_delivered += bytes_delivered
            c.prefetched_requests += prefetched
            c.late_reads += late_reads
            c.wait_s += wait_s
            if latency_s is not None:
                c.latencies.append(latency_s)
                if len(c.latencies) > 2 * LATENCIES_KEPT:
                    del c.latencies[:-LATENCIES_KEPT]
        if self.folder is not None:
            self._flush_soon()

    def _flush_soon(self) -> None:
        """Flush now when the last flush is :data:`FLUSH_EVERY_S` old, else once it is: the last counts of a burst
        reach the file too (a worker's last batches of a short run otherwise never did: 0.1 of 0.7 MB delivered)."""
        wait = self._flushed + FLUSH_EVERY_S - time.monotonic()
        if wait <= 0:
            self.flush()
            return
        with self.lock:
            if self._trailing is not None:
                return
            self._trailing = threading.Timer(wait, self.flush)
            self._trailing.daemon = True
            self._trailing.start()

    def flush(self) -> None:
        """Write this process's counters to its file in the shared folder (atomically: a rename)."""
        if self.folder is None:
            return
        self._flushed = time.monotonic()
        with self.lock:
            self._trailing = None  # counts made from now on flush again
            data = self.counters.to_json()
            data["latencies"] = self.counters.latencies[-LATENCIES_KEPT:]
        path = os.path.join(self.folder, f"{os.getpid()}.json")
        tmp = f"{path}.{threading.get_ident()}.tmp"
        with suppress(OSError):  # the folder went away (the pipeline ended): counting is best effort, reading is not
            with open(tmp, "w") as f:
                json.dump(data, f)
            os.replace(tmp, path)


_STATS = _ProcessStats()


class Counts(TypedDict, total=False):
    """The keywords of :func:`record` (as :meth:`_ProcessStats.record`): counts, bytes and seconds to add."""

    requests: int
    bytes_fetched: int
    bytes_delivered: int
    prefetched: int
    late_reads: int
    wait_s: float
    latency_s: float | None


def record(**kwargs: Unpack[Counts]) -> None:
    """Add to this process's counters (keywords as :meth:`_ProcessStats.record`)."""
    global _STATS
    if _STATS.pid != os.getpid():  # a forked child starts from zero
        folder, _STATS = _STATS.folder, _ProcessStats()
        _STATS.folder = folder
    _STATS.record(**kwargs)


def share_in(folder: str | os.PathLike[str] | None) -> None:
    """Write this process's counters to ``folder`` from now on (None: stop)."""
    _STATS.folder = None if folder is None else os.fspath(folder)
    _STATS.flush()


def shared_folder() -> str | None:
    """The folder this process writes its counters to (None: none)."""
    return _STATS.folder


def flush() -> None:
    """Write this process's counters now (when a folder is set)."""
    _STATS.flush()


def snapshot() -> ReadCounters:
    """A copy of this process's counters."""
    with _STATS.lock:
        return dataclasses.replace(_STATS.counters, latencies=list(_STATS.counters.latencies))


def collect(folder: str | os.PathLike[str] | None) -> ReadCounters:
    """This process's counters plus every other process's file in ``folder`` (their last flush)."""
    total = snapshot()
    if folder is None:
        return total
    for name in os.listdir(folder):
        if not name.endswith(".json") or name == f"{os.getpid()}.json":
            continue
        try:
            with open(os.path.join(folder, name)) as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        total.add(ReadCounters(**data))
    return total


def subtract(after: ReadCounters, before: ReadCounters) -> ReadCounters:
    """The counts between two snapshots (latencies: those added since)."""
    names = [f.name for f in dataclasses.fields(ReadCounters) if f.name != "latencies"]
    since = len(before.latencies) if len(after.latencies) >= len(before.latencies) else 0
    return ReadCounters(**{k: getattr(after, k) - getattr(before, k) for k in names}, latencies=after.latencies[since:])


class CountIn:
    """A map that passes each element through unchanged and makes the process it runs in (a Grain worker) write its
    counters to ``folder`` (:func:`share_in`, once per process), where the main process :func:`collect` s them."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __call__(self, element: T) -> T:
        if shared_folder() != self.folder:
            share_in(self.folder)
        return element
