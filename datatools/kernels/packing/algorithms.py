"""The packing algorithms in one table (:data:`TABLE`: kernel and traits of each; every caller reads the traits here,
never from a name) and one packing's options (:class:`PackOptions`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from datatools.base.checks import (
    DEFAULT_ALGORITHM,
    MAX_CTX,
    MAX_WINDOW,
    OVERFLOW_POLICIES,
    PACK_ALGORITHMS,
    check_choice,
    check_int,
)
from datatools.kernels.packing.pieces import piece_sizes
from datatools.kernels.packing.planners import (
    NO_PIECES,
    NO_ROWS,
    NO_RUNS,
    best_fit_resume,
    best_fit_state,
    concat_split,
    concat_split_state,
    first_fit,
    first_fit_resume,
    first_fit_state,
    next_fit,
    next_fit_resume,
    next_fit_state,
)


def _next_fit(sizes, runs, capacity, max_segments, window, max_rows, row_of):
    return next_fit(sizes, capacity, max_segments, row_of)


def _best_fit(sizes, runs, capacity, max_segments, window, max_rows, row_of):
    """:func:`best_fit` from no row, as its two kernels called from here (as :func:`_best_fit_chunks` does): a
    kernel calling them would compile them again into its own code (~0.6 s of CPU on a cold cache, before a first
    batch)."""
    tree, head, below, segs, free, state = best_fit_state(capacity, window, max_rows)
    best_fit_resume(sizes, runs, capacity, max_segments, window, tree, head, below, segs, free, state, row_of)
    return int(state[0] + state[1]), int(state[2])


def _next_fit_chunks(chunks: Iterable[np.ndarray], ctx: int, max_segments: int, window: int) -> tuple[int, ...]:
    state = next_fit_state()
    for lengths in chunks:
        next_fit_resume(piece_sizes(lengths, ctx), ctx, max_segments, state, NO_ROWS)
    return int(state[0]), int(state[4]), int(state[3]), 0


def _first_fit_chunks(chunks: Iterable[np.ndarray], ctx: int, max_segments: int, window: int) -> tuple[int, ...]:
    tree, segs, state = first_fit_state(ctx, window, 0)
    for lengths in chunks:
        first_fit_resume(piece_sizes(lengths, ctx), NO_RUNS, ctx, max_segments, window, tree, segs, state, NO_ROWS)
    return int(state[0] + state[1]), int(state[3]), int(state[2]), 0


def _best_fit_chunks(chunks: Iterable[np.ndarray], ctx: int, max_segments: int, window: int) -> tuple[int, ...]:
    tree, head, below, segs, free, state = best_fit_state(ctx, window, 0)
    for lengths in chunks:
        sizes = piece_sizes(lengths, ctx)
        best_fit_resume(sizes, NO_RUNS, ctx, max_segments, window, tree, head, below, segs, free, state, NO_ROWS)
    return int(state[0] + state[1]), int(state[3]), int(state[2]), 0


def _concat_split_chunks(chunks: Iterable[np.ndarray], ctx: int, max_segments: int, window: int) -> tuple[int, ...]:
    state = concat_split_state(ctx)
    for lengths in chunks:
        concat_split(lengths, ctx, 1, max_segments, state, NO_PIECES, NO_PIECES, NO_ROWS, NO_PIECES, False)
    return int(state[1]), int(state[0]), int(state[4]), int(state[5])


@dataclass(frozen=True)
class Algorithm:
    """One packing algorithm: its kernel and what the callers need to know of it.

    Attributes:
      place: ``place(sizes, runs, capacity, max_segments, window, max_rows, row_of) -> (rows, most pieces in a
        row)`` (:mod:`~datatools.kernels.packing.planners`); None for ``concat_split``, which cuts documents.
      count_chunks: ``count_chunks(chunks of lengths, ctx, max_segments, window) -> (rows, pieces, most pieces in
        a row, documents cut)``; None for the decreasing packers (pieces largest first, counted on a histogram).
      windowed: takes a ``window`` of open rows; cuts_documents: documents concatenated and cut at row ends.
      cost: the padding analyzer's relative time per ctx; label: the name in its tables.
    """

    name: str
    place: Callable | None
    count_chunks: Callable | None
    decreasing: bool
    windowed: bool
    cuts_documents: bool
    cost: int
    label: str

    @property
    def mode(self) -> str:
        """The pipeline mode that runs it: ``planned`` (over all documents) or ``streaming`` (in input order)."""
        return "planned" if self.decreasing else "streaming"


TABLE = (
    Algorithm("next_fit", _next_fit, _next_fit_chunks, False, False, False, 2, "next fit"),
    Algorithm("first_fit", first_fit, _first_fit_chunks, False, True, False, 5, "first fit (streaming)"),
    Algorithm("best_fit", _best_fit, _best_fit_chunks, False, True, False, 6, "best fit (streaming)"),
    Algorithm("first_fit_decreasing", first_fit, None, True, False, False, 8, "first fit decreasing"),
    Algorithm("best_fit_decreasing", _best_fit, None, True, False, False, 7, "best fit decreasing"),
    Algorithm("concat_split", None, _concat_split_chunks, False, False, True, 1, "concat then split"),
)
BY_NAME = {a.name: a for a in TABLE}
ALGORITHMS = tuple(BY_NAME)
if ALGORITHMS != PACK_ALGORITHMS:  # the command line parses --algorithm from that list
    raise ImportError(f"datatools.base.checks.PACK_ALGORITHMS must be {ALGORITHMS}")


@dataclass(frozen=True)
class PackOptions:
    """One packing's options (:func:`~datatools.kernels.packing.plan.pack_lengths`), validated once, here. ``seg``
    and ``win`` are the kernels' spelling of ``max_segments`` and ``window`` (0: none)."""

    ctx: int
    algorithm: str = DEFAULT_ALGORITHM
    max_segments: int | None = None
    align: int = 1
    overflow: str = "split"
    window: int | None = None

    def __post_init__(self) -> None:
        ctx = check_int(self.ctx, "ctx", minimum=1, maximum=MAX_CTX)
        align = check_int(self.align, "align", minimum=1, maximum=MAX_CTX)
        if ctx % align:
            raise ValueError(f"align must divide ctx; got align={align}, ctx={ctx}")
        if self.max_segments is not None:
            object.__setattr__(
                self, "max_segments", check_int(self.max_segments, "max_segments", minimum=1, maximum=MAX_CTX)
            )
        check_choice(self.algorithm, "algorithm", ALGORITHMS)
        check_choice(self.overflow, "overflow", OVERFLOW_POLICIES)
        if self.window is not None:
            object.__setattr__(self, "window", check_int(self.window, "window", minimum=1, maximum=MAX_WINDOW))
        object.__setattr__(self, "ctx", ctx)
        object.__setattr__(self, "align", align)

    @property
    def packer(self) -> Algorithm:
        return BY_NAME[self.algorithm]

    @property
    def seg(self) -> int:
        return self.max_segments or 0

    @property
    def win(self) -> int:
        return self.window or 0
