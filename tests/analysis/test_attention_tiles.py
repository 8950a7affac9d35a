"""The analyzer's attention view: tile counts from piece sizes against exact counts of packed rows."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools import materialize, pack_lengths
from datatools.analysis.attention_tiles import AttentionTiles, attention_tile_view, piece_tiles, tile_counts
from datatools.analysis.padding import PaddingOptions, analyze
from datatools.kernels.attention_blocks import EMPTY, block_structure


def packed(lengths, ctx):
    """(pieces per size, rows, exact non-empty tiles per block) of the best-fit-decreasing plan of ``lengths``."""
    lengths = np.asarray(lengths, np.int64)
    plan = pack_lengths(lengths, ctx)
    batch = materialize(plan, np.zeros(int(lengths.sum()), np.int32), np.concatenate(([0], np.cumsum(lengths))))
    seg = batch["segment_ids"]
    sizes = np.concatenate([np.unique(r[r > 0], return_counts=True)[1] for r in seg])
    exact = {b: int((block_structure(seg, b) != EMPTY).sum()) for b in (8, 16, 32) if ctx % b == 0}
    return np.bincount(sizes, minlength=ctx + 1), plan.num_rows, exact


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 500), min_size=1, max_size=40), block=st.sampled_from([1, 8, 16, 128]))
def test_piece_tiles_bound_every_offset(sizes, block):
    """Fewest <= expected <= most, and each is the count at some offset (brute force over the offsets)."""
    low, expected, high = piece_tiles(np.asarray(sizes), block)
    for s, lo, ex, hi in zip(sizes, low, expected, high):
        per_offset = [(n := (o + s - 1) // block + 1) * (n + 1) / 2 for o in range(block)]
        assert lo == min(per_offset) and hi == max(per_offset)
        np.testing.assert_allclose(ex, np.mean(per_offset))


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.integers(1, 300), min_size=1, max_size=60), ctx_blocks=st.integers(2, 8))
def test_exact_tiles_of_packed_rows_lie_within_the_bounds(lengths, ctx_blocks):
    ctx = 32 * ctx_blocks
    counts, rows, exact = packed(lengths, ctx)
    for block, n in exact.items():
        view = tile_counts(counts, rows, ctx, block)
        assert view.non_empty_low <= n <= view.non_empty_high
        assert view.non_empty_low <= view.non_empty_tiles <= view.non_empty_high
        nb = ctx // block
        assert view.causal_tiles == rows * nb * (nb + 1) // 2 >= n


def test_the_expected_count_is_close_on_many_documents():
    lengths = np.random.default_rng(0).lognormal(np.log(100), 1.0, 3000).round().clip(1, 1024).astype(np.int64)
    counts, rows, exact = packed(lengths, 1024)
    for block, n in exact.items():
        assert abs(tile_counts(counts, rows, 1024, block).non_empty_tiles / n - 1) < 0.05


def test_analyze_reports_the_best_tile_and_ctx():
    lengths = np.random.default_rng(1).lognormal(np.log(300), 1.0, 5000).round().clip(1, 8192).astype(np.int64)
    report = analyze(lengths, PaddingOptions(contexts=(1024, 2048, 4096, 1000)))
    view = report.attention_tiles
    assert view is not None and view.packing == "best_fit_decreasing"
    rows = {r.ctx: r.rows for r in report.strategies if r.name == "best_fit_decreasing"}
    assert {(e.ctx, e.block) for e in view.entries} == {(c, b) for c in (1024, 2048, 4096) for b in (64, 128)}
    for e in view.entries:
        assert e.rows == rows[e.ctx] and e.ideal_ratio == e.causal_tiles / e.non_empty_tiles
    assert view.best is not None and view.best.ideal_ratio == max(e.ideal_ratio for e in view.entries)
    assert f"tile {view.best.block} at ctx {view.best.ctx:,}" in view.note
    assert attention_tile_view("pad", {}, {}) == AttentionTiles("pad", [], None, "")
