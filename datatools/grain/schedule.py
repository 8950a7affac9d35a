"""The schedule protocol: what every global batch sequence gives the host that reads its share.

A *schedule* computes, from document lengths alone, one global sequence of batches per epoch, the same on every
host; :class:`~datatools.grain.host_batches.HostBatchesMapDataset` reads one host's rows of each. The pipeline
picks one by config mode (``pipeline/schedules.py``). Batches do not cross epochs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

import numpy as np
import numpy.typing as npt

from datatools.io.formats.plan_file import PlanFile
from datatools.io.sources.documents import DocumentSource
from datatools.kernels.packing import PackPlan

T = TypeVar("T")


class Schedule(Protocol):
    """A global batch sequence (what every schedule gives)."""

    shapes: list[tuple[int, int]]  # the (rows, tokens) shape of every batch it may give (one XLA program each)
    row_counts: tuple[int, ...]  # every batch height (rows) it may give: each must divide by the host count

    def num_batches(self, epoch: int) -> int:
        """Global batches of ``epoch``."""
        ...

    def batch_rows(self, epoch: int, j: int) -> int:
        """Rows of global batch ``j`` of ``epoch``."""
        ...

    def read(self, epoch: int, j: int, lo: int, hi: int) -> dict[str, np.ndarray]:
        """Rows ``[lo, hi)`` of global batch ``j`` of ``epoch``: a canonical batch of ``hi - lo`` rows (rows past
        the data are empty: ``segment_ids`` 0)."""
        ...


@runtime_checkable
class ReadAheadSchedule(Schedule, Protocol):
    """A schedule whose reads can start before a batch is asked for (the host passes ``pieces`` to
    ``docs.prefetch``)."""

    docs: DocumentSource  # the document source read: its reads_ahead says whether read-ahead pays

    def pieces(self, epoch: int, j: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(doc, start, length)`` of every piece rows ``[lo, hi)`` of global batch ``j`` read."""
        ...

    def ahead_pieces(self, epoch: int, j: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What to read ahead for rows ``[lo, hi)`` of a batch further off than the next: ``pieces``, or more
        when that costs fewer requests (a lane's whole window)."""
        ...


@runtime_checkable
class PlannedRowsSchedule(Schedule, Protocol):
    """A schedule that says where every token of a batch comes from, from lengths alone (what ``datatools explain``
    reports, and what the balanced order of :mod:`datatools.grain.balanced_schedule` weighs rows by): every schedule
    of the pipeline's table is one; ``read`` fills exactly the rows ``rows_plan`` names."""

    pad_id: int  # the token id written at padding

    def rows_plan(self, epoch: int, j: int, lo: int, hi: int) -> PackPlan:
        """Rows ``[lo, hi)`` of global batch ``j`` of ``epoch`` that hold data (a prefix of them: the rest are
        empty), as one :class:`~datatools.kernels.packing.PackPlan` whose row ``i`` is row ``lo + i`` and whose
        ``ctx`` is the batch's row length (tokens)."""
        ...


class DocumentOrderLike(Protocol):
    """The documents' order per epoch (``DocumentOrder``, or a mixture's ``MixtureOrder``)."""

    n: int  # documents read per epoch
    same_documents_every_epoch: bool  # every epoch reads the same documents (reordered): their lengths too

    def __call__(self, positions: npt.ArrayLike, epoch: int) -> np.ndarray: ...


@runtime_checkable
class RestartableSchedule(Schedule, Protocol):
    """A schedule over a document order whose later documents may change at a restore (a mixture's new
    weights)."""

    order: DocumentOrderLike  # the documents' order per epoch

    def restart_position(self, epoch: int, j: int) -> int:
        """The first position of ``epoch``'s document order whose document may change without changing global
        batches ``0 .. j - 1`` of the epoch."""
        ...


@runtime_checkable
class HostCarryingSchedule(Schedule, Protocol):
    """A schedule that can send a host only what that host reads (a lane schedule: its own lanes' first plans)."""

    def carry_host(self, index: int, count: int) -> None:
        """From now on, carry (pickle to Grain workers) only what host ``index`` of ``count`` reads."""
        ...


@runtime_checkable
class EpochRowsSchedule(Schedule, Protocol):
    """A schedule with a vectorized walk of an epoch's rows (bucketing): what ``datatools explain`` walks whole
    epochs by, instead of ``rows_plan`` batch by batch."""

    def epoch_rows(
        self, epoch: int, batches: int, chunk: int = 1 << 20
    ) -> Iterator[tuple[np.ndarray, np.ndarray, PackPlan]]:
        """``(batch, row, plan)`` chunks (``chunk`` rows at a time) of the rows of global batches ``[0, batches)`` of
        ``epoch`` that hold data, in order."""
        ...


@dataclass(frozen=True)
class Delivered:
    """Pieces some global batches delivered, in bulk (their order not kept: what an exposure ledger counts): rows
    ``rows`` of ``plan`` (None: every row of it), counted ``sign`` times (-1: taken away, an epoch counted as a whole
    plan less its rows not delivered); or, with no ``plan``, every token of each of ``documents`` (global ids, int64)
    once: documents a packer cut whole into pieces (overflow ``split``, align 1), no plan needed."""

    plan: PackPlan | PlanFile | None = None
    rows: np.ndarray | None = None
    documents: np.ndarray | None = None
    sign: int = 1


@runtime_checkable
class DeliveredSchedule(Schedule, Protocol):
    """A schedule that says in bulk what global batches ``[0, batches)`` of an epoch deliver (streaming packing,
    lanes, the curriculum): ``datatools explain``'s ledger counts it instead of walking ``rows_plan`` batch by
    batch (whole windows as their documents, one partial window a lane planned)."""

    def delivered(self, epoch: int, batches: int, chunk: int = 1 << 22) -> Iterator[Delivered]:
        """The pieces of global batches ``[0, batches)`` of ``epoch``, as :class:`Delivered` parts of at most about
        ``chunk`` documents or rows each (bounds the memory)."""
        ...


@runtime_checkable
class DocumentPiecesSchedule(Schedule, Protocol):
    """A schedule that finds one document's pieces in an epoch without walking its batches (streaming packing,
    lanes, the curriculum): what ``datatools explain --document`` asks."""

    def document_pieces(self, epoch: int, d: int) -> list[tuple[int, int, int, int]]:
        """``(global batch, row, start, length)`` of every piece of document ``d`` (global id) in the epoch's rows,
        in no order; a piece of a remainder ``drop_remainder`` leaves out has a batch past the epoch's last (the
        caller keeps the batches it asks about)."""
        ...


@runtime_checkable
class PlannedEpochSchedule(Schedule, Protocol):
    """A schedule whose epoch is one plan's rows in an order (planned packing): ``datatools explain`` counts the
    plan's pieces in place."""

    def plan_rows(self, epoch: int) -> tuple[PackPlan | PlanFile, np.ndarray]:
        """``(plan, rows)``: the plan of the rows and every row id of it in ``epoch``'s order."""
        ...


class EpochCache:
    """What is computed once per epoch (or other key), up to ``keep`` of them, the least recently used dropped
    first (dropping them all when full planned the current epoch again once the next was planned ahead: two epochs in
    nine at the local benchmark's shape, ~25 ms each).

    Thread-safe (the value is computed outside the lock). Pickled empty, or with what it holds when ``carried``
    (small values that cost seconds to compute in a worker)."""

    def __init__(self, keep: int, *, carried: bool = False):
        self.keep, self.carried = int(keep), bool(carried)
        self._hits: dict[Any, Any] = {}
        self._lock = threading.Lock()

    def get(self, epoch: Any, compute: Callable[[Any], T]) -> T:
        """``compute(epoch)``, cached."""
        with self._lock:
            hit = self._hits.pop(epoch, None)
            if hit is not None:
                self._hits[epoch] = hit  # the most recently used last
        if hit is not None:
            return cast(T, hit)  # what compute gave for this key
        hit = compute(epoch)
        with self._lock:
            self._hits[epoch] = hit
            while len(self._hits) > max(1, self.keep):
                del self._hits[next(iter(self._hits))]
        return hit

    def held(self) -> list[Any]:
        """The epochs held now."""
        with self._lock:
            return sorted(self._hits)

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            return {"keep": self.keep, "carried": self.carried, "hits": dict(self._hits) if self.carried else {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        EpochCache.__init__(self, state["keep"], carried=state.get("carried", False))
        self._hits.update(state.get("hits", {}))


class ProcessCaches:
    """A mixin: pickled without its ``_lock`` and with the caches named in ``_CACHES`` empty."""

    _CACHES: tuple[str, ...] = ()

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k != "_lock"}
        return state | {k: type(state[k])() for k in self._CACHES}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
