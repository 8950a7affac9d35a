"""``pallas_blocksparse``: a Pallas TPU attention kernel whose grid runs over the loader's non-empty tiles only.

The loader's tile list (:func:`datatools.kernels.attention_blocks.tile_list`) is the scalar-prefetch operand whose
index maps fetch tile ``i`` at grid step ``i`` of the (heads, tiles listed) grid. Forward: a flash-style running
softmax in VMEM, also writing the log-sum-exp; backward (``jax.custom_vjp``): a dq pass in (row, query block)
order and a dk/dv pass in (row, key block) order. Full tiles skip the mask; every pass counts its grid steps (for
HFU). Blocks are multiples of 128 tokens; off a TPU the kernels run in TPU interpret mode (exact, slow).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from datatools.kernels.attention_blocks import TILE_KEYS
from datatools.train.attention import NEG  # a masked score: finite, so exp(NEG - max) is 0, never NaN

LANES = 128  # TPU lane width: block sizes are multiples of it
NT = (((1,), (1,)), ((), ()))  # dot_general: contract the last axes (A @ B^T)


class Geometry(NamedTuple):
    """A pass's static tile geometry (Python numbers: static under tracing, safe as a kernel's keyword): ``block``
    tokens a side of a tile (a multiple of 128), ``scale`` the scores' factor (1 / sqrt(head dim))."""

    block: int
    scale: float


class Tile(NamedTuple):
    """Where a grid step's tile is: its query block ``qb`` and key block ``kb`` (scalars read from the prefetched
    list) and the segment ids of its queries ``sq`` and keys ``sk`` (int32 blocks, shaped as :func:`_mask` says)."""

    qb: jax.Array
    kb: jax.Array
    sq: jax.Array
    sk: jax.Array


class Pass(NamedTuple):
    """One pass over the tile list, as :func:`_call` runs it: the kernel (its geometry bound), ``major`` (``"q"`` or
    ``"k"``: the block whose runs it accumulates), the BlockSpecs of its operands and outputs, the outputs' shapes
    (``jax.ShapeDtypeStruct``) and its VMEM scratch."""

    kernel: Callable[..., None]
    major: str
    in_specs: list[pl.BlockSpec]
    out_specs: list[pl.BlockSpec]
    out_shape: list[jax.ShapeDtypeStruct]
    scratch: list[pl.MemoryRef]


class Residuals(NamedTuple):
    """What the backward passes need (the custom VJP's residuals): q, k, v (B, H, T, D), the segment ids (B, T),
    the tile list's prefetch operands (q-major) and its order by key block, the forward's output and log-sum-exp."""

    q: jax.Array
    k: jax.Array
    v: jax.Array
    segment_ids: jax.Array
    tiles: tuple[jax.Array, ...]
    by_k: jax.Array
    out: jax.Array
    lse: jax.Array


def _mask(tile, block, q_axis=0):
    """(block, block) bool: may the query attend to the key in ``tile`` (a :class:`Tile`), the queries along
    ``q_axis`` (0: rows, sq (block, 1), sk (1, block); 1: columns, sq (1, block), sk (block, 1))."""
    qpos = tile.qb * block + jax.lax.broadcasted_iota(jnp.int32, (block, block), q_axis)
    kpos = tile.kb * block + jax.lax.broadcasted_iota(jnp.int32, (block, block), 1 - q_axis)
    return (kpos <= qpos) & (tile.sq == tile.sk) & (tile.sq > 0)


FULL, FIRST, LAST = 1, 2, 4  # bits of a tile's flags


def _flags(row, major, full, count):
    """Per tile: FULL, FIRST (it starts a run of equal (row, major) in the list: initialise the accumulators) and
    LAST (it ends one: write the result out), one int32 each, so a grid step reads one scalar for all three."""
    idx = jnp.arange(row.shape[0])
    same_prev = (idx > 0) & (row == jnp.roll(row, 1)) & (major == jnp.roll(major, 1))
    same_next = (idx + 1 < count) & (row == jnp.roll(row, -1)) & (major == jnp.roll(major, -1))
    return (full * FULL + jnp.where(same_prev, 0, FIRST) + jnp.where(same_next, 0, LAST)).astype(jnp.int32)


def _tile_step(flags_ref, steps_ref, init, accumulate, finish) -> None:
    """A grid step of every pass: counted in ``steps_ref``; ``init()`` at the first tile of a run,
    ``accumulate(full)``, ``finish()`` (write the result out) at its last."""

    @pl.when((pl.program_id(0) == 0) & (pl.program_id(1) == 0))
    def _():
        steps_ref[0] = 0

    steps_ref[0] += 1
    flags = flags_ref[pl.program_id(1)]
    pl.when(flags & FIRST != 0)(init)
    pl.when(flags & FULL != 0)(lambda: accumulate(True))
    pl.when(flags & FULL == 0)(lambda: accumulate(False))
    pl.when(flags & LAST != 0)(finish)


def _fwd_kernel(
    row_ref,
    qb_ref,
    kb_ref,
    flags_ref,
    q_ref,
    k_ref,
    v_ref,
    sq_ref,
    sk_ref,
    o_ref,
    lse_ref,
    steps_ref,
    m_sc,
    l_sc,
    acc_sc,
    *,
    geometry,
):
    i = pl.program_id(1)

    def init():
        m_sc[...] = jnp.full(m_sc.shape, NEG, jnp.float32)
        l_sc[...] = jnp.zeros(l_sc.shape, jnp.float32)
        acc_sc[...] = jnp.zeros(acc_sc.shape, jnp.float32)

    def accumulate(full: bool):
        v = v_ref[...]
        s = jax.lax.dot_general(q_ref[...], k_ref[...], NT, preferred_element_type=jnp.float32) * geometry.scale
        if not full:
            mask = _mask(Tile(qb_ref[i], kb_ref[i], sq_ref[...], sk_ref[...]), geometry.block)
            s = jnp.where(mask, s, NEG)
        m_prev = m_sc[...]
        m_new = jnp.maximum(m_prev, s.max(axis=1, keepdims=True))
        p = jnp.exp(s - m_new)
        if not full:
            p = jnp.where(mask, p, 0.0)
        grow = jnp.exp(m_prev - m_new)  # rescales what was summed under the old maximum
        l_sc[...] = l_sc[...] * grow + p.sum(axis=1, keepdims=True)
        acc_sc[...] = acc_sc[...] * grow + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        m_sc[...] = m_new

    def finish():
        l = l_sc[...]
        ok = l > 0  # a padding query attends to nothing: output 0
        safe = jnp.where(ok, l, 1.0)
        o_ref[...] = jnp.where(ok, acc_sc[...] / safe, 0.0).astype(o_ref.dtype)
        lse_ref[...] = jnp.where(ok, m_sc[...] + jnp.log(safe), 0.0)

    _tile_step(flags_ref, steps_ref, init, accumulate, finish)


def _probs(a, b, tile, lse, full, geometry, q_axis=0):
    """Probabilities (block, block) of ``tile`` (a :class:`Tile`) recomputed from the log-sum-exp (float32): of the
    scores ``a @ b^T``, queries x keys (``q_axis=0``: ``a`` the queries) or keys x queries (``q_axis=1``: ``a`` the
    keys); ``full``: a tile every query of which may attend to every key (no mask)."""
    s = jax.lax.dot_general(a, b, NT, preferred_element_type=jnp.float32) * geometry.scale
    if full:
        return jnp.exp(s - lse)
    mask = _mask(tile, geometry.block, q_axis)
    return jnp.where(mask, jnp.exp(jnp.where(mask, s, NEG) - lse), 0.0)


def _dq_kernel(
    row_ref,
    qb_ref,
    kb_ref,
    flags_ref,
    q_ref,
    k_ref,
    v_ref,
    sq_ref,
    sk_ref,
    do_ref,
    lse_ref,
    delta_ref,
    dq_ref,
    steps_ref,
    dq_sc,
    *,
    geometry,
):
    i = pl.program_id(1)

    def init():
        dq_sc[...] = jnp.zeros(dq_sc.shape, jnp.float32)

    def accumulate(full: bool):
        k = k_ref[...]
        tile = Tile(qb_ref[i], kb_ref[i], sq_ref[...], sk_ref[...])
        p = _probs(q_ref[...], k, tile, lse_ref[...], full, geometry)
        dp = jax.lax.dot_general(do_ref[...], v_ref[...], NT, preferred_element_type=jnp.float32)
        ds = p * (dp - delta_ref[...])
        dq_sc[...] += jnp.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32) * geometry.scale

    def finish():
        dq_ref[...] = dq_sc[...].astype(dq_ref.dtype)

    _tile_step(flags_ref, steps_ref, init, accumulate, finish)


def _dkv_kernel(
    row_ref,
    qb_ref,
    kb_ref,
    flags_ref,
    q_ref,
    k_ref,
    v_ref,
    sq_ref,
    sk_ref,
    do_ref,
    lse_ref,
    delta_ref,
    dk_ref,
    dv_ref,
    steps_ref,
    dk_sc,
    dv_sc,
    *,
    geometry,
):
    i = pl.program_id(1)

    def init():
        dk_sc[...] = jnp.zeros(dk_sc.shape, jnp.float32)
        dv_sc[...] = jnp.zeros(dv_sc.shape, jnp.float32)

    def accumulate(full: bool):
        # the tile transposed (keys x queries), as splash does: every matmul is A @ B or A @ B^T
        q, do = q_ref[...], do_ref[...]
        tile = Tile(qb_ref[i], kb_ref[i], sq_ref[...], sk_ref[...])
        pt = _probs(k_ref[...], q, tile, lse_ref[...], full, geometry, q_axis=1)
        dv_sc[...] += jnp.dot(pt.astype(do.dtype), do, preferred_element_type=jnp.float32)
        dpt = jax.lax.dot_general(v_ref[...], do, NT, preferred_element_type=jnp.float32)
        dst = pt * (dpt - delta_ref[...])
        dk_sc[...] += jnp.dot(dst.astype(q.dtype), q, preferred_element_type=jnp.float32) * geometry.scale

    def finish():
        dk_ref[...] = dk_sc[...].astype(dk_ref.dtype)
        dv_ref[...] = dv_sc[...].astype(dv_ref.dtype)

    _tile_step(flags_ref, steps_ref, init, accumulate, finish)


def _specs(block: int, d: int):
    """BlockSpecs of the operands, index maps (grid step h, i; the prefetched row, qb, kb, flags) reading the tile
    list: (q side, k side, seg q, seg k, per-query column)."""
    sq = pl.squeezed
    return (
        pl.BlockSpec((sq, sq, block, d), lambda h, i, row, qb, kb, flags: (row[i], h, qb[i], 0)),
        pl.BlockSpec((sq, sq, block, d), lambda h, i, row, qb, kb, flags: (row[i], h, kb[i], 0)),
        pl.BlockSpec((sq, block, 1), lambda h, i, row, qb, kb, flags: (row[i], qb[i], 0)),
        pl.BlockSpec((sq, 1, block), lambda h, i, row, qb, kb, flags: (row[i], 0, kb[i])),
        pl.BlockSpec((sq, sq, block, 1), lambda h, i, row, qb, kb, flags: (row[i], h, qb[i], 0)),
    )


def _transposed_specs(block: int):
    """BlockSpecs of the dk/dv pass's per-token operands, which works on transposed tiles (keys x queries):
    segment ids per query as a row (1, block) of the (B, 1, T) array, per key as a column (block, 1) of the
    (B, T, 1) array, and the per-query log-sum-exp and delta as rows of (B, H, 1, T) arrays."""
    sq = pl.squeezed
    return (
        pl.BlockSpec((sq, 1, block), lambda h, i, row, qb, kb, flags: (row[i], 0, qb[i])),
        pl.BlockSpec((sq, block, 1), lambda h, i, row, qb, kb, flags: (row[i], kb[i], 0)),
        pl.BlockSpec((sq, sq, 1, block), lambda h, i, row, qb, kb, flags: (row[i], h, 0, qb[i])),
    )


def _call(one: Pass, tiles, operands, heads: int):
    """One pass over the list: grid (heads, tiles listed), runs of equal (row, ``one.major`` block) accumulated;
    its outputs ``one.out_shape`` and last the grid steps it ran, (1,) int32 in SMEM."""
    row, qb, kb, full, count = tiles
    flags = _flags(row, qb if one.major == "q" else kb, full, count)
    out_specs = [*one.out_specs, pl.BlockSpec(memory_space=pltpu.SMEM)]
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=4,
        grid=(heads, count),
        in_specs=one.in_specs,
        out_specs=out_specs,
        scratch_shapes=one.scratch,
    )
    return pl.pallas_call(
        one.kernel,
        grid_spec=grid_spec,
        out_shape=[*one.out_shape, jax.ShapeDtypeStruct((1,), jnp.int32)],
        interpret=None if jax.default_backend() == "tpu" else pltpu.InterpretParams(),  # off a TPU: TPU interpret mode
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(row, qb, kb, flags, *operands)


def _segments(segment_ids):
    seg = segment_ids.astype(jnp.int32)
    return seg[:, :, None], seg[:, None, :]  # (B, T, 1) per query, (B, 1, T) per key


def forward(q, k, v, segment_ids, tiles, block: int):
    """(out (B, H, T, D), log-sum-exp (B, H, T, 1) float32, grid steps run) of the forward kernel; q, k, v:
    (B, H, T, D); tiles: (row, q block, k block, full, count) int32 arrays, q-major."""
    b, h, t, d = q.shape
    qs, ks, sqs, sks, cols = _specs(block, d)
    sq, sk = _segments(segment_ids)
    one = Pass(
        functools.partial(_fwd_kernel, geometry=Geometry(block, 1.0 / math.sqrt(d))),
        "q",
        [qs, ks, ks, sqs, sks],
        [qs, cols],
        [jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((b, h, t, 1), jnp.float32)],
        [pltpu.VMEM((block, 1), jnp.float32), pltpu.VMEM((block, 1), jnp.float32), pltpu.VMEM((block, d), jnp.float32)],
    )
    out, lse, steps = _call(one, tiles, (q, k, v, sq, sk), h)
    real = (segment_ids > 0)[:, None, :, None]  # query blocks of padding only are never visited
    return jnp.where(real, out, 0).astype(q.dtype), jnp.where(real, lse, 0.0), steps[0]


def backward(res: Residuals, block: int, dout):
    """(dq, dk, dv, dq grid steps, dk/dv grid steps): the two backward passes over the tile list, from the forward's
    residuals ``res`` and the output's cotangent ``dout`` (B, H, T, D)."""
    q, segment_ids, lse = res.q, res.segment_ids, res.lse
    b, h, t, d = q.shape
    geometry = Geometry(block, 1.0 / math.sqrt(d))
    delta = jnp.sum(res.out.astype(jnp.float32) * dout.astype(jnp.float32), axis=-1, keepdims=True)  # (B, H, T, 1)
    sq, sk = _segments(segment_ids)
    dq, dq_steps = _call(_dq_pass(q, geometry), res.tiles, (q, res.k, res.v, sq, sk, dout, lse, delta), h)
    kmajor = tuple(jnp.take(x, res.by_k) for x in res.tiles[:4]) + (res.tiles[4],)
    # sk is the (B, 1, T) view of the segment ids (read per query block here), sq the (B, T, 1) one (per key block)
    operands = (q, res.k, res.v, sk, sq, dout, lse.reshape(b, h, 1, t), delta.reshape(b, h, 1, t))
    dk, dv, dkv_steps = _call(_dkv_pass(res, geometry), kmajor, operands, h)
    real = (segment_ids > 0)[:, None, :, None]  # blocks no tile touches (padding only) are never written
    dq, dk, dv = (jnp.where(real, x, 0).astype(x.dtype) for x in (dq, dk, dv))
    return dq, dk, dv, dq_steps[0], dkv_steps[0]


def _dq_pass(q, geometry: Geometry) -> Pass:
    """The dq pass (q-major) of q (B, H, T, D): its operands q, k, v, seg q, seg k, dout, lse, delta."""
    qs, ks, sqs, sks, cols = _specs(geometry.block, q.shape[3])
    return Pass(
        functools.partial(_dq_kernel, geometry=geometry),
        "q",
        [qs, ks, ks, sqs, sks, qs, cols, cols],
        [qs],
        [jax.ShapeDtypeStruct(q.shape, q.dtype)],
        [pltpu.VMEM((geometry.block, q.shape[3]), jnp.float32)],
    )


def _dkv_pass(res: Residuals, geometry: Geometry) -> Pass:
    """The dk/dv pass (k-major, on transposed tiles): its operands q, k, v, seg as rows, seg as columns, dout, and
    the per-query lse and delta as rows."""
    block, d = geometry.block, res.q.shape[3]
    qs, ks, *_ = _specs(block, d)
    sq_row, sk_col, rows = _transposed_specs(block)
    return Pass(
        functools.partial(_dkv_kernel, geometry=geometry),
        "k",
        [qs, ks, ks, sq_row, sk_col, qs, rows, rows],
        [ks, ks],
        [jax.ShapeDtypeStruct(res.k.shape, res.k.dtype), jax.ShapeDtypeStruct(res.v.shape, res.v.dtype)],
        [pltpu.VMEM((block, d), jnp.float32), pltpu.VMEM((block, d), jnp.float32)],
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
def _attend(q, k, v, segment_ids, tiles, by_k, block):
    return forward(q, k, v, segment_ids, tiles, block)[0]


def _attend_fwd(q, k, v, segment_ids, tiles, by_k, block):
    out, lse, _ = forward(q, k, v, segment_ids, tiles, block)
    return out, Residuals(q, k, v, segment_ids, tiles, by_k, out, lse)


def _attend_bwd(block, res, dout):
    dq, dk, dv, _, _ = backward(res, block, dout)
    return dq, dk, dv, None, None, None


_attend.defvjp(_attend_fwd, _attend_bwd)


def _prepared(q, k, v, tiles: dict, block: int):
    """(q, k, v as (B, H, T, D), the tile list's prefetch operands, its order by key block), after checking the
    block (a multiple of 128 tokens dividing T) and the tile list."""
    if block % LANES or q.shape[1] % block:
        raise ValueError(
            f"pallas_blocksparse: attention_block={block} must be a multiple of {LANES} (the TPU lane "
            f"width) and divide ctx={q.shape[1]}"
        )
    missing = [key for key in TILE_KEYS if key not in tiles]
    if missing:
        raise ValueError(f"attention: pallas_blocksparse needs the batch's tile list ({', '.join(missing)} missing)")
    arrays = [jnp.asarray(tiles[key], jnp.int32) for key in TILE_KEYS]
    qt, kt, vt = (jnp.swapaxes(x, 1, 2) for x in (q, k, v))  # (B, H, T, D): a tile is (block, D) in VMEM
    return qt, kt, vt, (*arrays[:4], arrays[5][0]), arrays[4]


def pallas_blocksparse_attention(q, k, v, segment_ids, tiles: dict, block: int):
    """The same function as :func:`datatools.train.attention.dense_attention` on q, k, v (B, T, H, D), computed
    (and differentiated) by the Pallas kernels on the batch's tile list only (``tiles``: from
    :func:`~datatools.kernels.attention_blocks.tile_list` with the same ``block``, a multiple of 128 dividing T)."""
    qt, kt, vt, prefetch, by_k = _prepared(q, k, v, tiles, block)
    return jnp.swapaxes(_attend(qt, kt, vt, segment_ids, prefetch, by_k, block), 1, 2)


def pallas_blocksparse_steps(q, k, v, segment_ids, tiles: dict, block: int) -> dict[str, jax.Array]:
    """Grid steps each pass executes (``forward``, ``dq``, ``dkv``), counted by the kernels themselves: heads x
    the tiles listed when the kernel visits the non-empty tiles only."""
    qt, kt, vt, prefetch, by_k = _prepared(q, k, v, tiles, block)
    out, lse, fwd_steps = forward(qt, kt, vt, segment_ids, prefetch, block)
    res = Residuals(qt, kt, vt, segment_ids, prefetch, by_k, out, lse)
    *_, dq_steps, dkv_steps = backward(res, block, jnp.ones_like(out))
    return {"forward": fwd_steps, "dq": dq_steps, "dkv": dkv_steps}
