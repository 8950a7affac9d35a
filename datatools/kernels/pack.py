"""Sequence packing: plan which document pieces share a row, then build the rows.

Packing puts several documents into one fixed-length row of ``ctx`` tokens so
that the accelerator computes on tokens rather than padding. Attention is kept
inside each document by ``segment_ids``; RoPE restarts per document through
``positions``.

The work happens in two steps:

1. :func:`pack_lengths` sees only document lengths (tokens) and returns a
   :class:`PackPlan`: for every row, the pieces ``(doc, start, length)`` it holds.
   The bin-packing kernels are numba-compiled (``cache=True``) and run in
   O(n log n) or better:

   * ``next_fit``: input order, one open row; O(n).
   * ``first_fit`` / ``first_fit_decreasing``: the lowest-numbered row with room,
     found by descending a max segment tree over the rows' free capacity, O(log n).
   * ``best_fit`` / ``best_fit_decreasing``: the row with the least free capacity
     that still fits. Rows are kept in one stack per free-capacity value; a
     presence segment tree over capacities finds the smallest capacity >= the
     piece in O(log ctx).
   * ``concat_split``: concatenate the documents in order and cut every ``ctx``
     tokens (the classic pretraining layout; no padding but documents are cut).

   The ``*_decreasing`` variants order pieces by a stable counting sort on size,
   O(n + ctx), so equal sizes keep input order and plans are identical on every
   machine.

2. :func:`materialize` gathers the tokens of a set of rows from a flat token array
   and builds int32 ``tokens``, ``segment_ids``, ``positions`` and ``loss_mask``
   (one numba pass writing each output slot once).

Alignment: with ``align > 1`` every piece starts at a multiple of ``align`` inside
its row, so a piece occupies ``ceil(length / align) * align`` slots. The kernels
work in units of ``align`` tokens (row capacity ``ctx // align``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy as np

from datatools.base.checks import (MAX_CTX, OVERFLOW_POLICIES, as_lengths, check_choice, check_id,
                                        check_int, short_repr)

ALGORITHMS = (
    "next_fit",
    "first_fit",
    "best_fit",
    "first_fit_decreasing",
    "best_fit_decreasing",
    "concat_split",
)

_OVERFLOW_CODE = {name: code for code, name in enumerate(OVERFLOW_POLICIES)}
_CANONICAL = ("tokens", "segment_ids", "positions", "loss_mask")


@dataclass(frozen=True)
class PackPlan:
    """Which pieces of which documents go into which row.

    Pieces are stored flat; the pieces of row ``r`` are
    ``doc[row_splits[r]:row_splits[r + 1]]`` (and likewise ``start``, ``length``),
    in the order they sit in the row.

    Attributes:
      ctx: row length (tokens).
      align: every piece starts at a multiple of this many tokens inside its row.
      num_rows: number of rows.
      row_splits: int64 (num_rows + 1,), offsets of each row's pieces.
      doc: int64 (num_pieces,), index of the piece's document in the input lengths.
      start: int64 (num_pieces,), offset of the piece inside its document (tokens).
      length: int32 (num_pieces,), tokens in the piece.
      dropped_tokens: tokens of the input present in no row (truncate / drop).
      empty_documents: zero-length documents, skipped.
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
    _offset: np.ndarray | None = field(default=None, repr=False, compare=False)
    _max_doc: int | None = field(default=None, repr=False, compare=False)

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

    @property
    def max_doc(self) -> int:
        """The largest document index in the plan (-1 when empty)."""
        if self._max_doc is None:
            object.__setattr__(self, "_max_doc", int(self.doc.max()) if self.num_pieces else -1)
        return self._max_doc

    @property
    def offset(self) -> np.ndarray:
        """int64 (num_pieces,): where each piece starts inside its row (tokens)."""
        if self._offset is None:
            object.__setattr__(self, "_offset", _piece_offsets(self.length, self.row_splits, self.align))
        return self._offset

    def row(self, r: int) -> list[tuple[int, int, int]]:
        """The pieces of row ``r`` as ``(doc, start, length)`` tuples."""
        if not 0 <= r < self.num_rows:
            raise IndexError(f"row {r} out of range for a plan of {self.num_rows} rows")
        a, b = self.row_splits[r], self.row_splits[r + 1]
        return list(zip(self.doc[a:b].tolist(), self.start[a:b].tolist(), self.length[a:b].tolist()))

    def summary(self) -> dict:
        """Plain-python figures for reports and JSON."""
        return {
            "algorithm": self.algorithm,
            "ctx": self.ctx,
            "rows": self.num_rows,
            "pieces": self.num_pieces,
            "kept_tokens": self.kept_tokens,
            "dropped_tokens": self.dropped_tokens,
            "efficiency": self.efficiency,
            "lower_bound_rows": self.lower_bound_rows,
        }


def _piece_offsets(length: np.ndarray, row_splits: np.ndarray, align: int) -> np.ndarray:
    slots = -(-length.astype(np.int64) // align) * align
    ends = np.cumsum(slots)
    begins = ends - slots
    row_begin = np.concatenate(([0], ends))[row_splits[:-1]]
    return begins - np.repeat(row_begin, np.diff(row_splits))


# --------------------------------------------------------------------------- kernels


@numba.njit(cache=True)
def _cut_pieces(lengths, ctx, overflow_code):
    """Cut documents into pieces of at most ctx tokens according to the overflow policy.

    overflow_code: 0 split, 1 truncate, 2 drop (3 error is checked before).
    Returns (doc, start, length, dropped_tokens, empty_documents).
    """
    n = lengths.shape[0]
    count = 0
    for i in range(n):
        L = lengths[i]
        if L == 0:
            continue
        if L <= ctx:
            count += 1
        elif overflow_code == 0:
            count += (L + ctx - 1) // ctx
        elif overflow_code == 1:
            count += 1
    doc = np.empty(count, np.int64)
    start = np.empty(count, np.int64)
    length = np.empty(count, np.int32)
    dropped = 0
    empty = 0
    k = 0
    for i in range(n):
        L = lengths[i]
        if L == 0:
            empty += 1
            continue
        if L <= ctx:
            doc[k] = i
            start[k] = 0
            length[k] = L
            k += 1
        elif overflow_code == 0:
            s = 0
            while s < L:
                doc[k] = i
                start[k] = s
                length[k] = min(ctx, L - s)
                k += 1
                s += ctx
        elif overflow_code == 1:
            doc[k] = i
            start[k] = 0
            length[k] = ctx
            dropped += L - ctx
            k += 1
        else:
            dropped += L
    return doc, start, length, dropped, empty


@numba.njit(cache=True)
def _decreasing_order(units, capacity):
    """Stable counting sort of piece indices by size, largest first. O(n + capacity)."""
    counts = np.zeros(capacity + 2, np.int64)
    for i in range(units.shape[0]):
        counts[capacity - units[i] + 1] += 1
    for c in range(1, capacity + 2):
        counts[c] += counts[c - 1]
    order = np.empty(units.shape[0], np.int32)
    for i in range(units.shape[0]):
        key = capacity - units[i]
        order[counts[key]] = i
        counts[key] += 1
    return order


@numba.njit(cache=True)
def _next_fit(sizes, capacity, max_segments):
    """Row of each piece (``sizes`` in placement order), and the number of rows."""
    n = sizes.shape[0]
    row_of = np.empty(n, np.int32)
    row = -1
    free = 0
    segs = 0
    for k in range(n):
        s = sizes[k]
        if row < 0 or s > free or (max_segments > 0 and segs >= max_segments):
            row += 1
            free = capacity
            segs = 0
        row_of[k] = row
        free -= s
        segs += 1
    return row_of, row + 1


@numba.njit(cache=True, nogil=True)
def max_tree_first(tree, size, s):
    """Leaf node of the leftmost row whose free capacity is >= s (the root must be >= s)."""
    node = 1
    while node < size:
        node = 2 * node
        if tree[node] < s:
            node += 1
    return node


@numba.njit(cache=True, nogil=True)
def max_tree_set(tree, node, v):
    """Set a leaf's free capacity and restore the max of its ancestors."""
    tree[node] = v
    node >>= 1
    while node >= 1:
        m = max(tree[2 * node], tree[2 * node + 1])
        if tree[node] == m:
            break
        tree[node] = m
        node >>= 1


@numba.njit(cache=True)
def _first_fit(sizes, capacity, max_segments):
    """First fit with a max segment tree over the rows' free capacity (a closed row holds -1)."""
    n = sizes.shape[0]
    size = 1
    while size < n:
        size *= 2
    tree = np.full(2 * size, capacity, np.int32)
    segs = np.zeros(size if max_segments > 0 else 1, np.int32)
    row_of = np.empty(n, np.int32)
    num_rows = 0
    for k in range(n):
        s = sizes[k]
        node = max_tree_first(tree, size, s)
        r = node - size
        row_of[k] = r
        if r >= num_rows:
            num_rows = r + 1
        v = tree[node] - s
        if max_segments > 0:
            segs[r] += 1
            if segs[r] >= max_segments:
                v = -1
        max_tree_set(tree, node, v)
    return row_of, num_rows


@numba.njit(cache=True, nogil=True)
def presence_set(tree, size, c):
    node = size + c
    while node >= 1 and tree[node] == 0:
        tree[node] = 1
        node >>= 1


@numba.njit(cache=True, nogil=True)
def presence_clear(tree, size, c):
    node = size + c
    tree[node] = 0
    node >>= 1
    while node >= 1:
        v = tree[2 * node] | tree[2 * node + 1]
        if tree[node] == v:
            break
        tree[node] = v
        node >>= 1


@numba.njit(cache=True, nogil=True)
def presence_next(tree, size, c):
    """Smallest present leaf index >= c, or -1."""
    node = size + c
    if tree[node]:
        return c
    while node > 1:
        if (node & 1) == 0 and tree[node + 1]:
            node += 1
            while node < size:
                node = 2 * node
                if tree[node] == 0:
                    node += 1
            return node - size
        node >>= 1
    return -1


@numba.njit(cache=True, nogil=True)
def stack_push(tree, size, head, below, r, f):
    """Put row ``r`` on the stack of rows with ``f`` free units (f > 0), marking ``f`` present in the tree. For
    the cold paths (existing rows); the best-fit loops keep their own inline copy (see :func:`_best_fit_from`)."""
    below[r] = head[f]
    if head[f] < 0:
        presence_set(tree, size, f)
    head[f] = r


@numba.njit(cache=True, nogil=True)
def serpentine_next(r, step, rows):
    """The row after ``r`` when dealing to ``rows`` rows in serpentine order (0 .. R-1, R-1 .. 0, 0 ..)."""
    r += step
    if r == rows:
        return rows - 1, -1
    if r < 0:
        return 0, 1
    return r, step


@numba.njit(cache=True)
def _best_fit(sizes, capacity, max_segments):
    """Best fit into new rows (see :func:`_best_fit_from`)."""
    return _best_fit_from(sizes, capacity, max_segments, np.zeros(0, np.int32), np.zeros(0, np.int32))


@numba.njit(cache=True)
def _best_fit_from(sizes, capacity, max_segments, free0, segs0):
    """Best fit: one LIFO stack of rows per free capacity, a presence tree over capacities.

    Rows ``0 .. len(free0) - 1`` exist already with ``free0`` free units and ``segs0`` pieces (pushed onto their
    stacks in row order); new rows are numbered after them. Returns (row of each piece, rows in all).

    The stack handling is written out again in ``analysis.padding._best_fit_decreasing_rows_from``
    and its windowed best fit on purpose: sharing it through small numba helpers made the
    bulk BFD count 2.2x slower and windowed best fit 22% slower (measured at 1M and 100M
    documents), so each kernel keeps its own copy.

    A row's free capacity is the stack it sits on, so no per-row capacity is stored.
    """
    n = sizes.shape[0]
    first = free0.shape[0]
    size = 1
    while size < capacity + 1:
        size *= 2
    tree = np.zeros(2 * size, np.uint8)
    head = np.full(capacity + 1, -1, np.int32)
    below = np.empty(max(first + n, 1), np.int32)
    segs = np.zeros(max(first + n, 1) if max_segments > 0 else 1, np.int32)
    for r in range(first):
        f = free0[r]
        if max_segments > 0:
            segs[r] = segs0[r]
            if segs[r] >= max_segments:
                f = 0
        if f > 0:
            stack_push(tree, size, head, below, r, f)
    row_of = np.empty(n, np.int32)
    num_rows = first
    for k in range(n):
        s = sizes[k]
        c = presence_next(tree, size, s)
        if c < 0:
            r = num_rows
            num_rows += 1
            c = capacity
        else:
            r = head[c]
            head[c] = below[r]
            if head[c] < 0:
                presence_clear(tree, size, c)
        row_of[k] = r
        f = c - s
        if max_segments > 0:
            segs[r] += 1
            if segs[r] >= max_segments:
                f = 0
        if f > 0:
            below[r] = head[f]
            if head[f] < 0:
                presence_set(tree, size, f)
            head[f] = r
    return row_of, num_rows


@numba.njit(cache=True)
def _deal_capped(sizes, capacity, max_segments, rows):
    """Deal pieces (``sizes`` in decreasing order) to ``rows`` rows in serpentine order (row 0, 1, ..., R-1, then
    R-1, ..., 0, ...), so every row gets a mix of large and small pieces; a piece that does not fit its row (room
    or the cap) is left at -1. Returns (``row_of``, free units per row, pieces per row)."""
    n = sizes.shape[0]
    free = np.full(rows, capacity, np.int32)
    segs = np.zeros(rows, np.int32)
    row_of = np.full(n, -1, np.int32)
    r = 0
    step = 1
    for k in range(n):
        s = sizes[k]
        if s <= free[r] and segs[r] < max_segments:
            row_of[k] = r
            free[r] -= s
            segs[r] += 1
        r, step = serpentine_next(r, step, rows)
    return row_of, free, segs


def worth_dealing(rows: int, units: int, pieces: int, capacity: int, max_segments: int) -> bool:
    """Whether a plain decreasing fit of ``rows`` rows is far enough (over 1%) above the lower bound
    max(units / capacity, pieces / cap) for dealing (:func:`capped_decreasing_rows`) to be worth its time."""
    if pieces <= max_segments:
        return False
    bound = max(-(-units // capacity), -(-pieces // max_segments))
    return rows * 100 > bound * 101


def capped_decreasing_rows(sizes: np.ndarray, capacity: int, max_segments: int) -> tuple[np.ndarray, int]:
    """Placement of pieces (``sizes`` in decreasing order) under a binding cap on pieces per row.

    Decreasing first/best fit fill rows with the largest pieces up to the cap and leave the small ones, a few to
    a nearly empty row: with a cap of 4 and documents of mean 230 tokens at ctx 1024 that is 25% padding where
    the bound is 12%. Here the pieces are dealt to R = max(tokens / capacity, pieces / cap) rows (the lower
    bound) in serpentine order, and the pieces that did not fit their row are best-fit (largest first) into
    the dealt rows or new ones. :func:`pack_lengths` keeps whichever of this and plain decreasing fit needs
    fewer rows.

    Returns:
      (row_of, num_rows): the row of each piece, in the order of ``sizes``.
    """
    n = sizes.shape[0]
    rows = max(-(-int(sizes.sum()) // capacity), -(-n // max_segments), 1)
    row_of, free, segs = _deal_capped(sizes, capacity, max_segments, rows)
    left = np.flatnonzero(row_of < 0)
    if left.shape[0]:
        placed, rows = _best_fit_from(sizes[left], capacity, max_segments, free, segs)
        row_of[left] = placed
    return row_of, rows


@numba.njit(cache=True)
def _assemble(row_of, order, use_order, num_rows, doc, start, length):
    """Group pieces by row (stable: placement order inside a row).

    ``row_of[k]`` is the row of the k-th placed piece, ``order[k]`` its index in
    (doc, start, length). Returns (row_splits, doc, start, length) in row order.
    """
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


@numba.njit(cache=True)
def _concat_split(lengths, ctx, align, max_segments, doc, start, length, splits, fill):
    """Concatenate documents in order and cut every ctx tokens.

    Pieces start at multiples of ``align``; a new row starts when the current one is
    full or holds ``max_segments`` pieces. Run once with fill=False to count
    (returns (pieces, rows)), then with fill=True and arrays of those sizes.
    """
    k = 0
    r = -1
    pos = ctx  # forces a new row at the first piece
    segs = 0
    for i in range(lengths.shape[0]):
        total = lengths[i]
        done = 0
        while done < total:
            aligned = ((pos + align - 1) // align) * align
            if aligned >= ctx or (max_segments > 0 and segs >= max_segments):
                r += 1
                if fill:
                    splits[r] = k
                aligned = 0
                segs = 0
            take = min(total - done, ctx - aligned)
            if fill:
                doc[k] = i
                start[k] = done
                length[k] = take
            k += 1
            segs += 1
            done += take
            pos = aligned + take
    if fill:
        splits[r + 1] = k
    return k, r + 1


# --------------------------------------------------------------------------- public API


def cut_pieces(lengths: np.ndarray, ctx: int, overflow: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """Apply an overflow policy at ``ctx`` tokens: the pieces every packer or bucketer works on.

    Args:
      lengths: int64 tokens per document (validated, e.g. by ``as_lengths``).
      ctx: the longest piece (tokens).
      overflow: ``split`` (ctx-sized pieces), ``truncate``, ``drop`` or ``error``.

    Returns:
      (doc int64, start int64, length int32, dropped_tokens, empty_documents); zero-length
      documents give no piece.
    """
    if overflow == "error" and lengths.size:
        too_long = np.flatnonzero(lengths > ctx)
        if too_long.size:
            i = int(too_long[0])
            raise ValueError(f"document {i} has length {int(lengths[i])} > {ctx} (overflow='error')")
    doc, start, length, dropped, empty = _cut_pieces(lengths, ctx, _OVERFLOW_CODE.get(overflow, 0))
    return doc, start, length, int(dropped), int(empty)


def pack_lengths(
    lengths,
    ctx: int,
    *,
    algorithm: str = "best_fit_decreasing",
    max_segments: int | None = None,
    align: int = 1,
    overflow: str = "split",
) -> PackPlan:
    """Plan how to pack documents of the given lengths into rows of ``ctx`` tokens.

    Args:
      lengths: 1-D integers, tokens per document. Zero-length documents are skipped
        and counted in ``PackPlan.empty_documents``.
      ctx: row length (tokens), >= 1.
      algorithm: one of ``next_fit``, ``first_fit``, ``best_fit`` (input order,
        unbounded open rows), ``first_fit_decreasing``, ``best_fit_decreasing``
        (largest pieces first) or ``concat_split`` (concatenate, cut every ctx).
      max_segments: at most this many pieces in one row (packed attention kernels
        such as cuDNN / TransformerEngine THD need a fixed cap); None for no cap.
      align: every piece starts at a multiple of ``align`` tokens in its row; must
        divide ``ctx``. The gap counts as padding.
      overflow: what to do with documents longer than ``ctx``: ``split`` into
        ctx-sized pieces (nothing lost), ``truncate`` to the first ctx tokens,
        ``drop`` the document, or ``error``. For ``concat_split`` long documents
        are cut across rows under ``split``.

    Returns:
      A :class:`PackPlan`; the same input gives the identical plan on any machine.

    Raises:
      ValueError: ctx < 1, negative or non-integer lengths, max_segments < 1,
        align < 1 or not dividing ctx, an unknown algorithm or overflow policy, or
        with ``overflow="error"`` a document longer than ctx.
    """
    ctx = check_int(ctx, "ctx", minimum=1, maximum=MAX_CTX)
    align = check_int(align, "align", minimum=1, maximum=MAX_CTX)
    if ctx % align:
        raise ValueError(f"align must divide ctx; got align={align}, ctx={ctx}")
    if max_segments is not None:
        max_segments = check_int(max_segments, "max_segments", minimum=1, maximum=MAX_CTX)
    check_choice(algorithm, "algorithm", ALGORITHMS)
    check_choice(overflow, "overflow", OVERFLOW_POLICIES)
    lengths = as_lengths(lengths)
    if overflow == "error":
        cut_pieces(lengths, ctx, "error")  # raises naming the first document longer than ctx
    seg_cap = 0 if max_segments is None else max_segments

    if algorithm == "concat_split":
        return _plan_concat_split(lengths, ctx, align, seg_cap, overflow)

    doc, start, length, dropped, empty = cut_pieces(lengths, ctx, overflow)
    capacity = ctx // align
    if length.shape[0] >= 2**31 - 1:
        raise ValueError(f"{length.shape[0]} pieces exceed the 2**31 - 1 that one plan holds; pack in shards")
    units = (length + align - 1) // align if align > 1 else length
    decreasing = algorithm.endswith("_decreasing")
    order = _decreasing_order(units, capacity) if decreasing else np.zeros(0, np.int32)
    kernel = {"next_fit": _next_fit, "first_fit": _first_fit, "best_fit": _best_fit}[
        algorithm.removesuffix("_decreasing")
    ]
    # Gather the sizes into placement order first: the kernels then read them sequentially.
    placed = units[order] if decreasing else units
    row_of, num_rows = kernel(placed, capacity, seg_cap)
    if decreasing and seg_cap and worth_dealing(num_rows, int(placed.sum()), placed.shape[0], capacity, seg_cap):
        dealt, dealt_rows = capped_decreasing_rows(placed, capacity, seg_cap)  # a binding cap: may need fewer rows
        if dealt_rows < num_rows:
            row_of, num_rows = dealt, dealt_rows
    splits, doc, start, length = _assemble(row_of, order, decreasing, num_rows, doc, start, length)
    return PackPlan(ctx, align, int(num_rows), splits, doc, start, length, dropped, empty, algorithm)


def _plan_concat_split(lengths, ctx, align, seg_cap, overflow) -> PackPlan:
    empty = int(np.count_nonzero(lengths == 0))
    dropped = 0
    if overflow in ("truncate", "drop"):
        excess = np.maximum(lengths - ctx, 0)
        if overflow == "truncate":
            dropped = int(excess.sum())
            lengths = np.minimum(lengths, ctx)
        else:
            long = lengths > ctx
            dropped = int(lengths[long].sum())
            lengths = np.where(long, 0, lengths)
    none = np.zeros(0, np.int64)
    num_pieces, num_rows = _concat_split(lengths, ctx, align, seg_cap, none, none, none, none, False)
    doc, start, splits = np.empty(num_pieces, np.int64), np.empty(num_pieces, np.int64), np.empty(num_rows + 1, np.int64)
    length = np.empty(num_pieces, np.int32)
    _concat_split(lengths, ctx, align, seg_cap, doc, start, length, splits, True)
    return PackPlan(ctx, align, int(num_rows), splits, doc, start, length, dropped, empty, "concat_split")


def materialize(
    plan: PackPlan,
    tokens: np.ndarray,
    offsets: np.ndarray,
    rows=None,
    *,
    pad_id: int = 0,
    check_values: bool = True,
    out: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Build packed rows from a flat token array, writing every output slot once.

    One numba pass per row writes its pieces and its padding straight into the four
    outputs (no prefill, no second pass), so building rows costs about a copy of their
    bytes (16 bytes per slot). Every piece the rows read is first checked to lie inside
    ``tokens`` (per piece, in numba), so a plan and arrays that do not match raise before
    anything is written; the ids written are checked in the same pass (see Raises).

    Args:
      plan: the plan from :func:`pack_lengths`.
      tokens: 1-D array of every document's tokens back to back.
      offsets: int (num_documents + 1,): document i is ``tokens[offsets[i]:offsets[i+1]]``.
      rows: row ids to build (int array-like); None for all rows.
      pad_id: token written at padding slots.
      check_values: check that ids of a dtype wider than int32 fit int32 (on the pieces read only);
        ``False`` when the caller checked the whole array once. Negative ids are refused either way.
      out: a canonical batch to write into instead of allocating one (four C-contiguous int32 arrays of
        shape (len(rows), ctx) under ``tokens``, ``segment_ids``, ``positions``, ``loss_mask``); every slot
        is overwritten. Use it where the caller owns the buffer (a batch Grain may still hold must not be
        reused).

    Returns:
      int32 arrays of shape (len(rows), ctx), the canonical datatools batch (``out`` itself when given):
      ``tokens``; ``segment_ids`` (1, 2, ... per piece within a row, 0 = padding);
      ``positions`` (0-based in the document: a continuation piece counts on from
      its offset); ``loss_mask`` (1 where the next token is in the same piece, so
      no target crosses a document boundary).

    Raises:
      TypeError: ``plan`` is not a :class:`PackPlan`, or the tokens are not integers, or ``out`` is not a
        canonical batch of the right shape.
      ValueError: a token id the rows hold is outside [0, 2**31 - 1] (a negative id is refused whatever the
        dtype and ``check_values``), or the plan and arrays do not match.
    """
    _check_plan(plan)
    rows = _check_rows(plan, rows)
    pad_id = check_id(pad_id, "pad_id")
    tokens = np.asarray(tokens)
    offsets = np.asarray(offsets)
    if tokens.ndim != 1 or tokens.dtype.kind not in "iu":
        raise TypeError(f"tokens must be a 1-D integer array, got {tokens.dtype} {tokens.shape}")
    if offsets.ndim != 1 or offsets.shape[0] < 1 or offsets.dtype.kind not in "iu":
        raise ValueError(f"offsets must be a 1-D integer array of num_documents + 1 values, got {offsets.dtype} "
                         f"{offsets.shape}")
    if plan.max_doc >= offsets.shape[0] - 1:
        raise ValueError(f"plan refers to document {plan.max_doc} but offsets describe {offsets.shape[0] - 1} documents")
    offsets = offsets.astype(np.int64, copy=False)
    batch = _output_batch(out, rows.shape[0], plan.ctx)
    if rows.shape[0] == 0:
        return batch
    _check_piece_bounds(plan, rows, offsets, tokens.shape[0])
    wide = bool(check_values) and tokens.dtype.itemsize >= 4 and tokens.dtype != np.int32
    _fill_checked(rows, plan.row_splits, plan.doc, plan.start, plan.length, plan.offset, offsets, tokens, pad_id,
                  wide, batch, rows)
    return batch


def _check_plan(plan) -> None:
    if not isinstance(plan, PackPlan):
        raise TypeError(f"plan must be a PackPlan from pack_lengths(), got {short_repr(plan)}")


def _output_batch(out, batch: int, ctx: int) -> dict[str, np.ndarray]:
    """``out`` checked to be a canonical batch of ``batch`` x ``ctx`` int32 C-contiguous arrays, or four new
    uninitialized ones (the fill writes every slot)."""
    if out is None:
        return {k: np.empty((batch, ctx), np.int32) for k in _CANONICAL}
    if not isinstance(out, dict) or any(k not in out for k in _CANONICAL):
        raise TypeError(f"out must be a dict of {', '.join(_CANONICAL)} arrays, got {short_repr(out)}")
    for k in _CANONICAL:
        a = out[k]
        if not isinstance(a, np.ndarray) or a.dtype != np.int32 or a.shape != (batch, ctx) \
                or not a.flags.c_contiguous or not a.flags.writeable:
            raise TypeError(f"out[{k!r}] must be a writeable C-contiguous int32 array of shape {(batch, ctx)}, got "
                            f"{short_repr(a)}")
    return out


def _fill_checked(rows, row_splits, doc, start, length, offset, offsets, tokens, pad_id, wide, batch, row_ids) -> None:
    """Run the fill; a row holding an id outside [0, 2**31 - 1] is a ValueError naming the id, its row and slot."""
    err = np.zeros(3, np.int64)
    if _fill_rows(rows, row_splits, doc, start, length, offset, offsets, tokens, pad_id, wide,
                  batch["tokens"], batch["segment_ids"], batch["positions"], batch["loss_mask"], err):
        b, where, value = (int(v) for v in err)
        if wide:  # the id as the source holds it, before the cast to int32
            value = int(tokens[where])
            raise ValueError(f"tokens: token id {value} in row {int(row_ids[b])} is outside [0, 2**31 - 1] "
                             f"(batches are int32)")
        raise ValueError(f"tokens: token id {value} at row {int(row_ids[b])}, position {where} (as int32) "
                         f"is outside [0, 2**31 - 1]; token ids must be non-negative")


def _check_rows(plan: PackPlan, rows) -> np.ndarray:
    """Row ids as int64 (all rows when None); IndexError for one outside the plan, ValueError for non-integers."""
    if rows is None:
        return np.arange(plan.num_rows)
    try:
        arr = np.asarray(rows).reshape(-1)
    except (OverflowError, ValueError, TypeError):
        raise ValueError(f"rows must be integers, got {short_repr(rows)}") from None
    if arr.size and (arr.dtype.kind not in "iu" or (arr.dtype.kind == "u" and arr.max() > np.iinfo(np.int64).max)):
        raise ValueError(f"rows must be integers in the int64 range, got {short_repr(rows)}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and (arr.min() < 0 or arr.max() >= plan.num_rows):
        bad = arr[(arr < 0) | (arr >= plan.num_rows)][0]
        raise IndexError(f"row {int(bad)} out of range for a plan of {plan.num_rows} rows")
    return arr


def _check_piece_bounds(plan: PackPlan, rows: np.ndarray, offsets: np.ndarray, num_tokens: int) -> None:
    """Every piece of ``rows`` must lie in ``[0, num_tokens)`` of the flat array (per piece, numba)."""
    q = _first_bad_piece(rows, plan.row_splits, plan.doc, plan.start, plan.length, offsets, num_tokens)
    if q >= 0:
        d = int(plan.doc[q])
        begin = int(offsets[d] + plan.start[q])
        end = begin + int(plan.length[q])
        raise ValueError(f"document {d}: tokens [{begin}, {end}) of the plan are "
                         f"outside the token array of {num_tokens} (or past the document's offsets); the plan, "
                         f"tokens and offsets do not match")


@numba.njit(cache=True, nogil=True)
def _first_bad_piece(rows, row_splits, doc, start, length, offsets, num_tokens):
    """The first piece of ``rows`` not inside both its document and ``[0, num_tokens)``; -1 when all are."""
    for b in range(rows.shape[0]):
        r = rows[b]
        for q in range(row_splits[r], row_splits[r + 1]):
            begin = offsets[doc[q]] + start[q]
            end = begin + length[q]
            if begin < 0 or end > num_tokens or end > offsets[doc[q] + 1]:
                return q
    return -1


def check_token_ids(tokens: np.ndarray, where: str = "tokens") -> None:
    """Token ids must be in [0, 2**31 - 1] (batches are int32); vectorized over ``tokens``."""
    if tokens.size:
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi > np.iinfo(np.int32).max:
            bad = lo if lo < 0 else hi
            raise ValueError(f"{where}: token id {bad} outside [0, 2**31 - 1] (batches are int32)")


def materialize_pieces(plan: PackPlan, read_pieces, rows=None, *, pad_id: int = 0,
                       out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Like :func:`materialize`, reading only the pieces of the selected rows through ``read_pieces``.

    Args:
      plan: the plan from :func:`pack_lengths`.
      read_pieces: ``read_pieces(doc, start, length) -> tokens``: the given pieces of
        their documents back to back (one int array); for example
        :meth:`datatools.io.documents.ArrayDocuments.read_pieces`, or a token store's
        cached reader. Called once for all selected rows.
      rows: row ids to build; None for all rows.
      pad_id: token written at padding slots.
      out: a canonical batch to write into, as for :func:`materialize`.
    """
    _check_plan(plan)
    rows = _check_rows(plan, rows)
    pad_id = check_id(pad_id, "pad_id")
    first, counts = plan.row_splits[rows], np.diff(plan.row_splits)[rows]
    splits = np.concatenate(([0], np.cumsum(counts)))
    sel = np.repeat(first - splits[:-1], counts) + np.arange(splits[-1], dtype=np.int64)
    start, length = plan.start[sel], plan.length[sel]
    flat = np.asarray(read_pieces(plan.doc[sel], start, length))
    if flat.ndim != 1 or flat.dtype.kind not in "iu" or flat.shape[0] != int(length.sum()):
        raise TypeError(f"read_pieces must return the {int(length.sum())} tokens asked for as a 1-D integer array, "
                        f"got {flat.dtype} {flat.shape}")
    # Piece j of the selection sits at flat[piece_begin[j]:]; _fill_rows reads offsets[doc] + start.
    piece_begin = np.concatenate(([0], np.cumsum(length, dtype=np.int64)))
    fake_offsets = piece_begin[:-1] - start
    batch = _output_batch(out, rows.shape[0], plan.ctx)
    if rows.shape[0]:
        wide = flat.dtype.itemsize >= 4 and flat.dtype != np.int32
        _fill_checked(np.arange(rows.shape[0], dtype=np.int64), splits, np.arange(sel.shape[0], dtype=np.int64),
                      start, length, plan.offset[sel], fake_offsets, flat, pad_id, wide, batch, rows)
    return batch


@numba.njit(cache=True, nogil=True)
def _fill_rows(rows, row_splits, doc, start, length, offset, offsets, tokens, pad_id, wide,
               out_tokens, segment_ids, positions, loss_mask, err):
    """Write each selected row of the (batch, ctx) int32 outputs once: its pieces and the padding between and
    after them (no prefill). Each output is filled by its own slice loop, so each vectorizes.

    ``wide``: check each piece's source ids fit [0, 2**31 - 1] before the cast. Every row's int32 ids are checked
    non-negative once it is built. On a bad id: ``err`` = (batch row, source index (wide) or slot, id as int32),
    return True (rows after it are not built).
    """
    ctx = out_tokens.shape[1]
    for b in range(rows.shape[0]):
        r = rows[b]
        t_row, s_row, p_row, m_row = out_tokens[b], segment_ids[b], positions[b], loss_mask[b]
        at = 0
        for q in range(row_splits[r], row_splits[r + 1]):
            dst, n = offset[q], length[q]
            if dst > at:  # alignment gap
                t_row[at:dst] = pad_id
                s_row[at:dst] = 0
                p_row[at:dst] = 0
                m_row[at:dst] = 0
            src = offsets[doc[q]] + start[q]
            piece = tokens[src:src + n]
            if wide and n > 0 and (piece.min() < 0 or piece.max() > 2147483647):
                for j in range(n):
                    if piece[j] < 0 or piece[j] > 2147483647:
                        err[0], err[1], err[2] = b, src + j, 0
                        return True
            t_row[dst:dst + n] = piece
            s_row[dst:dst + n] = q - row_splits[r] + 1
            p0 = start[q]
            for j in range(n):
                p_row[dst + j] = p0 + j
            m_row[dst:dst + n] = 1
            if n > 0:
                m_row[dst + n - 1] = 0
            at = dst + n
        if at < ctx:
            t_row[at:] = pad_id
            s_row[at:] = 0
            p_row[at:] = 0
            m_row[at:] = 0
        if t_row.min() < 0:
            c = int(np.argmin(t_row))
            err[0], err[1], err[2] = b, c, t_row[c]
            return True
    return False
