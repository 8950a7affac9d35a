"""One host's share of a global batch sequence, as a ``grain.MapDataset`` (many hosts, elastic resume).

Every host computes the same global batches from document lengths alone (a schedule: :mod:`datatools.grain.schedule`)
and reads only its own rows: host ``h`` of ``N`` takes rows ``[h * R / N, (h + 1) * R / N)`` of every global batch of
``R`` rows. Element ``j`` is its slice of global batch ``j``, so a position depends neither on ``N`` nor on the
prefetch workers (:mod:`datatools.grain.portable_state`): a checkpoint taken on ``N`` hosts restores on ``M``.
"""

from __future__ import annotations

import bisect
import contextlib
import sys
import threading
from typing import Any

import numpy as np
import numpy.typing as npt

import grain
from datatools.base.checks import check_choice, check_int
from datatools.grain.batch import read_batch
from datatools.grain.schedule import EpochCache, HostCarryingSchedule, ReadAheadSchedule, Schedule
from datatools.io.formats.plan_file import PlanFile
from datatools.io.sources.documents import DocumentSource
from datatools.kernels.batch_layouts import CANONICAL_KEYS
from datatools.kernels.packing import PackPlan
from datatools.kernels.packing.materialize import new_batch
from datatools.kernels.shuffle import BlockShuffle, FeistelPermutation


def empty_rows(rows: int, length: int, pad_id: int, *, fill_from: int = 0) -> dict[str, np.ndarray]:
    """A canonical batch of ``rows`` rows of ``length`` tokens; rows from ``fill_from`` on are empty (padding:
    ``segment_ids`` 0), the rows before it are left for the caller to fill."""
    out = new_batch(rows, length)
    out["tokens"][fill_from:] = pad_id
    for key in CANONICAL_KEYS[1:]:
        out[key][fill_from:] = 0
    return out


def host_rows(rows: int, index: int, count: int) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of a global batch of ``rows`` rows that host ``index`` of ``count`` reads: the hosts take
    equal contiguous slices in host order (``rows`` divides by ``count``)."""
    share = rows // count
    return index * share, (index + 1) * share


class DocumentOrder:
    """The order documents are read in, per epoch: ``none`` (storage order), ``full`` (a Feistel permutation of
    (seed, epoch)) or ``block`` (a windowed block shuffle). ``order(positions, epoch)``: the document at each
    position (int64), O(1) per position."""

    same_documents_every_epoch = True  # a permutation of all n documents every epoch

    def __init__(self, n: int, kind: str, *, seed: int, io_block_size: int = 64, window_blocks: int = 1024):
        self.n = check_int(n, "documents", minimum=1)
        self.kind = check_choice(kind, "shuffle kind", ("none", "full", "block"))
        self.seed = seed
        self._block: BlockShuffle | None = None
        if kind == "block":
            self._block = BlockShuffle(n, io_block_size=io_block_size, window_blocks=window_blocks, seed=seed)
        self._perms = EpochCache(keep=5)

    def __call__(self, positions: npt.ArrayLike, epoch: int) -> np.ndarray:
        at = np.asarray(positions, np.int64)
        if self.kind == "none":
            return at.copy()
        if self._block is not None:  # kind block
            return np.asarray(self._block.index(at, epoch), np.int64)
        perm = self._perms.get(epoch, lambda e: FeistelPermutation(self.n, self.seed, epoch=e))
        return np.asarray(perm(at), np.int64)


class PlannedSchedule:
    """Global batches of ``batch_size`` consecutive rows of ``rows``, a (shuffled) MapDataset of canonical rows of
    ``ctx`` tokens (index ``e * len + i`` is row i of epoch e); ``drop_remainder`` leaves out each epoch's last,
    short batch (else it is padded with empty rows)."""

    def __init__(self, rows: grain.MapDataset, batch_size: int, *, drop_remainder: bool, ctx: int, pad_id: int = 0):
        self.rows, self.n = rows, len(rows)
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        self.drop_remainder = bool(drop_remainder)
        self.ctx, self.pad_id = int(ctx), int(pad_id)
        self._batches = self.n // self.batch_size if drop_remainder else -(-self.n // self.batch_size)
        self.row_counts: tuple[int, ...] = (self.batch_size,)
        self.shapes = [(self.batch_size, self.ctx)]

    def num_batches(self, epoch: int) -> int:
        return self._batches

    def batch_rows(self, epoch: int, j: int) -> int:
        return self.batch_size

    @property
    def docs(self) -> DocumentSource:
        """The document source the rows are read from."""
        docs: DocumentSource = self.rows.docs
        return docs

    def rows_plan(self, epoch: int, j: int, lo: int, hi: int) -> PackPlan:
        """Rows ``[lo, hi)`` of global batch ``j`` that hold data (a prefix: the epoch's last batch may end early),
        as one plan (see :class:`~datatools.grain.schedule.PlannedRowsSchedule`)."""
        index = j * self.batch_size + np.arange(lo, hi, dtype=np.int64)
        plan: PackPlan = self.rows.rows_plan(index[index < self.n] + epoch * self.n)
        return plan

    def plan_rows(self, epoch: int) -> tuple[PackPlan | PlanFile, np.ndarray]:
        """``(plan, rows)``: the plan (a PackPlan or a memory-mapped PlanFile) of the rows, and every row id of it
        in ``epoch``'s order: entry i is row ``i % batch_size`` of global batch ``i // batch_size`` (the entries
        past the last batch are the rows ``drop_remainder`` leaves out). An epoch's rows without their pieces."""
        plan_rows: tuple[PackPlan | PlanFile, np.ndarray] = self.rows.plan_rows(
            np.arange(self.n, dtype=np.int64) + epoch * self.n
        )
        return plan_rows

    def pieces(self, epoch: int, j: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(doc, start, length)`` of every piece rows ``[lo, hi)`` of global batch ``j`` read."""
        plan = self.rows_plan(epoch, j, lo, hi)
        return plan.doc, plan.start, plan.length

    ahead_pieces = pieces

    def read(self, epoch: int, j: int, lo: int, hi: int) -> dict[str, np.ndarray]:
        index = j * self.batch_size + np.arange(lo, hi, dtype=np.int64)
        valid = index < self.n
        if valid.all():
            batch: dict[str, np.ndarray] = read_batch(self.rows, index + epoch * self.n)
            return batch
        out = empty_rows(hi - lo, self.ctx, self.pad_id)
        if valid.any():
            batch = read_batch(self.rows, index[valid] + epoch * self.n)
            for key in CANONICAL_KEYS:
                out[key][valid] = batch[key]
        return out


class HostBatchesMapDataset(grain.MapDataset):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    """Element ``j``: host ``index`` of ``count``'s rows of global batch ``j`` of ``schedule``, over the epochs.

    ``self[j]`` is a pure function of ``j``: it reads batch ``j`` and nothing else. Reading ahead in batch order is
    the job of the one reader of a host (:class:`~datatools.grain.host_reader.HostBatchesIterDataset`), which asks
    :meth:`pieces` what each batch reads.

    Args:
      schedule: the global batches (:class:`~datatools.grain.schedule.Schedule`).
      index, count: this host and the number of hosts; every batch height must divide by ``count``.
      num_epochs: epochs to run; None: repeat forever.
    """

    def __init__(self, schedule: Schedule, *, index: int = 0, count: int = 1, num_epochs: int | None = 1):
        super().__init__()
        self._count = check_int(count, "host count", minimum=1)
        self._index = check_int(index, "host index", minimum=0)
        if self._index >= self._count:
            raise ValueError(f"host index {index} out of range [0, {count})")
        bad = [r for r in schedule.row_counts if r % self._count]
        if bad:
            raise ValueError(
                f"a global batch of {bad[0]} rows does not divide over {count} hosts: the batch size "
                f"(every bucket's, when bucketing) must be a multiple of the host count"
            )
        self._schedule = schedule
        if isinstance(schedule, HostCarryingSchedule):  # a schedule that sends only this host's first plans
            schedule.carry_host(self._index, self._count)
        self._epochs = None if num_epochs is None else check_int(num_epochs, "num_epochs", minimum=1)
        self._ends = [0]  # cumulative batches at the end of each epoch computed so far
        self._planned_ahead = 0  # the last epoch counted ahead, in the background (_plan_next_epoch)
        self._lock = threading.Lock()
        if schedule.num_batches(0) == 0:
            raise ValueError(
                "the data makes no global batch (fewer rows than one batch; set drop_remainder: false "
                "or a smaller batch_size)"
            )

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"} | {"_planned_ahead": 0}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def schedule(self) -> Schedule:
        """The global batch sequence this host reads its rows of."""
        return self._schedule

    @property
    def reads_ahead(self) -> bool:
        """Whether this host's reads pay for being issued ahead of need (a schedule that says what a batch reads,
        over a source in object storage)."""
        schedule = self._schedule
        return isinstance(schedule, ReadAheadSchedule) and schedule.docs.reads_ahead

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """The (rows, tokens) shapes of this host's batches."""
        return [(r // self._count, t) for r, t in self._schedule.shapes]

    def _end_of(self, epoch: int) -> int:
        """Global batches before the end of ``epoch``. An epoch is counted outside the lock: planning one takes
        ~0.05-3 s, and batches of the epochs already counted must not wait for it."""
        while True:
            with self._lock:
                if len(self._ends) > epoch + 1:
                    return self._ends[epoch + 1]
                next_epoch = len(self._ends) - 1
            batches = self._schedule.num_batches(next_epoch)  # the schedule's own cache: planned once
            with self._lock:
                if len(self._ends) == next_epoch + 1:
                    self._ends.append(self._ends[-1] + batches)

    def _plan_next_epoch(self, epoch: int, j: int) -> None:
        """From the middle of ``epoch`` on (batch ``j``), count the next epoch in a daemon thread, once: its plan
        (an epoch's Feistel order and window counts) is then ready before the reads reach it."""
        if self._epochs is not None and epoch + 1 >= self._epochs:
            return
        if 2 * j < self._end_of(epoch) - self._ends[epoch]:
            return
        with self._lock:
            if self._planned_ahead > epoch:
                return
            self._planned_ahead = epoch + 1

        def plan() -> None:
            with contextlib.suppress(Exception):  # an error is raised where the epoch is needed, by the same call
                self._end_of(epoch + 1)

        threading.Thread(target=plan, name="datatools-plan-ahead", daemon=True).start()

    def __len__(self) -> int:
        return sys.maxsize if self._epochs is None else self._end_of(self._epochs - 1)

    def locate(self, j: int) -> tuple[int, int]:
        """(epoch, batch within the epoch) of global batch ``j``."""
        if j < 0 or (self._epochs is not None and j >= len(self)):
            raise IndexError(f"batch {j} out of range for {len(self)} batches")
        epoch = bisect.bisect_right(self._ends, j) - 1  # a list: np.searchsorted made an array of it (~3 us a batch)
        while self._end_of(epoch) <= j:
            epoch += 1
        return epoch, j - self._ends[epoch]

    def _rows(self, epoch: int, j: int) -> tuple[int, int]:
        """This host's rows [lo, hi) of global batch ``j`` of ``epoch``."""
        return host_rows(self._schedule.batch_rows(epoch, j), self._index, self._count)

    def rows_of(self, index: int) -> tuple[int, int, int, int]:
        """``(epoch, batch within the epoch, lo, hi)``: where global batch ``index`` is, and this host's rows
        ``[lo, hi)`` of it."""
        epoch, j = self.locate(index)
        return (epoch, j, *self._rows(epoch, j))

    def __getitem__(self, index: int | slice) -> Any:  # a batch (dict of arrays), or a slice of the dataset
        if isinstance(index, slice):
            return self.slice(index)
        epoch, j = self.locate(int(index))
        self._plan_next_epoch(epoch, j)
        return self._schedule.read(epoch, j, *self._rows(epoch, j))

    def __str__(self) -> str:
        return f"HostBatchesMapDataset(host {self._index} of {self._count}, {type(self._schedule).__name__})"
