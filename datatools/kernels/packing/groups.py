"""Packing more documents than one plan fits in memory (:func:`pack_lengths` holds 50-80 bytes a document), and the
lower bound of rows any packing needs.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from datatools.kernels.packing.algorithms import PackOptions
from datatools.kernels.packing.plan import PackPlan, pack

CARRY_FREE_DIVISOR = 64  # a row with more than ctx / 64 tokens free (3 % at ctx 2048) is carried forward
CARRY_FRACTION = 4  # at most group_docs / 4 pieces carried into the next group (bounds its memory)


def pack_in_groups(
    lengths: np.ndarray,
    options: PackOptions,
    *,
    group_docs: int,
) -> Iterator[PackPlan]:
    """The packed plan of ``lengths`` (tokens per document; may be memory-mapped) as :class:`PackPlan` s of finished
    rows, planned ``group_docs`` documents at a time, the pieces of each group's under-filled rows carried into the
    next (within a few rows of the single plan; exactly it for one group). ``doc`` index the whole ``lengths``;
    ``dropped_tokens`` and ``empty_documents`` count the group's; each group packed with ``options``."""
    n = int(lengths.shape[0])
    if group_docs < 1:
        raise ValueError(f"group_docs must be >= 1, got {group_docs}")
    ctx, align = options.ctx, options.align
    carry_doc = carry_start = np.zeros(0, np.int64)
    carry_len = np.zeros(0, np.int64)
    free_limit = max(1, ctx // CARRY_FREE_DIVISOR)
    max_carry = max(1, group_docs // CARRY_FRACTION)
    for g0 in range(0, max(n, 1), group_docs):
        g1 = min(n, g0 + group_docs)
        part = np.asarray(lengths[g0:g1], dtype=np.int64)
        nc = carry_len.shape[0]
        sizes = np.concatenate((carry_len, part)) if nc else part
        plan = pack(sizes, options)
        del sizes, part
        carried = plan.doc < nc
        doc = plan.doc + (g0 - nc)
        start = plan.start
        if nc:
            which = plan.doc[carried]
            doc[carried] = carry_doc[which]
            start = start.copy()
            start[carried] += carry_start[which]
        if g1 == n or plan.num_rows == 0:  # every row is finished
            keep = np.ones(plan.num_rows, bool)
        else:
            keep = _rows_kept(plan, free_limit, max_carry)
        per_row = np.diff(plan.row_splits)
        piece_kept = np.repeat(keep, per_row)
        carry_doc, carry_start = doc[~piece_kept], start[~piece_kept]
        carry_len = plan.length[~piece_kept].astype(np.int64)
        splits = np.zeros(int(keep.sum()) + 1, np.int64)
        np.cumsum(per_row[keep], out=splits[1:])
        yield PackPlan(
            ctx,
            align,
            int(keep.sum()),
            splits,
            doc[piece_kept],
            start[piece_kept],
            plan.length[piece_kept],
            plan.dropped_tokens,
            plan.empty_documents,
            options.algorithm,
        )


def _rows_kept(plan: PackPlan, free_limit: int, max_carry: int) -> np.ndarray:
    """bool (num_rows,): the rows finished now; the others (the emptiest, free >= ``free_limit`` tokens, at most
    ``max_carry`` pieces in all) go into the next group."""
    slots = -(-plan.length.astype(np.int64) // plan.align) * plan.align
    fill = np.add.reduceat(slots, plan.row_splits[:-1]) if plan.num_pieces else np.zeros(plan.num_rows, np.int64)
    loose = np.flatnonzero(plan.ctx - fill >= free_limit)
    loose = loose[np.argsort(fill[loose], kind="stable")]  # emptiest first
    pieces = np.cumsum(np.diff(plan.row_splits)[loose])
    loose = loose[pieces <= max_carry]
    keep = np.ones(plan.num_rows, bool)
    keep[loose] = False
    return keep


def size_histogram(length: np.ndarray, ctx: int, align: int) -> np.ndarray:
    """int64 (ctx // align + 1,): pieces of each size in units of ``align`` tokens (summable across groups)."""
    units = -(-np.asarray(length, np.int64) // align)
    return np.bincount(units, minlength=ctx // align + 1).astype(np.int64)


def lower_bound_rows(histogram: np.ndarray, kept_tokens: int, ctx: int, max_segments: int | None = None) -> int:
    """max(L1, L2, ceil(pieces / max_segments)): rows no packing of these pieces can go below. ``histogram[s]``
    pieces take ``s`` units (capacity ``C = len(histogram) - 1``); L1 = ceil(kept_tokens / ctx); L2 (Martello &
    Toth 1990), for every k in [0, C/2] at once, O(C): the pieces above C - k and those in (C/2, C - k] (a row
    each), plus the room the pieces in [k, C/2] need beyond those rows' free space."""
    hist = np.asarray(histogram, np.int64)
    cap = hist.shape[0] - 1
    l1 = -(-int(kept_tokens) // ctx)
    pieces = int(hist.sum())
    bound = max(l1, -(-pieces // max_segments) if max_segments else 0)
    if cap < 1 or pieces == 0:
        return bound
    sizes = np.arange(cap + 1, dtype=np.int64)
    count_le = np.cumsum(hist)  # pieces of size <= s
    units_le = np.cumsum(hist * sizes)  # units of pieces of size <= s
    half = cap // 2
    k = np.arange(0, half + 1, dtype=np.int64)
    n1 = pieces - count_le[cap - k]  # size > C - k
    n2 = count_le[cap - k] - count_le[half]  # C/2 < size <= C - k
    u2 = units_le[cap - k] - units_le[half]
    below_k = np.where(k > 0, units_le[np.maximum(k - 1, 0)], 0)
    u3 = units_le[half] - below_k  # k <= size <= C/2
    need = np.maximum(0, -(-(u3 - (n2 * cap - u2)) // cap))
    return max(bound, int((n1 + n2 + need).max()))
