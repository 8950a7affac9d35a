"""The train step on 8 host-platform CPU devices with block-sparse attention sharded over them (run by
test_sharded_train.py in a fresh process: XLA_FLAGS must be set before jax starts):

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python sharded_train_worker.py OUT.npz

Writes, for one packed batch of 16 rows: the step's loss and gradient norm on one device (dense attention) and on 8
(``Trainer`` with ``attention: blocksparse``: each device its own rows and its own tile list), and on 8 with each
device handed its neighbour's list (the control: a step that did not read each device's own list would not see the
change). Then ``train()`` from a pipeline with ``devices: 8`` for two steps: the tiles each device's list held by
the step records, and the same counted from each batch's segment ids, device by device.
"""

from __future__ import annotations

import dataclasses
import sys

import jax
import numpy as np

from datatools import materialize, pack_lengths
from datatools.io.sources.documents import ArrayDocuments
from datatools.kernels.attention_blocks import EMPTY, block_structure, device_tile_lists
from datatools.pipeline import build_canonical, parse_config
from datatools.train.attention import SPARSE_KEYS
from datatools.train.loop import TrainConfig, TrainSection, train
from datatools.train.model import ModelConfig
from datatools.train.step import OptimizerConfig, Trainer

DEVICES, ROWS, CTX, BLOCK = 8, 16, 256, 32
MODEL = ModelConfig(vocab_size=97, d_model=32, n_layers=1, n_heads=2, attention="blocksparse", attention_block=BLOCK)


def step(trainer: Trainer, batch: dict) -> tuple[float, float]:
    state = trainer.init_state(0)
    _, metrics = trainer.train_step(state, trainer.put_batch(batch))
    return float(metrics["loss"]), float(metrics["grad_norm"])


def main(out: str) -> None:
    assert jax.device_count() == DEVICES, jax.devices()
    rng = np.random.default_rng(0)
    lengths = rng.lognormal(np.log(40), 1.2, 400).round().clip(2, 600).astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    tokens = rng.integers(1, MODEL.vocab_size, int(offsets[-1])).astype(np.int32)
    plan = pack_lengths(lengths, CTX)
    rows = rng.permutation(plan.num_rows)[:ROWS]
    batch = materialize(plan, tokens, offsets, rows=rows)
    opt = OptimizerConfig()
    one = Trainer(dataclasses.replace(MODEL, attention="dense"), opt, 10, devices=jax.devices()[:1])
    result = {"one": np.array(step(one, batch))}
    eight = Trainer(MODEL, opt, 10)
    assert eight.tile_devices == DEVICES
    lists = device_tile_lists(batch["segment_ids"], BLOCK, DEVICES)
    result["eight"] = np.array(step(eight, {**batch, **lists}))
    rolled = {k: np.roll(v, 1, axis=0) for k, v in lists.items()}  # device d reads device d - 1's list
    result["rolled"] = np.array(step(eight, {**batch, **rolled}))

    cfg = parse_config(
        {"source": {"path": "mem"}, "shuffle": {"kind": "full"}, "packing": {"ctx": CTX}, "batch_size": ROWS}
        | {"seed": 0, "devices": DEVICES, "attention_block": BLOCK}
    )
    docs = ArrayDocuments(tokens, offsets)
    report = train(TrainConfig(cfg, MODEL, TrainSection(steps=2)), documents=docs)
    result["recorded"] = np.array([r.device_tiles for r in report.records])
    result["attention"] = np.array([r.device_attention for r in report.records])
    plain = build_canonical(cfg, docs)  # the same batches, one tile list each: count each device's slice
    counted, pairs = [], []
    for j in range(2):
        seg = plain.batches[j]["segment_ids"]
        kinds = block_structure(seg, BLOCK) != EMPTY
        counted.append(kinds.reshape(DEVICES, -1).sum(axis=1))
        per_row = [sum(int(c) * (int(c) + 1) for c in np.bincount(r[r > 0])) for r in seg]
        loads = np.array(per_row).reshape(DEVICES, -1).sum(axis=1)
        pairs.append(loads.max() / loads.mean())
    result["counted"], result["counted_attention"] = np.array(counted), np.array(pairs)
    assert set(SPARSE_KEYS) <= set(lists)
    np.savez(out, **result)


if __name__ == "__main__":
    main(sys.argv[1])
