"""The jitted, data-parallel training step.

``train_step(state, batch) -> (state, metrics)`` is compiled once per batch shape,
donates the old state's buffers, and runs data-parallel over every local device:
a 1-D mesh ``("data",)``, the batch sharded along its first axis, parameters and
optimizer state replicated (XLA inserts the gradient all-reduce).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from datatools.kernels.batch_layouts import CANONICAL_KEYS
from datatools.pipeline.schema import field
from datatools.train.model import TILE_LIST_KEYS, ModelConfig, attention_keys, init_params, loss_fn

BATCH_KEYS = CANONICAL_KEYS  # what the step reads from a canonical batch


@dataclass(frozen=True)
class OptimizerConfig:
    learning_rate: float = field(3e-3, minimum=0.0)
    warmup_steps: int = field(10, minimum=0)
    weight_decay: float = field(0.01, minimum=0.0)
    grad_clip: float = field(1.0, minimum=0.0)


def make_optimizer(cfg: OptimizerConfig, total_steps: int) -> optax.GradientTransformation:
    schedule = optax.warmup_cosine_decay_schedule(0.0, cfg.learning_rate, max(cfg.warmup_steps, 1),
                                                  max(total_steps, cfg.warmup_steps + 1))
    return optax.chain(optax.clip_by_global_norm(cfg.grad_clip) if cfg.grad_clip else optax.identity(),
                       optax.adamw(schedule, weight_decay=cfg.weight_decay))


class Trainer:
    """Holds the mesh, the shardings, the optimizer and the jitted step.

    Args:
      model: the model config.
      optimizer: the optimizer config.
      total_steps: for the learning-rate schedule.
      devices: the devices of the data-parallel mesh (default: all local devices).
    """

    def __init__(self, model: ModelConfig, optimizer: OptimizerConfig, total_steps: int, devices=None):
        self.model = model
        self.devices = list(devices or jax.local_devices())
        if model.attention in ("splash", "pallas_blocksparse") and len(self.devices) > 1:
            raise ValueError(f"attention: {model.attention} runs on one device for now ({len(self.devices)} "
                             "given): its Pallas kernel is not yet wrapped in shard_map")
        if model.attention == "cudnn" and self.devices[0].platform != "gpu":
            raise ValueError(f"attention: cudnn needs an NVIDIA GPU with cuDNN (the devices are "
                             f"{self.devices[0].platform}); use pallas_gpu (interpreted off a GPU), fused or dense")
        self.mesh = Mesh(np.array(self.devices), ("data",))
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self.batch_sharding = NamedSharding(self.mesh, PartitionSpec("data"))
        self.tx = make_optimizer(optimizer, total_steps)
        cfg, tx = model, self.tx
        self._traces = 0

        def step(state, batch):
            self._traces += 1  # runs when jit traces: once per program it compiles (per batch shape)
            (loss, count), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"], cfg, batch)
            updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
            params = optax.apply_updates(state["params"], updates)
            metrics = {"loss": loss, "targets": count, "grad_norm": optax.tree.norm(grads)}
            return {"params": params, "opt_state": opt_state, "step": state["step"] + 1}, metrics

        self.train_step = jax.jit(step, donate_argnums=(0,), out_shardings=(self.replicated, self.replicated))

    def init_state(self, seed: int = 0) -> dict:
        params = init_params(self.model, jax.random.PRNGKey(seed))
        state = {"params": params, "opt_state": self.tx.init(params), "step": jnp.zeros((), jnp.int32)}
        return jax.device_put(state, self.replicated)

    def put_batch(self, batch: dict) -> dict:
        """A host batch (this process's rows) as a global array sharded over the mesh's data axis.

        The rows must divide evenly over the local devices."""
        rows = batch["tokens"].shape[0]
        if rows % len(self.devices):
            raise ValueError(f"batch of {rows} rows does not split over {len(self.devices)} devices")
        keys = BATCH_KEYS + attention_keys(self.model.attention)
        return {k: jax.make_array_from_process_local_data(  # the batch-wide tile list is not split by rows
                    self.replicated if k in TILE_LIST_KEYS else self.batch_sharding, np.asarray(batch[k], np.int32))
                for k in keys}

    def compilations(self) -> int:
        """Programs compiled so far for the step (one per distinct batch shape)."""
        return self._traces
