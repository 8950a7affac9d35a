"""One Levanter training run fed by a datatools pipeline, as ``levanter.main.train_lm`` runs one (run in a
subprocess by test_levanter.py: one JAX process per run, as a real restart is).

The data path is Levanter's own: ``LmDataConfig`` with a ``DirectDatasetComponent`` carrying
:class:`datatools.integrations.levanter.PipelineDataset` (:func:`data_config`), ``train_set`` ->
``Trainer.data_loader`` -> ``iter_from_step(state.step)`` -> ``Trainer.train``. A tiny Llama, CPU,
float32. Writes JSON: the loss of every step run, and the rows of each step as the trainer's loader
handed them over (a CRC-32 of each row's tokens and the sum of its loss weights).

With ``--per-document``: on the run's first batch, Levanter's per-token losses (``reduction=None``) of
each packed row, against each of its documents run alone (the document at position 0 of a row of
padding); the largest difference is written.
"""

from __future__ import annotations

import argparse
import json
import zlib
from pathlib import Path

import jax.numpy as jnp
import jax.random as jrandom
import jmp
import levanter
import numpy as np
from haliax import Axis
from levanter.checkpoint import CheckpointerConfig
from levanter.data.text.examples import GrugLmExample, named_lm_example_from_grug
from levanter.models.llama import LlamaConfig
from levanter.optim.config import AdamConfig
from levanter.tracker import NoopConfig
from levanter.trainer import Trainer, TrainerConfig

from datatools.integrations.levanter import data_config

SEQ, VOCAB = 128, 1024


def model_config() -> LlamaConfig:
    return LlamaConfig(
        max_seq_len=SEQ,
        hidden_dim=64,
        intermediate_dim=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=4,
        gradient_checkpointing=False,
        scan_layers=False,
    )


def per_document_gap(model, example) -> tuple[float, int]:
    """Largest |packed - alone| per-token loss over the documents of the batch's rows, and documents checked."""
    Pos = model.Pos
    packed = np.asarray(model.compute_next_token_loss(example, reduction=None).array, np.float32)
    tokens = np.asarray(example.tokens.array)
    weight = np.asarray(example.loss_weight.array)
    q_seg = np.asarray(example.attn_mask.segment_ids[0].array)
    worst, docs = 0.0, 0
    for r in range(tokens.shape[0]):
        for s in np.unique(q_seg[r][q_seg[r] >= 0]):
            at = np.flatnonzero(q_seg[r] == s)
            n = at.size
            alone_tokens = np.zeros(Pos.size, np.int32)
            alone_tokens[:n] = tokens[r, at]
            seg = np.full(Pos.size, -1, np.int32)
            seg[:n] = 0
            w = np.zeros(Pos.size, np.float32)
            w[:n] = weight[r, at]
            g = GrugLmExample.causal(
                tokens=jnp.asarray(alone_tokens), loss_weight=jnp.asarray(w), segment_ids=jnp.asarray(seg)
            )
            alone = named_lm_example_from_grug(g, Pos)
            loss = np.asarray(model.compute_next_token_loss(alone, reduction=None).array, np.float32)[:n]
            worst = max(worst, float(np.abs(loss - packed[r, at]).max()))
            docs += 1
    return worst, docs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--checkpoints", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--per-document", action="store_true")
    args = ap.parse_args()

    trainer_config = TrainerConfig(
        num_train_steps=args.steps,
        train_batch_size=args.batch_size,
        require_accelerator=False,
        id="dt",
        tracker=NoopConfig(),
        mp=jmp.get_policy("f32"),
        seed=0,
        log_dir=Path(args.out).parent / "logs",
        checkpointer=CheckpointerConfig(base_path=args.checkpoints, save_interval=None, keep=None),
        log_jaxprs=False,
        log_xla_hlo=False,
    )
    levanter.trainer.initialize(trainer_config)
    optimizer = AdamConfig(learning_rate=3e-3, weight_decay=0.0, warmup=0, lr_schedule="constant").build(args.steps)
    data = data_config(args.pipeline, vocab_size=VOCAB)
    losses: dict[int, float] = {}
    steps_rows: list[list] = []
    gap = None

    def loss_function(model, example, *, key=None):
        return model.compute_next_token_loss(example, key=key)

    with Trainer(trainer_config, optimizer, loss_function) as trainer:
        data_key, _, model_key, training_key = jrandom.split(jrandom.PRNGKey(0), 4)
        Pos = model_config().max_Pos
        train_set = data.train_set(Pos, trainer_config.batch_schedule, key=data_key)
        state = trainer.initial_state(
            training_key, model_init=lambda: model_config().build(Axis("vocab", VOCAB), key=model_key)
        )
        trainer.add_hook(lambda info: losses.__setitem__(int(info.step), float(info.loss)), every=1)
        start = int(state.step)
        loader = trainer.data_loader(train_set).iter_from_step(start)

        def recorded(it):
            for batch in it:  # the batches as the trainer receives them
                tokens = np.asarray(batch.tokens.array)
                weight = np.asarray(batch.loss_weight.array)
                steps_rows.append(
                    [[zlib.crc32(t.astype(np.int32).tobytes()), float(w.sum())] for t, w in zip(tokens, weight)]
                )
                yield batch

        if args.per_document:
            first = next(iter(trainer.data_loader(train_set).iter_from_step(start)))
            gap = per_document_gap(state.model, first)
        trainer.train(state, recorded(loader))
    Path(args.out).write_text(
        json.dumps({"start": start, "losses": losses, "rows": steps_rows[: args.steps - start], "per_document": gap})
    )


if __name__ == "__main__":
    main()
