"""The batch-wide tile list (the Pallas kernel's scalar-prefetch operands) lists exactly the non-empty tiles."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools.kernels.attention_blocks import (
    EMPTY,
    FULL,
    TILE_KEYS,
    block_pairs,
    block_structure,
    bucket_width,
    tile_list,
)


def segments(rows: list[list[int]], ctx: int) -> np.ndarray:
    """(rows, ctx) segment ids: each row's pieces numbered 1, 2, ... back to back, then padding (0)."""
    out = np.zeros((len(rows), ctx), np.int32)
    for r, lengths in enumerate(rows):
        at = 0
        for s, n in enumerate(lengths, 1):
            n = min(n, ctx - at)
            out[r, at : at + n] = s
            at += n
    return out


rows_st = st.lists(st.lists(st.integers(1, 200), min_size=0, max_size=12), min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(rows=rows_st, block=st.sampled_from([4, 8, 16, 32]), ctx_blocks=st.integers(1, 8))
def test_tile_list_is_the_non_empty_tiles_in_kernel_order(rows, block, ctx_blocks):
    seg = segments(rows, block * ctx_blocks)
    kinds = block_structure(seg, block)
    tiles = tile_list(seg, block)
    assert set(tiles) == set(TILE_KEYS) and all(v.dtype == np.int32 for v in tiles.values())
    n = int(tiles["tile_count"][0])
    assert n == int((kinds != EMPTY).sum())
    assert tiles["tile_row"].shape == (bucket_width(n),)
    row, q, k, full = (tiles[key][:n] for key in ("tile_row", "tile_q", "tile_k", "tile_full"))
    # every non-empty tile once, in (row, q block, k block) order: a query block's tiles are consecutive
    listed = list(zip(row.tolist(), q.tolist(), k.tolist()))
    assert listed == sorted(set(listed)) == sorted(zip(*map(np.ndarray.tolist, np.nonzero(kinds))))
    np.testing.assert_array_equal(full, kinds[row, q, k] == FULL)
    # the dk/dv order: a permutation of the real entries sorted by (row, k block, q block)
    by_k = tiles["tile_by_k"]
    assert sorted(by_k[:n].tolist()) == list(range(n)) and (by_k[n:] == np.arange(n, by_k.shape[0])).all()
    keyed = list(zip(row[by_k[:n]].tolist(), k[by_k[:n]].tolist(), q[by_k[:n]].tolist()))
    assert keyed == sorted(keyed)
    if n:  # padding entries repeat the last tile: a kernel running over them would fetch no new block
        for key in ("tile_row", "tile_q", "tile_k", "tile_full"):
            assert (tiles[key][n:] == tiles[key][n - 1]).all()
    # the per-row layout lists the same tiles
    pairs = block_pairs(seg, block, kinds=kinds)
    assert int(pairs["block_valid"].sum()) == n


@given(most=st.integers(0, 5000), minimum=st.sampled_from([1, 16]), step=st.sampled_from([64, 256]))
def test_bucket_width_holds_the_entries_with_little_padding(most, minimum, step):
    w = bucket_width(most, minimum=minimum, step=step)
    assert w >= max(most, minimum, 1)
    if most > step:
        assert w % step == 0 and w - most < step
    else:
        assert w & (w - 1) == 0 and (w < 2 * max(most, 1) or w == minimum)
