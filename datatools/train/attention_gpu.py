"""Attention for NVIDIA GPUs on packed rows, a padding query's output 0: ``cudnn`` (the causal half of every row,
a GPU only) and ``pallas_gpu`` (JAX's Pallas flash attention with segment ids: it skips the tiles above the
diagonal, not cross-document ones; off a GPU it runs interpreted, exact and slow).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from datatools.train.attention import zero_padding


def cudnn_arguments(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array) -> dict[str, Any]:
    """The keyword arguments of ``jax.nn.dot_product_attention`` for packed rows (besides q, k, v):
    ``mask`` (B, 1, T, T) same segment, ``is_causal``, and each row's length up to its last real token."""
    seg = segment_ids.astype(jnp.int32)
    t = seg.shape[1]
    real = seg > 0
    lengths = jnp.where(real.any(axis=1), t - jnp.argmax(real[:, ::-1], axis=1), 0).astype(jnp.int32)
    return {
        "mask": (seg[:, :, None] == seg[:, None, :])[:, None],
        "is_causal": True,
        "query_seq_lengths": lengths,
        "key_value_seq_lengths": lengths,
        "scale": 1.0 / math.sqrt(q.shape[-1]),
    }


def cudnn_attention(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array) -> jax.Array:
    """cuDNN flash attention with the segment mask; a GPU only."""
    platform = jax.devices()[0].platform
    if platform != "gpu":
        raise ValueError(
            f"attention: cudnn needs an NVIDIA GPU with cuDNN (this JAX runs on {platform}); use "
            "pallas_gpu (interpreted off a GPU), fused, dense or blocksparse"
        )
    out = jax.nn.dot_product_attention(q, k, v, implementation="cudnn", **cudnn_arguments(q, k, v, segment_ids))
    return zero_padding(out, segment_ids, q.dtype)


def pallas_gpu_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array, block: int = 128
) -> jax.Array:
    """Pallas GPU flash attention with segment ids (0: padding) and causal masking (interpreted off a GPU); q, k, v
    (B, T, H, D), T a multiple of ``block`` (the kernels' tile size in tokens) or below it."""
    from jax.experimental.pallas.ops.gpu.attention import BlockSizes, mha

    t = q.shape[1]
    b = min(block, t)
    if t % b:
        raise ValueError(f"pallas_gpu: attention_block={block} must divide ctx={t}")
    sizes = BlockSizes(block_q=b, block_k=b, block_q_dkv=b, block_kv_dkv=b, block_q_dq=b, block_kv_dq=b)
    out = mha(
        q,
        k,
        v,
        segment_ids.astype(jnp.int32),
        sm_scale=1.0 / math.sqrt(q.shape[-1]),
        causal=True,
        block_sizes=sizes,
        interpret=jax.devices()[0].platform != "gpu",
    )
    return zero_padding(out, segment_ids, q.dtype)
