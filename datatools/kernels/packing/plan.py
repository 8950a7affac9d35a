"""Sequence packing: :func:`pack_lengths` plans which document pieces share a row of ``ctx`` tokens (:class:`PackPlan`),
from document lengths alone (:func:`~datatools.kernels.packing.materialize.materialize` builds the rows' tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numba
import numpy as np

from datatools.base.checks import DEFAULT_ALGORITHM, as_lengths
from datatools.kernels.packing.algorithms import TABLE, PackOptions
from datatools.kernels.packing.pieces import cut_pieces, decreasing_order, decreasing_runs
from datatools.kernels.packing.planners import (
    NO_PIECES,
    NO_ROWS,
    NO_RUNS,
    capped_decreasing,
    concat_split,
    concat_split_state,
    worth_dealing,
)


@dataclass(frozen=True)
class PackPlan:
    """Which pieces of which documents go into which row: row ``r`` holds pieces
    ``doc[row_splits[r]:row_splits[r + 1]]`` (likewise ``start``, ``length``), in row order.

    Attributes:
      ctx: row length (tokens); align: every piece starts at a multiple of this many tokens in its row.
      num_rows: rows; row_splits: int64 (num_rows + 1,), offsets of each row's pieces.
      doc, start, length: int64, int64, int32 (num_pieces,): the piece's document (index into the input lengths),
        where it starts inside it and its tokens.
      dropped_tokens: tokens of the input in no row (truncate / drop); empty_documents: zero-length, skipped.
      algorithm: the algorithm that made the plan.
    """

    ctx: int
    align: int
    num_rows: int
    row_splits: np.ndarray
    doc: np.ndarray
    start: np.ndarray
    length: np.ndarray
    dropped_tokens: int
    empty_documents: int
    algorithm: str

    @classmethod
    def of_rows(cls, ctx: int, align: int, row_splits, doc, start, length, algorithm: str) -> PackPlan:
        """The plan of the rows ``row_splits`` delimits, ``doc`` and ``start`` as int64, ``length`` as int32."""
        doc, start, length = np.asarray(doc, np.int64), np.asarray(start, np.int64), np.asarray(length, np.int32)
        return cls(ctx, align, row_splits.shape[0] - 1, row_splits, doc, start, length, 0, 0, algorithm)

    @classmethod
    def one_piece_rows(cls, ctx: int, doc, start, length, algorithm: str) -> PackPlan:
        """A plan whose row i of ``ctx`` tokens holds piece i (``doc``, ``start``, ``length``: int64 arrays) alone."""
        return cls.of_rows(ctx, 1, np.arange(doc.shape[0] + 1, dtype=np.int64), doc, start, length, algorithm)

    @property
    def num_pieces(self) -> int:
        return int(self.doc.shape[0])

    @property
    def kept_tokens(self) -> int:
        """Tokens present in some row."""
        return int(self.length.sum(dtype=np.int64))

    @property
    def efficiency(self) -> float:
        """Kept tokens / (num_rows * ctx); 0.0 for an empty plan."""
        if self.num_rows == 0:
            return 0.0
        return self.kept_tokens / (self.num_rows * self.ctx)

    @property
    def lower_bound_rows(self) -> int:
        """ceil(kept tokens / ctx): no packing of these tokens can use fewer rows."""
        return -(-self.kept_tokens // self.ctx)

    @property
    def pieces_per_row(self) -> np.ndarray:
        """int64 (num_rows,): number of pieces (segments) in each row."""
        return np.diff(self.row_splits)

    @cached_property
    def max_doc(self) -> int:
        """The largest document index in the plan (-1 when empty)."""
        return int(self.doc.max()) if self.num_pieces else -1

    @cached_property
    def offset(self) -> np.ndarray:
        """int64 (num_pieces,): where each piece starts inside its row (tokens)."""
        slots = -(-self.length.astype(np.int64) // self.align) * self.align
        ends = np.cumsum(slots)
        row_begin = np.concatenate(([0], ends))[self.row_splits[:-1]]
        return ends - slots - np.repeat(row_begin, np.diff(self.row_splits))

    def row(self, r: int) -> list[tuple[int, int, int]]:
        """The pieces of row ``r`` as ``(doc, start, length)`` tuples."""
        if not 0 <= r < self.num_rows:
            raise IndexError(f"row {r} out of range for a plan of {self.num_rows} rows")
        a, b = self.row_splits[r], self.row_splits[r + 1]
        return list(zip(self.doc[a:b].tolist(), self.start[a:b].tolist(), self.length[a:b].tolist()))


def pack_lengths(
    lengths,
    ctx: int,
    *,
    algorithm: str = DEFAULT_ALGORITHM,
    max_segments: int | None = None,
    window: int | None = None,
    align: int = 1,
    overflow: str = "split",
) -> PackPlan:
    """Plan how to pack documents of the given lengths into rows of ``ctx`` tokens; the same input gives the
    identical :class:`PackPlan` on any machine.

    Args:
      lengths: 1-D integers, tokens per document (zero-length ones skipped, counted in ``empty_documents``).
      ctx: row length (tokens), >= 1.
      algorithm: ``next_fit`` (one open row), ``first_fit`` (the lowest row with room), ``best_fit`` (the tightest),
        ``first_fit_decreasing``, ``best_fit_decreasing`` (largest pieces first) or ``concat_split`` (concatenate,
        cut every ctx); default :data:`~datatools.base.checks.DEFAULT_ALGORITHM`, best_fit_decreasing.
      max_segments: at most this many pieces in one row (cuDNN / TransformerEngine THD need a cap); None: no cap.
      align: every piece starts at a multiple of ``align`` tokens in its row (the gap is padding); divides ``ctx``.
      overflow: documents longer than ``ctx``: ``split`` into ctx-sized pieces, ``truncate``, ``drop`` or ``error``.
      window: ``first_fit`` / ``best_fit`` only: at most this many open rows, all closed when a piece fits none
        (Grain's ``FirstFitPackIterDataset`` / ``BestFitPackIterDataset``, ``num_packing_bins=window``).

    Raises:
      ValueError: a bad option or length, or with ``overflow="error"`` a document longer than ctx.
    """
    return pack(lengths, PackOptions(ctx, algorithm, max_segments, align, overflow, window))


def pack(lengths, options: PackOptions) -> PackPlan:
    """:func:`pack_lengths` with its options already validated (:class:`PackOptions`)."""
    o, algo = options, options.packer
    ctx, align, seg_cap = o.ctx, o.align, o.seg
    lengths = as_lengths(lengths)
    if o.overflow == "error":
        cut_pieces(lengths, ctx, "error")  # raises naming the first document longer than ctx
    if algo.place is None:  # concat_split cuts documents, not pieces
        return _plan_concat_split(lengths, ctx, align, seg_cap, o.overflow)
    if o.window is not None and not algo.windowed:
        windowed = " and ".join(a.name for a in TABLE if a.windowed)
        raise ValueError(f"window applies to {windowed} only; got algorithm={o.algorithm!r}")
    doc, start, length, dropped, empty = cut_pieces(lengths, ctx, o.overflow)
    capacity = ctx // align
    if length.shape[0] >= 2**31 - 1:
        raise ValueError(f"{length.shape[0]} pieces exceed the 2**31 - 1 that one plan holds; pack in shards")
    units = (length + align - 1) // align if align > 1 else length
    n = units.shape[0]
    row_of = np.empty(n, np.int32)
    decreasing = algo.decreasing
    order = decreasing_order(units, capacity) if decreasing else np.zeros(0, np.int32)
    if decreasing:  # equal sizes in runs, largest first: placed in bulk, the same rows as one at a time
        sizes, runs = decreasing_runs(np.bincount(units, minlength=capacity + 1))
    else:
        sizes, runs = units, NO_RUNS
    num_rows, _ = algo.place(sizes, runs, capacity, seg_cap, o.win, n, row_of)
    total = int(units.sum(dtype=np.int64))
    if decreasing and seg_cap and worth_dealing(num_rows, total, n, capacity, seg_cap):
        dealt = np.empty(n, np.int32)  # a binding cap: dealing may need fewer rows
        dealt_rows, _ = capped_decreasing(sizes, runs, capacity, seg_cap, n, total, dealt)
        if dealt_rows < num_rows:
            row_of, num_rows = dealt, dealt_rows
    splits, doc, start, length = _assemble(row_of, order, decreasing, num_rows, doc, start, length)
    return PackPlan(ctx, align, int(num_rows), splits, doc, start, length, dropped, empty, o.algorithm)


@numba.njit(cache=True, nogil=True)
def _assemble(row_of, order, use_order, num_rows, doc, start, length):
    """(row_splits, doc, start, length) grouped by row, stably: ``row_of[k]`` is the row of the k-th placed piece,
    ``order[k]`` (when ``use_order``) its index in (doc, start, length)."""
    n = row_of.shape[0]
    splits = np.zeros(num_rows + 1, np.int64)
    for k in range(n):
        splits[row_of[k] + 1] += 1
    for r in range(num_rows):
        splits[r + 1] += splits[r]
    cursor = splits[:-1].astype(np.int32)
    out_doc = np.empty(n, np.int64)
    out_start = np.empty(n, np.int64)
    out_length = np.empty(n, np.int32)
    for k in range(n):
        p = order[k] if use_order else k
        r = row_of[k]
        d = cursor[r]
        cursor[r] = d + 1
        out_doc[d] = doc[p]
        out_start[d] = start[p]
        out_length[d] = length[p]
    return splits, out_doc, out_start, out_length


def _plan_concat_split(lengths, ctx, align, seg_cap, overflow) -> PackPlan:
    empty = int(np.count_nonzero(lengths == 0))
    dropped = 0
    if overflow == "truncate":
        dropped = int(np.maximum(lengths - ctx, 0).sum())
        lengths = np.minimum(lengths, ctx)
    elif overflow == "drop":
        long = lengths > ctx
        dropped = int(lengths[long].sum())
        lengths = np.where(long, 0, lengths)
    state = concat_split_state(ctx)
    concat_split(lengths, ctx, align, seg_cap, state, NO_PIECES, NO_PIECES, NO_ROWS, NO_PIECES, False)
    num_pieces, num_rows = int(state[0]), int(state[1])
    doc, start = np.empty(num_pieces, np.int64), np.empty(num_pieces, np.int64)
    splits, length = np.empty(num_rows + 1, np.int64), np.empty(num_pieces, np.int32)
    concat_split(lengths, ctx, align, seg_cap, concat_split_state(ctx), doc, start, length, splits, True)
    return PackPlan(ctx, align, int(num_rows), splits, doc, start, length, dropped, empty, "concat_split")
