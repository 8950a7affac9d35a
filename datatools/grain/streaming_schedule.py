"""Streaming packing as a global schedule: windows of shuffled documents packed from their lengths alone.

The epoch's documents, in order, are cut into windows of ``window`` documents; each is planned
(``pack_lengths``) and its rows put in a seeded order (seed, epoch, window). Global batch ``j`` is rows
``[j * B, (j + 1) * B)`` of the windows' rows back to back. Memory: one int64 per window and the last few
windows' plans. Counting an epoch's rows counts every window's rows from its lengths, 4,096 windows a kernel call
(0.18 s CPU per million documents at window 1024, ctx 8192; planning each window, as options other than align 1
and overflow split still do, took 2.7-3.6 s).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from datatools.base.checks import check_int
from datatools.grain.host_batches import empty_rows
from datatools.grain.schedule import Delivered, DocumentOrderLike, EpochCache, ProcessCaches
from datatools.io.sources.documents import DocumentSource
from datatools.kernels.packing import PackOptions, PackPlan, cut_pieces, pack, pack_lengths
from datatools.kernels.packing.counting import count_windows
from datatools.kernels.packing.plan_format import row_pieces

PLANS_KEPT = 8  # window plans cached per process
WINDOWS_COUNTED = 4096  # windows counted a kernel call (bounds the documents gathered at once)


def whole_pieces(options: PackOptions) -> bool:
    """Whether a window packed with ``options`` holds every token of each of its documents once, in pieces the
    counting kernels count (align 1, overflow ``split``): then a window's rows are counted and its delivery is
    known without planning it."""
    return options.align == 1 and options.overflow == "split"


def plan_window(
    lengths: np.ndarray, docs: np.ndarray, options: PackOptions, key: list[int] | None = None
) -> tuple[PackPlan, np.ndarray]:
    """The window planner of every streaming packer (this schedule, lanes, the Grain transform): the plan of
    documents ``docs`` (global ids) packed with ``options`` and, with a ``key``, its rows' seeded order (position i
    of the window is row ``order[i]`` of the plan)."""
    plan = pack(lengths[docs], options)
    plan = dataclasses.replace(plan, doc=docs[plan.doc])
    order = np.random.default_rng(key).permutation(plan.num_rows) if key is not None else np.zeros(0, np.int64)
    return plan, order


def window_pieces_of(plan: PackPlan, order: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(position, start, length)`` of every piece of document ``d`` in a window's plan: the position of its row
    in the window's row order ``order`` (position i is row ``order[i]``), and the piece's token range."""
    hit = np.flatnonzero(np.asarray(plan.doc) == d)
    rows = np.searchsorted(np.asarray(plan.row_splits), hit, side="right") - 1
    where = np.empty(order.shape[0], np.int64)
    where[order] = np.arange(order.shape[0])
    return where[rows], np.asarray(plan.start)[hit], np.asarray(plan.length)[hit]


def rows_of(picked: list[tuple[PackPlan, int]], ctx: int) -> PackPlan:
    """One plan holding the given ``(plan, row)`` rows in order (a batch drawn from several windows)."""
    runs: list[tuple[PackPlan, list[int]]] = []  # consecutive rows of one plan: gathered at once
    for plan, r in picked:
        if runs and runs[-1][0] is plan:
            runs[-1][1].append(r)
        else:
            runs.append((plan, [r]))
    return plan_runs(runs, ctx)


def plan_runs(runs: Sequence[tuple[PackPlan, np.ndarray | list[int]]], ctx: int) -> PackPlan:
    """One plan holding rows ``rows`` (int64) of each ``(plan, rows)`` in turn: a run of several rows gathered by one
    index (a Python tuple and three slices a row took ~0.1 ms a batch of 32, a quarter of a streaming batch), a run
    of one row (lanes: a batch's rows come from as many windows) by three slices and Python ints (an array made for
    each one-row run and its count made a local batch of 128 lane rows ~5% slower; the gather's ten numpy calls a
    row, 30%)."""
    counts: list[int] = []
    doc: list[np.ndarray] = []
    start: list[np.ndarray] = []
    length: list[np.ndarray] = []
    template: PackPlan | None = None
    for plan, rows in runs:
        n = len(rows)
        sel: slice | np.ndarray
        if n == 0:
            continue
        if n == 1:
            r = int(rows[0])
            a, b = int(plan.row_splits[r]), int(plan.row_splits[r + 1])
            sel = slice(a, b)
            counts.append(b - a)
        else:
            sel, splits = row_pieces(plan.row_splits, np.asarray(rows, np.int64))
            counts.extend(np.diff(splits).tolist())
        if template is None:
            template = plan
        doc.append(plan.doc[sel])
        start.append(plan.start[sel])
        length.append(plan.length[sel])
    if template is None:
        return pack_lengths(np.zeros(0, np.int64), ctx)
    row_splits = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=row_splits[1:])
    return PackPlan(
        ctx=ctx,
        align=template.align,
        num_rows=len(counts),
        row_splits=row_splits,
        doc=np.concatenate(doc),
        start=np.concatenate(start),
        length=np.concatenate(length),
        dropped_tokens=0,
        empty_documents=0,
        algorithm=template.algorithm,
    )


class RowsPlanSchedule:
    """What the streaming schedules share: given ``rows_plan(epoch, j, lo, hi)`` (the rows of batch ``j`` that
    hold data, as one plan), the pieces they read and the rows themselves, in one bulk read."""

    docs: Any  # a document source with pack_rows
    ctx: int
    pad_id: int
    _plans: OrderedDict[tuple[int, ...], tuple[PackPlan, np.ndarray]]  # window plans by key, least recently used first
    _plans_kept: int
    _lock: threading.Lock

    def rows_plan(self, epoch: int, j: int, lo: int, hi: int) -> PackPlan:
        raise NotImplementedError

    def pieces(self, epoch: int, j: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(doc, start, length) of every piece rows [lo, hi) of global batch ``j`` read (for read-ahead)."""
        plan = self.rows_plan(epoch, j, lo, hi)
        return plan.doc, plan.start, plan.length

    def ahead_pieces(self, epoch: int, j: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.pieces(epoch, j, lo, hi)

    def _cached_plan(
        self, key: tuple[int, ...], plan: Callable[[], tuple[PackPlan, np.ndarray]]
    ) -> tuple[PackPlan, np.ndarray]:
        """The window plan of ``key``: cached, or ``plan()`` (and kept)."""
        hit = self._held_plans([key])[0]
        if hit is not None:
            return hit
        value = plan()
        self._keep(key, value)
        return value

    def _held_plans(self, keys: Sequence[tuple[int, ...]]) -> list[tuple[PackPlan, np.ndarray] | None]:
        """The cached window plans of ``keys`` (None where not held), each marked used: one pass under the lock (a
        batch of 128 lane rows asked its windows ~1 us each, of a row's ~2.5)."""
        with self._lock:
            plans = self._plans
            held = [plans.get(key) for key in keys]
            for key, hit in zip(keys, held):
                if hit is not None:
                    plans.move_to_end(key)
        return held

    def _keep(self, key: tuple[int, ...], value: tuple[PackPlan, np.ndarray]) -> None:
        """Cache a window's ``(plan, row order)``, the oldest dropped past the limit."""
        with self._lock:
            self._plans[key] = value
            while len(self._plans) > self._plans_kept:
                self._plans.popitem(last=False)

    def read(self, epoch: int, j: int, lo: int, hi: int) -> dict[str, np.ndarray]:
        plan = self.rows_plan(epoch, j, lo, hi)
        out = empty_rows(hi - lo, plan.ctx, self.pad_id, fill_from=plan.num_rows)
        if plan.num_rows:
            self.docs.pack_rows(
                plan, np.arange(plan.num_rows), pad_id=self.pad_id, out={k: v[: plan.num_rows] for k, v in out.items()}
            )
        return out


class StreamingSchedule(RowsPlanSchedule, ProcessCaches):
    """Global batches of streaming packing (see the module docstring): ``docs`` (``lengths()``, ``pack_rows``) read
    in ``order`` (:class:`~datatools.grain.host_batches.DocumentOrder`), ``window`` documents at a time packed with
    ``options`` (rows of ``options.ctx`` tokens), ``batch_size`` rows a global batch; ``seed`` orders each window's
    rows."""

    _CACHES = ("_plans",)  # rebuilt in each process

    def __init__(
        self,
        docs: DocumentSource,
        order: DocumentOrderLike,
        options: PackOptions,
        *,
        window: int,
        batch_size: int,
        drop_remainder: bool,
        seed: int = 0,
        pad_id: int = 0,
    ):
        self.docs, self.order = docs, order
        self.lengths = np.asarray(docs.lengths(), np.int64)
        self.ctx, self.options = options.ctx, options
        self.window = check_int(window, "window", minimum=1)
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        self.drop_remainder = bool(drop_remainder)
        if options.overflow == "error":
            cut_pieces(self.lengths, self.ctx, "error")  # names the first document too long, by its global index
        self.seed, self.pad_id = int(seed), int(pad_id)
        self.positions = int(order.n)  # documents read per epoch (a mixture's may differ from the documents held)
        self.num_windows = -(-self.positions // self.window)
        self.row_counts: tuple[int, ...] = (self.batch_size,)
        self.shapes = [(self.batch_size, self.ctx)]
        self._starts = EpochCache(keep=5, carried=True)  # epoch -> first row of each window
        self._plans, self._plans_kept = OrderedDict(), PLANS_KEPT
        self._lock = threading.Lock()

    def _window_docs(self, epoch: int, w: int) -> np.ndarray:
        n = self.positions
        return self.order(np.arange(w * self.window, min(n, (w + 1) * self.window), dtype=np.int64), epoch)

    def window_plan(self, epoch: int, w: int) -> tuple[PackPlan, np.ndarray]:
        """Window ``w``'s plan and row order (as :func:`plan_window`)."""

        def plan() -> tuple[PackPlan, np.ndarray]:
            return plan_window(self.lengths, self._window_docs(epoch, w), self.options, [self.seed, epoch, w])

        return self._cached_plan((epoch, w), plan)

    def window_starts(self, epoch: int) -> np.ndarray:
        """int64 (num_windows + 1,): the first row of each window in the epoch's rows (the last: all rows)."""
        return self._starts.get(epoch, self._window_starts)

    def _window_starts(self, epoch: int) -> np.ndarray:
        """Every window's rows counted: in one kernel call per ``WINDOWS_COUNTED`` windows where the counting
        kernels cover the options (align 1, overflow split; ~0.3 ms a window saved), else each window planned."""
        o = self.options
        counts = np.zeros(self.num_windows, np.int64)
        if not whole_pieces(o):
            for w in range(self.num_windows):
                counts[w] = plan_window(self.lengths, self._window_docs(epoch, w), o)[0].num_rows
            return np.concatenate(([0], np.cumsum(counts)))
        for w in range(0, self.num_windows, WINDOWS_COUNTED):
            u = min(w + WINDOWS_COUNTED, self.num_windows)
            a, b = w * self.window, min(u * self.window, self.positions)
            docs = self.order(np.arange(a, b, dtype=np.int64), epoch)
            bounds = np.minimum(np.arange(w, u + 1, dtype=np.int64) * self.window, b) - a
            counts[w:u] = count_windows(self.lengths[docs], bounds, o)
        return np.concatenate(([0], np.cumsum(counts)))

    def delivered(self, epoch: int, batches: int, chunk: int = 1 << 22) -> Iterator[Delivered]:
        """See :class:`~datatools.grain.schedule.DeliveredSchedule`: the first ``batches * batch_size`` rows of the
        epoch are its windows' rows back to back, so every window before the one holding the last of them is
        delivered whole (its documents, in ``chunk``-document parts; each window planned when the options do not
        keep documents whole), then that window's first rows in its row order."""
        starts = self.window_starts(epoch)
        rows = min(batches * self.batch_size, int(starts[-1]))
        full = int(np.searchsorted(starts[1:], rows, side="right"))  # windows [0, full) end at or before ``rows``
        if whole_pieces(self.options):
            step = max(1, chunk // self.window) * self.window
            for a in range(0, min(full * self.window, self.positions), step):
                b = min(a + step, full * self.window, self.positions)
                yield Delivered(documents=self.order(np.arange(a, b, dtype=np.int64), epoch))
        else:
            for w in range(full):
                yield Delivered(plan=plan_window(self.lengths, self._window_docs(epoch, w), self.options)[0])
        if full < self.num_windows and rows > starts[full]:
            plan, order = self.window_plan(epoch, full)
            yield Delivered(plan=plan, rows=order[: rows - int(starts[full])])

    def document_pieces(self, epoch: int, d: int, chunk: int = 1 << 22) -> list[tuple[int, int, int, int]]:
        """See :class:`~datatools.grain.schedule.DocumentPiecesSchedule`: the epoch's order scanned for ``d``
        (``chunk`` positions at a time; a mixture may draw it more than once), then each window holding it
        planned."""
        positions = [
            a + np.flatnonzero(self.order(np.arange(a, min(a + chunk, self.positions), dtype=np.int64), epoch) == d)
            for a in range(0, self.positions, chunk)
        ]
        starts = self.window_starts(epoch)
        out = []
        for w in np.unique(np.concatenate(positions) // self.window).tolist():
            position, start, length = window_pieces_of(*self.window_plan(epoch, w), d)
            for g, a, n in zip((starts[w] + position).tolist(), start.tolist(), length.tolist()):
                out.append((g // self.batch_size, g % self.batch_size, a, n))
        return out

    def num_batches(self, epoch: int) -> int:
        rows = int(self.window_starts(epoch)[-1])
        return rows // self.batch_size if self.drop_remainder else -(-rows // self.batch_size)

    def batch_rows(self, epoch: int, j: int) -> int:
        return self.batch_size

    def restart_position(self, epoch: int, j: int) -> int:
        """See :class:`~datatools.grain.schedule.RestartableSchedule`: the start of the first window none of whose
        rows batches ``0 .. j - 1`` hold."""
        starts = self.window_starts(epoch)
        w = int(np.searchsorted(starts, j * self.batch_size, side="left"))  # first window starting at or after
        return min(w * self.window, self.positions)

    def row_runs(self, epoch: int, j: int, lo: int, hi: int) -> list[tuple[PackPlan, np.ndarray]]:
        """Rows [lo, hi) of global batch ``j`` that hold data (a prefix), as ``(window plan, row ids)`` runs in order:
        the epoch's rows are the windows' rows back to back, so a batch is a slice of one window's row order, or of
        a few consecutive windows' (each a run)."""
        starts = self.window_starts(epoch)
        at, end = j * self.batch_size + lo, min(j * self.batch_size + hi, int(starts[-1]))
        runs = []
        while at < end:  # Python ints, the array's own searchsorted (numpy's wrappers: 10 against 8 us a batch)
            w = int(starts.searchsorted(at, "right")) - 1  # the window holding row ``at`` (none empty)
            first, last = starts[w : w + 2].tolist()
            plan, order = self.window_plan(epoch, w)
            runs.append((plan, order[at - first : min(end, last) - first]))
            at = min(end, last)
        return runs

    def rows_plan(self, epoch: int, j: int, lo: int, hi: int) -> PackPlan:
        """Rows [lo, hi) of global batch ``j`` that hold data (a prefix), as one plan."""
        return plan_runs(self.row_runs(epoch, j, lo, hi), self.ctx)

    def read(self, epoch: int, j: int, lo: int, hi: int) -> dict[str, np.ndarray]:
        """Rows [lo, hi) of global batch ``j``, each run of a window's rows filled straight from the window's plan
        (its piece offsets computed once a window): making the batch's own plan first (:meth:`rows_plan`) cost
        as much again as the fill (0.43 against 0.2 CPU s for the 1,229 batches of 40M tokens)."""
        runs = self.row_runs(epoch, j, lo, hi)
        filled = sum(rows.shape[0] for _, rows in runs)
        if len(runs) == 1 and filled == hi - lo:  # most batches: one window's rows, no padding (~5 us less)
            batch: dict[str, np.ndarray] = self.docs.pack_rows(*runs[0], pad_id=self.pad_id)
            return batch
        out = empty_rows(hi - lo, self.ctx, self.pad_id, fill_from=filled)
        at = 0
        for plan, rows in runs:
            part = {k: v[at : at + rows.shape[0]] for k, v in out.items()}
            self.docs.pack_rows(plan, rows, pad_id=self.pad_id, out=part)
            at += rows.shape[0]
        return out
