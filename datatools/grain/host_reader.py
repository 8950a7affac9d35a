"""One reader per host: a host's batches read ahead and built ahead in batch order, from one place.

A host knows its next batches (the global batch sequence is a function of the lengths, the seed and the config), so
its reads are ordered by that sequence, never by a clock. One background thread (:class:`BatchWalk`) walks the batch
numbers from the restored position; before building batch ``k`` it issues the reads of batches ``k .. k +``
:data:`READ_AHEAD` that are not issued yet (``prefetch``: issued, not waited for; the source's byte budget bounds
them, and a batch it refuses is offered again once the batches before it are built), then builds batch ``k`` and
hands it over through a queue of at most :data:`BUILD_AHEAD` finished batches. Reads are issued in batch order:
every batch's own pieces at its batch number, a lane's whole window read ahead for batch ``k`` after the pieces of
batches up to ``k +`` :data:`WINDOWS_AFTER` (the source's issue ``order``), so the first batch's own reads go first
and the next batch's before the windows of batches far ahead.

As in Levanter's ``DataLoaderIterator`` (a bounded background queue walked from the restored position) and mosaic
streaming's ``_prepare_thread`` (reads ahead along the known order within a budget), reads are I/O and run in
threads; worker processes are for CPU-bound sources only (:mod:`datatools.pipeline.build`).

:class:`HostBatchesIterDataset` is the Grain face of it: its iterator's state is the next global batch
(``{"next_index": k}``, the form of a single-process Grain iterator), so a checkpoint restores on any number of hosts.
"""

from __future__ import annotations

import atexit
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

import grain
from datatools.grain.host_batches import HostBatchesMapDataset
from datatools.grain.schedule import ReadAheadSchedule

T = TypeVar("T")

READ_AHEAD = 8  # batches past the one being built whose reads are issued (the source's byte budget bounds the bytes)
BUILD_AHEAD = 2  # finished batches waiting for the consumer
PRIME = 2  # batches built (their reads in) before a walk that reads ahead hands over its first: at +100 ms the next
# batch's pieces are ~140 requests more than the first's (host 0 of 4), more than a 0.4 s step of moto's ~170/s,
# and step 1 waited 0.7-0.9 s; the first batch is later by that (its bound counts those requests too)
WINDOWS_AFTER = READ_AHEAD + 1  # a lane's window read ahead for batch k is issued after the own pieces of batches up
# to k + this (issued with them, the windows of batches 2-8 held back the pieces of batch 2: a step waited 0.6 s)
_END = object()  # the walk reached its last batch
# walks whose thread may still run: closed at exit (see _close_live)
_LIVE: weakref.WeakSet[BatchWalk[Any]] = weakref.WeakSet()


@atexit.register
def _close_live() -> None:
    """Close every walk still running before the interpreter ends: a builder thread left inside a read or a numba
    kernel while the interpreter finalized aborted the process ("terminate called without an active exception")."""
    for walk in list(_LIVE):
        walk.close()


class BatchWalk(Generic[T]):
    """Batches ``start, start + 1, ...`` (up to ``stop``, exclusive; None: no end) of ``build``, read ahead and built
    ahead in one daemon thread, handed over in order by :meth:`next`.

    Args:
      build: ``build(k)``: batch ``k``, finished (the reads it needs that were not issued ahead are issued then).
      start, stop: the first batch and the end (exclusive; None: endless).
      prefetch: ``prefetch(k, near)``: issue batch ``k``'s reads without waiting (``near``: ``k`` is the batch being
        built or the next, whose own pieces are read; further ones may read what is cheapest); False when the source's
        byte budget is full (``k`` is offered again after the next batch is built). None: nothing is read ahead.
      read_ahead: batches past the one being built whose reads are issued.
      build_ahead: finished batches held for the consumer (0: each batch is built in :meth:`next`, no thread).
      prime: batches built before the first is handed over (at most ``build_ahead``); None: :data:`PRIME` when
        reads are issued ahead (``prefetch``) and ``build_ahead`` allows, else 1.

    Counters (exact, not timed): :attr:`handed` batches handed over, :attr:`asked_early` batches asked for before
    they were built (the consumer waited for the builder).
    """

    def __init__(
        self,
        build: Callable[[int], T],
        *,
        start: int = 0,
        stop: int | None = None,
        prefetch: Callable[[int, bool], bool] | None = None,
        read_ahead: int = READ_AHEAD,
        build_ahead: int = BUILD_AHEAD,
        prime: int | None = None,
    ):
        self._build, self._prefetch = build, prefetch
        self.start, self.stop = int(start), stop
        self.read_ahead, self.build_ahead = max(0, int(read_ahead)), max(0, int(build_ahead))
        if prime is None:
            prime = PRIME if prefetch is not None else 1
        self.prime = max(1, min(int(prime), self.build_ahead))
        # finished batches, and a token for each place free among the build_ahead (two C queues: a bounded
        # queue.Queue's Python locks and conditions cost ~12 us a batch handed over, half the handing over)
        self._queue: queue.SimpleQueue[tuple[int, object]] = queue.SimpleQueue()
        self._free: queue.SimpleQueue[None] = queue.SimpleQueue()
        for _ in range(max(1, self.build_ahead)):
            self._free.put(None)
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._issued = self.start  # the first batch whose reads were not all accepted yet
        self._built = self.start  # the next batch to build (the synchronous walk)
        self._done = False
        self.handed = 0
        self.asked_early = 0

    @property
    def position(self) -> int:
        """The next batch :meth:`next` hands over."""
        return self.start + self.handed

    def _in_range(self, k: int) -> bool:
        return self.stop is None or k < self.stop

    def _issue_reads(self, k: int) -> None:
        """Offer the reads of batches from the first not yet accepted to ``k + read_ahead``, in order, until the
        source's budget refuses one."""
        if self._prefetch is None:
            return
        last = k + self.read_ahead
        while self._issued <= last and self._in_range(self._issued):
            if not self._prefetch(self._issued, self._issued <= k + 1):
                return
            self._issued += 1

    def _run(self) -> None:
        """Issue reads, build, hand over, in batch order; after a :meth:`close`, end without putting anything more
        than the one batch the close made room for."""
        k = self.start
        stopped = self._stopped
        first: list[tuple[int, Any]] = []  # the first batches, handed over once ``prime`` of them are built
        try:
            while self._in_range(k):
                if stopped.is_set():
                    return
                self._issue_reads(k)
                item = self._build(k)
                self._free.get()  # a place for it (close() gives one to a builder waiting here)
                first.append((k, item))
                if stopped.is_set():
                    return
                k += 1
                if k - self.start >= self.prime:
                    while first:
                        self._queue.put(first.pop(0))
            if not stopped.is_set():
                for entry in first + [(k, _END)]:
                    self._queue.put(entry)
        except BaseException as exc:  # noqa: BLE001 -- raised in the consumer, at the batch that failed
            if not stopped.is_set():
                for entry in first + [(k, exc)]:
                    self._queue.put(entry)

    def next(self) -> T:
        """The next batch (StopIteration past ``stop``; a build's error is raised here, at its batch)."""
        if self._done:
            raise StopIteration
        if self.build_ahead == 0:
            return self._next_here()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="datatools-host-reader", daemon=True)
            _LIVE.add(self)
            self._thread.start()
        if self._queue.empty():
            self.asked_early += 1
        _, item = self._queue.get()
        self._free.put(None)
        if item is _END:
            self._done = True
            raise StopIteration
        if isinstance(item, BaseException):
            self._done = True
            raise item
        self.handed += 1
        return cast(T, item)  # neither the end nor an error: a built batch

    def _next_here(self) -> T:
        k = self._built
        if not self._in_range(k):
            self._done = True
            raise StopIteration
        self._issue_reads(k)
        item = self._build(k)
        self._built += 1
        self.handed += 1
        return item

    def close(self) -> None:
        """Stop the walk and wait for its thread, which ends after the batch it is building (its reads are bounded
        by the storage layer's own limits)."""
        self._stopped.set()
        self._done = True
        while True:  # the batches built ahead let go
            try:
                self._queue.get_nowait()
            except Exception:  # noqa: BLE001 -- queue.Empty (or, at interpreter exit, the module already gone)
                break
        self._free.put(None)  # a builder waiting for a place gets one, and sees the stop
        thread = self._thread  # joined already: a second close (Grain's __del__ at exit) touches no module global
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join()


class _HostBatchesIterator(grain.DatasetIterator):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    """Iterates a host's batches through one :class:`BatchWalk`; state: ``{"next_index": k}``."""

    def __init__(self, ds: HostBatchesIterDataset):
        super().__init__()
        self._ds = ds
        self._walk = ds.walk(0)

    def __next__(self) -> Any:  # the host's next element
        return self._walk.next()

    def get_state(self) -> dict[str, Any]:
        return {"next_index": self._walk.position}

    def set_state(self, state: dict[str, Any]) -> None:
        k = state["next_index"]
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"state['next_index'] must be a batch count >= 0, got {k!r}")
        self._walk.close()
        self._ds.forget_read_ahead()
        self._walk = self._ds.walk(k)

    def close(self) -> None:
        self._walk.close()

    @property
    def walk(self) -> BatchWalk[Any]:
        """The walk now read from (its counters)."""
        return self._walk


def prefetcher(
    schedule: Any, where: Callable[[int], tuple[int, int, int, int]], windows_after: int = WINDOWS_AFTER
) -> Callable[[int, bool], bool]:
    """The one place a host's reads are issued ahead (a :class:`BatchWalk`'s ``prefetch``): global batch ``k`` is
    rows ``[lo, hi)`` of batch ``j`` of ``epoch`` (``where(k)``); its own pieces at issue order ``k`` and, unless
    ``near``, what reads cheapest for it (a lane's whole window) at ``k + windows_after``, handed to the source's
    ``prefetch`` (False: its byte budget is full)."""
    docs = schedule.docs

    def prefetch(k: int, near: bool) -> bool:
        epoch, j, lo, hi = where(k)
        pieces = schedule.pieces(epoch, j, lo, hi)
        window = None if near else schedule.ahead_pieces(epoch, j, lo, hi)
        with docs.prefetching_together():  # queued together: a piece's request reads the window's run around it
            if not docs.prefetch(*pieces, near=True, order=k):
                return False
            return window is None or bool(docs.prefetch(*window, near=False, order=k + windows_after))

    return prefetch


class HostBatchesIterDataset(grain.IterDataset):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    """A host's batches (``elements[k]``: global batch ``k``'s rows of this host, maps applied) in order, read and
    built ahead by one :class:`BatchWalk`.

    Args:
      elements: the host's batches by global batch number, maps applied (a ``MapDataset`` over ``host``).
      host: the host's batches before the maps: what each batch reads (:meth:`HostBatchesMapDataset.pieces`).
      threaded: build batches ahead in a thread (False for sources in memory: the hand-off costs more than a batch).
    """

    def __init__(self, elements: grain.MapDataset, host: HostBatchesMapDataset, *, threaded: bool = True):
        super().__init__()
        self.elements, self.host, self.threaded = elements, host, bool(threaded)

    def walk(self, start: int) -> BatchWalk[Any]:
        """A walk of this host's batches from global batch ``start``."""
        host = self.host
        prefetch = prefetcher(host.schedule, host.rows_of) if host.reads_ahead else None
        stop = None if host._epochs is None else len(self.elements)
        return BatchWalk(
            self.elements.__getitem__,
            start=start,
            stop=stop,
            prefetch=prefetch,
            build_ahead=BUILD_AHEAD if self.threaded else 0,
        )

    def forget_read_ahead(self) -> None:
        """Let the source reuse what an abandoned walk read ahead (a restore moved the position)."""
        schedule = self.host.schedule
        if isinstance(schedule, ReadAheadSchedule):
            schedule.docs.forget_read_ahead()

    def __iter__(self) -> _HostBatchesIterator:
        return _HostBatchesIterator(self)

    def __str__(self) -> str:
        return f"HostBatchesIterDataset({self.host})"
