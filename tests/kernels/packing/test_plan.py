"""Properties of the packing kernels and the materializer."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools import ALGORITHMS, materialize, pack_lengths

lengths_st = st.lists(st.integers(min_value=0, max_value=300), min_size=0, max_size=120)
ctx_align_st = st.sampled_from([(1, 1), (7, 1), (16, 1), (16, 4), (64, 8), (128, 1), (128, 32), (256, 16)])
overflow_st = st.sampled_from(["split", "truncate", "drop"])
max_seg_st = st.one_of(st.none(), st.integers(min_value=1, max_value=6))


def _expected_kept(lengths, ctx, overflow):
    L = np.asarray(lengths, dtype=np.int64)
    if overflow == "split":
        return L
    if overflow == "truncate":
        return np.minimum(L, ctx)
    return np.where(L > ctx, 0, L)


def check_plan(plan, lengths, ctx, align, max_segments, overflow):
    L = np.asarray(lengths, dtype=np.int64)
    kept = _expected_kept(L, ctx, overflow)
    # Conservation: every kept token of every document lies in exactly one piece.
    covered = np.zeros(int(L.sum()), dtype=np.int64)
    base = np.concatenate(([0], np.cumsum(L)))
    for d, s, n in zip(plan.doc, plan.start, plan.length):
        assert n >= 1
        assert s + n <= kept[d]
        covered[base[d] + s : base[d] + s + n] += 1
    expected = (
        np.concatenate([np.r_[np.ones(k, np.int64), np.zeros(l - k, np.int64)] for k, l in zip(kept, L)])
        if L.size
        else covered
    )
    np.testing.assert_array_equal(covered, expected)
    assert plan.kept_tokens + plan.dropped_tokens == L.sum()
    assert plan.empty_documents == int((L == 0).sum())
    # Rows: within ctx after alignment, segment cap respected, none empty.
    assert plan.row_splits[0] == 0 and plan.row_splits[-1] == plan.num_pieces
    assert np.all(np.diff(plan.row_splits) >= 1)
    off = plan.offset
    assert np.all(off % align == 0)
    assert np.all(off + plan.length <= ctx)
    for r in range(plan.num_rows):
        a, b = plan.row_splits[r], plan.row_splits[r + 1]
        if b - a > 1:  # pieces don't overlap: each starts after the previous one ends
            assert np.all(off[a + 1 : b] >= off[a : b - 1] + plan.length[a : b - 1])
        if max_segments is not None:
            assert b - a <= max_segments
    assert plan.num_rows >= plan.lower_bound_rows
    if plan.num_rows:
        assert plan.efficiency == pytest.approx(plan.kept_tokens / (plan.num_rows * ctx))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=60, deadline=None)
@given(lengths=lengths_st, ca=ctx_align_st, overflow=overflow_st, max_segments=max_seg_st)
def test_plan_conserves_tokens_and_respects_limits(algorithm, lengths, ca, overflow, max_segments):
    ctx, align = ca
    plan = pack_lengths(lengths, ctx, algorithm=algorithm, max_segments=max_segments, align=align, overflow=overflow)
    check_plan(plan, lengths, ctx, align, max_segments, overflow)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(min_value=0, max_value=80), max_size=40), ca=ctx_align_st, max_segments=max_seg_st)
def test_materialized_rows_hold_the_documents(algorithm, lengths, ca, max_segments):
    ctx, align = ca
    L = np.asarray(lengths, dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(L)))
    tokens = np.arange(1, offsets[-1] + 1, dtype=np.int64)  # token value = global index + 1, never the pad id
    plan = pack_lengths(L, ctx, algorithm=algorithm, max_segments=max_segments, align=align)
    batch = materialize(plan, tokens, offsets)
    assert all(v.dtype == np.int32 and v.shape == (plan.num_rows, ctx) for v in batch.values())
    seen = batch["tokens"][batch["segment_ids"] > 0]
    np.testing.assert_array_equal(np.sort(seen), tokens)  # every token exactly once
    assert np.all(batch["tokens"][batch["segment_ids"] == 0] == 0)
    for r in range(plan.num_rows):
        for seg, (d, s, n) in enumerate(plan.row(r), start=1):
            where = np.flatnonzero(batch["segment_ids"][r] == seg)
            assert where.size == n and where[0] % align == 0 and np.all(np.diff(where) == 1)
            np.testing.assert_array_equal(batch["tokens"][r, where], tokens[offsets[d] + s : offsets[d] + s + n])
            np.testing.assert_array_equal(batch["positions"][r, where], np.arange(s, s + n))
            np.testing.assert_array_equal(batch["loss_mask"][r, where], np.r_[np.ones(n - 1), 0])
    assert np.all(batch["loss_mask"][batch["segment_ids"] == 0] == 0)


def test_materialize_subset_of_rows_matches_full():
    rng = np.random.default_rng(1)
    L = rng.integers(1, 50, size=200)
    offsets = np.concatenate(([0], np.cumsum(L)))
    tokens = rng.integers(1, 1000, size=offsets[-1])
    plan = pack_lengths(L, 64, align=8)
    full = materialize(plan, tokens, offsets)
    rows = [5, 0, 3, 3]
    part = materialize(plan, tokens, offsets, rows)
    for k in full:
        np.testing.assert_array_equal(part[k], full[k][rows])


def test_known_small_plans():
    plan = pack_lengths([3, 5, 2, 7], 8, algorithm="first_fit")
    assert [plan.row(r) for r in range(plan.num_rows)] == [[(0, 0, 3), (1, 0, 5)], [(2, 0, 2)], [(3, 0, 7)]]
    plan = pack_lengths([3, 5, 2, 7], 8, algorithm="best_fit_decreasing")
    assert plan.num_rows == 3 and plan.row(0) == [(3, 0, 7)]
    plan = pack_lengths([5, 5, 5], 8, algorithm="concat_split")
    assert [plan.row(r) for r in range(2)] == [[(0, 0, 5), (1, 0, 3)], [(1, 3, 2), (2, 0, 5)]]
    plan = pack_lengths([20], 8, overflow="split")
    assert plan.row_splits.tolist() == [0, 1, 2, 3] and plan.length.tolist() == [8, 8, 4]
    plan = pack_lengths([20, 0, 3], 8, overflow="truncate")
    assert plan.dropped_tokens == 12 and plan.empty_documents == 1 and plan.kept_tokens == 11


def test_best_fit_beats_first_fit_choice():
    # best fit puts the 2 into the row with 2 free (row 1), first fit into row 0 (4 free)
    bf = pack_lengths([4, 6, 2, 4], 8, algorithm="best_fit")
    ff = pack_lengths([4, 6, 2, 4], 8, algorithm="first_fit")
    assert bf.num_rows == 2 and ff.num_rows == 3


def test_deterministic():
    rng = np.random.default_rng(7)
    L = rng.integers(0, 3000, size=5000)
    for algorithm in ALGORITHMS:
        a = pack_lengths(L, 1024, algorithm=algorithm, align=64)
        b = pack_lengths(L.tolist(), 1024, algorithm=algorithm, align=64)
        for name in ("row_splits", "doc", "start", "length"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_decreasing_packs_near_lower_bound():
    rng = np.random.default_rng(0)
    L = rng.lognormal(np.log(400), 1.2, size=50_000).clip(1, 8192).astype(np.int64)
    plan = pack_lengths(L, 2048)
    assert plan.num_rows <= plan.lower_bound_rows * 1.005


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(lengths=[1, 2], ctx=0), "ctx must be >= 1"),
        (dict(lengths=[1, -2], ctx=8), r"lengths\[1\] = -2 is negative"),
        (dict(lengths=[1.5], ctx=8), "is not an integer"),
        (dict(lengths=[1, float("nan")], ctx=8), "is not an integer"),
        (dict(lengths=["a"], ctx=8), "must hold integers"),
        (dict(lengths=[[1, 2]], ctx=8), "1-D"),
        (dict(lengths=[1], ctx=8, max_segments=0), "max_segments must be >= 1"),
        (dict(lengths=[1], ctx=8, align=0), "align must be >= 1"),
        (dict(lengths=[1], ctx=8, align=3), "align must divide ctx"),
        (dict(lengths=[1], ctx=8, algorithm="magic"), "algorithm must be one of"),
        (dict(lengths=[1], ctx=8, overflow="wrap"), "overflow must be one of"),
        (dict(lengths=[1, 9], ctx=8, overflow="error"), "document 1 has length 9"),
    ],
)
def test_bad_input_raises(kwargs, message):
    lengths = kwargs.pop("lengths")
    ctx = kwargs.pop("ctx")
    with pytest.raises(ValueError, match=message):
        pack_lengths(lengths, ctx, **kwargs)


def test_integral_floats_accepted_and_types_checked():
    assert pack_lengths(np.array([3.0, 4.0]), 8).kept_tokens == 7
    with pytest.raises(TypeError):
        pack_lengths([1], 8.5)
    with pytest.raises(IndexError):
        materialize(pack_lengths([1], 8), np.ones(1), np.array([0, 1]), rows=[1])


@settings(max_examples=80, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=1, max_size=200),
    ctx=st.integers(16, 400),
    cap=st.integers(1, 6),
    algorithm=st.sampled_from(["first_fit_decreasing", "best_fit_decreasing"]),
)
def test_a_binding_cap_is_dealt_and_never_worse(lengths, ctx, cap, algorithm):
    """Under a cap the decreasing packers also deal pieces over the lower-bound rows and keep the better plan:
    never more rows than the plain decreasing fit, never fewer than either bound, every piece once."""
    from datatools.kernels.packing import planners

    arr = np.minimum(np.array(lengths), ctx)  # one piece per document
    plan = pack_lengths(arr, ctx, algorithm=algorithm, max_segments=cap)
    sizes = np.sort(arr)[::-1].astype(np.int32)
    no = np.zeros(0, np.int32)
    if algorithm == "first_fit_decreasing":
        plain = planners.first_fit(sizes, planners.NO_RUNS, ctx, cap, 0, sizes.size, no)[0]
    else:
        plain = planners.best_fit(sizes, planners.NO_RUNS, ctx, cap, 0, sizes.size, no, no, no)[0]
    assert plan.num_rows <= plain
    assert plan.num_rows >= max(-(-plan.kept_tokens // ctx), -(-plan.num_pieces // cap))
    assert plan.pieces_per_row.max() <= cap
    assert plan.kept_tokens == arr.sum() and np.array_equal(np.sort(plan.doc), np.arange(arr.size))


def test_a_binding_cap_lands_near_its_bound():
    """Mean 230 tokens at ctx 1024 with at most 4 documents per row: the rows are bounded by documents / 4; plain
    decreasing fit filled rows with four large documents and left the small ones four to a row (1,472 rows for
    these 5,000 documents, 25% padding)."""
    rng = np.random.default_rng(0)
    lengths = rng.lognormal(np.log(170), np.sqrt(2 * np.log(230 / 170)), 5000).round().clip(1, 1024)
    plan = pack_lengths(lengths, 1024, max_segments=4)
    bound = max(-(-int(lengths.sum()) // 1024), -(-lengths.size // 4))
    assert plan.num_rows <= 1.07 * bound


# --------------------------------------------------------------------------- issue 21 defect 6: bad arguments


@pytest.mark.parametrize("plan", [None, "plan", {"ctx": 8}, np.zeros(3)])
def test_materialize_without_a_plan_is_a_type_error_naming_the_value(plan):
    from datatools.kernels.packing import materialize_pieces

    tokens, offsets = np.arange(8, dtype=np.int32), np.array([0, 5, 8])
    with pytest.raises(TypeError, match="plan"):
        materialize(plan, tokens, offsets)
    with pytest.raises(TypeError, match="plan"):
        materialize_pieces(plan, lambda d, s, n: tokens[:0])


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=12),
    data=st.data(),
    dtype=st.sampled_from([np.int8, np.int16, np.int32, np.int64]),
)
def test_materialize_refuses_a_negative_token_id_in_the_rows_it_builds(lengths, data, dtype):
    """Property: a negative id anywhere in the documents the rows read is a ValueError naming the id; no batch
    ever holds a negative id."""
    from datatools.kernels.packing import materialize_pieces

    lengths = np.array(lengths)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    tokens = np.arange(int(offsets[-1])).astype(dtype) % 100
    at = data.draw(st.integers(0, tokens.size - 1))
    bad = data.draw(st.integers(-100, -1))
    tokens[at] = bad
    plan = pack_lengths(lengths, 64)
    with pytest.raises(ValueError, match=str(bad)):
        materialize(plan, tokens, offsets)
    with pytest.raises(ValueError, match=str(bad)):
        materialize_pieces(
            plan,
            lambda d, s, n: np.concatenate([tokens[offsets[i] + a : offsets[i] + a + k] for i, a, k in zip(d, s, n)]),
        )


# --------------------------------------------------------------------------- issue 27: rows written into `out`


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=0, max_value=80), max_size=40),
    ca=ctx_align_st,
    data=st.data(),
    dtype=st.sampled_from([np.uint16, np.int32, np.uint32, np.int64]),
)
def test_rows_written_into_out_equal_the_allocated_rows(lengths, ca, data, dtype):
    """Property: building into a preallocated batch full of garbage overwrites every slot: the result is the
    batch materialize allocates, for materialize and materialize_pieces, any dtype, alignment and row order."""
    from datatools.kernels.packing import materialize_pieces

    ctx, align = ca
    L = np.asarray(lengths, dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(L)))
    tokens = (np.arange(offsets[-1]) % 5000 + 1).astype(dtype)
    plan = pack_lengths(L, ctx, align=align)
    rows = data.draw(st.lists(st.integers(0, max(plan.num_rows - 1, 0)), max_size=8)) if plan.num_rows else []
    pad_id = data.draw(st.integers(0, 9))
    want = materialize(plan, tokens, offsets, rows, pad_id=pad_id)
    for build in (
        lambda out: materialize(plan, tokens, offsets, rows, pad_id=pad_id, out=out),
        lambda out: materialize_pieces(
            plan,
            lambda d, s, n: np.concatenate(
                [tokens[offsets[i] + a : offsets[i] + a + k] for i, a, k in zip(d, s, n)] + [tokens[:0]]
            ),
            rows,
            pad_id=pad_id,
            out=out,
        ),
    ):
        out = {k: np.full((len(rows), ctx), -7, np.int32) for k in want}
        got = build(out)
        assert got is out
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])


@pytest.mark.parametrize(
    "out",
    [
        "batch",
        {"tokens": np.zeros((2, 16), np.int32)},
        {k: np.zeros((2, 16), np.int64) for k in ("tokens", "segment_ids", "positions", "loss_mask")},
        {k: np.zeros((3, 16), np.int32) for k in ("tokens", "segment_ids", "positions", "loss_mask")},
        {k: np.zeros((2, 32), np.int32)[:, ::2] for k in ("tokens", "segment_ids", "positions", "loss_mask")},
    ],
)
def test_a_wrong_out_batch_is_a_type_error_naming_it(out):
    tokens, offsets = np.arange(1, 21, dtype=np.int32), np.array([0, 5, 20])
    plan = pack_lengths([5, 15], 16)
    with pytest.raises(TypeError, match="out"):
        materialize(plan, tokens, offsets, [0, 1], out=out)


@pytest.mark.parametrize("dtype", [np.uint32, np.int64, np.uint64])
def test_ids_past_int32_are_refused_on_the_rows_built(dtype):
    """A wide id past 2**31 - 1 in a row built is a ValueError naming it (not wrapped into the batch)."""
    tokens, offsets = np.arange(1, 21).astype(dtype), np.array([0, 5, 20])
    tokens[7] = 2**31 + 3
    plan = pack_lengths([5, 15], 16)
    with pytest.raises(ValueError, match=str(2**31 + 3)):
        materialize(plan, tokens, offsets)


# --------------------------------------------------------------------------- issue 34: row ids checked in numba


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=1, max_value=60), min_size=1, max_size=30),
    data=st.data(),
    dtype=st.sampled_from([np.int32, np.uint8]),  # at most 30 rows: every id fits
)
def test_row_ids_as_an_int64_array_are_checked_like_any_other(lengths, data, dtype):
    """Property: rows given as an int64 array (the fast path, checked in numba) build the batch the same rows give
    as a list or another dtype, and one id outside the plan is an IndexError naming it, whatever its place."""
    L = np.asarray(lengths, dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(L)))
    tokens = (np.arange(offsets[-1]) % 1000).astype(np.int32)
    plan = pack_lengths(L, 64)
    rows = data.draw(st.lists(st.integers(0, plan.num_rows - 1), min_size=1, max_size=8))
    fast = materialize(plan, tokens, offsets, np.asarray(rows, np.int64))
    for other in (
        materialize(plan, tokens, offsets, np.asarray(rows).astype(dtype)),
        materialize(plan, tokens, offsets, rows),
    ):
        for k in fast:
            np.testing.assert_array_equal(fast[k], other[k])
    bad = data.draw(st.sampled_from([-1, plan.num_rows, plan.num_rows + 7, -(2**40)]))
    where = data.draw(st.integers(0, len(rows)))
    with pytest.raises(IndexError, match=rf"row {bad} out of range"):
        materialize(plan, tokens, offsets, np.asarray(rows[:where] + [bad] + rows[where:], np.int64))
