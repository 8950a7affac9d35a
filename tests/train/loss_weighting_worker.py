"""One gradient step unpacked vs packed, sharded and accumulated (run by tests/train/test_loss_weighting.py in a
subprocess with two host-platform CPU devices).

    XLA_FLAGS=--xla_force_host_platform_device_count=2 python loss_weighting_worker.py OUT.npz

For ``token`` and ``document`` weighting, writes the flattened gradient of the objective computed two ways:

* ``ref_<weighting>``: unpacked, one document piece per row (documents longer than ctx cut at ctx, as
  ``overflow: split`` cuts them), weights written out from their definition, one device, no accumulation:
  ``grad(sum(w * ce) / sum(w))``;
* ``packed_<weighting>``: the same documents packed (best fit decreasing), rows shuffled, split into
  MICRO micro-batches of uneven token counts, weights from the loader's kernel, each micro-batch sharded over
  two devices (``Trainer.put_batch``), accumulated by ``Trainer.gradients``;

and ``control``: the per-micro-batch token mean averaged over micro-batches (what accumulating means gives), which
must differ (the comparison has power).
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np

from datatools.kernels.loss_weights import add_loss_weights
from datatools.kernels.packing import materialize, pack_lengths
from datatools.train.model import ModelConfig, init_params, token_nll
from datatools.train.step import OptimizerConfig, Trainer

CFG = ModelConfig(vocab_size=97, d_model=32, n_layers=1, n_heads=4, dtype="float32")
CTX = 64
MICRO = 4
LENGTHS = [1, 2, 3, 4, 6, 9, 17, 31, 40, 63, 64, 65, 100, 150, 250, 5, 2, 12]  # 65..250: split at ctx


def flat(tree) -> np.ndarray:
    return np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree_util.tree_leaves(tree)])


def unpacked_pieces(docs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """One piece (a document, or ctx tokens of a longer one) per row, padded to ctx."""
    pieces = [d[i : i + CTX] for d in docs for i in range(0, len(d), CTX)]
    out = {k: np.zeros((len(pieces), CTX), np.int32) for k in ("tokens", "segment_ids", "positions", "loss_mask")}
    for r, p in enumerate(pieces):
        out["tokens"][r, : len(p)] = p
        out["segment_ids"][r, : len(p)] = 1
        out["positions"][r, : len(p)] = np.arange(len(p))
        out["loss_mask"][r, : len(p) - 1] = 1
    return out


def reference_weights(batch: dict, weighting: str) -> np.ndarray:
    """The definition: token: 1 per target; document: each piece's n targets weigh 1/n (one piece per row)."""
    mask = batch["loss_mask"].astype(np.float64)
    if weighting == "token":
        return mask.astype(np.float32)
    n = mask.sum(axis=1, keepdims=True)
    return np.where(n > 0, mask / np.maximum(n, 1), 0).astype(np.float32)


def objective(params, batch, weights):
    return jnp.sum(token_nll(params, CFG, batch) * weights) / jnp.sum(weights)


def main() -> None:
    out_path = sys.argv[1]
    assert len(jax.devices()) == 2, jax.devices()
    rng = np.random.default_rng(7)
    docs = [rng.integers(2, CFG.vocab_size, n).astype(np.int32) for n in LENGTHS]
    lengths = np.array(LENGTHS)
    plan = pack_lengths(lengths, CTX, algorithm="best_fit_decreasing", overflow="split")
    packed = materialize(plan, np.concatenate(docs), np.concatenate(([0], np.cumsum(lengths))))
    rows = -(-plan.num_rows // (2 * MICRO)) * 2 * MICRO  # pad with empty rows: every micro-batch splits over 2
    order = rng.permutation(rows)
    full = {k: np.zeros((rows, CTX), np.int32) for k in packed}
    for k, v in packed.items():
        full[k][: plan.num_rows] = v
    full = {k: v[order] for k, v in full.items()}
    micro = [{k: v[i::MICRO] for k, v in full.items()} for i in range(MICRO)]  # uneven token counts
    params = init_params(CFG, jax.random.PRNGKey(0))
    trainer = Trainer(CFG, OptimizerConfig(), 1, devices=jax.devices())
    replicated = jax.device_put(params, trainer.replicated)
    unpacked = unpacked_pieces(docs)
    result = {"targets_per_micro_batch": np.array([m["loss_mask"].sum() for m in micro])}
    grad = jax.jit(jax.grad(objective))
    for weighting in ("token", "document"):
        w = reference_weights(unpacked, weighting)
        ref = grad(params, unpacked, w)
        batches = [trainer.put_batch(add_loss_weights(m, weighting)) for m in micro]
        grads, metrics = trainer.gradients(replicated, batches)
        result[f"ref_{weighting}"] = flat(ref)
        result[f"packed_{weighting}"] = flat(grads)
        result[f"weight_sum_{weighting}"] = np.asarray(metrics["weight_sum"])
        result[f"ref_weight_sum_{weighting}"] = np.asarray(w.sum(dtype=np.float64))
    means = [grad(params, m, m["loss_mask"].astype(np.float32)) for m in micro]
    result["control"] = flat(jax.tree.map(lambda *g: sum(g) / MICRO, *means))
    np.savez(out_path, **result)


if __name__ == "__main__":
    main()
