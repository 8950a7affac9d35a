"""Training from a YAML config: a pipeline config (:mod:`datatools.pipeline.build`) plus ``model`` and ``train``
sections. The Grain pipeline, sharded per host unless its ``shard`` says otherwise, feeds the jitted step
``grad_accum_steps`` batches at a time; each step reports tokens/s, efficiency and MFU.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from datatools.base.checks import check_token_ids
from datatools.base.errors import RunFailed
from datatools.base.progress import doing
from datatools.base.reports import Report
from datatools.io.formats.yaml_files import load_yaml
from datatools.kernels.balance import busiest_over_mean, device_loads
from datatools.pipeline import PipelineConfig, ShardConfig, build_canonical, parse_config
from datatools.pipeline.build import CanonicalPipeline, resolve_shard
from datatools.pipeline.named_configs import resolve_config
from datatools.pipeline.schema import field, from_dict
from datatools.pipeline.sources import OpenedDocuments
from datatools.pipeline.stalls import LoaderReport, StallMeter
from datatools.train.model import ModelConfig, attention_keys
from datatools.train.step import OptimizerConfig, Trainer

TILED = ("blocksparse", "pallas_blocksparse", "splash", "pallas_gpu")  # kernels whose tile must divide each row
VARIABLE_WIDTH = ("blocksparse", "pallas_blocksparse")  # kernels whose inputs' shape changes with the batch's tiles


class CompileBudgetExceeded(RunFailed):
    """A curriculum run compiled more step programs than it has lengths (exit status 1)."""


class TrainingDiverged(RunFailed):
    """The loss became non-finite: the run stops (the CLI exits with status 1) instead of training on NaN."""


@dataclass(frozen=True)
class TrainSection:
    steps: int = field(50, minimum=1, maximum=1 << 40)
    learning_rate: float = field(3e-3, minimum=0.0, maximum=1e3)
    warmup_steps: int = field(10, minimum=0, maximum=1 << 40)
    weight_decay: float = field(0.01, minimum=0.0)
    grad_clip: float = field(1.0, minimum=0.0)
    log_every: int = field(10, minimum=1, maximum=1 << 40)
    seed: int = field(0, minimum=0, maximum=(1 << 32) - 1)
    grad_accum_steps: int = field(
        1,
        minimum=1,
        maximum=1 << 16,
        doc="micro-batches (pipeline batches) per optimizer step; the loss is divided by "
        "the weight sum of all of them (docs/loss-weighting.md)",
    )

    @property
    def optimizer(self) -> OptimizerConfig:
        return OptimizerConfig(self.learning_rate, self.warmup_steps, self.weight_decay, self.grad_clip)


@dataclass(frozen=True)
class TrainConfig:
    pipeline: PipelineConfig
    model: ModelConfig
    train: TrainSection


def load_train_config(
    path: str | os.PathLike[str],
    *,
    steps: int | None = None,
    source: str | None = None,
    attention: str | None = None,
    grad_accum_steps: int | None = None,
) -> TrainConfig:
    """Read and validate a training config (pipeline keys + ``model`` + ``train``), a file or a shipped config's name
    (no ``configs/`` after pip install); ``steps``, ``source``, ``attention``, ``grad_accum_steps`` override it."""
    path = resolve_config(path)
    data = load_yaml(path)
    try:
        model = from_dict(ModelConfig, data.pop("model", None), "model")
        train = from_dict(TrainSection, data.pop("train", None), "train")
        pipeline = parse_config(data, source=source)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if steps is not None:
        train = dataclasses.replace(train, steps=steps)
    if grad_accum_steps is not None:
        train = dataclasses.replace(train, grad_accum_steps=grad_accum_steps)
    if attention is not None:
        model = dataclasses.replace(model, attention=attention)
    block = model.attention_block
    if model.attention == "pallas_blocksparse" and block % 128:
        raise ValueError(
            f"{path}: model.attention_block={block} must be a multiple of 128 (the TPU lane width) "
            "for attention: pallas_blocksparse"
        )
    if model.attention in TILED:
        packing, bucketing = pipeline.packing, pipeline.bucketing
        if packing and packing.ctx is None and packing.plan is not None:  # packing: {plan: DIR}: the plan's own ctx
            from datatools.io.formats.plan_file import PlanFile

            packing = dataclasses.replace(packing, ctx=PlanFile(packing.plan).ctx)
            pipeline = pipeline.replace(packing=packing)
        shapes: list[int] = []
        if pipeline.curriculum:
            shapes = list(pipeline.curriculum.lengths)
        elif packing and packing.ctx is not None:
            shapes = [packing.ctx]
        elif bucketing:
            shapes = list(bucketing.boundaries or [])
        if bucketing and not bucketing.boundaries and bucketing.tile % block:
            shapes.append(bucketing.tile)
        bad = [s for s in shapes if s % block]
        if bad:
            raise ValueError(
                f"{path}: model.attention_block={block} must divide every row length (got {bad[0]}); "
                f"choose a block that divides packing.ctx / the bucket tile"
            )
    if pipeline.curriculum and model.attention in VARIABLE_WIDTH:
        raise ValueError(
            f"{path}: attention: {model.attention} pads each batch's tile list to its own width, one compiled "
            f"program per width: a curriculum compiles one program per length "
            f"({len(pipeline.curriculum.lengths)}); use dense, fused, splash, pallas_gpu or cudnn"
        )
    return TrainConfig(pipeline, model, train)


@dataclass(frozen=True)
class StepRecord(Report):
    """One optimizer step: tokens are slots (padding included), useful tokens real ones; FLOPs of the step."""

    step: int
    loss: float
    seconds: float
    rows: int
    tokens: int
    useful_tokens: int
    efficiency: float  # useful tokens / slots
    tokens_per_s: float
    useful_tokens_per_s: float
    flops: float  # model FLOPs on the useful tokens
    mfu: float
    hardware_flops: float  # FLOPs as executed: every slot, the pairs the attention kernel computes
    hfu: float
    attention_pairs_computed: int
    attention_flops: float  # the attention term alone: in-document pairs
    attention_flops_executed: float
    shape: list[int]  # the first micro-batch's [rows, length]
    loader_wait_s: float  # what this step waited for its batches
    # per local device (contiguous slices of rows), summed over the micro-batches: the busiest device's in-document
    # attention work (pairs, the FLOPs' attention term) over the mean device's, and tokens likewise (1.0: balanced)
    device_attention: float = 1.0
    device_tokens: float = 1.0
    device_tiles: list[int] = dataclasses.field(default_factory=list)  # tiles each device's list holds (sharded)
    compiled: bool = False  # the step compiled a program (its time includes compilation)


@dataclass(frozen=True)
class LengthRate(Report):
    """The steps of one row length; the first (which compiles) is left out of ``seconds``, ``flops``,
    ``timed_tokens``, ``tokens_per_s`` and ``mfu``."""

    length: int
    steps: int
    compile_s: float  # the first step's time
    seconds: float
    flops: float
    tokens: int
    useful_tokens: int
    attention_flops: float
    attention_flops_executed: float
    timed_tokens: int
    mfu: float
    tokens_per_s: float


@dataclass(frozen=True)
class TrainSummary(Report):
    """Rates, efficiency and MFU / HFU over the steps after the first (which compiles); the whole run's steps, wall
    time, loss, compilations and shapes."""

    steps: int
    first_step_s: float
    wall_s: float
    total_useful_tokens: int
    seconds: float
    useful_tokens: int
    tokens_per_s: float
    useful_tokens_per_s: float
    efficiency: float
    mfu: float
    hfu: float
    attention: str
    final_loss: float
    compilations: int
    shapes: list[tuple[int, ...]]
    peak_flops: float
    peak_source: str
    devices: list[str]
    device_attention: float  # mean over the steps after the first of StepRecord.device_attention
    device_tiles: float  # the same for the busiest device's listed tiles over the mean (nan: not sharded)
    params: int
    loader: LoaderReport  # what each step waited for its batches, what the readers fetched
    compile_budget: int | None  # a curriculum's lengths: one program each, no more
    per_length: list[LengthRate]


@dataclass(frozen=True)
class TrainReport(Report):
    """What :func:`train` returns and ``datatools train --json`` writes."""

    summary: TrainSummary
    records: list[StepRecord]
    evaluation: dict[str, float] = dataclasses.field(default_factory=dict)  # held-out loss (nats/token) per set


def _host_sharded(cfg: PipelineConfig) -> PipelineConfig:
    import jax

    cfg = resolve_shard(cfg)  # shard: auto -> this process of jax.process_count()
    if cfg.shard.count == 1 and jax.process_count() > 1:
        return cfg.replace(shard=ShardConfig(index=jax.process_index(), count=jax.process_count()))
    return cfg


@dataclass
class _StepCounts:
    """What one optimizer step's micro-batches hold: real tokens, slots, rows, in-document attention pairs, pairs the
    attention computes, and per device (contiguous slices of rows) pairs, real tokens and listed tiles."""

    useful: int
    slots: int
    rows: int
    pair_sum: int
    computed: int
    dev_pairs: np.ndarray
    dev_tokens: np.ndarray
    dev_tiles: np.ndarray

    @classmethod
    def of(
        cls, batches: list[dict[str, np.ndarray]], model: ModelConfig, tile_devices: int, devices: int
    ) -> _StepCounts:
        from datatools.train.mfu import attention_pairs_computed, row_lengths_sq

        zeros = [np.zeros(devices, np.int64) for _ in range(3)]
        c = cls(0, 0, 0, 0, 0, *zeros)
        for batch in batches:
            check_token_ids(batch["tokens"], model.vocab_size, "model.vocab_size")
            seg = batch["segment_ids"]
            c.useful, c.slots, c.rows = c.useful + int(np.count_nonzero(seg)), c.slots + seg.size, c.rows + seg.shape[0]
            row_pairs = row_lengths_sq(seg)
            c.pair_sum += int(row_pairs.sum())
            c.dev_pairs += device_loads(row_pairs, devices)
            c.dev_tokens += device_loads(np.count_nonzero(seg, axis=1), devices)
            if tile_devices > 1:
                c.dev_tiles += np.asarray(batch["tile_count"], np.int64).reshape(devices)
            c.computed += attention_pairs_computed(model.attention, batch, model.attention_block)
        return c


def _listed_tiles(steady: list[StepRecord], devices: int) -> float:
    """The mean over ``steady`` steps of the busiest device's listed tiles over the mean device's (nan: none)."""
    return float(np.mean([busiest_over_mean(r.device_tiles, devices) for r in steady])) if steady else float("nan")


@dataclass(frozen=True)
class _Run:
    """What a training run keeps fixed from its start: the config, the trainer, the built loader, the devices'
    peak FLOP/s (and how it was found) and a curriculum's compile budget (one program per length, else None)."""

    cfg: TrainConfig
    trainer: Trainer
    built: CanonicalPipeline
    peak: float
    peak_source: str
    budget: int | None

    @classmethod
    def start(cls, cfg: TrainConfig, documents: OpenedDocuments | None = None) -> tuple[_Run, dict[str, Any]]:
        """The run built (its loader in the ``datatools`` format, listing each batch's tiles for a tiled attention)
        and the trainer's initial state; ValueError when a curriculum length's rows do not split over the
        devices."""
        from datatools.train.mfu import device_peak

        pipe = _host_sharded(cfg.pipeline).replace(format="datatools")
        if attention_keys(cfg.model.attention):  # the loader lists each batch's tiles
            pipe = pipe.replace(attention_block=cfg.model.attention_block)
        trainer = Trainer(cfg.model, cfg.train.optimizer, cfg.train.steps)
        devices = len(trainer.devices)
        built = build_canonical(pipe, documents, tile_devices=trainer.tile_devices)  # a tile list per device: sharded
        state = trainer.init_state(cfg.train.seed)
        peak, peak_source = device_peak(trainer.devices)
        budget = len(built.shapes) if pipe.curriculum is not None else None  # one program per length, no more
        bad = [(r, t) for r, t in built.shapes if r % devices] if budget is not None else []
        if bad:
            raise ValueError(
                f"curriculum: length {bad[0][1]} gives {bad[0][0]} rows per host, which do not split over "
                f"{devices} devices (raise tokens_per_batch)"
            )
        return cls(cfg, trainer, built, peak, peak_source, budget), state

    def step(
        self, step: int, state: dict[str, Any], batches: list[dict[str, Any]], it: StallMeter[Any], waited: int
    ) -> tuple[dict[str, Any], StepRecord]:
        """One optimizer step on ``batches`` (the micro-batches of step ``step``): the new state and the step's
        record (``it.waits[waited:]``: what it waited for its batches). TrainingDiverged when the loss is not
        finite, CompileBudgetExceeded when a curriculum compiled more programs than it has lengths."""
        trainer = self.trainer
        c = _StepCounts.of(batches, self.cfg.model, trainer.tile_devices, len(trainer.devices))
        seg = batches[0]["segment_ids"]
        t0 = time.perf_counter()
        if step == 1:
            doing(f"compiling the step for {seg.shape[0]}x{seg.shape[1]} batches, running it")
        programs = trainer.compilations()
        state, metrics = trainer.accumulate_step(state, [trainer.put_batch(b) for b in batches])
        loss = float(metrics["loss"])  # waits for the step
        if step == 1:
            doing(None)  # the steps' own lines and bar from here
        if not math.isfinite(loss):
            raise TrainingDiverged(
                f"step {step}: the loss became {loss}; training stopped (try a lower "
                f"train.learning_rate or a grad_clip)"
            )
        secs = time.perf_counter() - t0
        if self.budget is not None and trainer.compilations() > self.budget:
            raise CompileBudgetExceeded(
                f"step {step}: {trainer.compilations()} step programs compiled for a curriculum of {self.budget} "
                f"lengths ({', '.join(f'{r}x{t}' for r, t in self.built.shapes)}); batch shape {list(seg.shape)}"
            )
        waits = float(sum(it.waits[waited:]))
        return state, self._record(step, loss, secs, c, list(seg.shape), waits, trainer.compilations() > programs)

    def _record(
        self, step: int, loss: float, secs: float, c: _StepCounts, shape: list[int], waits: float, compiled: bool
    ) -> StepRecord:
        """A step's record: its loss and time, its tokens and their rates, its FLOPs (model, as executed, the
        attention term) and MFU / HFU against the peak, how the devices shared it."""
        from datatools.train.mfu import hardware_flops, step_flops

        model, peak, devices = self.cfg.model, self.peak, len(self.trainer.devices)
        flops, hw_flops = step_flops(model, c.useful, c.pair_sum), hardware_flops(model, c.slots, c.computed)
        attn = step_flops(model, 0, c.pair_sum)  # the attention term alone: in-document pairs
        return StepRecord(
            step,
            loss,
            secs,
            c.rows,
            c.slots,
            c.useful,
            c.useful / c.slots,
            c.slots / secs,
            c.useful / secs,
            flops,
            flops / secs / peak,
            hw_flops,
            hw_flops / secs / peak,
            c.computed,
            attn,
            hardware_flops(model, 0, c.computed),
            shape,
            waits,
            busiest_over_mean(c.dev_pairs, devices),
            busiest_over_mean(c.dev_tokens, devices),
            c.dev_tiles.tolist() if self.trainer.tile_devices > 1 else [],
            compiled,
        )

    def summary(self, records: list[StepRecord], seen_useful: int, loader: LoaderReport) -> TrainSummary:
        """The run's summary: rates, efficiency and MFU / HFU over the steps after the first (which compiles), the
        whole run's steps, wall time, loss, compilations and shapes."""
        cfg, trainer, peak = self.cfg, self.trainer, self.peak
        steady = records[1:] or records
        secs = sum(r.seconds for r in steady)
        return TrainSummary(
            steps=len(records),
            first_step_s=records[0].seconds if records else float("nan"),
            wall_s=sum(r.seconds for r in records),
            total_useful_tokens=seen_useful,
            seconds=secs,
            useful_tokens=sum(r.useful_tokens for r in steady),
            tokens_per_s=sum(r.tokens for r in steady) / secs if secs else 0.0,
            useful_tokens_per_s=sum(r.useful_tokens for r in steady) / secs if secs else 0.0,
            efficiency=sum(r.useful_tokens for r in steady) / max(sum(r.tokens for r in steady), 1),
            mfu=sum(r.flops for r in steady) / secs / peak if secs else 0.0,
            hfu=sum(r.hardware_flops for r in steady) / secs / peak if secs else 0.0,
            attention=cfg.model.attention,
            final_loss=records[-1].loss if records else float("nan"),
            compilations=trainer.compilations(),
            shapes=sorted({tuple(r.shape) for r in records}),
            peak_flops=peak,
            peak_source=self.peak_source,
            devices=[str(d) for d in trainer.devices],
            device_attention=float(np.mean([r.device_attention for r in steady])) if steady else 1.0,
            device_tiles=_listed_tiles(steady, len(trainer.devices)) if trainer.tile_devices > 1 else float("nan"),
            params=cfg.model.num_params(),
            loader=loader,
            compile_budget=self.budget,
            per_length=per_length(records, peak),
        )


def train(
    cfg: TrainConfig,
    *,
    on_step: Callable[[StepRecord], object] | None = None,
    documents: OpenedDocuments | None = None,
    stop_after_useful_tokens: int | None = None,
    on_loader_stall: Callable[[str], None] | None = None,
    evaluation: dict[str, list[dict[str, np.ndarray]]] | None = None,
) -> TrainReport:
    """Run ``cfg.train.steps`` steps (fewer if the data ends, or once ``stop_after_useful_tokens`` real tokens
    have been trained on), calling ``on_step(record)`` after each and ``on_loader_stall(line)`` when a step waited
    for the loader (at most every few seconds). ``evaluation``: named sets of held-out canonical batches; the
    report's ``evaluation`` holds the trained model's mean loss on each (nats per target token)."""
    run, state = _Run.start(cfg, documents)
    records: list[StepRecord] = []
    seen_useful = 0
    it = StallMeter(iter(run.built.dataset), stats_folder=run.built.stats_folder, warn=on_loader_stall)
    try:
        for step in range(1, cfg.train.steps + 1):
            waited = len(it.waits)
            if step == 1:  # what a user waits for before the first step's line (planning said its own before)
                doing("waiting for the first batch")
            batches = list(itertools.islice(it, cfg.train.grad_accum_steps))  # one optimizer step
            if len(batches) < cfg.train.grad_accum_steps:  # the data ended: a short step would weigh differently
                break
            state, rec = run.step(step, state, batches, it, waited)
            records.append(rec)
            if on_step:
                on_step(rec)
            seen_useful += rec.useful_tokens
            if stop_after_useful_tokens and seen_useful >= stop_after_useful_tokens:
                break
    finally:
        loader = it.report()
        it.close()
    summary = run.summary(records, seen_useful, loader)
    held_out = {
        name: run.trainer.evaluate(state["params"], [run.trainer.put_batch(b) for b in batches])
        for name, batches in (evaluation or {}).items()
    }
    return TrainReport(summary, records, held_out)


def per_length(records: list[StepRecord], peak: float) -> list[LengthRate]:
    """A :class:`LengthRate` per row length (tokens) of the steps."""
    out = []
    for length in sorted({r.shape[1] for r in records}):
        steps = [r for r in records if r.shape[1] == length]
        timed = steps[1:]  # the first compiles
        seconds = sum((r.seconds for r in timed), 0.0)
        flops = sum((r.flops for r in timed), 0.0)
        timed_tokens = sum(r.tokens for r in timed)
        out.append(
            LengthRate(
                length,
                len(steps),
                steps[0].seconds,
                seconds,
                flops,
                sum(r.tokens for r in steps),
                sum(r.useful_tokens for r in steps),
                sum((r.attention_flops for r in steps), 0.0),
                sum((r.attention_flops_executed for r in steps), 0.0),
                timed_tokens,
                flops / seconds / peak if seconds else float("nan"),
                timed_tokens / seconds if seconds else float("nan"),
            )
        )
    return out
