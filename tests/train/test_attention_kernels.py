"""The accelerator kernels (splash, pallas_blocksparse, pallas_gpu, cudnn's arguments) equal dense attention.

Run on the CPU in TPU interpret mode (splash, pallas_blocksparse) and GPU interpret mode
(pallas_gpu): exact, but slow (a TPU-interpreted grid step costs about 40 ms of CPU), so
the batches are small: ctx 256, tiles of 128 tokens, rows that hold many short
documents, one document filling the row, the pieces of split documents, and padding.
The reference is dense attention in float64: a float32 dense reference is itself
about as far from float64 as the kernels are (splash: ~4e-5 absolute at values up to
~40), so each kernel is held to float64 within float32 rounding. The larger cases
(whole-model loss and gradients per case, ``datatools train`` against dense: 25-40 s of
CPU each) are marked ``slow``: ``make test`` skips them, ``pytest -m slow`` runs them.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import without_progress
from datatools.kernels.attention_blocks import EMPTY, block_structure, tile_list
from datatools.train.attention import dense_attention

CTX, BLOCK, HEADS, DIM = 256, 128, 2, 32
ROWS = {  # the cases, one per row: lengths of the pieces, then padding
    "many short documents": [5, 9, 3, 17, 2, 30, 8, 11, 4, 6, 20, 13, 40, 7, 25, 19, 37],
    "one document filling the row": [256],
    "split documents": [190, 66],  # the tail of a document from the row before, the head of the next
    "padding": [40, 7, 100],
}


def segment_ids(cases=ROWS) -> np.ndarray:
    out = np.zeros((len(cases), CTX), np.int32)
    for r, lengths in enumerate(cases.values()):
        at = 0
        for s, n in enumerate(lengths, 1):
            out[r, at : at + n] = s
            at += n
    return out


SEG = segment_ids()


def inputs(seed=0, rows=None):
    rows = len(ROWS) if rows is None else rows
    keys = jax.random.split(jax.random.PRNGKey(seed), 4)
    q, k, v, w = (jax.random.normal(key, (rows, CTX, HEADS, DIM), jnp.float32) for key in keys)
    return q, k, v, w


def reference(q, k, v, w, seg):
    """(sum(out * w), gradients wrt q, k, v) of dense attention in float64."""
    with jax.enable_x64(True):
        args = [jnp.asarray(np.asarray(x), jnp.float64) for x in (q, k, v)]
        seg64 = jnp.asarray(seg)
        w64 = jnp.asarray(np.asarray(w), jnp.float64)
        f = lambda q, k, v: (dense_attention(q, k, v, seg64) * w64).sum()  # noqa: E731
        value, grads = jax.value_and_grad(f, argnums=(0, 1, 2))(*args)
        return np.asarray(dense_attention(*args, seg64)), float(value), [np.asarray(g) for g in grads]


def assert_equals_dense(attention, seed=0, seg=SEG):
    """``attention(q, k, v, segment_ids)`` against float64 dense: outputs, and the gradients of sum(out * w)."""
    q, k, v, w = inputs(seed, seg.shape[0])
    seg_j = jnp.asarray(seg)
    out_ref, value_ref, grads_ref = reference(q, k, v, w, seg)

    @jax.jit
    def run(q, k, v):  # one program: the forward kernel once, then the backward kernels
        out, vjp = jax.vjp(lambda q, k, v: attention(q, k, v, seg_j), q, k, v)
        return out, vjp(w.astype(out.dtype))

    out, grads = run(q, k, v)
    np.testing.assert_allclose(np.asarray(out), out_ref, rtol=1e-5, atol=1e-5)
    assert not np.asarray(out)[seg == 0].any()  # padding queries: output 0
    np.testing.assert_allclose(float((out * w).sum()), value_ref, rtol=1e-5)
    for name, got, want in zip("qkv", grads, grads_ref):
        scale = np.abs(want).max()
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5 * scale, err_msg=f"d{name}")


def test_pallas_blocksparse_equals_dense():
    from datatools.train.attention_pallas import pallas_blocksparse_attention

    tiles = tile_list(SEG, BLOCK)
    assert_equals_dense(lambda q, k, v, s: pallas_blocksparse_attention(q, k, v, s, tiles, BLOCK))


def test_pallas_blocksparse_grid_visits_exactly_the_listed_tiles():
    """Each pass counts its own grid steps: heads x the non-empty tiles (counted independently), no more."""
    from datatools.train.attention_pallas import pallas_blocksparse_steps

    seg = SEG[[0, 3]]
    tiles = tile_list(seg, BLOCK)
    non_empty = int((block_structure(seg, BLOCK) != EMPTY).sum())
    assert non_empty == int(tiles["tile_count"][0]) < tiles["tile_row"].shape[0]  # the list is padded
    q, k, v, _ = inputs(1, seg.shape[0])
    steps = jax.jit(lambda q, k, v: pallas_blocksparse_steps(q, k, v, jnp.asarray(seg), tiles, BLOCK))(q, k, v)
    assert {name: int(n) for name, n in steps.items()} == {
        "forward": HEADS * non_empty,
        "dq": HEADS * non_empty,
        "dkv": HEADS * non_empty,
    }


# JAX's splash kernel behind our adapter (~8 s of CPU, interpret mode): make test-all; make test runs our Pallas
# block-sparse kernel against dense and the grid's visits
@pytest.mark.slow
def test_splash_equals_dense():
    from datatools.train.attention_splash import splash_attention

    assert_equals_dense(lambda q, k, v, s: splash_attention(q, k, v, s, BLOCK))


def test_pallas_gpu_equals_dense():
    from datatools.train.attention_gpu import pallas_gpu_attention

    assert_equals_dense(lambda q, k, v, s: pallas_gpu_attention(q, k, v, s, BLOCK))


def test_cudnn_arguments_give_dense_and_cudnn_needs_a_gpu():
    """What ``cudnn`` passes to jax.nn.dot_product_attention computes dense attention (checked with XLA's
    implementation on the CPU); off a GPU, ``cudnn`` says so instead of failing inside cuDNN."""
    from datatools.train.attention_gpu import cudnn_arguments, cudnn_attention

    def xla(q, k, v, seg):
        out = jax.nn.dot_product_attention(q, k, v, implementation="xla", **cudnn_arguments(q, k, v, seg))
        return jnp.where((seg > 0)[:, :, None, None], out, 0)

    assert_equals_dense(xla)
    lengths = np.asarray(cudnn_arguments(*inputs()[:3], jnp.asarray(SEG))["query_seq_lengths"])
    np.testing.assert_array_equal(lengths, [np.flatnonzero(r).max() + 1 for r in SEG])
    if jax.devices()[0].platform != "gpu":
        with pytest.raises(ValueError, match="cudnn needs an NVIDIA GPU"):
            cudnn_attention(*inputs()[:3], jnp.asarray(SEG))


def test_pallas_blocksparse_rejects_a_block_off_the_lane_width():
    from datatools.train.attention_pallas import pallas_blocksparse_attention

    q, k, v, _ = inputs()
    with pytest.raises(ValueError, match="attention_block=64 must be a multiple of 128"):
        pallas_blocksparse_attention(q, k, v, jnp.asarray(SEG), tile_list(SEG, 64), 64)
    with pytest.raises(ValueError, match="tile_count missing"):
        pallas_blocksparse_attention(q, k, v, jnp.asarray(SEG), {}, BLOCK)


# --- the whole model: loss and gradients per case, and `datatools train` ---------------------------------------

MODEL_CASES = {
    "many short documents": [5, 9, 3, 17, 2, 30, 8, 11, 4, 6, 20, 13, 40, 7, 25, 19, 37],
    "one document filling the row": [256],
    "documents split across rows": [300, 170, 45],
    "padding": [40, 7],
}


def model_loss_and_grads(attention, case):
    import dataclasses

    from datatools import materialize, pack_lengths
    from datatools.train.model import ModelConfig, init_params, loss_fn

    cfg = ModelConfig(vocab_size=97, d_model=32, n_layers=1, n_heads=HEADS, attention=attention, attention_block=BLOCK)
    lengths = np.asarray(MODEL_CASES[case])
    rng = np.random.default_rng(len(case))
    tokens = rng.integers(0, cfg.vocab_size, int(lengths.sum())).astype(np.int32)
    batch = materialize(pack_lengths(lengths, CTX), tokens, np.concatenate(([0], np.cumsum(lengths))))
    batch = {**batch, **tile_list(batch["segment_ids"], BLOCK)}
    params = init_params(dataclasses.replace(cfg, attention="dense"), jax.random.PRNGKey(3))
    fn = jax.jit(jax.value_and_grad(lambda p, b: loss_fn(p, cfg, b), has_aux=True))
    (loss, count), grads = fn(params, {k: jnp.asarray(v) for k, v in batch.items()})
    return float(loss), float(count), jax.tree_util.tree_leaves(grads)


def assert_model_equals_dense(attention, case):
    ld, cd, gd = model_loss_and_grads("dense", case)
    lk, ck, gk = model_loss_and_grads(attention, case)
    assert cd == ck > 0
    np.testing.assert_allclose(lk, ld, rtol=1e-5)
    for a, b in zip(gd, gk):  # float32 both: within float32 rounding of the leaf's scale
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=2e-5 * np.abs(a).max())


@pytest.mark.slow
@pytest.mark.parametrize("attention", ["splash", "pallas_blocksparse", "pallas_gpu"])
@pytest.mark.parametrize("case", list(MODEL_CASES))
def test_kernels_model_equals_dense(case, attention):
    assert_model_equals_dense(attention, case)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from conftest import random_docs, write_test_store

    return write_test_store(
        tmp_path_factory.mktemp("kernels") / "store", random_docs(60, seed=5, max_len=400, vocab=97)
    )


def train_runs(tmp_path, store, capsys, attentions, steps=3):
    from datatools.cli import main

    cfg = tmp_path / "p.yaml"
    cfg.write_text(
        f"source: {{path: {store}}}\nshuffle: {{kind: full}}\nnum_epochs: null\n"
        f"packing: {{ctx: {CTX}}}\nbatch_size: 1\n"
        f"model: {{vocab_size: 97, d_model: 32, n_layers: 1, n_heads: {HEADS}, attention_block: {BLOCK}}}\n"
        "train: {learning_rate: 1.0e-2, warmup_steps: 1, log_every: 1}\n"
    )
    runs = {}
    for attention in attentions:
        assert main(["train", str(cfg), "--steps", str(steps), "--attention", attention, "--json", "-"]) == 0
        runs[attention] = json.loads(capsys.readouterr().out)["records"]
    return runs


def assert_follows_dense(runs, attention):
    dense, kernel = runs["dense"], runs[attention]
    assert len(kernel) == len(dense) == 3
    np.testing.assert_allclose([r["loss"] for r in kernel], [r["loss"] for r in dense], rtol=1e-5)
    for d, k in zip(dense, kernel):
        assert d["flops"] == k["flops"]  # the same useful work, counted alike
        assert k["attention_pairs_computed"] < d["attention_pairs_computed"] == CTX * CTX  # one row


@pytest.mark.slow
def test_train_cli_pallas_blocksparse_follows_dense(tmp_path, store, capsys):
    """``datatools train --attention pallas_blocksparse`` on the CPU (TPU interpret mode): the same losses as
    dense, step by step; HFU counts the tiles its grid visits (the loader's tile count x 128^2)."""
    runs = train_runs(tmp_path, store, capsys, ["dense", "pallas_blocksparse"])
    assert_follows_dense(runs, "pallas_blocksparse")
    for r in runs["pallas_blocksparse"]:
        tiles, rest = divmod(r["attention_pairs_computed"], BLOCK * BLOCK)
        assert rest == 0 and 1 <= tiles <= 3  # a real block's diagonal tile at least, of the 3 causal ones


@pytest.mark.slow
def test_train_cli_splash_follows_dense(tmp_path, store, capsys):
    runs = train_runs(tmp_path, store, capsys, ["dense", "splash"])
    assert_follows_dense(runs, "splash")
    assert all(r["attention_pairs_computed"] == 3 * BLOCK * BLOCK for r in runs["splash"])  # every causal tile


def test_train_cli_refuses_what_cannot_run_here(tmp_path, store, capsys):
    """One line and exit 2, before any step: a pallas_blocksparse tile off the lane width; cudnn off a GPU."""
    from datatools.cli import main

    cfg = tmp_path / "p.yaml"
    cfg.write_text(
        f"source: {{path: {store}}}\npacking: {{ctx: {CTX}}}\nbatch_size: 1\n"
        "model: {vocab_size: 97, d_model: 32, n_layers: 1, n_heads: 2, attention_block: 64}\n"
    )
    assert main(["train", str(cfg), "--attention", "pallas_blocksparse"]) == 2
    err = without_progress(capsys.readouterr().err).strip()  # a slow start may print a progress line first
    assert err.count("\n") == 0 and "model.attention_block=64 must be a multiple of 128" in err
    if jax.devices()[0].platform != "gpu":
        assert main(["train", str(cfg), "--attention", "cudnn", "--steps", "1"]) == 2
        err = without_progress(capsys.readouterr().err).strip()
        assert err.count("\n") == 0 and "attention: cudnn needs an NVIDIA GPU" in err
