"""Padding analysis: every figure against a brute-force reference, and Grain's own packers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import grain
from datatools import pack_lengths
from datatools.analysis.padding import STRATEGIES, PaddingOptions, analyze, default_contexts, simulate


def pieces_at(lengths, ctx):
    return [min(ctx, n - s) for n in lengths for s in range(0, n, ctx)]


def grain_rows(pieces, ctx, cls, bins):
    if not pieces:
        return 0
    src = grain.MapDataset.source([{"tokens": np.ones(p, np.int32)} for p in pieces]).to_iter_dataset()
    return sum(1 for _ in cls(src, length_struct={"tokens": ctx}, num_packing_bins=bins, shuffle_bins=False))


def brute_windowed(pieces, ctx, bins, best):
    """Grain's semantics, one piece at a time: ``bins`` open rows, all emitted when none fits."""
    rows, free = 0, []
    for p in pieces:
        fits = [i for i, f in enumerate(free) if f >= p]
        if not fits:
            if len(free) == bins:
                rows += len(free)
                free = []
            free.append(ctx - p)
            continue
        i = min(fits, key=lambda i: (free[i], i)) if best else fits[0]
        free[i] -= p
    return rows + len(free)


def brute_buckets(pieces, ctx, tile, k):
    """Least padded slots over every choice of <= k boundaries among tile multiples below ctx, plus ctx."""
    from itertools import combinations

    cands = sorted({min(-(-p // tile) * tile, ctx) for p in pieces} | {ctx})
    best = None
    for r in range(0, k):
        for combo in combinations([c for c in cands if c < ctx], r):
            bounds = sorted(combo) + [ctx]
            slots = sum(next(b for b in bounds if b >= p) for p in pieces)
            best = slots if best is None else min(best, slots)
    return best


lengths_st = st.lists(st.integers(0, 300), min_size=1, max_size=60).filter(lambda x: sum(x) > 0)


@settings(max_examples=40, deadline=None)
@given(lengths=lengths_st, ctx=st.integers(1, 200), bins=st.integers(1, 6))
def test_streaming_fits_equal_brute_force(lengths, ctx, bins):
    pieces = pieces_at(lengths, ctx)
    for name, best in (("first_fit", False), ("best_fit", True)):
        got = simulate(np.array(lengths), ctx, name, PaddingOptions(window=bins))
        assert got.rows == brute_windowed(pieces, ctx, bins, best)


def test_streaming_fits_equal_grain():
    rng = np.random.default_rng(0)
    for _ in range(6):
        lengths = rng.integers(0, 500, int(rng.integers(50, 300)))
        ctx, bins = int(rng.integers(64, 400)), int(rng.integers(2, 16))
        pieces = pieces_at(lengths, ctx)
        assert simulate(lengths, ctx, "first_fit", PaddingOptions(window=bins)).rows == grain_rows(
            pieces, ctx, grain.experimental.FirstFitPackIterDataset, bins
        )
        assert simulate(lengths, ctx, "best_fit", PaddingOptions(window=bins)).rows == grain_rows(
            pieces, ctx, grain.experimental.BestFitPackIterDataset, bins
        )


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_st, ctx=st.integers(1, 200), cap=st.one_of(st.none(), st.integers(1, 5)))
def test_planned_strategies_equal_the_packer(lengths, ctx, cap):
    arr = np.array(lengths)
    for name in ("first_fit_decreasing", "best_fit_decreasing", "next_fit", "concat_split"):
        plan = pack_lengths(arr, ctx, algorithm=name, max_segments=cap)
        r = simulate(arr, ctx, name, PaddingOptions(max_segments=cap))
        assert r.rows == plan.num_rows
        assert r.max_docs_per_row == int(plan.pieces_per_row.max())
        assert r.efficiency == pytest.approx(plan.efficiency)
        assert r.dropped_tokens == 0


@settings(max_examples=40, deadline=None)
@given(lengths=lengths_st, ctx=st.integers(1, 300), tile=st.sampled_from([1, 16, 64]), k=st.integers(1, 3))
def test_pad_and_bucket_equal_brute_force(lengths, ctx, tile, k):
    arr = np.array(lengths)
    nonempty = [n for n in lengths if n]
    pad = simulate(arr, ctx, "pad")
    kept = sum(min(n, ctx) for n in nonempty)
    assert pad.rows == len(nonempty)
    assert pad.efficiency == pytest.approx(kept / (len(nonempty) * ctx))
    assert pad.dropped_tokens == sum(nonempty) - kept
    assert pad.truncated_fraction == pytest.approx(sum(n > ctx for n in nonempty) / len(nonempty))
    bucket = simulate(arr, ctx, "bucket", PaddingOptions(tile=tile, buckets=k))
    pieces = pieces_at(nonempty, ctx)
    assert bucket.rows == len(pieces)
    assert bucket.efficiency == pytest.approx(sum(pieces) / brute_buckets(pieces, ctx, tile, k))
    assert bucket.boundaries is not None and len(bucket.boundaries) <= k and bucket.boundaries[-1] == ctx


def test_report_shape_speedup_and_recommendation():
    rng = np.random.default_rng(3)
    lengths = np.clip(rng.lognormal(5.2, 0.8, 20000), 1, 4000).astype(int)
    rep = analyze(lengths, PaddingOptions(contexts=(1024, 2048)))
    assert rep.num_sequences == 20000 and rep.num_tokens == int(lengths.sum())
    assert rep.lengths.p50 == pytest.approx(np.percentile(lengths, 50))
    assert sum(rep.histogram.counts) == 20000
    assert {(r.name, r.ctx) for r in rep.strategies} == {(n, c) for n in STRATEGIES for c in (1024, 2048)}
    for r in rep.strategies:
        pad = next(p for p in rep.at(r.ctx) if p.name == "pad")
        assert r.speedup_bound == pytest.approx(r.efficiency / pad.efficiency)
    rec = rep.recommendation
    assert rec.strategy == "best_fit_decreasing" and rec.ctx == 2048  # smallest ctx >= p99
    assert rec.maxtext["packing"] is True and rec.maxtext["max_target_length"] == 2048
    assert "grain_packing_type" in rec.maxtext and "max_segments_per_seq" in rec.maxtext
    capped = simulate(lengths, 2048, "best_fit_decreasing", PaddingOptions(max_segments=rec.max_segments))
    assert capped.efficiency >= rec.efficiency - 0.005
    # the snippet is a valid pipeline config
    import yaml

    from datatools.pipeline import parse_config

    parse_config({"source": {"path": "x"}, **yaml.safe_load(rec.datatools_config)})


def test_padding_is_recommended_when_it_wastes_little():
    rep = analyze(np.full(100, 1000), PaddingOptions(contexts=(1024,)))
    assert rep.recommendation.strategy == "pad"


def test_default_contexts_are_tile_aligned():
    lengths = np.random.default_rng(1).integers(1, 3000, 1000)
    ctxs = default_contexts(lengths, 128)
    assert ctxs == sorted(set(ctxs)) and all(c % 128 == 0 for c in ctxs) and len(ctxs) <= 4


def test_bad_arguments():
    with pytest.raises(ValueError, match="ctx must be >= 1"):
        analyze([1, 2], PaddingOptions(contexts=(0,)))
    with pytest.raises(ValueError, match="every document is empty"):
        analyze([0, 0])
    with pytest.raises(ValueError, match=r"lengths\[1\] = -1 is negative"):
        analyze([3, -1])


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 3000), min_size=1, max_size=200), ctx=st.sampled_from([64, 256, 1024]))
def test_attention_view_matches_the_plan(lengths, ctx):
    """Dense causal pairs (every slot of every row) against in-document pairs (sum of s(s+1)/2 over the plan's
    pieces), checked against pack_lengths' own plan."""
    from datatools import pack_lengths
    from datatools.analysis.padding import simulate

    lengths = np.asarray(lengths)
    plan = pack_lengths(lengths, ctx, algorithm="best_fit_decreasing")
    pieces = plan.length.astype(np.float64)
    got = simulate(lengths, ctx, "best_fit_decreasing")
    assert got.attention_segment_pairs == pytest.approx(float((pieces * (pieces + 1) / 2).sum()))
    assert got.attention_dense_pairs == pytest.approx(plan.num_rows * ctx * (ctx + 1) / 2)
    pad = simulate(lengths, ctx, "pad")
    kept = np.minimum(lengths, ctx).astype(np.float64)
    assert pad.attention_segment_pairs == pytest.approx(float((kept * (kept + 1) / 2).sum()))
    assert pad.attention_dense_pairs == pytest.approx(len(lengths) * ctx * (ctx + 1) / 2)


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 3000), min_size=2, max_size=300),
    chunk=st.integers(1, 64),
    window=st.integers(1, 6),
)
def test_an_input_read_a_slice_at_a_time_gives_the_whole_arrays_report(lengths, chunk, window):
    """Over CHUNK documents analyze() reads slices (a memory-mapped lengths.npy at 10^9): every figure of the
    report -- statistics, every strategy's rows, the recommendation -- is the one of the whole array."""
    import datatools.analysis.padding as padding

    arr = np.array(lengths, np.uint32)
    assume(arr.sum() > 0)
    options = PaddingOptions(contexts=(256, 1024), window=window, threads=1)
    whole = analyze(arr, options).as_dict()
    old = padding.CHUNK
    try:
        padding.CHUNK = chunk
        sliced = analyze(arr, options).as_dict()
    finally:
        padding.CHUNK = old
    for entry in (*whole["strategies"], *sliced["strategies"]):
        entry.pop("seconds")
    for key in ("p50", "p90", "p99", "mean"):
        assert sliced["lengths"][key] == pytest.approx(whole["lengths"][key], rel=1e-12)
        sliced["lengths"][key] = whole["lengths"][key]
    assert sliced == whole
