"""How many rows a packing takes, without making the plan: the same kernels as :func:`pack_lengths`, counting.

:func:`count_rows` runs a packer of :mod:`~datatools.kernels.packing.planners` with no per-piece output, so it
gives exactly ``pack_lengths(...)``'s ``num_rows``, ``num_pieces`` and largest ``pieces_per_row`` (with
``overflow="split"``, ``align=1``) in the packer's working memory alone: on piece sizes (input order: 4 bytes a
piece), or for the order-free ``*_decreasing`` packers on a histogram of the sizes (O(ctx) input, equal pieces
placed in bulk). What the padding analyzer (:mod:`datatools.analysis.padding`) reports for every strategy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from datatools.base.checks import MAX_CTX, MAX_WINDOW, as_lengths, check_choice, check_int, short_repr
from datatools.kernels.packing.pieces import decreasing_runs, piece_histogram, piece_sizes
from datatools.kernels.packing.plan import ALGORITHMS
from datatools.kernels.packing.planners import (
    NO_ROWS,
    NO_RUNS,
    best_fit,
    best_fit_resume,
    best_fit_state,
    capped_decreasing,
    concat_split,
    concat_split_count,
    first_fit,
    first_fit_resume,
    first_fit_state,
    next_fit,
    next_fit_resume,
    next_fit_state,
    worth_dealing,
)

IN_ORDER = ("next_fit", "first_fit", "best_fit", "concat_split")  # need the input order, not a histogram


@dataclass(frozen=True)
class PackCount:
    """What packing some documents comes to, as :func:`pack_lengths`' plan would hold it.

    Attributes:
      rows: rows of ``ctx`` tokens (``PackPlan.num_rows``).
      pieces: pieces placed (``PackPlan.num_pieces``: documents, and the ctx-sized parts of longer ones).
      max_pieces_per_row: the most pieces one row holds (``PackPlan.pieces_per_row.max()``; 0 when empty).
      cut_documents: ``concat_split`` only: documents cut across rows (0 for the other packers, which cut only
        documents longer than ctx).
    """

    rows: int
    pieces: int
    max_pieces_per_row: int
    cut_documents: int = 0


def count_rows(
    ctx: int,
    algorithm: str,
    *,
    lengths=None,
    sizes=None,
    histogram=None,
    max_segments: int | None = None,
    window: int | None = None,
) -> PackCount:
    """The rows ``pack_lengths(lengths, ctx, algorithm=..., max_segments=..., window=...)`` makes, counted.

    Give exactly one of:
      lengths: tokens per document (documents longer than ctx are split into ctx-sized pieces).
      sizes: int32 piece sizes in input order, each in [1, ctx] (:func:`piece_sizes` of the lengths): computed
        once, shared by several counts.
      histogram: int (ctx + 1,): ``histogram[s]`` pieces of ``s`` tokens (:func:`piece_histogram`; index 0 is
        ignored). Only for ``first_fit_decreasing`` / ``best_fit_decreasing``, which do not depend on the order.

    Args:
      ctx: row length (tokens).
      algorithm: one of :data:`ALGORITHMS` (``concat_split`` takes ``lengths`` only).
      max_segments: at most this many pieces in one row; None for no cap.
      window: ``first_fit`` / ``best_fit``: open rows, as :func:`pack_lengths` (ignored by the others).

    Raises:
      ValueError: a bad ctx, algorithm, cap or window, not exactly one input, or an input that is not what it
        should be (named).
    """
    ctx = check_int(ctx, "ctx", minimum=1, maximum=MAX_CTX)
    check_choice(algorithm, "algorithm", ALGORITHMS)
    seg = 0 if max_segments is None else check_int(max_segments, "max_segments", minimum=1, maximum=MAX_CTX)
    win = 0 if window is None else check_int(window, "window", minimum=1, maximum=MAX_WINDOW)
    given = [name for name, v in (("lengths", lengths), ("sizes", sizes), ("histogram", histogram)) if v is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of lengths, sizes, histogram; got {', '.join(given) or 'none'}")
    if algorithm == "concat_split":
        if lengths is None:
            raise ValueError("concat_split counts on lengths (documents in order), not on pieces")
        lengths = as_lengths(lengths)
        none = np.zeros(0, np.int64)
        pieces, rows, most, cut = concat_split(lengths, ctx, 1, seg, none, none, NO_ROWS, none, False)
        return PackCount(int(rows), int(pieces), int(most), int(cut))
    if histogram is not None:
        if algorithm in IN_ORDER:
            raise ValueError(f"{algorithm} depends on the input order: count it on lengths or sizes, not a histogram")
        return _count_decreasing(_checked_histogram(histogram, ctx), ctx, algorithm, seg)
    if lengths is not None:
        lengths = as_lengths(lengths)
        if algorithm.endswith("_decreasing"):
            return _count_decreasing(piece_histogram(lengths, ctx), ctx, algorithm, seg)
        sizes = piece_sizes(lengths, ctx)
    sizes = _checked_sizes(sizes, ctx)
    if algorithm.endswith("_decreasing"):
        return _count_decreasing(np.bincount(sizes, minlength=ctx + 1).astype(np.int64), ctx, algorithm, seg)
    n = int(sizes.shape[0])
    if algorithm == "next_fit":
        rows, most = next_fit(sizes, ctx, seg, NO_ROWS)
    elif algorithm == "first_fit":
        rows, most = first_fit(sizes, NO_RUNS, ctx, seg, win, n, NO_ROWS)
    else:
        rows, most = best_fit(sizes, NO_RUNS, ctx, seg, win, n, NO_ROWS, NO_ROWS, NO_ROWS)
    return PackCount(int(rows), n, int(most))


def count_rows_chunked(
    ctx: int,
    algorithm: str,
    chunks: Iterable,
    *,
    max_segments: int | None = None,
    window: int | None = None,
) -> PackCount:
    """:func:`count_rows` of the concatenation of ``chunks`` (tokens per document, in order), exactly, holding one
    chunk at a time: the in-order packers carry their state (open rows, window) from chunk to chunk
    (``*_resume`` kernels of :mod:`~datatools.kernels.packing.planners`), the decreasing ones add up a histogram.
    What counts 10^9 documents read a slice at a time from a memory-mapped file.

    ``first_fit`` / ``best_fit`` need a ``window`` here (unbounded, they would provision a row per piece of the
    whole input). Raises ValueError as :func:`count_rows`, naming a bad chunk's index.
    """
    ctx = check_int(ctx, "ctx", minimum=1, maximum=MAX_CTX)
    check_choice(algorithm, "algorithm", ALGORITHMS)
    seg = 0 if max_segments is None else check_int(max_segments, "max_segments", minimum=1, maximum=MAX_CTX)
    win = 0 if window is None else check_int(window, "window", minimum=1, maximum=MAX_WINDOW)
    if algorithm in ("first_fit", "best_fit") and not win:
        raise ValueError(f"{algorithm} counted by chunks needs a window (open rows); got None")
    pieces = 0
    if algorithm.endswith("_decreasing"):
        histogram = np.zeros(ctx + 1, np.int64)
        for i, chunk in enumerate(chunks):
            histogram += piece_histogram(as_lengths(chunk, f"chunk {i}"), ctx)
        return _count_decreasing(histogram, ctx, algorithm, seg)
    if algorithm == "concat_split":
        cs = np.zeros(6, np.int64)
        cs[2] = ctx
        for i, chunk in enumerate(chunks):
            concat_split_count(as_lengths(chunk, f"chunk {i}"), ctx, seg, cs)
        return PackCount(int(cs[1]), int(cs[0]), int(cs[4]), int(cs[5]))
    if algorithm == "next_fit":
        state = next_fit_state()
        run = lambda sizes: next_fit_resume(sizes, ctx, seg, state, NO_ROWS)  # noqa: E731
    elif algorithm == "first_fit":
        tree, segs, state = first_fit_state(ctx, win, 0)
        run = lambda sizes: first_fit_resume(sizes, NO_RUNS, ctx, seg, win, tree, segs, state, NO_ROWS)  # noqa: E731
    else:
        tree, head, below, segs, free, state = best_fit_state(ctx, win, 0)
        run = lambda sizes: best_fit_resume(  # noqa: E731
            sizes, NO_RUNS, ctx, seg, win, tree, head, below, segs, free, state, NO_ROWS
        )
    for i, chunk in enumerate(chunks):
        sizes = piece_sizes(as_lengths(chunk, f"chunk {i}"), ctx)
        pieces += int(sizes.shape[0])
        run(sizes)
    if algorithm == "next_fit":
        return PackCount(int(state[0]), pieces, int(state[3]))
    return PackCount(int(state[0] + state[1]), pieces, int(state[2]))


def _count_decreasing(histogram: np.ndarray, ctx: int, algorithm: str, seg: int) -> PackCount:
    """First/best fit decreasing (and the capped dealing, when it wins) from a size histogram."""
    sizes, runs = decreasing_runs(histogram)
    pieces = int(runs.sum())
    units = int((sizes.astype(np.int64) * runs).sum())
    # without a cap, any-fit packers never leave two rows at most half full, so rows <= 2 * lower bound + 1;
    # with a cap, up to one row per piece
    max_rows = pieces if seg else min(pieces, 2 * -(-units // ctx) + 1)
    if algorithm == "first_fit_decreasing":
        rows, most = first_fit(sizes, runs, ctx, seg, 0, max_rows, NO_ROWS)
    else:
        rows, most = best_fit(sizes, runs, ctx, seg, 0, max_rows, NO_ROWS, NO_ROWS, NO_ROWS)
    if seg and worth_dealing(int(rows), units, pieces, ctx, seg):
        dealt_rows, dealt_most = capped_decreasing(sizes, runs, ctx, seg)
        if dealt_rows < rows:
            rows, most = dealt_rows, dealt_most
    return PackCount(int(rows), pieces, int(most))


def _checked_sizes(sizes, ctx: int) -> np.ndarray:
    arr = np.asarray(sizes)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ValueError(f"sizes must be a 1-D integer array of piece sizes, got {short_repr(sizes)}")
    if arr.size and (int(arr.min()) < 1 or int(arr.max()) > ctx):
        bad = int(arr.min()) if int(arr.min()) < 1 else int(arr.max())
        raise ValueError(f"sizes must lie in [1, ctx={ctx}] (pieces of at most ctx tokens), got {bad}")
    return np.ascontiguousarray(arr, dtype=np.int32)


def _checked_histogram(histogram, ctx: int) -> np.ndarray:
    arr = np.asarray(histogram)
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or arr.shape[0] != ctx + 1:
        raise ValueError(
            f"histogram must be ctx + 1 = {ctx + 1} integer counts (pieces of each size 0..ctx), "
            f"got {short_repr(histogram)}"
        )
    if arr.size and int(arr.min()) < 0:
        raise ValueError(f"histogram counts must be >= 0, got {int(arr.min())}")
    return np.ascontiguousarray(arr, dtype=np.int64)
