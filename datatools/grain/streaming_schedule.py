"""Streaming packing as a global schedule: windows of shuffled documents packed from their lengths alone.

The epoch's documents, in the shuffled order, are cut into windows of ``window``
documents; each window is planned (``pack_lengths`` over its documents' lengths) and
its rows put in a seeded order (``seed``, epoch, window). The epoch's rows are the
windows' rows back to back, and global batch ``j`` is rows ``[j * B, (j + 1) * B)``.
Every host computes the same rows from lengths only and reads the tokens of its own
rows (:class:`~datatools.grain.host_batches.HostBatchesMapDataset`).

Memory: the rows per window of the epochs in use (one int64 per window) and the plans
of the last few windows read (one window's plan each) -- no window's tokens are held
beyond the batch being built. Counting an epoch's rows plans every window once, in each
process that reads the epoch (numba; measured 2.7 s (full shuffle) to 3.6 s (block) per million
documents at window 1024, ctx 8192, on a 2-core machine under a load of 12).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from datatools.base.checks import check_int
from datatools.grain.host_batches import empty_rows
from datatools.grain.schedule import DocumentOrderLike, ProcessCaches
from datatools.kernels.packing import PackOptions, PackPlan, cut_pieces, pack_lengths

PLANS_KEPT = 8  # window plans cached per process


def plan_window(
    lengths: np.ndarray, docs: np.ndarray, ctx: int, options: dict, key: list[int] | None = None
) -> tuple[PackPlan, np.ndarray]:
    """The window planner of streaming packing (the one every streaming packer uses: this schedule, lanes, the
    Grain transform): the packing window of documents ``docs`` (global ids), its plan from their lengths
    (``options``: :func:`~datatools.kernels.packing.pack_lengths`'s; document ids global) and, with a ``key``,
    its rows' seeded order (position i of the window is row ``order[i]`` of the plan)."""
    plan = pack_lengths(lengths[docs], ctx, **options)
    plan = dataclasses.replace(plan, doc=docs[plan.doc])
    order = np.random.default_rng(key).permutation(plan.num_rows) if key is not None else np.zeros(0, np.int64)
    return plan, order


def rows_of(picked: list[tuple[PackPlan, int]], ctx: int) -> PackPlan:
    """One plan holding the given rows (``(plan, row)`` pairs) in order: the rows of a batch, drawn from
    several windows, read in one bulk read."""
    if not picked:
        return pack_lengths(np.zeros(0, np.int64), ctx)
    first = [int(p.row_splits[r]) for p, r in picked]
    end = [int(p.row_splits[r + 1]) for p, r in picked]
    counts = np.asarray([b - a for a, b in zip(first, end)], np.int64)
    template = picked[0][0]
    return PackPlan(
        ctx=ctx,
        align=template.align,
        num_rows=len(picked),
        row_splits=np.concatenate(([0], np.cumsum(counts))),
        doc=np.concatenate([p.doc[a:b] for (p, _), a, b in zip(picked, first, end)]),
        start=np.concatenate([p.start[a:b] for (p, _), a, b in zip(picked, first, end)]),
        length=np.concatenate([p.length[a:b] for (p, _), a, b in zip(picked, first, end)]),
        dropped_tokens=0,
        empty_documents=0,
        algorithm=template.algorithm,
    )


class RowsPlanSchedule:
    """What the streaming schedules share: given ``rows_plan(epoch, j, lo, hi)`` (rows [lo, hi) of global batch
    ``j`` that hold data, as one plan), the pieces they read and the rows themselves, in one bulk read."""

    docs: Any  # a document source with pack_rows
    ctx: int
    pad_id: int

    def rows_plan(self, epoch: int, j: int, lo: int, hi: int) -> PackPlan:
        raise NotImplementedError

    def pieces(self, epoch: int, j: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(doc, start, length) of every piece rows [lo, hi) of global batch ``j`` read (for read-ahead)."""
        plan = self.rows_plan(epoch, j, lo, hi)
        return plan.doc, plan.start, plan.length

    def ahead_pieces(self, epoch: int, j: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What to read ahead for a batch further off than the next: its pieces (see :class:`LaneSchedule`)."""
        return self.pieces(epoch, j, lo, hi)

    def read(self, epoch: int, j: int, lo: int, hi: int) -> dict[str, np.ndarray]:
        plan = self.rows_plan(epoch, j, lo, hi)  # its ctx: the batch's row length
        out = empty_rows(hi - lo, plan.ctx, self.pad_id, fill_from=plan.num_rows)
        if plan.num_rows:  # one bulk read for the whole batch, written straight into its rows (a fresh batch)
            self.docs.pack_rows(
                plan, np.arange(plan.num_rows), pad_id=self.pad_id, out={k: v[: plan.num_rows] for k, v in out.items()}
            )
        return out


class StreamingSchedule(RowsPlanSchedule, ProcessCaches):
    """Global batches of streaming packing (see the module docstring).

    Args:
      docs: a document source (``lengths()``, ``pack_rows(plan, rows)``).
      order: the documents' order per epoch (:class:`~datatools.grain.host_batches.DocumentOrder`).
      ctx: row length (tokens).
      window: documents per packing window.
      batch_size: rows per global batch.
      drop_remainder: leave out each epoch's last, short batch (else padded with empty rows).
      algorithm, max_segments, align, overflow: as :func:`datatools.pack_lengths`.
      seed: seed of each window's row order.
      pad_id: token id of padding.
    """

    _CACHES = ("_plans",)  # rebuilt in each process

    def __init__(
        self,
        docs,
        order: DocumentOrderLike,
        *,
        ctx: int,
        window: int,
        batch_size: int,
        drop_remainder: bool,
        algorithm: str = "best_fit_decreasing",
        max_segments: int | None = None,
        align: int = 1,
        overflow: str = "split",
        seed: int = 0,
        pad_id: int = 0,
    ):
        self.docs, self.order = docs, order
        self.lengths = np.asarray(docs.lengths(), np.int64)
        opts = PackOptions(ctx, algorithm, max_segments, align, overflow)  # validated there
        self.ctx, self.options = opts.ctx, opts.keywords  # the options plan_window passes to pack_lengths
        self.window = check_int(window, "window", minimum=1)
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        self.drop_remainder = bool(drop_remainder)
        if overflow == "error":
            cut_pieces(self.lengths, self.ctx, "error")  # names the first document too long, by its global index
        self.seed, self.pad_id = int(seed), int(pad_id)
        self.positions = int(order.n)  # documents read per epoch (a mixture's may differ from the documents held)
        self.num_windows = -(-self.positions // self.window)
        self.row_counts = (self.batch_size,)
        self.shapes = [(self.batch_size, self.ctx)]
        self._starts: dict[int, np.ndarray] = {}  # epoch -> first row of each window (num_windows + 1)
        self._plans: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def _window_docs(self, epoch: int, w: int) -> np.ndarray:
        n = self.positions
        return self.order(np.arange(w * self.window, min(n, (w + 1) * self.window), dtype=np.int64), epoch)

    def window_plan(self, epoch: int, w: int) -> tuple[PackPlan, np.ndarray]:
        """Window ``w``'s plan (document ids global) and its row order: position i of the window is row
        ``order[i]`` of the plan."""
        key = (epoch, w)
        with self._lock:
            hit = self._plans.get(key)
            if hit is not None:
                self._plans.move_to_end(key)
                return hit
        docs = self._window_docs(epoch, w)
        plan, rows = plan_window(self.lengths, docs, self.ctx, self.options, [self.seed, epoch, w])
        with self._lock:
            self._plans[key] = (plan, rows)
            while len(self._plans) > PLANS_KEPT:
                self._plans.popitem(last=False)
        return plan, rows

    def window_starts(self, epoch: int) -> np.ndarray:
        """int64 (num_windows + 1,): the first row of each window in the epoch's rows (the last: all rows)."""
        with self._lock:
            starts = self._starts.get(epoch)
        if starts is None:
            counts = np.fromiter(
                (
                    plan_window(self.lengths, self._window_docs(epoch, w), self.ctx, self.options)[0].num_rows
                    for w in range(self.num_windows)
                ),
                np.int64,
                count=self.num_windows,
            )
            starts = np.concatenate(([0], np.cumsum(counts)))
            with self._lock:
                if len(self._starts) > 4:
                    self._starts.clear()
                self._starts[epoch] = starts
        return starts

    def num_batches(self, epoch: int) -> int:
        rows = int(self.window_starts(epoch)[-1])
        full, rest = divmod(rows, self.batch_size)
        return full + (1 if rest and not self.drop_remainder else 0)

    def batch_rows(self, epoch: int, j: int) -> int:
        return self.batch_size

    def restart_position(self, epoch: int, j: int) -> int:
        """The first position of ``epoch``'s document order whose document may change without changing global
        batches ``0 .. j - 1`` of the epoch: the start of the first window none of whose rows they hold (a mixture's
        new weights take effect there; the rest of a window already begun is read as planned)."""
        starts = self.window_starts(epoch)
        w = int(np.searchsorted(starts, j * self.batch_size, side="left"))  # first window starting at or after
        return min(w * self.window, self.positions)

    def rows_plan(self, epoch: int, j: int, lo: int, hi: int) -> PackPlan:
        """Rows [lo, hi) of global batch ``j`` that hold data (a prefix), as one plan."""
        starts = self.window_starts(epoch)
        rows = j * self.batch_size + np.arange(lo, hi, dtype=np.int64)
        rows = rows[rows < starts[-1]]  # a prefix: the rows past the data stay empty
        window = np.searchsorted(starts, rows, side="right") - 1
        picked = []
        for w in np.unique(window).tolist():  # a batch spans one or two windows, each a run of its rows
            a, b = np.searchsorted(window, [w, w + 1])
            plan, order = self.window_plan(epoch, w)
            picked += [(plan, int(r)) for r in order[rows[a:b] - starts[w]]]
        return rows_of(picked, self.ctx)
