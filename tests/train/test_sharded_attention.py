"""Block-sparse attention on 8 devices (``jax.shard_map`` over the batch axis, each device its own tile list): equal
to dense attention, forward and gradients, and each device executes exactly the tiles its rows hold; balanced batches
make the per-device lists close in length."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import built_once
from datatools.kernels.attention_blocks import EMPTY, block_structure, device_tile_lists, tile_list
from device_workers import run_worker

WORKER = Path(__file__).with_name("sharded_attention_worker.py")


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """The worker's results (a fresh process: 8 host-platform CPU devices need XLA_FLAGS before jax starts)."""
    folder = built_once(tmp_path_factory, "sharded_attention", lambda d: run_worker(WORKER, d / "out.npz", devices=8))
    return dict(np.load(folder / "out.npz"))


@pytest.mark.parametrize("order", ["drawn", "balanced"])
def test_sharded_blocksparse_equals_dense(sharded, order):
    np.testing.assert_allclose(sharded[f"{order}_out"], sharded[f"{order}_ref"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sharded[f"{order}_grads"], sharded[f"{order}_ref_grads"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("order", ["drawn", "balanced"])
def test_each_device_executes_the_tiles_its_rows_hold(sharded, order):
    np.testing.assert_array_equal(sharded[f"{order}_executed"], sharded[f"{order}_counted"])


def test_balanced_lists_are_closer_in_length(sharded):
    drawn, balanced = sharded["drawn_executed"], sharded["balanced_executed"]
    assert drawn.sum() == balanced.sum()
    assert balanced.max() < drawn.max()


def test_device_lists_are_the_slices_tile_lists_padded_to_one_width():
    rng = np.random.default_rng(1)
    seg = np.zeros((8, 128), np.int32)
    for r in range(8):
        cuts = np.sort(rng.choice(np.arange(1, 128), rng.integers(0, 6), replace=False))
        seg[r] = np.searchsorted(cuts, np.arange(128), side="right") + 1
    seg[3, 100:] = 0
    lists = device_tile_lists(seg, 16, 4)
    width = lists["tile_row"].shape[1]
    for d in range(4):
        own = tile_list(seg[2 * d : 2 * d + 2], 16)
        n = int(own["tile_count"][0])
        assert int(lists["tile_count"][d, 0]) == n == int((block_structure(seg[2 * d : 2 * d + 2], 16) != EMPTY).sum())
        for key in ("tile_row", "tile_q", "tile_k", "tile_full"):
            np.testing.assert_array_equal(lists[key][d, :n], own[key][:n])
            assert (lists[key][d, n:] == own[key][n - 1]).all()
        np.testing.assert_array_equal(lists["tile_by_k"][d, n:], np.arange(n, width))


def test_balanced_lists_fit_a_narrower_width(sharded):
    assert sharded["balanced_width"] <= sharded["drawn_width"]


def test_a_width_shorter_than_a_list_is_refused():
    seg = np.ones((4, 64), np.int32)
    with pytest.raises(ValueError, match="width=2 is shorter than a device's 20 tiles"):
        device_tile_lists(seg, 16, 2, width=2)
    assert device_tile_lists(seg, 16, 2, width=40)["tile_row"].shape == (2, 40)
