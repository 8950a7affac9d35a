"""Attention for packed rows: ``dense`` (the reference), ``fused`` and ``blocksparse`` (the accelerator kernels are
in ``attention_splash``, ``attention_pallas`` and ``attention_gpu``). All compute one function: query t attends to
key s when s <= t, both are in the same segment and neither is padding; a padding query's output is 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal, Required, TypedDict, Unpack, overload

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec
from jax.typing import ArrayLike

NEG = -1e30
SPARSE_KEYS = ("tile_row", "tile_q", "tile_k", "tile_count")  # what blocksparse reads of a tile list
CHUNK = 256  # tile-list entries a step of blocksparse's scan, at most
Tiles = Mapping[str, ArrayLike]  # a tile list by name (SPARSE_KEYS; more entries are ignored)
# the scan's carry: running max, running sum, output accumulated, tiles computed
_Carry = tuple[jax.Array, jax.Array, jax.Array, jax.Array]


class SparseOptions(TypedDict, total=False):
    """:func:`blocksparse_attention`'s options, passed on by :func:`sharded_blocksparse_attention`."""

    chunk: int  # tile-list entries a scan step, at most
    executed: bool  # also return the tiles computed


class _Output(TypedDict, total=False):
    """:class:`SparseOptions` for the output alone."""

    chunk: int
    executed: Literal[False]


class _OutputAndCount(TypedDict, total=False):
    """:class:`SparseOptions` for the output and the tiles computed."""

    chunk: int
    executed: Required[Literal[True]]


def _mask(segment_ids: jax.Array) -> jax.Array:
    """(B, 1, T, T) bool: query t sees key s when s <= t, both in one segment, the query not padding."""
    t = segment_ids.shape[1]
    causal = jnp.tril(jnp.ones((t, t), bool))
    same = segment_ids[:, :, None] == segment_ids[:, None, :]
    return (causal[None] & same & (segment_ids > 0)[:, :, None])[:, None]


def zero_padding(out: jax.Array, segment_ids: jax.Array, dtype: jnp.dtype) -> jax.Array:
    """``out`` (B, T, H, D) with every padding query's output 0 (what every implementation returns), as ``dtype``."""
    return jnp.where((segment_ids > 0)[:, :, None, None], out, 0).astype(dtype)


def dense_attention(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array) -> jax.Array:
    """q, k, v: (B, T, H, D); segment_ids: (B, T). Returns (B, T, H, D)."""
    mask = _mask(segment_ids)
    scores = jnp.einsum("bthd,bshd->bhts", q, k).astype(jnp.float32) / math.sqrt(q.shape[-1])
    scores = jnp.where(mask, scores, NEG)
    probs = jax.nn.softmax(scores, axis=-1)
    probs = jnp.where(mask, probs, 0.0).astype(q.dtype)  # padding queries attend to nothing
    return jnp.einsum("bhts,bshd->bthd", probs, v)


def fused_attention(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array) -> jax.Array:
    """``jax.nn.dot_product_attention`` with the segment mask: cuDNN's fused kernel where JAX can use it (a GPU),
    XLA's otherwise (the CPU tests). Padding queries' outputs are zeroed, as in :func:`dense_attention`."""
    out = jax.nn.dot_product_attention(q, k, v, mask=_mask(segment_ids))
    return zero_padding(out, segment_ids, q.dtype)


@overload
def blocksparse_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array,
    tiles: Tiles,
    block: int,
    chunk: int = ...,
    *,
    executed: Literal[False] = ...,
) -> jax.Array: ...


@overload
def blocksparse_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array,
    tiles: Tiles,
    block: int,
    chunk: int = ...,
    *,
    executed: Literal[True],
) -> tuple[jax.Array, jax.Array]: ...


def blocksparse_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array,
    tiles: Tiles,
    block: int,
    chunk: int = CHUNK,
    *,
    executed: bool = False,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """The same function as :func:`dense_attention` on q, k, v (B, T, H, D), T a multiple of ``block`` (tokens),
    computed on the listed tiles only: pure JAX, cost about ctx x document length.

    ``tiles``: the loader's tile list (:func:`datatools.kernels.attention_blocks.tile_list`): int arrays
    ``tile_row``, ``tile_q``, ``tile_k`` (P,) and ``tile_count`` (1,) (entries past it are padding), in any order,
    processed ``chunk`` entries a step of a rematerialized ``lax.scan`` with a running softmax per (row, query
    block). Fed every causal tile, it is a causal flash kernel (the benchmark's baseline). ``executed``: also return
    the tiles the scan computed (int32 scalar: the live entries it visited).
    """
    _check_tiles(tiles, q.shape[1], block)
    b, t, h, d = q.shape
    nb = t // block
    entries, chunk = _scan_entries(tiles, chunk)
    qt, kt, vt = (x.reshape(b * nb, block, h, d) for x in (q, k, v))  # one entry per (row, block)
    seg = segment_ids.reshape(b * nb, block)
    offs = jnp.arange(block)
    scale = 1.0 / math.sqrt(d)
    earlier = jnp.tril(jnp.ones((chunk, chunk), bool), -1)  # entry j < entry i of a chunk

    def step(carry: _Carry, entries: tuple[jax.Array, ...]) -> tuple[_Carry, None]:
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

    (_, l, acc, done), _ = jax.lax.scan(jax.checkpoint(step), _empty_carry(b * nb, h, block, d), entries)
    inv = jnp.where(l > 0, 1.0 / jnp.where(l > 0, l, 1.0), 0.0)  # padding queries: no keys, output 0
    out = (acc * jnp.transpose(inv, (0, 2, 1))[..., None]).astype(q.dtype).reshape(b, t, h, d)
    return (out, done) if executed else out


def _check_tiles(tiles: Tiles, t: int, block: int) -> None:
    """ValueError when the tile list lacks an entry blocksparse reads, or ``block`` does not divide ctx ``t``
    (tokens)."""
    missing = [key for key in SPARSE_KEYS if key not in tiles]
    if missing:
        raise ValueError(f"blocksparse: the tile list lacks {', '.join(missing)} (from tile_list)")
    if t % block:
        raise ValueError(f"blocksparse: attention_block={block} must divide ctx={t}")


def _empty_carry(rows: int, heads: int, block: int, d: int) -> _Carry:
    """The scan's carry before any tile, per (row, query block) of ``block`` queries: running max NEG, running
    sum 0, output 0 (float32), and no tile computed (int32)."""
    return (
        jnp.full((rows, heads, block), NEG, jnp.float32),
        jnp.zeros((rows, heads, block), jnp.float32),
        jnp.zeros((rows, block, heads, d), jnp.float32),
        jnp.zeros((), jnp.int32),
    )


def _scan_entries(tiles: Tiles, chunk: int) -> tuple[tuple[jax.Array, ...], int]:
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


@overload
def sharded_blocksparse_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array,
    tiles: Tiles,
    block: int,
    mesh: Mesh,
    *,
    axis: str = ...,
    **kw: Unpack[_Output],
) -> jax.Array: ...


@overload
def sharded_blocksparse_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array,
    tiles: Tiles,
    block: int,
    mesh: Mesh,
    *,
    axis: str = ...,
    **kw: Unpack[_OutputAndCount],
) -> tuple[jax.Array, jax.Array]: ...


def sharded_blocksparse_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array,
    tiles: Tiles,
    block: int,
    mesh: Mesh,
    *,
    axis: str = "data",
    **kw: Unpack[SparseOptions],
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """:func:`blocksparse_attention` with the batch axis sharded over ``mesh``'s ``axis`` (``jax.shard_map``): each
    device runs its rows on its own tile list, no communication. ``tiles``: the per-device lists of
    :func:`~datatools.kernels.attention_blocks.device_tile_lists` ((devices, P) arrays; ``tile_row`` within the
    device's rows), devices in mesh order. ``executed=True`` also returns the tiles each device computed (int32
    (devices,))."""
    spec = PartitionSpec(axis)  # type: ignore[no-untyped-call]  # jax's PartitionSpec.__new__ is untyped
    want = bool(kw.pop("executed", False))
    chunk = kw.get("chunk", CHUNK)

    def local(
        q: jax.Array,
        k: jax.Array,
        v: jax.Array,
        seg: jax.Array,
        row: jax.Array,
        tq: jax.Array,
        tk: jax.Array,
        count: jax.Array,
    ) -> tuple[jax.Array, jax.Array]:
        mine = {"tile_row": row[0], "tile_q": tq[0], "tile_k": tk[0], "tile_count": count[0]}
        out, done = blocksparse_attention(q, k, v, seg, mine, block, chunk, executed=True)
        return out, done.reshape(1)

    args = (q, k, v, segment_ids, *(jnp.asarray(tiles[key], jnp.int32) for key in SPARSE_KEYS))
    out, done = jax.shard_map(  # check_vma off: the scan's fresh carry is per device, as its inputs
        local, mesh=mesh, in_specs=(spec,) * len(args), out_specs=(spec, spec), check_vma=False
    )(*args)
    return (out, done) if want else out
