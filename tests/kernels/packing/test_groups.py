"""Grouped packing (bounded memory) and the plan encoding: properties against the single in-memory plan."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools.kernels.packing import ALGORITHMS, PackOptions, pack_lengths
from datatools.kernels.packing.groups import lower_bound_rows, pack_in_groups, size_histogram
from datatools.kernels.packing.plan_format import (
    gather_rows,
    lengths_identity,
    piece_dtypes,
    piece_stats,
    smallest_uint,
)


def _joined(parts):
    splits = [np.zeros(1, np.int64)]
    pieces = 0
    for p in parts:
        splits.append(p.row_splits[1:] + pieces)
        pieces += p.num_pieces
    cat = lambda name: np.concatenate([getattr(p, name) for p in parts])  # noqa: E731
    return np.concatenate(splits), cat("doc"), cat("start"), cat("length")


def _check_valid(lengths, ctx, align, max_segments, splits, doc, start, length):
    """Every token of every document in exactly one piece; rows hold <= ctx aligned tokens, <= max_segments."""
    order = np.lexsort((start, doc))
    d, s, n = doc[order], start[order], length[order].astype(np.int64)
    first = np.r_[True, d[1:] != d[:-1]][: d.size]
    assert (s[first] == 0).all()
    assert (s[~first] == (s + n)[np.flatnonzero(~first) - 1]).all()  # contiguous pieces
    assert (np.bincount(d, weights=n, minlength=lengths.size) == lengths).all()
    slots = -(-length.astype(np.int64) // align) * align
    fill = np.add.reduceat(slots, splits[:-1]) if slots.size else np.zeros(0)
    assert (fill <= ctx).all() and (np.diff(splits) >= 1).all()
    if max_segments and splits.size > 1:
        assert np.diff(splits).max() <= max_segments


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 700), min_size=1, max_size=300),
    ctx=st.sampled_from([64, 128, 256]),
    group=st.integers(1, 80),
    algorithm=st.sampled_from(ALGORITHMS),
    align=st.sampled_from([1, 8]),
    max_segments=st.sampled_from([None, 3]),
)
def test_grouped_plans_keep_every_token_once(lengths, ctx, group, algorithm, align, max_segments):
    lengths = np.asarray(lengths, np.int64)
    parts = list(pack_in_groups(lengths, PackOptions(ctx, algorithm, max_segments, align), group_docs=group))
    splits, doc, start, length = _joined(parts)
    _check_valid(lengths, ctx, align, max_segments, splits, doc, start, length)
    assert sum(p.empty_documents for p in parts) == int((lengths == 0).sum())
    rows = len(splits) - 1
    bound = lower_bound_rows(size_histogram(length, ctx, align), int(length.sum()), ctx, max_segments)
    assert rows >= bound  # a lower bound is one


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 900), min_size=1, max_size=200),
    ctx=st.sampled_from([100, 256]),
    algorithm=st.sampled_from(ALGORITHMS),
)
def test_one_group_is_the_in_memory_plan(lengths, ctx, algorithm):
    lengths = np.asarray(lengths, np.int64)
    (part,) = pack_in_groups(lengths, PackOptions(ctx, algorithm), group_docs=len(lengths))
    whole = pack_lengths(lengths, ctx, algorithm=algorithm)
    for name in ("row_splits", "doc", "start", "length"):
        np.testing.assert_array_equal(getattr(part, name), getattr(whole, name), err_msg=name)


def test_small_groups_stay_within_a_tenth_of_a_percent_of_the_bound():
    """Groups of 2,000 documents (50 groups), their loose rows carried forward: rows <= 1.001 * max(L1, L2)."""
    rng = np.random.default_rng(7)
    lengths = np.maximum(1, rng.lognormal(np.log(230) - 0.5, 1.0, 100_000)).astype(np.int64)
    parts = list(pack_in_groups(lengths, PackOptions(2048), group_docs=2_000))
    splits, doc, start, length = _joined(parts)
    _check_valid(lengths, 2048, 1, None, splits, doc, start, length)
    bound = lower_bound_rows(size_histogram(length, 2048, 1), int(length.sum()), 2048)
    assert bound >= -(-int(lengths.sum()) // 2048)
    assert len(splits) - 1 <= 1.001 * bound


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 20), min_size=1, max_size=12))
def test_l2_bound_never_exceeds_the_optimum(sizes):
    """Against brute force: the fewest rows of capacity 20 any assignment reaches is >= the bound."""
    cap = 20
    best = len(sizes)

    def place(i, fills):
        nonlocal best
        if len(fills) >= best:
            return
        if i == len(sizes):
            best = len(fills)
            return
        for j in range(len(fills)):
            if fills[j] + sizes[i] <= cap:
                fills[j] += sizes[i]
                place(i + 1, fills)
                fills[j] -= sizes[i]
        place(i + 1, fills + [sizes[i]])

    place(0, [])
    hist = np.bincount(sizes, minlength=cap + 1)
    assert lower_bound_rows(hist, sum(sizes), cap) <= best


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 3000), min_size=1, max_size=200),
    rows=st.lists(st.integers(0, 10**6), max_size=30),
    ctx=st.sampled_from([64, 512]),
)
def test_encoded_rows_read_back(lengths, rows, ctx):
    lengths = np.asarray(lengths, np.int64)
    plan = pack_lengths(lengths, ctx)
    pieces, max_start, _ = piece_stats(lengths, ctx, "split")
    assert pieces == plan.num_pieces and max_start == (int(plan.start.max()) if plan.num_pieces else 0)
    dt = piece_dtypes(len(lengths), pieces, max_start, ctx)
    enc = (
        plan.row_splits.astype(dt["row_starts"]),
        plan.doc.astype(dt["doc"]),
        plan.start.astype(dt["start"]),
        plan.length.astype(dt["length"]),
    )
    if plan.num_rows == 0:
        return
    rows = np.asarray(rows, np.int64) % plan.num_rows
    got = gather_rows(*enc, rows, ctx=ctx, align=1, algorithm=plan.algorithm)
    assert got.num_rows == rows.size
    for i, r in enumerate(rows):
        assert got.row(i) == plan.row(int(r))


def test_identity_is_the_crc_of_int64_lengths_whatever_the_dtype():
    import zlib

    lengths = np.arange(1000, dtype=np.uint16)
    ident = lengths_identity(lengths)
    assert ident == {
        "documents": 1000,
        "tokens": int(lengths.sum()),
        "lengths_crc32": zlib.crc32(lengths.astype(np.int64).tobytes()),
    }
    assert smallest_uint(255) == np.uint8 and smallest_uint(256) == np.uint16 and smallest_uint(2**32) == np.uint64
