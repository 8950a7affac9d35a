"""count_rows runs the packers of pack_lengths without the plan: its figures are the plan's, for every algorithm."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools.kernels.packing import (
    ALGORITHMS,
    PackOptions,
    count_rows,
    count_rows_chunked,
    count_windows,
    pack_lengths,
    piece_histogram,
    piece_sizes,
)

lengths_st = st.lists(st.integers(0, 700), min_size=0, max_size=120)


def plan_figures(plan):
    per_row = plan.pieces_per_row
    return plan.num_rows, plan.num_pieces, int(per_row.max()) if plan.num_rows else 0


@settings(max_examples=150, deadline=None)
@given(
    lengths=lengths_st,
    ctx=st.integers(1, 300),
    algorithm=st.sampled_from(ALGORITHMS),
    cap=st.one_of(st.none(), st.integers(1, 6)),
    window=st.one_of(st.none(), st.integers(1, 8)),
)
def test_counts_equal_the_plans(lengths, ctx, algorithm, cap, window):
    """Rows, pieces and the fullest row's pieces: the count on lengths equals pack_lengths' plan, for every
    algorithm, cap and (first/best fit) window; on piece sizes and (decreasing) on a histogram too."""
    arr = np.array(lengths, np.int64)
    windowed = algorithm in ("first_fit", "best_fit")
    plan = pack_lengths(arr, ctx, algorithm=algorithm, max_segments=cap, window=window if windowed else None)
    count = count_rows(ctx, algorithm, lengths=arr, max_segments=cap, window=window if windowed else None)
    assert (count.rows, count.pieces, count.max_pieces_per_row) == plan_figures(plan)
    if algorithm == "concat_split":
        docs_in_rows = np.unique(
            np.stack([plan.doc, np.repeat(np.arange(plan.num_rows), plan.pieces_per_row)]), axis=1
        )[0]
        assert count.cut_documents == int(np.count_nonzero(np.bincount(docs_in_rows) > 1))
        return
    sizes = piece_sizes(arr, ctx)
    assert count == count_rows(ctx, algorithm, sizes=sizes, max_segments=cap, window=window if windowed else None)
    if algorithm.endswith("_decreasing"):
        assert count == count_rows(ctx, algorithm, histogram=piece_histogram(arr, ctx), max_segments=cap)


@settings(max_examples=200, deadline=None)
@given(
    lengths=lengths_st,
    cuts=st.lists(st.integers(0, 120), max_size=6),
    ctx=st.integers(1, 300),
    algorithm=st.sampled_from(ALGORITHMS),
    cap=st.one_of(st.none(), st.integers(1, 6)),
    window=st.integers(1, 8),
)
def test_counting_by_chunks_equals_counting_at_once(lengths, cuts, ctx, algorithm, cap, window):
    """The in-order packers carry their open rows (and window) from chunk to chunk, the decreasing ones add up
    histograms: split anywhere (empty chunks too), the counts are exactly count_rows' on the whole."""
    arr = np.array(lengths, np.int64)
    chunks = np.split(arr, sorted(min(c, arr.size) for c in cuts))
    windowed = algorithm in ("first_fit", "best_fit")
    whole = count_rows(ctx, algorithm, lengths=arr, max_segments=cap, window=window if windowed else None)
    chunked = count_rows_chunked(ctx, algorithm, iter(chunks), max_segments=cap, window=window)
    assert chunked == whole


def test_chunked_first_and_best_fit_need_a_window():
    with pytest.raises(ValueError, match="needs a window"):
        count_rows_chunked(64, "best_fit", [np.array([5, 6])])


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=1, max_size=150),
    ctx=st.integers(8, 300),
    algorithm=st.sampled_from(["first_fit", "best_fit"]),
    window=st.integers(1, 6),
)
def test_a_windowed_plan_holds_every_token_once_and_fits_its_rows(lengths, ctx, algorithm, window):
    """A plan with a window of open rows is a plan: every token of every document in one piece, rows <= ctx."""
    arr = np.array(lengths, np.int64)
    plan = pack_lengths(arr, ctx, algorithm=algorithm, window=window)
    fill = np.add.reduceat(plan.length.astype(np.int64), plan.row_splits[:-1])
    assert fill.max() <= ctx and plan.kept_tokens == arr.sum()
    assert np.array_equal(np.bincount(plan.doc, weights=plan.length, minlength=arr.size), arr)


def test_a_histogram_counts_what_the_lengths_count_at_scale():
    """The bulk placement of equal pieces (a few runs of many pieces) gives the one-at-a-time plan's rows."""
    rng = np.random.default_rng(0)
    lengths = rng.lognormal(6, 1, 200_000).astype(np.int64) + 1
    for algorithm in ("first_fit_decreasing", "best_fit_decreasing"):
        for cap in (None, 4):
            plan = pack_lengths(lengths, 2048, algorithm=algorithm, max_segments=cap)
            count = count_rows(2048, algorithm, histogram=piece_histogram(lengths, 2048), max_segments=cap)
            assert (count.rows, count.pieces, count.max_pieces_per_row) == plan_figures(plan)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(ctx=8, algorithm="best_fit"), "exactly one of lengths, sizes, histogram; got none"),
        (dict(ctx=8, algorithm="best_fit", lengths=[3], sizes=[3]), "got lengths, sizes"),
        (dict(ctx=8, algorithm="best_fit", histogram=[0] * 9), "depends on the input order"),
        (dict(ctx=8, algorithm="concat_split", sizes=[3]), "concat_split counts on lengths"),
        (dict(ctx=8, algorithm="first_fit", sizes=[3, 9]), "got 9"),
        (dict(ctx=8, algorithm="first_fit", sizes=[0]), "got 0"),
        (dict(ctx=8, algorithm="best_fit_decreasing", histogram=[1, 2]), "ctx + 1 = 9"),
        (dict(ctx=8, algorithm="best_fit_decreasing", histogram=[0, -1] + [0] * 7), "got -1"),
        (dict(ctx=8, algorithm="worst_fit", lengths=[3]), "worst_fit"),
        (dict(ctx=0, algorithm="best_fit", lengths=[3]), "ctx"),
        (dict(ctx=8, algorithm="best_fit", lengths=[3], window=0), "window"),
    ],
)
def test_bad_input_is_a_value_error_naming_it(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("+", r"\+")):
        count_rows(**kwargs)


def test_a_window_on_a_packer_without_one_is_refused():
    with pytest.raises(ValueError, match="window applies to first_fit and best_fit only"):
        pack_lengths([3, 4], 8, algorithm="best_fit_decreasing", window=2)


@settings(max_examples=100, deadline=None)
@given(
    lengths=lengths_st,
    cuts=st.lists(st.integers(0, 120), max_size=8),
    ctx=st.integers(1, 300),
    algorithm=st.sampled_from(ALGORITHMS),
    cap=st.one_of(st.none(), st.integers(1, 6)),
    window=st.one_of(st.none(), st.integers(1, 8)),
)
def test_window_counts_equal_each_windows_plan(lengths, cuts, ctx, algorithm, cap, window):
    """count_windows (one kernel call for the decreasing packers): each window's rows are those of its own plan,
    for every algorithm, cap and window, empty windows included."""
    arr = np.array(lengths, np.int64)
    bounds = np.array(sorted({0, arr.shape[0], *(min(c, arr.shape[0]) for c in cuts)}) or [0], np.int64)
    if algorithm == "concat_split":
        cap = None
    windowed = algorithm in ("first_fit", "best_fit")
    win = window if windowed else None
    rows = count_windows(arr, bounds, PackOptions(ctx, algorithm, cap, window=win))
    want = [
        pack_lengths(arr[a:b], ctx, algorithm=algorithm, max_segments=cap, window=win).num_rows
        for a, b in zip(bounds[:-1], bounds[1:])
    ]
    np.testing.assert_array_equal(rows, want)
    with pytest.raises(ValueError, match="bounds must run from 0"):
        count_windows(arr, bounds[:-1] if bounds.shape[0] > 1 else [1], PackOptions(ctx, algorithm))
    with pytest.raises(ValueError, match="count_windows counts align=1, overflow='split'"):
        count_windows(arr, bounds, PackOptions(ctx, algorithm, overflow="truncate"))
