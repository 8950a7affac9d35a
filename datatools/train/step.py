"""The jitted, data-parallel training step (a 1-D ``("data",)`` mesh over the local devices, the batch sharded on
its first axis, parameters replicated). The objective (docs/loss-weighting.md) is ``sum(w * ce) / sum(w)`` over
every target of the global step (``w`` the batch's ``loss_weights``, else the loss mask): the micro-batches'
gradients of ``sum(w * ce)`` and weight sums are added and divided once, so a step's gradients do not depend on
packing, sharding or micro-batching.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from datatools.kernels.attention_blocks import TILE_KEYS
from datatools.kernels.batch_layouts import CANONICAL_KEYS
from datatools.kernels.loss_weights import SUM_KEY, WEIGHTS_KEY
from datatools.pipeline.schema import field
from datatools.train.model import Batch, ModelConfig, Params, attention_keys, init_params, weighted_loss_sum

WEIGHT_KEYS = (WEIGHTS_KEY, SUM_KEY)  # float32: per-token weights, per-row weight sums (when the loader adds them)
# the training state: "params" (Params), "opt_state" (optax's, a pytree) and "step" (int32 scalar), replicated
TrainState = dict[str, Any]
Metrics = dict[str, jax.Array]  # a step's scalars by name: loss (nats per target), targets, weight_sum, grad_norm
Totals = dict[str, jax.Array]  # summed over micro-batches: loss_sum, weight_sum, targets
Devices = Sequence[jax.Device]  # the devices to train on, in mesh order


@dataclass(frozen=True)
class OptimizerConfig:
    learning_rate: float = field(3e-3, minimum=0.0)
    warmup_steps: int = field(10, minimum=0)
    weight_decay: float = field(0.01, minimum=0.0)
    grad_clip: float = field(1.0, minimum=0.0)


def make_optimizer(cfg: OptimizerConfig, total_steps: int) -> optax.GradientTransformation:
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, cfg.learning_rate, max(cfg.warmup_steps, 1), max(total_steps, cfg.warmup_steps + 1)
    )
    return optax.chain(
        optax.clip_by_global_norm(cfg.grad_clip) if cfg.grad_clip else optax.identity(),
        optax.adamw(schedule, weight_decay=cfg.weight_decay),
    )


def _check_devices(attention: str, devices: Sequence[jax.Device]) -> None:
    """ValueError when ``attention`` cannot run on ``devices``: the Pallas TPU kernels on more than one device (not
    yet in shard_map), cuDNN's off an NVIDIA GPU."""
    if attention in ("splash", "pallas_blocksparse") and len(devices) > 1:
        raise ValueError(
            f"attention: {attention} runs on one device for now ({len(devices)} "
            "given): its Pallas kernel is not yet wrapped in shard_map"
        )
    if attention == "cudnn" and devices[0].platform != "gpu":
        raise ValueError(
            f"attention: cudnn needs an NVIDIA GPU with cuDNN (the devices are "
            f"{devices[0].platform}); use pallas_gpu (interpreted off a GPU), fused or dense"
        )


class Trainer:
    """The mesh (over ``devices``, default all local ones), the shardings, the optimizer (its schedule over
    ``total_steps``) and the jitted steps. Rows of a batch are split over the devices in contiguous slices (device
    d of D takes rows ``[d B / D, (d + 1) B / D)``, as MaxText and Levanter shard the batch axis); with
    ``attention: blocksparse`` on more than one device each device runs its own rows on its own tile list
    (``tile_devices`` lists a batch, :func:`~datatools.train.attention.sharded_blocksparse_attention`)."""

    def __init__(
        self, model: ModelConfig, optimizer: OptimizerConfig, total_steps: int, devices: Devices | None = None
    ) -> None:
        self.model, self.devices = model, list(devices or jax.local_devices())
        _check_devices(model.attention, self.devices)
        self.mesh = Mesh(np.array(self.devices), ("data",))
        self.replicated = NamedSharding(self.mesh, PartitionSpec())  # type: ignore[no-untyped-call]  # jax: untyped
        self.batch_sharding = NamedSharding(self.mesh, PartitionSpec("data"))  # type: ignore[no-untyped-call]  # (same)
        # one tile list per device (sharded like the rows), else one for the batch (replicated)
        self.tile_devices = len(self.devices) if model.attention == "blocksparse" else 1
        mesh = self.mesh if self.tile_devices > 1 else None
        self.tx = make_optimizer(optimizer, total_steps)
        cfg, tx = model, self.tx
        self._traces = 0

        def sums(params: Params, batch: Batch) -> tuple[Totals, Params]:
            (loss_sum, count), grads = jax.value_and_grad(weighted_loss_sum, has_aux=True)(params, cfg, batch, mesh)
            # the loader's per-row sums: their global sum is the denominator; without them every target weighs 1
            weight_sum = jnp.sum(batch[SUM_KEY]) if SUM_KEY in batch else count
            return {"loss_sum": loss_sum, "weight_sum": weight_sum, "targets": count}, grads

        def normalize(totals: Totals, grads: Params) -> tuple[Params, Metrics]:
            denominator = jnp.where(totals["weight_sum"] > 0, totals["weight_sum"], 1.0)
            grads = jax.tree.map(lambda g: g / denominator, grads)
            return grads, {
                "loss": totals["loss_sum"] / denominator,
                "targets": totals["targets"],
                "weight_sum": totals["weight_sum"],
                "grad_norm": optax.tree.norm(grads),
            }

        def update(state: TrainState, grads: Params, metrics: Metrics) -> tuple[TrainState, Metrics]:
            updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
            params = optax.apply_updates(state["params"], updates)
            return {"params": params, "opt_state": opt_state, "step": state["step"] + 1}, metrics

        def step(state: TrainState, batch: Batch) -> tuple[TrainState, Metrics]:
            self._traces += 1  # runs when jit traces: once per program it compiles (per batch shape)
            return update(state, *normalize(*sums(state["params"], batch)))

        def micro(params: Params, acc: tuple[Totals, Params], batch: Batch) -> tuple[Totals, Params]:
            # acc starts at zeros: one program per batch shape, not two
            self._traces += 1
            return cast(tuple[Totals, Params], jax.tree.map(jnp.add, acc, sums(params, batch)))  # (untyped: a pytree)

        self._sums = sums
        self._acc_shapes: dict[tuple[str, ...], Any] = {}  # (totals, grads) shapes by the batch's keys
        rep = self.replicated
        self.train_step = jax.jit(step, donate_argnums=(0,), out_shardings=(rep, rep))
        self._micro = jax.jit(micro, donate_argnums=(1,), out_shardings=rep)
        self._normalize = jax.jit(lambda acc: normalize(*acc), donate_argnums=(0,), out_shardings=rep)
        # the old state only is donated: the gradients' buffers have no output to go to (XLA warned at every step)
        self._update = jax.jit(update, donate_argnums=(0,), out_shardings=(rep, rep))
        self._loss_sums = jax.jit(lambda params, batch: weighted_loss_sum(params, cfg, batch, mesh), out_shardings=rep)

    def evaluate(self, params: Params, batches: Sequence[Batch]) -> float:
        """The objective (mean weighted cross-entropy, nats per target token) over batches from :meth:`put_batch`,
        no update: a held-out loss."""
        loss = targets = 0.0
        for batch in batches:
            s, n = self._loss_sums(params, batch)
            loss, targets = loss + float(s), targets + float(n)
        return loss / targets if targets else float("nan")

    def gradients(self, params: Params, batches: Sequence[Batch]) -> tuple[Params, Metrics]:
        """(gradient of the objective, metrics) over micro-batches from :meth:`put_batch` (shapes may differ)."""
        if not batches:
            raise ValueError("a step needs at least one micro-batch")
        keys = tuple(sorted(batches[0]))
        if keys not in self._acc_shapes:  # the same for every batch shape: traced once
            self._acc_shapes[keys] = jax.eval_shape(self._sums, params, batches[0])
        acc = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype, device=self.replicated), self._acc_shapes[keys])
        for batch in batches:
            acc = self._micro(params, acc, batch)
        normalized: tuple[Params, Metrics] = self._normalize(acc)
        return normalized

    def accumulate_step(self, state: TrainState, batches: Sequence[Batch]) -> tuple[TrainState, Metrics]:
        """One optimizer step over micro-batches (see :meth:`gradients`); one batch is :meth:`train_step`."""
        stepped: tuple[TrainState, Metrics]  # (the jitted steps' results are untyped)
        if len(batches) == 1:
            stepped = self.train_step(state, batches[0])
        else:
            stepped = self._update(state, *self.gradients(state["params"], batches))
        return stepped

    def init_state(self, seed: int = 0) -> TrainState:
        """The initial state (parameters of ``seed``, the optimizer's state, step 0), replicated over the mesh."""
        params = init_params(self.model, jax.random.PRNGKey(seed))
        state = {"params": params, "opt_state": self.tx.init(params), "step": jnp.zeros((), jnp.int32)}
        placed: TrainState = jax.device_put(state, self.replicated)  # (device_put's result is untyped)
        return placed

    def put_batch(self, batch: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
        """A host batch (this process's rows, dividing evenly over the local devices) as global arrays sharded
        over the mesh's data axis; a batch-wide tile list replicated, per-device lists ((devices, P), from a
        pipeline built with ``tile_devices``) one row a device."""
        rows = batch["tokens"].shape[0]
        if rows % len(self.devices):
            raise ValueError(f"batch of {rows} rows does not split over {len(self.devices)} devices")
        keys = CANONICAL_KEYS + attention_keys(self.model.attention)
        if self.tile_devices > 1 and np.ndim(batch.get("tile_count", ())) != 2:
            raise ValueError(
                f"attention: blocksparse on {self.tile_devices} devices needs one tile list per device (a pipeline "
                f"built with tile_devices={self.tile_devices})"
            )
        per_device = self.tile_devices > 1
        out = {
            k: jax.make_array_from_process_local_data(  # type: ignore[no-untyped-call]  # untyped in jax
                self.replicated if k in TILE_KEYS and not per_device else self.batch_sharding,
                np.asarray(batch[k], np.int32),
            )
            for k in keys
        }
        for k in WEIGHT_KEYS:  # split by rows like the tokens; summed over the mesh in the step
            if k in batch:
                rows_k = np.asarray(batch[k], np.float32)
                out[k] = jax.make_array_from_process_local_data(self.batch_sharding, rows_k)  # type: ignore[no-untyped-call]
        return out

    def compilations(self) -> int:
        """Programs compiled so far for the step (one per distinct batch shape)."""
        return self._traces
