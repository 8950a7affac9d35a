"""Levanter's own ``train_lm`` entry point (``levanter.main.train_lm.main``) trained from a datatools pipeline,
as its users run it: ``config.data = data_config("pipeline.yaml", tokenizer=...)`` (run in a subprocess by
test_levanter.py: one JAX process per run, as a real restart is).

Nothing of ``train_lm`` is replaced: its tokenizer is a local tokenizer directory (no Hub), its model a tiny
Llama on CPU in float32, its tracker Levanter's ``json_logger`` (a JSON line per logged step, caught here by a
handler on that logger), its checkpointer saves at the end of the run and a rerun with the same id and a longer
``num_train_steps`` restores it. ``train_lm`` logs its configuration (``dataclasses.asdict`` deep-copies the
data config, ``PipelineDataset`` included) before it trains. Writes JSON: the loss of every step this run
trained, and the rows of the pipeline the run read (global batch, lo, hi).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import jax
import jmp
from levanter.checkpoint import CheckpointerConfig
from levanter.distributed import DistributedConfig
from levanter.main import train_lm
from levanter.models.llama import LlamaConfig
from levanter.optim.config import AdamConfig
from levanter.tracker.json_logger import JsonLoggerConfig
from levanter.trainer import TrainerConfig

from datatools.integrations.levanter import data_config

SEQ = 128


class Losses(logging.Handler):
    """The ``train/loss`` of each step Levanter's json_logger tracker logs."""

    def __init__(self):
        super().__init__()
        self.losses: dict[int, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            event = json.loads(record.getMessage())
        except ValueError:
            return
        loss = event.get("metrics", {}).get("train/loss") if event.get("event") == "log" else None
        if loss is not None:
            self.losses[int(event["step"])] = float(loss)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--checkpoints", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--coordinator", help="host:port of jax.distributed (several processes, one CPU device each)")
    ap.add_argument("--process", type=int, default=0)
    ap.add_argument("--processes", type=int, default=1)
    args = ap.parse_args()
    distributed = DistributedConfig()
    if args.coordinator:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # the gradients' all-reduce on CPU
        distributed = DistributedConfig(
            coordinator_address=args.coordinator, num_processes=args.processes, process_id=args.process
        )

    caught = Losses()
    logging.getLogger("levanter.json_logger").addHandler(caught)
    config = train_lm.TrainLmConfig(
        data=data_config(args.pipeline, tokenizer=args.tokenizer),
        trainer=TrainerConfig(
            num_train_steps=args.steps,
            train_batch_size=args.batch_size,
            require_accelerator=False,
            id="dt",
            tracker=JsonLoggerConfig(),
            mp=jmp.get_policy("f32"),
            seed=0,
            log_dir=Path(args.out).parent / "logs",
            checkpointer=CheckpointerConfig(base_path=args.checkpoints, save_interval=None, keep=None),
            log_jaxprs=False,
            log_xla_hlo=False,
            distributed=distributed,
        ),
        model=LlamaConfig(
            max_seq_len=SEQ,
            hidden_dim=64,
            intermediate_dim=128,
            num_layers=2,
            num_heads=4,
            num_kv_heads=4,
            gradient_checkpointing=False,
            scan_layers=False,
            tokenizer=args.tokenizer,  # train_lm's HF converter loads it at start: the local one, not the Hub's
            reference_checkpoint=args.tokenizer,
        ),
        optimizer=AdamConfig(learning_rate=3e-3, weight_decay=0.0, warmup=0, lr_schedule="constant"),
    )
    dataset = config.data.components["datatools"].datasets["train"]
    train_lm.main(config)
    out = {"losses": caught.losses, "reads": dataset.source.reads, "process": jax.process_index()}
    Path(args.out).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
