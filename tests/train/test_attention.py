"""Segment-aware block-sparse attention: the tile structure is exact, and loss and gradients equal dense."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools import materialize, pack_lengths
from datatools.kernels.attention_blocks import (
    EMPTY,
    FULL,
    PARTIAL,
    block_pairs,
    block_structure,
    tile_list,
)
from datatools.train.model import ModelConfig, init_params, loss_fn


def attention_pairs(segment_ids) -> tuple[int, int]:
    """(in-document causal query-key pairs, dense causal pairs) of a batch: sum of s(s+1)/2 over its pieces and
    rows x ctx(ctx+1)/2 (what a dense causal kernel computes)."""
    seg = np.asarray(segment_ids)
    rows, ctx = seg.shape
    useful = 0
    for r in range(rows):
        _, sizes = np.unique(seg[r][seg[r] > 0], return_counts=True)
        useful += int((sizes.astype(np.int64) * (sizes + 1) // 2).sum())
    return useful, rows * ctx * (ctx + 1) // 2


CFG = ModelConfig(vocab_size=97, d_model=32, n_layers=2, n_heads=4, dtype="float32", attention_block=16)


def brute_structure(seg: np.ndarray, block: int) -> np.ndarray:
    t = seg.shape[0]
    q, s = np.arange(t)[:, None], np.arange(t)[None, :]
    allowed = (s <= q) & (seg[:, None] == seg[None, :]) & (seg[:, None] > 0)
    nb = t // block
    tiles = allowed.reshape(nb, block, nb, block).transpose(0, 2, 1, 3).reshape(nb, nb, -1)
    return np.where(tiles.all(-1), FULL, np.where(tiles.any(-1), PARTIAL, EMPTY)).astype(np.int8)


def packed_batch(lengths, ctx, seed=0, rows=None):
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths)
    plan = pack_lengths(lengths, ctx)
    tokens = rng.integers(0, CFG.vocab_size, int(lengths.sum())).astype(np.int32)
    batch = materialize(plan, tokens, np.concatenate(([0], np.cumsum(lengths))), rows=rows)
    return batch, plan


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=1, max_size=30),
    block=st.sampled_from([4, 8, 16, 32]),
    ctx_blocks=st.integers(1, 8),
)
def test_block_structure_is_exact(lengths, block, ctx_blocks):
    ctx = block * ctx_blocks
    batch, _ = packed_batch(lengths, ctx)
    got = block_structure(batch["segment_ids"], block)
    for r in range(got.shape[0]):
        np.testing.assert_array_equal(got[r], brute_structure(batch["segment_ids"][r], block))
    pairs = block_pairs(batch["segment_ids"], block)
    assert (pairs["block_valid"].sum(axis=1) == (got != EMPTY).reshape(got.shape[0], -1).sum(axis=1)).all()
    useful, dense = attention_pairs(batch["segment_ids"])
    assert useful <= dense


CASES = {
    "many short documents": [5, 9, 3, 17, 2, 30, 8, 11, 4, 6, 20, 13],
    "one document filling the row": [128],
    "documents split across rows": [300, 170, 45],
    "padding": [40, 7],
}


@functools.partial(jax.jit, static_argnums=(1,))
def loss_and_gradients(params, cfg, batch):
    """Compiled once per attention and batch shape, for every case of that shape (op by op, a case took up to
    ~15 s; compiled per case, the 8 cases compiled 16 programs)."""
    return jax.value_and_grad(loss_fn, has_aux=True)(params, cfg, batch)


# make test: block-sparse on every case, fused on documents split across rows (the case where rows and documents
# differ); make test-all fused on the others too (each a model's forward and backward compiled, 3-11 s of CPU)
@pytest.mark.parametrize(
    "case, attention",
    [
        (case, attention)
        if attention == "blocksparse" or case == "documents split across rows"
        else pytest.param(case, attention, marks=pytest.mark.slow)
        for attention in ("blocksparse", "fused")
        for case in CASES
    ],
)
def test_blocksparse_equals_dense_loss_and_gradients(case, attention):
    batch, _ = packed_batch(CASES[case], 128, seed=len(case))
    sparse_cfg = dataclasses.replace(CFG, attention=attention)
    sparse_batch = {**batch, **tile_list(batch["segment_ids"], CFG.attention_block)}
    params = init_params(CFG, jax.random.PRNGKey(3))

    def run(cfg, b):
        return loss_and_gradients(params, cfg, {k: jnp.asarray(v) for k, v in b.items()})

    (ld, cd), gd = run(CFG, batch)
    (ls, cs), gs = run(sparse_cfg, sparse_batch)
    assert float(cd) == float(cs) > 0
    np.testing.assert_allclose(float(ls), float(ld), rtol=1e-5, atol=1e-5)
    for a, b in zip(jax.tree_util.tree_leaves(gd), jax.tree_util.tree_leaves(gs)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def causal_tiles(rows: int, ctx: int, block: int) -> dict:
    """Every tile on and under the diagonal of every row: what a causal flash kernel visits."""
    return tile_list(np.ones((rows, ctx), np.int32), block)


LISTINGS = ["in-document tiles", "every causal tile", "shuffled entries"]


# ~3 s of CPU each (a compile): make test runs chunk 7 (a remainder chunk) on every listing and chunks 1 and 256 on
# the shuffled entries; make test-all every chunk on every listing
@pytest.mark.parametrize(
    "chunk, listing",
    [
        (chunk, listing)
        if chunk == 7 or (listing == "shuffled entries" and chunk in (1, 256))
        else pytest.param(chunk, listing, marks=pytest.mark.slow)
        for chunk in (1, 3, 7, 256)
        for listing in LISTINGS
    ],
)
def test_any_chunking_of_the_tiles_gives_the_dense_result(chunk, listing):
    """The running softmax over chunks of the batch-wide tile list (and its rematerialized gradient) equals dense
    attention, whatever the order of the entries and with the causal list (tiles without work) as well."""
    from datatools.train.attention import blocksparse_attention, dense_attention

    batch, _ = packed_batch([300, 5, 9, 40, 70, 3, 100, 22], 128, seed=chunk)
    seg = jnp.asarray(batch["segment_ids"])
    b, t = seg.shape
    tiles = causal_tiles(b, t, 16) if listing == "every causal tile" else tile_list(batch["segment_ids"], 16)
    if listing == "shuffled entries":
        n = int(tiles["tile_count"][0])
        order = np.random.default_rng(chunk).permutation(n)
        tiles = {
            **tiles,
            **{
                key: np.concatenate([tiles[key][:n][order], tiles[key][n:]]) for key in ("tile_row", "tile_q", "tile_k")
            },
        }
    tiles = {k: jnp.asarray(v) for k, v in tiles.items()}
    q, k, v, w = (jax.random.normal(key, (b, t, 2, 8)) for key in jax.random.split(jax.random.PRNGKey(chunk), 4))

    def dense(q, k, v):
        return (dense_attention(q, k, v, seg) * w).sum()

    def sparse(q, k, v):
        return (blocksparse_attention(q, k, v, seg, tiles, 16, chunk=chunk) * w).sum()

    both = jax.jit(lambda q, k, v: [jax.value_and_grad(f, argnums=(0, 1, 2))(q, k, v) for f in (dense, sparse)])
    (ld, gd), (ls, gs) = both(q, k, v)
    np.testing.assert_allclose(float(ls), float(ld), rtol=1e-5, atol=1e-5)
    for a, b_ in zip(gd, gs):
        np.testing.assert_allclose(np.asarray(b_), np.asarray(a), rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # ~45 s on 2 cores: make test-cluster runs it
@settings(max_examples=8, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 400), min_size=1, max_size=24),
    block=st.sampled_from([16, 32]),
    chunk=st.sampled_from([8, 256]),
)
def test_blocksparse_memory_follows_the_tiles(lengths, block, chunk):
    """XLA's temporary memory for blocksparse's forward + backward is never above the same kernel over every causal
    tile (causal flash), and a batch with fewer tiles never needs more than one with more (same shapes)."""
    from datatools.train.attention import blocksparse_attention

    ctx = 8 * block
    batch, _ = packed_batch(lengths, ctx)
    seg = jnp.asarray(batch["segment_ids"])
    b, t = seg.shape
    q = jnp.zeros((b, t, 2, 8))

    def temp(tiles):
        grad = jax.jit(jax.grad(lambda q, tiles: blocksparse_attention(q, q, q, seg, tiles, block, chunk=chunk).sum()))
        tiles = {key: jnp.asarray(tiles[key]) for key in ("tile_row", "tile_q", "tile_k", "tile_count")}
        return grad.lower(q, tiles).compile().memory_analysis().temp_size_in_bytes

    sparse, causal = tile_list(batch["segment_ids"], block), causal_tiles(b, t, block)
    assert sparse["tile_row"].size <= causal["tile_row"].size
    assert temp(sparse) <= temp(causal)


@pytest.mark.slow  # ~20 s on 2 cores
def test_blocksparse_memory_never_falls_as_the_list_grows():
    """XLA's temporary memory is non-decreasing in the padded list length at fixed shapes (no list shorter than
    causal flash's costs more: a one-step scan, which would keep every residual, is never used)."""
    from datatools.train.attention import blocksparse_attention

    seg = jnp.ones((2, 512), jnp.int32)
    q = jnp.zeros((2, 512, 2, 8))
    temps = []
    for width in (16, 64, 128, 256, 512, 768):
        tiles = {
            "tile_row": jnp.zeros(width, jnp.int32),
            "tile_q": jnp.zeros(width, jnp.int32),
            "tile_k": jnp.zeros(width, jnp.int32),
            "tile_count": jnp.array([width], jnp.int32),
        }
        grad = jax.jit(jax.grad(lambda q, tiles: blocksparse_attention(q, q, q, seg, tiles, 32).sum()))
        temps.append(grad.lower(q, tiles).compile().memory_analysis().temp_size_in_bytes)
    assert temps == sorted(temps), temps


def test_blocksparse_bad_arguments_name_the_value():
    from datatools.train.attention import blocksparse_attention

    seg = np.ones((1, 64), np.int32)
    q = jnp.zeros((1, 64, 1, 4))
    tiles = tile_list(seg, 16)
    with pytest.raises(ValueError, match="lacks tile_count"):
        blocksparse_attention(q, q, q, jnp.asarray(seg), {k: tiles[k] for k in ("tile_row", "tile_q", "tile_k")}, 16)
    with pytest.raises(ValueError, match="attention_block=24 must divide ctx=64"):
        blocksparse_attention(q, q, q, jnp.asarray(seg), tiles, 24)
