"""Attention for packed rows: ``dense`` (the reference), ``fused`` and ``blocksparse`` (the accelerator kernels are
in ``attention_splash``, ``attention_pallas`` and ``attention_gpu``). All compute one function: query t attends to
key s when s <= t, both are in the same segment and neither is padding; a padding query's output is 0.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

NEG = -1e30
SPARSE_KEYS = ("tile_row", "tile_q", "tile_k", "tile_count")  # what blocksparse reads of a tile list


def _mask(segment_ids):
    """(B, 1, T, T) bool: query t sees key s when s <= t, both in one segment, the query not padding."""
    t = segment_ids.shape[1]
    causal = jnp.tril(jnp.ones((t, t), bool))
    same = segment_ids[:, :, None] == segment_ids[:, None, :]
    return (causal[None] & same & (segment_ids > 0)[:, :, None])[:, None]


def zero_padding(out: jax.Array, segment_ids: jax.Array, dtype: jnp.dtype) -> jax.Array:
    """``out`` (B, T, H, D) with every padding query's output 0 (what every implementation returns), as ``dtype``."""
    return jnp.where((segment_ids > 0)[:, :, None, None], out, 0).astype(dtype)


def dense_attention(q, k, v, segment_ids):
    """q, k, v: (B, T, H, D); segment_ids: (B, T). Returns (B, T, H, D)."""
    mask = _mask(segment_ids)
    scores = jnp.einsum("bthd,bshd->bhts", q, k).astype(jnp.float32) / math.sqrt(q.shape[-1])
    scores = jnp.where(mask, scores, NEG)
    probs = jax.nn.softmax(scores, axis=-1)
    probs = jnp.where(mask, probs, 0.0).astype(q.dtype)  # padding queries attend to nothing
    return jnp.einsum("bhts,bshd->bthd", probs, v)


def fused_attention(q, k, v, segment_ids):
    """``jax.nn.dot_product_attention`` with the segment mask: cuDNN's fused kernel where JAX can use it (a GPU),
    XLA's otherwise (the CPU tests). Padding queries' outputs are zeroed, as in :func:`dense_attention`."""
    out = jax.nn.dot_product_attention(q, k, v, mask=_mask(segment_ids))
    return zero_padding(out, segment_ids, q.dtype)


def blocksparse_attention(q, k, v, segment_ids, tiles: dict, block: int, chunk: int = 256, *, executed: bool = False):
    """The same function as :func:`dense_attention` on q, k, v (B, T, H, D), T a multiple of ``block`` (tokens),
    computed on the listed tiles only: pure JAX, cost about ctx x document length.

    ``tiles``: the loader's tile list (:func:`datatools.kernels.attention_blocks.tile_list`): int arrays
    ``tile_row``, ``tile_q``, ``tile_k`` (P,) and ``tile_count`` (1,) (entries past it are padding), in any order,
    processed ``chunk`` entries a step of a rematerialized ``lax.scan`` with a running softmax per (row, query
    block). Fed every causal tile, it is a causal flash kernel (the benchmark's baseline). ``executed``: also return
    the tiles the scan computed (int32 scalar: the live entries it visited).
    """
    missing = [key for key in SPARSE_KEYS if key not in tiles]
    if missing:
        raise ValueError(f"blocksparse: the tile list lacks {', '.join(missing)} (from tile_list)")
    b, t, h, d = q.shape
    if t % block:
        raise ValueError(f"blocksparse: attention_block={block} must divide ctx={t}")
    nb = t // block
    entries, chunk = _scan_entries(tiles, chunk)
    qt, kt, vt = (x.reshape(b * nb, block, h, d) for x in (q, k, v))  # one entry per (row, block)
    seg = segment_ids.reshape(b * nb, block)
    offs = jnp.arange(block)
    scale = 1.0 / math.sqrt(d)
    earlier = jnp.tril(jnp.ones((chunk, chunk), bool), -1)  # entry j < entry i of a chunk

    def step(carry, entries):
        m, l, acc, done = carry  # (B * nb, H, bq), (B * nb, H, bq), (B * nb, bq, H, D): per (row, query block)
        r, i, j, live = entries  # (chunk,) each
        iq, ik = r * nb + i, r * nb + j
        sq, sk = seg[iq], seg[ik]
        mask = (
            (sq[:, :, None] == sk[:, None, :])
            & (sq > 0)[:, :, None]
            & ((j[:, None] * block + offs)[:, None, :] <= (i[:, None] * block + offs)[:, :, None])
            & (live > 0)[:, None, None]
        )  # (c, bq, bk)
        s = jnp.einsum("pqhd,pkhd->phqk", qt[iq], kt[ik]).astype(jnp.float32) * scale
        s = jnp.where(mask[:, None], s, NEG)
        m_new = jax.lax.stop_gradient(m.at[iq].max(s.max(axis=-1)))  # a constant per query: no gradient
        mt = m_new[iq]
        first = ~((iq[:, None] == iq[None, :]) & earlier).any(axis=1)  # rescale each touched slot once
        grow = jnp.where(first[:, None, None], jnp.exp(m[iq] - mt) - 1.0, 0.0)  # (c, H, bq)
        p = jnp.where(mask[:, None], jnp.exp(s - mt[..., None]), 0.0)
        l = l.at[iq].add(l[iq] * grow + p.sum(axis=-1))
        o = jnp.einsum("phqk,pkhd->pqhd", p.astype(q.dtype), vt[ik]).astype(jnp.float32)
        acc = acc.at[iq].add(acc[iq] * jnp.transpose(grow, (0, 2, 1))[..., None] + o)
        return (m_new, l, acc, done + live.sum()), None

    init = (
        jnp.full((b * nb, h, block), NEG, jnp.float32),
        jnp.zeros((b * nb, h, block), jnp.float32),
        jnp.zeros((b * nb, block, h, d), jnp.float32),
        jnp.zeros((), jnp.int32),
    )
    (_, l, acc, done), _ = jax.lax.scan(jax.checkpoint(step), init, entries)
    inv = jnp.where(l > 0, 1.0 / jnp.where(l > 0, l, 1.0), 0.0)  # padding queries: no keys, output 0
    out = (acc * jnp.transpose(inv, (0, 2, 1))[..., None]).astype(q.dtype).reshape(b, t, h, d)
    return (out, done) if executed else out


def _scan_entries(tiles: dict, chunk: int) -> tuple[tuple[jax.Array, ...], int]:
    """The tile list as the steps of :func:`blocksparse_attention`'s scan: ``(row, query block, key block, live)``,
    each (steps, chunk), the entries past ``tile_count`` and the padding to a whole chunk (the last entry repeated)
    not live; and the chunk used (at most ``chunk``, at least two steps: XLA keeps a one-step scan's residuals)."""
    row, bq, bk = (jnp.asarray(tiles[key], jnp.int32).reshape(-1) for key in SPARSE_KEYS[:3])
    count = jnp.asarray(tiles["tile_count"], jnp.int32).reshape(-1)[0]
    p_all = row.shape[0]
    chunk = max(1, min(chunk, -(-p_all // 2)))  # at least two steps: XLA keeps a one-step scan's residuals
    pad = -p_all % chunk
    ok = (jnp.arange(p_all + pad) < count).astype(jnp.int32)
    if pad:
        row, bq, bk = (jnp.pad(x, (0, pad), mode="edge") for x in (row, bq, bk))
    steps = (p_all + pad) // chunk
    return tuple(x.reshape(steps, chunk) for x in (row, bq, bk, ok)), chunk


def sharded_blocksparse_attention(q, k, v, segment_ids, tiles: dict, block: int, mesh, *, axis: str = "data", **kw):
    """:func:`blocksparse_attention` with the batch axis sharded over ``mesh``'s ``axis`` (``jax.shard_map``): each
    device runs its rows on its own tile list, no communication. ``tiles``: the per-device lists of
    :func:`~datatools.kernels.attention_blocks.device_tile_lists` ((devices, P) arrays; ``tile_row`` within the
    device's rows), devices in mesh order. ``executed=True`` also returns the tiles each device computed (int32
    (devices,))."""
    spec = PartitionSpec(axis)
    want = bool(kw.pop("executed", False))

    def local(q, k, v, seg, row, tq, tk, count):
        mine = {"tile_row": row[0], "tile_q": tq[0], "tile_k": tk[0], "tile_count": count[0]}
        out, done = blocksparse_attention(q, k, v, seg, mine, block, executed=True, **kw)
        return out, done.reshape(1)

    args = (q, k, v, segment_ids, *(jnp.asarray(tiles[key], jnp.int32) for key in SPARSE_KEYS))
    out, done = jax.shard_map(  # check_vma off: the scan's fresh carry is per device, as its inputs
        local, mesh=mesh, in_specs=(spec,) * len(args), out_specs=(spec, spec), check_vma=False
    )(*args)
    return (out, done) if want else out
