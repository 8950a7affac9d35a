"""Streaming packing in *lanes*: a block shuffle whose io blocks each host reads once per epoch, and only its own.

In window order every batch reads from most of the shuffle window, on every host (from a bucket, ~250x the bytes
it uses). Here each epoch's io blocks, in a Feistel order of (seed, epoch), are dealt to ``L = batch_size *
lane_period`` lanes (block ``q`` to lane ``q % L``), each packed ``window`` documents at a time, its windows cut
early by a stagger (:func:`_spread`) so that lanes start windows at different steps, and at a quarter and a half
window (:data:`RAMP`: every lane begins the epoch at once, so its first windows are short), and a lane whose first
window would lie across the edge of a read extent (a stored inner chunk) begins at that edge, its first block's head
read last (:meth:`LaneSchedule._starts`); row ``r`` of global batch
``j`` is row ``j // P`` of lane ``r * P + j % P`` (``P = lane_period``). The first ``P * min(rows per lane)``
batches take a row of every lane; the leftover rows, in lane order, then fill the epoch's tail column by column
(:func:`_tail_slots`): row position ``r`` of the ``nb`` full tail batches takes the ``r``-th run of ``nb`` of them,
so a host's positions take about its own lanes' leftovers (and read about its own io blocks), and the last
``leftovers % B`` rows fill one last batch (docs/pipelines.md). Each lane's leftovers go to its slots in batch
order, so the rows that batches ``[0, j)`` deliver are a prefix of every lane's rows.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from datatools.base.checks import check_int
from datatools.grain.schedule import Delivered, EpochCache, ProcessCaches
from datatools.grain.streaming_schedule import RowsPlanSchedule, plan_window, rows_of, whole_pieces, window_pieces_of
from datatools.io.sources.documents import DocumentSource
from datatools.kernels.packing import PackOptions, PackPlan, cut_pieces
from datatools.kernels.packing.counting import count_windows
from datatools.kernels.shuffle import lane_blocks

RAMP = (4, 2)  # an epoch's first windows in every lane end at ``window // 4`` and ``window // 2`` documents, then at
# the stagger's cuts: at an epoch's start every lane begins a window at once and reads it whole, so with whole first
# windows the first 30 batches fetched ~6x what they delivered (host 0 of 4 at the users' shape, modelled by
# benchmarks/fetch_split.py: 10.6x over 15, 4.4x over 45), with the ramp ~2.2x (2.4x over 45, 2.1x over 60; one
# quarter window alone: 3.6x over 45). Two more windows a lane an epoch cost ~0.4% of the rows of a 500M-token store
# in padding (~0.02% of a 10B-token one).


ROW_STRIDE = 1 << 32  # a lane's rows in an epoch are fewer: (lane, row) as one sortable int64


def _spread(lanes: int) -> int:
    """A multiplier coprime to ``lanes`` near ``lanes / golden ratio``: lane ``l``'s window stagger is
    ``(l * spread) % lanes`` parts of a window, so any run of consecutive lanes has staggers spread evenly."""
    g = max(1, round(lanes * 0.6180339887))
    while math.gcd(g, lanes) != 1:
        g += 1
    return g


def _tail_slots(n: int, batch_size: int) -> np.ndarray:
    """int64 (n,): the tail slot (``batch * batch_size + row``, batches counted from the tail's first) of leftover
    row ``i`` of ``n``, dealt column-major: with ``nb = n // batch_size`` full tail batches, row ``i < nb *
    batch_size`` goes to tail batch ``i % nb``, row ``i // nb``, so each row position takes a contiguous run of the
    lane-ordered leftovers (about its own lanes': a host's positions then read about its own io blocks, not the
    other hosts'); the remaining ``n % batch_size`` rows fill the last batch in order."""
    i = np.arange(n, dtype=np.int64)
    nb = n // batch_size
    if nb == 0:
        return i
    out: np.ndarray = np.where(i < nb * batch_size, (i % nb) * batch_size + i // nb, i)
    return out


@dataclass
class _Epoch:
    """One epoch's lanes: blocks, window cuts and rows, all from lengths."""

    lane_blocks: list[np.ndarray]  # per lane: its io blocks in order
    lane_cum: list[np.ndarray]  # per lane: documents before each of its blocks (len blocks + 1)
    start: np.ndarray  # per lane: the block-order position its epoch begins at (rotated: :meth:`_starts`)
    cuts: list[np.ndarray]  # per lane: window boundaries in the lane's document positions
    row_starts: list[np.ndarray]  # per lane: the first row of each window (len windows + 1)
    window_keys: np.ndarray  # every lane's windows, lane by lane: lane * ROW_STRIDE + the window's first row
    first_window: np.ndarray  # per lane: the index in window_keys of its first window
    regular: int  # batches taking one row of every lane
    tail: np.ndarray  # (lane, row) of each tail slot (batch * batch_size + row, from the tail's first batch)
    tail_slot: np.ndarray  # the tail slot of each lane's leftover rows, lane by lane (tail's inverse)
    batches: int


@dataclass(frozen=True)
class LaneLayout:
    """How an epoch's io blocks are dealt to lanes: ``io_block_size`` documents per io block (a contiguous read),
    ``period`` lanes per row position (P above; ``batch_size * period`` lanes in all)."""

    io_block_size: int
    period: int = 2


class LaneSchedule(RowsPlanSchedule, ProcessCaches):
    """Global batches of streaming packing in lanes (see the module docstring).

    Args:
      docs: a document source (``lengths()``, ``pack_rows(plan, rows)``, optionally ``prefetch``).
      options: how each window is packed (rows of ``options.ctx`` tokens).
      layout: the io block size and the lanes per row position (:class:`LaneLayout`).
      window, batch_size, drop_remainder, seed, pad_id: as :class:`StreamingSchedule`.
    """

    def __init__(
        self,
        docs: DocumentSource,
        options: PackOptions,
        layout: LaneLayout,
        *,
        window: int,
        batch_size: int,
        drop_remainder: bool,
        seed: int = 0,
        pad_id: int = 0,
    ):
        self.docs = docs
        self.lengths = np.asarray(docs.lengths(), np.int64)
        self.ctx, self.options = options.ctx, options
        self.window = check_int(window, "window", minimum=1)
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        self.io_block_size = check_int(layout.io_block_size, "io_block_size", minimum=1)
        self.period = check_int(layout.period, "lane_period", minimum=1)
        self.lanes = self.batch_size * self.period
        self.drop_remainder = bool(drop_remainder)
        self.seed, self.pad_id = int(seed), int(pad_id)
        if options.overflow == "error":
            cut_pieces(self.lengths, self.ctx, "error")  # names the first document too long, by its global index
        self.n = self.lengths.shape[0]
        self.num_blocks = -(-self.n // self.io_block_size)
        self.row_counts: tuple[int, ...] = (self.batch_size,)
        self.shapes = [(self.batch_size, self.ctx)]
        self._epochs = EpochCache(keep=3, carried=True)  # O(io blocks) to send; 1-3 s to plan in each worker
        self._plans: OrderedDict[tuple[int, ...], tuple[PackPlan, np.ndarray]] = OrderedDict()
        self._plans_kept = 4 * self.lanes + 16
        self._carried: range | None = None  # the lanes whose first window plans a pickle carries (all: None)
        self._lock = threading.Lock()

    def carry_host(self, index: int, count: int) -> None:
        """Host ``index`` of ``count`` reads this schedule: a pickle carries the first window plans of its lanes only
        (host 0 of 4 of a 100M-token store pickles to 2.8 MB, 4.4 MB with all 256 lanes). Several hosts widen it."""
        share = self.batch_size // count
        lanes = range(index * share * self.period, (index + 1) * share * self.period)
        with self._lock:
            if self._carried is None:
                self._carried = lanes
            else:
                self._carried = range(min(self._carried.start, lanes.start), max(self._carried.stop, lanes.stop))

    def __getstate__(self) -> dict[str, Any]:
        # the carried lanes' first windows go along (~0.1 s for 256 lanes, against ~0.6 s in a worker's first batch)
        lanes = self._carried or range(self.lanes)
        for epoch in self._epochs.held():
            e = self._epoch(epoch)
            for lane in lanes:
                if e.cuts[lane].shape[0] > 1:
                    self.window_plan(epoch, lane, 0)
        first = [(k, v) for k, v in self._plans.items() if k[2] == 0 and k[1] in lanes][-len(lanes) :]
        return {k: v for k, v in self.__dict__.items() if k != "_lock"} | {"_plans": OrderedDict(first)}

    def _lane_docs(self, e: _Epoch, lane: int, a: int, b: int) -> np.ndarray:
        """Documents at positions [a, b) of ``lane`` (int64)."""
        cum, shift = e.lane_cum[lane], int(e.start[lane])
        pos = np.arange(a + shift, b + shift, dtype=np.int64)
        if shift and b + shift > cum[-1]:  # rotated: the first block's head last
            pos[pos >= cum[-1]] -= cum[-1]
        i = np.searchsorted(cum, pos, side="right") - 1
        docs: np.ndarray = e.lane_blocks[lane][i] * self.io_block_size + (pos - cum[i])
        return docs

    def _epoch(self, epoch: int) -> _Epoch:
        return self._epochs.get(epoch, self._plan_epoch)

    def _plan_epoch(self, epoch: int) -> _Epoch:
        L, S = self.lanes, self.io_block_size
        blocks_of = lane_blocks(self.num_blocks, L, seed=self.seed, epoch=epoch)
        lane_cum: list[np.ndarray] = []
        cuts: list[np.ndarray] = []
        spread = _spread(L)
        ramp = [self.window // part for part in RAMP]  # every lane's epoch begins with short windows
        for lane, blocks in enumerate(blocks_of):
            cum = np.concatenate(([0], np.cumsum(np.minimum(S, self.n - blocks * S))))  # the last block may be short
            lane_cum.append(cum)
            n_lane = int(cum[-1])
            shift = ((lane * spread) % L * self.window) // L  # staggered: lanes begin windows at different steps
            c = np.arange(self.window - shift, n_lane, self.window, dtype=np.int64)
            c = np.union1d(c[c > 0], [r for r in ramp if 0 < r < n_lane]).astype(np.int64)
            c = np.concatenate(([0], c, [n_lane])) if n_lane else np.zeros(1, np.int64)
            cuts.append(c)
        e = _Epoch(
            blocks_of,
            lane_cum,
            self._starts(blocks_of, ramp[0]),
            cuts,
            [],
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
            0,
            np.zeros((0, 2), np.int64),
            np.zeros(0, np.int64),
            0,
        )
        windows = np.asarray([c.shape[0] - 1 for c in cuts], np.int64)  # per lane
        e.first_window = np.cumsum(windows) - windows
        per_lane = np.split(self._window_rows(e, epoch), e.first_window[1:])
        e.row_starts = [np.concatenate(([0], np.cumsum(rows))) for rows in per_lane]
        e.window_keys = np.concatenate([r[:-1] + lane * ROW_STRIDE for lane, r in enumerate(e.row_starts)])
        counts = [int(starts[-1]) for starts in e.row_starts]
        least = min(counts)
        e.regular = self.period * least
        e.tail, e.tail_slot = self._deal_tail(np.asarray(counts, np.int64) - least, least)
        full, rest = divmod(e.tail.shape[0], self.batch_size)
        e.batches = e.regular + full + (1 if rest and not self.drop_remainder else 0)
        return e

    def _starts(self, blocks_of: list[np.ndarray], first_window: int) -> np.ndarray:
        """int64 (lanes,): where each lane's epoch begins in its blocks' documents (its first block's head, before
        that, read last). Every lane begins its epoch at once, and its read-ahead reads its first window whole: a
        first window (``first_window`` documents, a quarter window, :data:`RAMP`; the stagger may cut it shorter, the
        next window then read as soon) across a read extent's edge reads
        two extents (:meth:`DocumentSource.next_extent_starts`: a Levanter cache's 1 MiB chunks under blocks of ~2
        chunks, the first 30 batches fetched 3.7x what they delivered, one chunk a lane ~2.1x). So a lane whose first
        window, from its first block's first document, crosses into a later extent, and which, from the first
        document of that later extent, lies in it and in the block, begins there; the others at 0 (extents smaller
        than a window: a window spans several whichever document begins it). The extents read over the epoch are
        the same; a source that reads no extents begins every lane at 0."""
        first = np.asarray([int(b[0]) * self.io_block_size if b.shape[0] else 0 for b in blocks_of], np.int64)
        later = self.docs.next_extent_starts(first)
        if later is None:
            return np.zeros(len(blocks_of), np.int64)
        size = np.asarray([min(self.io_block_size, self.n - f) if b.shape[0] else 0 for f, b in zip(first, blocks_of)])
        after = self.docs.next_extent_starts(np.minimum(later, self.n - 1))
        fits = (later - first < first_window) & (later + first_window <= np.minimum(after, first + size))
        start: np.ndarray = np.where(fits, later - first, 0).astype(np.int64)
        return start

    def _deal_tail(self, left: np.ndarray, least: int) -> tuple[np.ndarray, np.ndarray]:
        """``(tail, tail_slot)`` of :class:`_Epoch` for ``left[lane]`` leftover rows per lane (rows ``least ..`` of
        each): the lane-ordered leftovers take the slots of :func:`_tail_slots`, each lane's rows in the order of
        its slots (batch by batch: a lane whose leftovers straddle two row positions still delivers a prefix of its
        rows at every batch, what :meth:`lane_rows_delivered` counts)."""
        lane_of = np.repeat(np.arange(left.shape[0], dtype=np.int64), left)
        slots = _tail_slots(lane_of.shape[0], self.batch_size)
        slot: np.ndarray = slots[np.lexsort((slots, lane_of))]  # lane by lane (each lane's run kept), ascending
        first = np.cumsum(left) - left  # each lane's first leftover
        row = least + np.arange(lane_of.shape[0], dtype=np.int64) - first[lane_of]
        tail = np.empty((lane_of.shape[0], 2), np.int64)
        tail[slot] = np.stack([lane_of, row], axis=1)
        return tail, slot

    def _window_rows(self, e: _Epoch, epoch: int) -> np.ndarray:
        """Rows of every window of every lane, lane by lane (int64), counted in one kernel call (~10^4 windows an
        epoch for 32 GB, ~0.3 ms each if planned one by one). Options the counting kernels do not cover (``align``
        > 1, ``overflow`` other than ``split``) plan every window, the lanes' first kept."""
        o = self.options
        docs = np.concatenate([self._lane_docs(e, lane, 0, int(c[-1])) for lane, c in enumerate(e.cuts)])
        offsets = np.concatenate(([0], np.cumsum([int(c[-1]) for c in e.cuts])))  # each lane's first document
        bounds = np.concatenate([off + c[:-1] for off, c in zip(offsets, e.cuts)] + [offsets[-1:]])
        if whole_pieces(o):
            return count_windows(self.lengths[docs], bounds, o)
        rows = []
        for lane, c in enumerate(e.cuts):
            for w, (a, b) in enumerate(zip(offsets[lane] + c[:-1], offsets[lane] + c[1:])):
                plan, row_order = plan_window(self.lengths, docs[a:b], o, [self.seed, epoch, lane, w])
                rows.append(plan.num_rows)
                if w == 0:
                    self._keep((epoch, lane, 0), (plan, row_order))
        return np.asarray(rows, np.int64)

    def window_plan(self, epoch: int, lane: int, w: int) -> tuple[PackPlan, np.ndarray]:
        """Window ``w`` of ``lane``: its plan (document ids global) and row order."""
        return self._cached_plan((epoch, lane, w), lambda: self._plan_window(epoch, lane, w))

    def _plan_window(self, epoch: int, lane: int, w: int) -> tuple[PackPlan, np.ndarray]:
        e = self._epoch(epoch)
        docs = self._lane_docs(e, lane, int(e.cuts[lane][w]), int(e.cuts[lane][w + 1]))
        return plan_window(self.lengths, docs, self.options, key=[self.seed, epoch, lane, w])

    def num_batches(self, epoch: int) -> int:
        return self._epoch(epoch).batches

    def batch_rows(self, epoch: int, j: int) -> int:
        return self.batch_size

    def regular_batches(self, epoch: int) -> int:
        """Batches of ``epoch`` that take one row of every lane (the rest take the lanes' leftover rows)."""
        return self._epoch(epoch).regular

    def _lane_rows(self, epoch: int, j: int, lo: int, hi: int) -> np.ndarray:
        """(lane, row of the lane) of rows [lo, hi) of global batch ``j`` that hold data (a prefix)."""
        e = self._epoch(epoch)
        if j < e.regular:
            r = np.arange(lo, hi, dtype=np.int64)
            return np.stack([r * self.period + j % self.period, np.full(r.shape[0], j // self.period)], axis=1)
        t = (j - e.regular) * self.batch_size
        return e.tail[t + lo : t + hi]

    def lane_rows_delivered(self, epoch: int, batches: int) -> np.ndarray:
        """int64 (lanes,): rows of each lane that global batches ``[0, batches)`` of ``epoch`` hold (always a prefix
        of the lane's rows: batch j < regular takes row ``j // P`` of lanes ``r * P + j % P``, the tail each lane's
        leftover rows in the order of its slots, :meth:`_deal_tail`)."""
        e = self._epoch(epoch)
        P, b = self.period, min(batches, e.batches)
        lane = np.arange(self.lanes, dtype=np.int64)
        if b <= e.regular:
            return np.maximum(0, -(-(b - lane % P) // P))
        t = (b - e.regular) * self.batch_size
        return e.regular // P + np.bincount(e.tail[:t, 0], minlength=self.lanes).astype(np.int64)

    def document_pieces(self, epoch: int, d: int) -> list[tuple[int, int, int, int]]:
        """See :class:`~datatools.grain.schedule.DocumentPiecesSchedule`: the lane and place of ``d``'s io block,
        its window planned, each piece's row of the lane put in its batch (a regular batch's, or the tail's)."""
        e = self._epoch(epoch)
        q = d // self.io_block_size
        found = [(lane, np.flatnonzero(blocks == q)) for lane, blocks in enumerate(e.lane_blocks)]
        lane, i = next(((lane, i) for lane, i in found if i.size), (-1, None))
        if i is None:
            return []
        n_lane = int(e.lane_cum[lane][-1])
        pos = (int(e.lane_cum[lane][i[0]]) + d - q * self.io_block_size - int(e.start[lane])) % n_lane
        w = int(np.searchsorted(e.cuts[lane], pos, side="right")) - 1
        position, start, length = window_pieces_of(*self.window_plan(epoch, lane, w), d)
        least = e.regular // self.period
        tail_before = sum(int(s[-1]) - least for s in e.row_starts[:lane])  # tail rows of the lanes before
        out = []
        for k, a, n in zip((e.row_starts[lane][w] + position).tolist(), start.tolist(), length.tolist()):
            if k < least:  # batch k * P + lane % P takes row k of this lane, at row lane // P
                out.append((k * self.period + lane % self.period, lane // self.period, a, n))
                continue
            t = int(e.tail_slot[tail_before + k - least])  # its tail slot (past the batches: a remainder dropped)
            out.append((e.regular + t // self.batch_size, t % self.batch_size, a, n))
        return out

    def delivered(self, epoch: int, batches: int, chunk: int = 1 << 22) -> Iterator[Delivered]:
        """See :class:`~datatools.grain.schedule.DeliveredSchedule`: each lane delivers a prefix of its rows
        (:meth:`lane_rows_delivered`), so its windows before the one holding the last of them whole (their
        documents; each window planned when the options do not keep documents whole), then that window's first
        rows in its row order."""
        e = self._epoch(epoch)
        for lane, k in enumerate(self.lane_rows_delivered(epoch, batches).tolist()):
            starts, cuts = e.row_starts[lane], e.cuts[lane]
            full = int(np.searchsorted(starts[1:], k, side="right"))  # windows [0, full) end at or before row k
            if whole_pieces(self.options):
                for a in range(0, int(cuts[full]), chunk):
                    yield Delivered(documents=self._lane_docs(e, lane, a, min(a + chunk, int(cuts[full]))))
            else:
                for w in range(full):
                    yield Delivered(plan=self._plan_window(epoch, lane, w)[0])
            if full < cuts.shape[0] - 1 and k > starts[full]:
                plan, order = self.window_plan(epoch, lane, full)
                yield Delivered(plan=plan, rows=order[: k - int(starts[full])])

    def ahead_pieces(self, epoch: int, j: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every document of the windows that rows [lo, hi) of batch ``j`` draw from, whole (for read-ahead): a
        window's io blocks read in few requests (read by pieces: 104 requests a batch at +100 ms, issue 31); the
        epoch's last batches (leftover rows) read their own pieces."""
        e = self._epoch(epoch)
        if j >= e.regular:  # whole windows would be ~4x the bytes the tail uses
            return self.pieces(epoch, j, lo, hi)
        windows = {
            (lane, int(np.searchsorted(e.row_starts[lane], k, side="right")) - 1)
            for lane, k in self._lane_rows(epoch, j, lo, hi).tolist()
        }
        cuts = e.cuts
        parts = [self._lane_docs(e, lane, int(cuts[lane][w]), int(cuts[lane][w + 1])) for lane, w in sorted(windows)]
        doc = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return doc, np.zeros(doc.shape[0], np.int64), self.lengths[doc]

    def rows_plan(self, epoch: int, j: int, lo: int, hi: int) -> PackPlan:
        """Rows [lo, hi) of global batch ``j`` that hold data, as one plan (every row's pieces, in order)."""
        e = self._epoch(epoch)
        lane_rows = self._lane_rows(epoch, j, lo, hi)
        lanes, ks = lane_rows[:, 0], lane_rows[:, 1]
        at = np.searchsorted(e.window_keys, lanes * ROW_STRIDE + ks, side="right") - 1  # each row's window, at once
        windows = (at - e.first_window[lanes]).tolist()
        within = (ks - (e.window_keys[at] - lanes * ROW_STRIDE)).tolist()  # the row's place in its window
        keys = [(epoch, lane, w) for lane, w in zip(lanes.tolist(), windows)]
        held = self._held_plans(keys)
        picked = []
        for key, hit, i in zip(keys, held, within):
            plan, order = hit if hit is not None else self.window_plan(*key)
            picked.append((plan, int(order[i])))
        return rows_of(picked, self.ctx)
