"""``splash``: JAX's splash attention (TPU) on packed rows, as MaxText and Levanter use it: a causal mask per head
and ``segment_ids`` as splash's ``SegmentIds``, every tile under the diagonal visited. Off a TPU it runs in TPU
interpret mode (exact, slow), entered when the forward and backward passes are traced (a custom VJP).
"""

from __future__ import annotations

import contextlib
import functools
import math

import jax
import jax.numpy as jnp

from datatools.train.attention import zero_padding


def tpu_interpret():
    """A context under which Pallas TPU kernels run in TPU interpret mode, off a TPU (a no-op on one)."""
    if jax.default_backend() == "tpu":
        return contextlib.nullcontext()
    from jax.experimental.pallas import tpu as pltpu

    return pltpu.force_tpu_interpret_mode(pltpu.InterpretParams())


@functools.lru_cache(maxsize=16)
def _kernel(ctx: int, heads: int, block: int):
    from jax.experimental.pallas.ops.tpu import splash_attention as sa

    b = min(block, ctx)
    sizes = sa.BlockSizes(
        block_q=b,
        block_kv=b,
        block_kv_compute=b,
        block_q_dkv=b,
        block_kv_dkv=b,
        block_kv_dkv_compute=b,
        block_q_dq=b,
        block_kv_dq=b,
    )
    mask = sa.MultiHeadMask([sa.CausalMask((ctx, ctx)) for _ in range(heads)])
    with jax.ensure_compile_time_eval():  # its tile tables are constants (cached), not values of a trace
        return sa.make_splash_mha_single_device(mask, block_sizes=sizes)


def _run(q, k, v, segment_ids, block):
    from jax.experimental.pallas.ops.tpu.splash_attention import SegmentIds

    kernel = _kernel(q.shape[2], q.shape[1], block)

    def one_row(args):
        q, k, v, s = args
        return kernel(q, k, v, segment_ids=SegmentIds(q=s, kv=s))

    if jax.default_backend() == "tpu":  # splash is per row: vmap adds the batch to its grid (as MaxText does)
        return jax.vmap(lambda *args: one_row(args))(q, k, v, segment_ids)
    # TPU interpret mode (jax 0.10.2) rejects a vmapped splash (its dimension semantics miss the batch axis)
    return jax.lax.map(one_row, (q, k, v, segment_ids))


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _splash(q, k, v, segment_ids, block):
    with tpu_interpret():
        return _run(q, k, v, segment_ids, block)


def _splash_fwd(q, k, v, segment_ids, block):
    with tpu_interpret():
        return jax.vjp(lambda q, k, v: _run(q, k, v, segment_ids, block), q, k, v)  # (out, vjp: the residuals)


def _splash_bwd(block, vjp, dout):
    with tpu_interpret():  # splash's backward kernels are built here, when the gradient is traced
        dq, dk, dv = vjp(dout)
    return dq, dk, dv, None


_splash.defvjp(_splash_fwd, _splash_bwd)


def splash_attention(q, k, v, segment_ids, block: int = 128):
    """The same function as :func:`datatools.train.attention.dense_attention`, by splash attention; q, k, v
    (B, T, H, D), T a multiple of ``block`` (splash's tile size in tokens, 128 suits every TPU) or below it."""
    t = q.shape[1]
    if t % min(block, t):
        raise ValueError(f"splash: attention_block={block} must divide ctx={t}")
    scale = 1.0 / math.sqrt(q.shape[-1])  # splash does not scale the scores: scale the queries
    qt, kt, vt = (jnp.swapaxes(x, 1, 2) for x in ((q * scale).astype(q.dtype), k, v))  # (B, H, T, D)
    out = jnp.swapaxes(_splash(qt, kt, vt, segment_ids.astype(jnp.int32), block), 1, 2)
    return zero_padding(out, segment_ids, q.dtype)
