"""FLOP accounting and MFU, counted on useful (non-padding) tokens, forward + backward = 3 x forward::

    flops = 6 * N * T_useful  +  6 * L * d_model * sum over document pieces s * (s + 1)

``N``: matmul parameters (not the embedding lookup); the second term is causal attention within each document
piece of s tokens (QK^T and AV, s(s+1)/2 pairs of 2 * d_model FLOPs each, times 3). MFU = flops / step seconds /
peak FLOP/s: :data:`PEAK_FLOPS` (dense bf16, per chip), or a measured float32 matmul on a CPU.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from datatools.train.model import ModelConfig

PEAK_FLOPS = {  # dense bf16 FLOP/s per chip, from the vendors' data sheets
    "A100": 312e12,
    "H100": 989e12,  # SXM
    "H200": 989e12,
    "TPU v5p": 459e12,
    "TPU v6e": 918e12,
}


def row_lengths_sq(segment_ids: np.ndarray) -> np.ndarray:
    """int64 (rows,): per row, the sum over its pieces of s * (s + 1), s the piece's tokens (twice the causal
    query-key pairs inside its documents: the row's share of the attention FLOPs)."""
    seg = np.asarray(segment_ids)
    out = np.zeros(seg.shape[0], np.int64)
    for r, row in enumerate(seg):
        counts = np.bincount(row[row > 0]).astype(np.int64)
        out[r] = (counts * (counts + 1)).sum()
    return out


def segment_lengths_sq(segment_ids: np.ndarray) -> int:
    """sum over pieces of s * (s + 1), s the piece's tokens (segment runs within each row)."""
    return int(row_lengths_sq(segment_ids).sum())


def step_flops(cfg: ModelConfig, useful_tokens: int, pair_sum: int) -> float:
    """Training FLOPs of one step on ``useful_tokens`` real tokens (see the module docstring)."""
    return 6.0 * cfg.num_params() * useful_tokens + 6.0 * cfg.n_layers * cfg.d_model * pair_sum


def hardware_flops(cfg: ModelConfig, slots: int, computed_pairs: int) -> float:
    """FLOPs the device executes in one training step: the matmuls over every slot (padding included) and the
    query-key pairs the kernel computes (:func:`attention_pairs_computed`), 12 * L * d_model FLOPs a pair."""
    return 6.0 * cfg.num_params() * slots + 12.0 * cfg.n_layers * cfg.d_model * computed_pairs


def attention_pairs_computed(attention: str, batch: dict[str, np.ndarray], block: int) -> int:
    """Query-key pairs (per head) that ``attention`` computes for a canonical batch: dense and fused every pair;
    the block-sparse kernels the listed tiles x block^2; splash and pallas_gpu the tiles on and under the diagonal
    (cross-document ones too); cudnn the causal half."""
    rows, ctx = (int(n) for n in np.shape(batch["segment_ids"]))
    if attention in ("blocksparse", "pallas_blocksparse"):
        return int(np.asarray(batch["tile_count"]).sum()) * block * block
    if attention in ("splash", "pallas_gpu"):
        b = min(block, ctx)
        nb = ctx // b
        return rows * nb * (nb + 1) // 2 * b * b
    if attention == "cudnn":
        return rows * ctx * (ctx + 1) // 2
    return rows * ctx * ctx


def device_peak(devices: Sequence[jax.Device] | None = None) -> tuple[float, str]:
    """(peak FLOP/s of the devices, how it was found): the table for GPUs/TPUs, a measured matmul on CPU."""
    devices = devices or jax.local_devices()
    kind = devices[0].device_kind
    for name, peak in PEAK_FLOPS.items():
        if name.replace("TPU ", "").lower() in kind.lower():
            return peak * len(devices), f"{name} bf16 peak x {len(devices)}"
    if devices[0].platform == "cpu":
        return measured_cpu_peak(), "measured CPU float32 matmul"
    return float("nan"), f"unknown device {kind!r}"


def measured_cpu_peak(n: int = 1024, repeats: int = 5) -> float:
    """FLOP/s of a float32 (n x n) @ (n x n) matmul on the CPU, best of ``repeats``."""
    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        f(a).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n**3 / best
