"""A small decoder-only transformer in JAX (a pytree of arrays): pre-norm (RMSNorm), RoPE, segment-aware causal
attention. Packed documents never see each other, and RoPE rotates by the per-segment ``positions``, so a
document packed at offset 700 is computed exactly as if it were alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Literal, TypedDict

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from datatools.base.checks import ATTENTIONS, MAX_CTX, MAX_VOCAB
from datatools.kernels.attention_blocks import TILE_KEYS
from datatools.pipeline.schema import OneOf, field
from datatools.train.attention import (
    SPARSE_KEYS,
    blocksparse_attention,
    dense_attention,
    fused_attention,
    sharded_blocksparse_attention,
)

Batch = Mapping[str, jax.Array]  # a device batch by field: tokens, segment_ids, positions, loss_mask, ... (B, T)
Blocks = dict[str, jax.Array]  # a batch's tile lists by name (attention_keys)


class LayerParams(TypedDict):
    """One transformer layer's parameters (float32): the norms' scales (d,) and the projections (in, out)."""

    attn_norm: jax.Array
    wq: jax.Array
    wk: jax.Array
    wv: jax.Array
    wo: jax.Array
    mlp_norm: jax.Array
    w_gate: jax.Array
    w_up: jax.Array
    w_down: jax.Array


class Params(TypedDict):
    """The model's parameters, a pytree (float32): embedding (vocab, d), layers, final norm (d,), output
    projection (d, vocab)."""

    embed: jax.Array
    layers: list[LayerParams]
    final_norm: jax.Array
    unembed: jax.Array


@dataclass(frozen=True)
class ModelConfig:
    """Model size. ``tiny`` presets run on a CPU; ~100M parameters is d_model 768, 12 layers, 12 heads."""

    vocab_size: int = field(4096, minimum=2, maximum=MAX_VOCAB)
    d_model: int = field(128, minimum=8, maximum=1 << 16)
    n_layers: int = field(2, minimum=1, maximum=1024)
    n_heads: int = field(4, minimum=1, maximum=1024)
    d_ff: int | None = field(None, minimum=1, maximum=1 << 18, doc="default 4 * d_model")
    rope_theta: float = field(10000.0, minimum=1.0, maximum=1e12)
    dtype: Literal["float32", "bfloat16"] = field("float32", doc="activations and matmuls")
    attention: Annotated[str, OneOf(ATTENTIONS)] = field(
        "dense",
        doc="dense: the whole ctx x ctx matrix, masked; blocksparse: only the tiles packing leaves "
        "non-empty (pure JAX); fused: jax.nn.dot_product_attention (XLA); splash: JAX's splash "
        "attention (TPU); pallas_blocksparse: our Pallas TPU kernel over the loader's non-empty tiles; "
        "pallas_gpu: Pallas GPU flash attention with segment ids; cudnn: cuDNN flash attention (GPU). "
        "The Pallas kernels run interpreted (slow, for correctness) off their device",
    )
    attention_block: int = field(
        128,
        minimum=8,
        maximum=MAX_CTX,
        doc="tile size (tokens) of the blocksparse and Pallas kernels; must divide ctx "
        "(pallas_blocksparse: a multiple of 128)",
    )

    def check(self, where: str) -> None:
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"config: {where}.d_model={self.d_model} must split into {self.n_heads} heads of an even size"
            )

    @property
    def ff(self) -> int:
        return self.d_ff or 4 * self.d_model

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def num_params(self) -> int:
        """Parameters N, the input embedding excluded (as in the 6N of the FLOP count)."""
        d, f = self.d_model, self.ff
        per_layer = 4 * d * d + 3 * d * f + 2 * d
        return self.n_layers * per_layer + d + d * self.vocab_size  # + final norm + output projection


def init_params(cfg: ModelConfig, key: jax.Array) -> Params:
    """Parameters (float32): scaled normal init; the output projection is separate from the embedding."""
    d, f, v = cfg.d_model, cfg.ff, cfg.vocab_size
    keys = iter(jax.random.split(key, 2 + 7 * cfg.n_layers))

    def normal(shape: tuple[int, int], scale: float) -> jax.Array:
        return jax.random.normal(next(keys), shape, jnp.float32) * scale

    layers: list[LayerParams] = [
        {
            "attn_norm": jnp.ones((d,), jnp.float32),
            "wq": normal((d, d), d**-0.5),
            "wk": normal((d, d), d**-0.5),
            "wv": normal((d, d), d**-0.5),
            "wo": normal((d, d), (2 * cfg.n_layers * d) ** -0.5),
            "mlp_norm": jnp.ones((d,), jnp.float32),
            "w_gate": normal((d, f), d**-0.5),
            "w_up": normal((d, f), d**-0.5),
            "w_down": normal((f, d), (2 * cfg.n_layers * f) ** -0.5),
        }
        for _ in range(cfg.n_layers)
    ]
    return {
        "embed": normal((v, d), 1.0),
        "layers": layers,
        "final_norm": jnp.ones((d,), jnp.float32),
        "unembed": normal((d, v), d**-0.5),
    }


def _rms_norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    """RMSNorm of ``x`` over its last axis, times ``scale``, in ``x``'s dtype (computed in float32)."""
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)
    return (y * scale).astype(x.dtype)


def _rope(x: jax.Array, positions: jax.Array, theta: float) -> jax.Array:
    """Rotate (B, T, H, D) by per-token positions (B, T)."""
    half = x.shape[-1] // 2
    freqs = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = positions.astype(jnp.float32)[..., None] * freqs  # (B, T, half)
    cos, sin = jnp.cos(angles)[:, :, None, :], jnp.sin(angles)[:, :, None, :]
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def attention_keys(attention: str) -> tuple[str, ...]:
    """The batch fields an attention implementation reads besides the canonical ones (the loader's tile lists)."""
    return {"blocksparse": SPARSE_KEYS, "pallas_blocksparse": TILE_KEYS}.get(attention, ())


def attend(
    cfg: ModelConfig,
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array,
    blocks: Blocks | None,
    mesh: Mesh | None = None,
) -> jax.Array:
    """Segment-aware causal attention of (B, T, H, D) q, k, v by ``cfg.attention`` (all compute one function).
    ``mesh``: for ``blocksparse``, the batch axis is sharded over its ``data`` axis and ``blocks`` holds one tile
    list per device (:func:`~datatools.train.attention.sharded_blocksparse_attention`); None: one list."""
    name = cfg.attention
    if attention_keys(name):  # blocksparse, pallas_blocksparse: the loader's tile lists
        if blocks is None:
            raise ValueError(f"attention: {name} needs the batch's {' / '.join(attention_keys(name))}")
        if name == "blocksparse" and mesh is not None:
            return sharded_blocksparse_attention(q, k, v, segment_ids, blocks, cfg.attention_block, mesh)
        if name == "blocksparse":
            return blocksparse_attention(q, k, v, segment_ids, blocks, cfg.attention_block)
        from datatools.train.attention_pallas import pallas_blocksparse_attention

        # (the kernel is untyped)
        out: jax.Array = pallas_blocksparse_attention(q, k, v, segment_ids, blocks, cfg.attention_block)
        return out
    if name == "splash":
        from datatools.train.attention_splash import splash_attention

        return splash_attention(q, k, v, segment_ids, cfg.attention_block)
    if name == "pallas_gpu":
        from datatools.train.attention_gpu import pallas_gpu_attention

        return pallas_gpu_attention(q, k, v, segment_ids, cfg.attention_block)
    if name == "cudnn":
        from datatools.train.attention_gpu import cudnn_attention

        return cudnn_attention(q, k, v, segment_ids)
    return fused_attention(q, k, v, segment_ids) if name == "fused" else dense_attention(q, k, v, segment_ids)


def forward(
    params: Params,
    cfg: ModelConfig,
    tokens: jax.Array,
    segment_ids: jax.Array,
    positions: jax.Array,
    blocks: Blocks | None = None,
    mesh: Mesh | None = None,
) -> jax.Array:
    """Logits (B, T, vocab), float32. ``blocks``: the batch's non-empty tiles (:func:`attention_keys`), for
    ``attention: blocksparse`` / ``pallas_blocksparse``; ``mesh``: their per-device lists' mesh (:func:`attend`)."""
    dt = jnp.dtype(cfg.dtype)
    b, t = tokens.shape
    h, hd = cfg.n_heads, cfg.head_dim
    x = params["embed"][tokens].astype(dt)
    for layer in params["layers"]:
        y = _rms_norm(x, layer["attn_norm"])
        q = (y @ layer["wq"].astype(dt)).reshape(b, t, h, hd)
        k = (y @ layer["wk"].astype(dt)).reshape(b, t, h, hd)
        v = (y @ layer["wv"].astype(dt)).reshape(b, t, h, hd)
        q, k = _rope(q, positions, cfg.rope_theta), _rope(k, positions, cfg.rope_theta)
        o = attend(cfg, q, k, v, segment_ids, blocks, mesh).reshape(b, t, cfg.d_model)
        x = x + o @ layer["wo"].astype(dt)
        y = _rms_norm(x, layer["mlp_norm"])
        gate = jax.nn.silu(y @ layer["w_gate"].astype(dt))
        x = x + (gate * (y @ layer["w_up"].astype(dt))) @ layer["w_down"].astype(dt)
    x = _rms_norm(x, params["final_norm"])
    return (x @ params["unembed"].astype(dt)).astype(jnp.float32)


def token_nll(params: Params, cfg: ModelConfig, batch: Batch, mesh: Mesh | None = None) -> jax.Array:
    """Next-token cross-entropy (nats, float32, (B, T)) at every position: position t predicts token t + 1 (the
    last position predicts a 0; weigh it out with the loss mask). ``mesh``: see :func:`attend`."""
    blocks = {k: batch[k] for k in attention_keys(cfg.attention)} or None
    logits = forward(params, cfg, batch["tokens"], batch["segment_ids"], batch["positions"], blocks, mesh)
    targets = jnp.concatenate([batch["tokens"][:, 1:], jnp.zeros_like(batch["tokens"][:, :1])], axis=1)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]


def loss_fn(params: Params, cfg: ModelConfig, batch: Batch) -> tuple[jax.Array, jax.Array]:
    """(mean next-token cross-entropy over the loss mask, number of targets); the mask is 0 at padding and at a
    document's last token: no target crosses a document."""
    weights = batch["loss_mask"].astype(jnp.float32)
    count = weights.sum()
    return (token_nll(params, cfg, batch) * weights).sum() / jnp.maximum(count, 1.0), count


def weighted_loss_sum(
    params: Params, cfg: ModelConfig, batch: Batch, mesh: Mesh | None = None
) -> tuple[jax.Array, jax.Array]:
    """(sum of ``loss_weights * cross-entropy``, number of targets): the numerator of the weighted objective,
    not yet divided (the step divides by the global weight sum). Without ``loss_weights`` the loss mask weighs
    (``token`` weighting). ``mesh``: see :func:`attend`."""
    mask = batch["loss_mask"].astype(jnp.float32)
    weights = batch["loss_weights"].astype(jnp.float32) if "loss_weights" in batch else mask
    return (token_nll(params, cfg, batch, mesh) * weights).sum(), mask.sum()
