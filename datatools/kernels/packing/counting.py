"""How many rows a packing takes, without making the plan: the same kernels as :func:`pack_lengths`, counting, in
the packer's working memory alone (4 bytes a piece, or O(ctx) on a size histogram for the decreasing packers).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numba
import numpy as np

from datatools.base.checks import as_lengths, short_repr
from datatools.kernels.packing.algorithms import Algorithm, PackOptions
from datatools.kernels.packing.pieces import decreasing_runs, piece_histogram, piece_sizes, split_histogram
from datatools.kernels.packing.planners import NO_ROWS, NO_RUNS, best_fit, capped_decreasing, first_fit, worth_dealing


@dataclass(frozen=True)
class PackCount:
    """What packing some documents comes to, as :func:`pack_lengths`' plan would hold it: ``rows``
    (``num_rows``), ``pieces`` (``num_pieces``), ``max_pieces_per_row`` (0 when empty) and ``cut_documents``
    (``concat_split`` only: documents cut across rows; 0 for the other packers)."""

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
    """Exactly the ``num_rows``, ``num_pieces`` and largest ``pieces_per_row`` of ``pack_lengths(lengths, ctx,
    algorithm=..., max_segments=..., window=...)`` (``overflow="split"``, ``align=1``), counted.

    Args:
      lengths: tokens per document; or
      sizes: int32 piece sizes in input order, each in [1, ctx] (:func:`piece_sizes`, shared by several counts); or
      histogram: int (ctx + 1,) pieces of each size (:func:`piece_histogram`), for the decreasing packers only.
        Exactly one of the three (``concat_split`` takes ``lengths`` only).

    Raises:
      ValueError: a bad ctx, algorithm, cap or window, not exactly one input, or a bad input (named).
    """
    o = PackOptions(ctx, algorithm, max_segments, window=window)
    algo, ctx, seg = o.packer, o.ctx, o.seg
    given = [name for name, v in (("lengths", lengths), ("sizes", sizes), ("histogram", histogram)) if v is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of lengths, sizes, histogram; got {', '.join(given) or 'none'}")
    if algo.cuts_documents:
        if lengths is None:
            raise ValueError(f"{algorithm} counts on lengths (documents in order), not on pieces")
        assert algo.count_chunks is not None
        return PackCount(*algo.count_chunks([as_lengths(lengths)], ctx, seg, 0))
    if histogram is not None:
        if not algo.decreasing:
            raise ValueError(f"{algorithm} depends on the input order: count it on lengths or sizes, not a histogram")
        return _count_decreasing(_checked_histogram(histogram, ctx), ctx, algo, seg)
    if lengths is not None:
        lengths = as_lengths(lengths)
        if algo.decreasing:
            return _count_decreasing(piece_histogram(lengths, ctx), ctx, algo, seg)
        sizes = piece_sizes(lengths, ctx)
    sizes = _checked_sizes(sizes, ctx)
    if algo.decreasing:
        return _count_decreasing(np.bincount(sizes, minlength=ctx + 1).astype(np.int64), ctx, algo, seg)
    n = int(sizes.shape[0])
    assert algo.place is not None
    rows, most = algo.place(sizes, NO_RUNS, ctx, seg, o.win, n, NO_ROWS)
    return PackCount(int(rows), n, int(most))


def count_rows_chunked(
    ctx: int,
    algorithm: str,
    chunks: Iterable,
    *,
    max_segments: int | None = None,
    window: int | None = None,
) -> PackCount:
    """:func:`count_rows` of the concatenation of ``chunks`` (tokens per document), exactly, holding one chunk at a
    time (state carried from chunk to chunk, or a histogram summed). ``first_fit`` / ``best_fit`` need a ``window``
    here (unbounded, they would provision a row per piece). ValueError as :func:`count_rows`, naming the chunk."""
    o = PackOptions(ctx, algorithm, max_segments, window=window)
    algo, ctx, seg = o.packer, o.ctx, o.seg
    if algo.windowed and not o.win:
        raise ValueError(f"{algorithm} counted by chunks needs a window (open rows); got None")
    lengths = (as_lengths(chunk, f"chunk {i}") for i, chunk in enumerate(chunks))
    if algo.decreasing:
        histogram = sum((piece_histogram(x, ctx) for x in lengths), np.zeros(ctx + 1, np.int64))
        return _count_decreasing(histogram, ctx, algo, seg)
    assert algo.count_chunks is not None
    return PackCount(*algo.count_chunks(lengths, ctx, seg, o.win))


def _count_decreasing(histogram: np.ndarray, ctx: int, algo: Algorithm, seg: int) -> PackCount:
    """First/best fit decreasing from a size histogram."""
    best = algo.place is not first_fit
    if seg:
        rows, pieces, most = _count_capped(histogram, ctx, seg, best)
    else:
        rows, pieces, most = (_count_best if best else _count_first)(histogram, ctx, seg)
    return PackCount(int(rows), int(pieces), int(most))


# One kernel per packer and cap, not one with flags: numba compiles every branch of a kernel, so a flag for best
# (else first) fit and a cap compiled first fit and the capped dealing into every count (~13 of the ~30 s a first
# streaming batch spent compiling on a cold cache). The window is an int64 0 (np.int64), not a literal 0: a literal
# argument compiles the placer a second time, beside the plans' int64 window. The glue (_runs_of, _count_best, and
# best_fit within it) is inlined by numba: as kernels of their own, each compiled its callees again into its code,
# ~1.5 s of CPU on a cold cache before a first streaming batch (count_windows is on that path).


@numba.njit(cache=True, nogil=True, inline="always")
def _runs_of(histogram, ctx, seg):
    """(sizes, runs, pieces, units, most rows) of a size histogram, largest first: without a cap, any-fit packers
    never leave two rows at most half full, so rows <= 2 * lower bound + 1; with a cap, up to one row per piece."""
    sizes, runs = decreasing_runs(histogram)
    pieces = np.int64(0)  # not a literal 0: a call given it would compile the callee for Literal[int](0)
    units = np.int64(0)
    for j in range(sizes.shape[0]):  # a loop, not array expressions: numba compiles those (astype, *, sum) apart
        pieces += runs[j]
        units += np.int64(sizes[j]) * runs[j]
    max_rows = pieces if seg else min(pieces, 2 * -(-units // ctx) + 1)
    return sizes, runs, pieces, units, max_rows


@numba.njit(cache=True, nogil=True, inline="always")
def _count_best(histogram, ctx, seg):
    """(rows, pieces, most pieces in a row) of best fit decreasing of a size histogram, no cap dealing."""
    sizes, runs, pieces, _, max_rows = _runs_of(histogram, ctx, seg)
    none = np.zeros(0, np.int32)
    rows, most = best_fit(sizes, runs, ctx, seg, np.int64(0), max_rows, none, none, none)
    return rows, pieces, most


@numba.njit(cache=True, nogil=True)
def _count_first(histogram, ctx, seg):
    """As :func:`_count_best`, first fit decreasing."""
    sizes, runs, pieces, _, max_rows = _runs_of(histogram, ctx, seg)
    rows, most = first_fit(sizes, runs, ctx, seg, np.int64(0), max_rows, np.zeros(0, np.int32))
    return rows, pieces, most


@numba.njit(cache=True, nogil=True)
def _count_capped(histogram, ctx, seg, best):
    """As :func:`_count_best` (``best``, else first fit) under a cap of ``seg`` pieces a row, or the capped dealing
    when it needs fewer rows."""
    sizes, runs, pieces, units, _ = _runs_of(histogram, ctx, seg)
    rows, _, most = _count_best(histogram, ctx, seg) if best else _count_first(histogram, ctx, seg)
    if worth_dealing(rows, units, pieces, ctx, seg):
        dealt_rows, dealt_most = capped_decreasing(sizes, runs, ctx, seg, pieces, units, np.zeros(0, np.int32))
        if dealt_rows < rows:
            rows, most = dealt_rows, dealt_most
    return rows, pieces, most


def count_windows(lengths, bounds, options: PackOptions) -> np.ndarray:
    """int64 ``count_rows(ctx, algorithm, lengths=lengths[bounds[w]:bounds[w + 1]], ...).rows`` of every window
    ``w`` (``bounds``: non-decreasing, 0 to the end) packed with ``options`` (``align`` 1, ``overflow`` split, as
    :func:`count_rows`); the decreasing packers in one kernel call (~0.3 ms a window saved)."""
    o = options
    if o.align != 1 or o.overflow != "split":
        raise ValueError(f"count_windows counts align=1, overflow='split'; got align={o.align}, {o.overflow!r}")
    lengths = as_lengths(lengths)
    bounds = np.asarray(bounds, np.int64)
    if bounds.ndim != 1 or bounds.shape[0] < 1 or bounds[0] != 0 or bounds[-1] != lengths.shape[0]:
        raise ValueError(f"bounds must run from 0 to {lengths.shape[0]} (the lengths), got {short_repr(bounds)}")
    if np.any(np.diff(bounds) < 0):
        raise ValueError(f"bounds must not decrease, got {short_repr(bounds)}")
    rows = np.zeros(bounds.shape[0] - 1, np.int64)
    if not o.packer.decreasing:
        for w in range(rows.shape[0]):
            part = lengths[bounds[w] : bounds[w + 1]]
            rows[w] = count_rows(o.ctx, o.algorithm, lengths=part, max_segments=o.max_segments, window=o.window).rows
        return rows
    best = o.packer.place is not first_fit
    if o.seg:
        _count_windows_capped(lengths, bounds, o.ctx, o.seg, best, rows)
    else:
        (_count_windows_best if best else _count_windows_first)(lengths, bounds, o.ctx, o.seg, rows)
    return rows


@numba.njit(cache=True, nogil=True)
def _count_windows_best(lengths, bounds, ctx, seg, rows):
    for w in range(rows.shape[0]):
        rows[w] = _count_best(split_histogram(lengths[bounds[w] : bounds[w + 1]], ctx), ctx, seg)[0]


@numba.njit(cache=True, nogil=True)
def _count_windows_first(lengths, bounds, ctx, seg, rows):
    for w in range(rows.shape[0]):
        rows[w] = _count_first(split_histogram(lengths[bounds[w] : bounds[w + 1]], ctx), ctx, seg)[0]


@numba.njit(cache=True, nogil=True)
def _count_windows_capped(lengths, bounds, ctx, seg, best, rows):
    for w in range(rows.shape[0]):
        rows[w] = _count_capped(split_histogram(lengths[bounds[w] : bounds[w + 1]], ctx), ctx, seg, best)[0]


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
