"""``splash``: JAX's splash attention (TPU) on packed rows, as MaxText and Levanter use it: a causal mask per head
and ``segment_ids`` as splash's ``SegmentIds``, every tile under the diagonal visited. Off a TPU it runs in TPU
interpret mode (exact, slow), entered when the forward and backward passes are traced (a custom VJP).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, cast

import jax
import jax.numpy as jnp

from datatools.train.attention import zero_padding

if TYPE_CHECKING:
    from jax.experimental.pallas.ops.tpu.splash_attention.splash_attention_kernel import SplashAttentionKernel

_Grads = tuple[jax.Array, jax.Array, jax.Array]  # d(output) / d(q, k, v)


def tpu_interpret() -> AbstractContextManager[object]:
    """A context under which Pallas TPU kernels run in TPU interpret mode, off a TPU (a no-op on one)."""
    if jax.default_backend() == "tpu":
        return contextlib.nullcontext()
    from jax.experimental.pallas import tpu as pltpu

    return pltpu.force_tpu_interpret_mode(pltpu.InterpretParams())


@functools.lru_cache(maxsize=16)
def _kernel(ctx: int, heads: int, block: int) -> SplashAttentionKernel:
    """Splash's kernel for one row of ``heads`` causal heads of ``ctx`` tokens, tiles of ``block`` tokens."""
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
        kernel: SplashAttentionKernel = sa.make_splash_mha_single_device(mask, block_sizes=sizes)  # (untyped)
        return kernel


def _run(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array, block: int) -> jax.Array:
    """Splash on every row: q, k, v (B, H, T, D), segment_ids (B, T) int32; (B, H, T, D)."""
    from jax.experimental.pallas.ops.tpu.splash_attention import SegmentIds

    kernel = _kernel(q.shape[2], q.shape[1], block)

    def one_row(args: tuple[jax.Array, jax.Array, jax.Array, jax.Array]) -> jax.Array:
        q, k, v, s = args
        out = kernel(q, k, v, segment_ids=SegmentIds(q=s, kv=s))
        return cast(jax.Array, out)  # the output alone: the kernel was made without save_residuals

    if jax.default_backend() == "tpu":  # splash is per row: vmap adds the batch to its grid (as MaxText does)
        rows: jax.Array = jax.vmap(lambda *args: one_row(args))(q, k, v, segment_ids)  # (vmap's result is untyped)
        return rows
    # TPU interpret mode (jax 0.10.2) rejects a vmapped splash (its dimension semantics miss the batch axis)
    mapped: jax.Array = jax.lax.map(one_row, (q, k, v, segment_ids))  # (lax.map is untyped)
    return mapped


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _splash(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array, block: int) -> jax.Array:
    with tpu_interpret():
        return _run(q, k, v, segment_ids, block)


def _splash_fwd(
    q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array, block: int
) -> tuple[jax.Array, Callable[[jax.Array], _Grads]]:
    with tpu_interpret():
        return jax.vjp(lambda q, k, v: _run(q, k, v, segment_ids, block), q, k, v)  # (out, vjp: the residuals)


def _splash_bwd(
    block: int, vjp: Callable[[jax.Array], _Grads], dout: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, None]:
    with tpu_interpret():  # splash's backward kernels are built here, when the gradient is traced
        dq, dk, dv = vjp(dout)
    return dq, dk, dv, None


_splash.defvjp(_splash_fwd, _splash_bwd)


def splash_attention(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array, block: int = 128) -> jax.Array:
    """The same function as :func:`datatools.train.attention.dense_attention`, by splash attention; q, k, v
    (B, T, H, D), T a multiple of ``block`` (splash's tile size in tokens, 128 suits every TPU) or below it."""
    t = q.shape[1]
    if t % min(block, t):
        raise ValueError(f"splash: attention_block={block} must divide ctx={t}")
    scale = 1.0 / math.sqrt(q.shape[-1])  # splash does not scale the scores: scale the queries
    qt, kt, vt = (jnp.swapaxes(x, 1, 2) for x in ((q * scale).astype(q.dtype), k, v))  # (B, H, T, D)
    out = jnp.swapaxes(_splash(qt, kt, vt, segment_ids.astype(jnp.int32), block), 1, 2)
    return zero_padding(out, segment_ids, q.dtype)
