"""Attention implementations for packed rows: ``dense`` (the reference) and ``blocksparse`` (segment-aware).

Both compute the same function: query t attends to key s only when s <= t, both are
in the same segment, and neither is padding; a padding query's output is 0.

* ``dense`` forms the whole (T x T) score matrix per head and masks it: memory and
  FLOPs grow with ctx^2 whatever the documents.
* ``blocksparse`` takes the list of non-empty (query block, key block) tiles that the
  pipeline computed on the host (:func:`datatools.kernels.attention_blocks.block_pairs`),
  gathers those tiles a chunk at a time and combines each query block's tiles with a
  running softmax (flash-attention style, in a rematerialized ``lax.scan``). Pure JAX
  with static shapes: it runs everywhere; its FLOPs grow with the tiles that hold work
  (about ctx x document length), not with ctx^2, and its memory with one chunk of tiles.

The accelerator kernels computing the same function are in ``attention_splash`` (TPU),
``attention_pallas`` (``pallas_blocksparse``, TPU) and ``attention_gpu`` (``pallas_gpu``, ``cudnn``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

NEG = -1e30


def dense_attention(q, k, v, segment_ids):
    """q, k, v: (B, T, H, D); segment_ids: (B, T). Returns (B, T, H, D)."""
    t = segment_ids.shape[1]
    causal = jnp.tril(jnp.ones((t, t), bool))
    mask = (causal[None] & (segment_ids[:, :, None] == segment_ids[:, None, :]) & (segment_ids > 0)[:, :, None])[:, None]
    scores = jnp.einsum("bthd,bshd->bhts", q, k).astype(jnp.float32) / math.sqrt(q.shape[-1])
    scores = jnp.where(mask, scores, NEG)
    probs = jax.nn.softmax(scores, axis=-1)
    probs = jnp.where(mask, probs, 0.0).astype(q.dtype)  # padding queries attend to nothing
    return jnp.einsum("bhts,bshd->bthd", probs, v)


def fused_attention(q, k, v, segment_ids):
    """``jax.nn.dot_product_attention`` with the segment mask: cuDNN's fused kernel where JAX can use it (a GPU),
    XLA's otherwise (the CPU tests). Padding queries' outputs are zeroed, as in :func:`dense_attention`."""
    t = segment_ids.shape[1]
    causal = jnp.tril(jnp.ones((t, t), bool))
    mask = (causal[None] & (segment_ids[:, :, None] == segment_ids[:, None, :]) & (segment_ids > 0)[:, :, None])[:, None]
    out = jax.nn.dot_product_attention(q, k, v, mask=mask)
    return jnp.where((segment_ids > 0)[:, :, None, None], out, 0).astype(q.dtype)


def blocksparse_attention(q, k, v, segment_ids, block_q, block_k, block_valid, block: int, chunk: int = 256):
    """The same function as :func:`dense_attention`, computed on the listed tiles only.

    The tiles are processed ``chunk`` at a time in a ``lax.scan`` with a running
    softmax (per query: the largest score so far, the sum of exponentials and the
    weighted values, rescaled when the maximum grows), and each step is
    rematerialized in the backward pass: memory holds one chunk of tiles and the
    running output, however many tiles a row has (a row filled by one long document
    has about half of all tiles).

    Args:
      q, k, v: (B, T, H, D); T a multiple of ``block``.
      segment_ids: (B, T).
      block_q, block_k, block_valid: (B, P) int: the non-empty tiles of each row and which list entries are real.
      block: tile size (tokens).
      chunk: tiles per scan step.
    """
    b, t, h, d = q.shape
    nb = t // block
    p_all = block_q.shape[1]
    chunk = max(1, min(chunk, p_all))
    pad = -p_all % chunk
    if pad:
        block_q, block_k, block_valid = (jnp.pad(x, ((0, 0), (0, pad))) for x in (block_q, block_k, block_valid))
    steps = (p_all + pad) // chunk
    rows = jnp.arange(b)[:, None]
    qt, kt, vt = (x.reshape(b, nb, block, h, d) for x in (q, k, v))
    seg = segment_ids.reshape(b, nb, block)
    offs = jnp.arange(block)
    scale = 1.0 / math.sqrt(d)

    def step(carry, tiles):
        m, l, acc = carry  # (B, nb, H, bq), (B, nb, H, bq), (B, nb, bq, H, D)
        bq, bk, ok = tiles  # (B, chunk) each
        sq, sk = seg[rows, bq], seg[rows, bk]
        qpos, kpos = bq[..., None] * block + offs, bk[..., None] * block + offs
        mask = ((sq[..., :, None] == sk[..., None, :]) & (sq > 0)[..., :, None]
                & (kpos[..., None, :] <= qpos[..., :, None]) & (ok > 0)[..., None, None])  # (B, c, bq, bk)
        s = jnp.einsum("bpqhd,bpkhd->bphqk", qt[rows, bq], kt[rows, bk]).astype(jnp.float32) * scale
        s = jnp.where(mask[:, :, None], s, NEG)
        m_new = jax.lax.stop_gradient(m.at[rows, bq].max(s.max(axis=-1)))  # a constant per query: no gradient
        grow = jnp.exp(m - m_new)  # rescales what was summed under the old maximum
        p = jnp.where(mask[:, :, None], jnp.exp(s - m_new[rows, bq][..., None]), 0.0)
        l = (l * grow).at[rows, bq].add(p.sum(axis=-1))
        o = jnp.einsum("bphqk,bpkhd->bpqhd", p.astype(q.dtype), vt[rows, bk]).astype(jnp.float32)
        acc = (acc * jnp.transpose(grow, (0, 1, 3, 2))[..., None]).at[rows, bq].add(o)
        return (m_new, l, acc), None

    init = (jnp.full((b, nb, h, block), NEG, jnp.float32), jnp.zeros((b, nb, h, block), jnp.float32),
            jnp.zeros((b, nb, block, h, d), jnp.float32))
    tiles = tuple(x.reshape(b, steps, chunk).transpose(1, 0, 2) for x in (block_q, block_k, block_valid))
    (_, l, acc), _ = jax.lax.scan(jax.checkpoint(step), init, tiles)
    inv = jnp.where(l > 0, 1.0 / jnp.where(l > 0, l, 1.0), 0.0)  # padding queries: no keys, output 0
    out = acc * jnp.transpose(inv, (0, 1, 3, 2))[..., None]
    return out.astype(q.dtype).reshape(b, t, h, d)
