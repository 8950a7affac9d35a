"""Run a built pipeline for N batches and measure it: batches/s, tokens/s, efficiency, shapes."""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field

import numpy as np

from datatools.base.progress import doing
from datatools.base.reports import Report
from datatools.grain.balanced_schedule import DEFAULT_BLOCK
from datatools.kernels.attention_blocks import EMPTY, block_structure
from datatools.kernels.balance import busiest_over_mean
from datatools.kernels.batch_layouts import to_format
from datatools.pipeline import PipelineConfig, ShardConfig, build_canonical
from datatools.pipeline.stalls import LoaderReport, StallMeter


@dataclass(frozen=True)
class RunSettings(Report):
    """What ran: the source, the mode (planned, streaming, bucketing, curriculum), prefetch workers, format, rows
    per batch."""

    source: str
    mode: str
    workers: int
    format: str
    batch_size: int


@dataclass(frozen=True)
class PipelineRunReport(Report):
    """What :func:`run_pipeline` measured; ``datatools pipeline`` prints it and ``--json`` is :meth:`to_json`.

    Rates are over the batches after the first (the first includes starting workers), 0 where fewer than two
    batches ran; ``startup_s`` is NaN when none ran. Times in seconds, rates per second.
    """

    config: RunSettings
    documents: int  # documents in the source
    batches: int  # batches run (fewer than asked when the data ended)
    build_s: float  # config -> dataset (plan, open the source)
    startup_s: float  # first batch after the build
    batches_per_s: float
    tokens_per_s: float  # slots: real tokens + padding
    real_tokens_per_s: float
    efficiency: float  # real tokens / slots over the batches seen
    plan_efficiency: float | None  # planned packing: real / slots over the whole plan; None otherwise
    shapes: list[list[int]]  # distinct [rows, tokens] batch shapes, sorted
    format: str
    loader: LoaderReport | None = None  # what each step waited for its batch, and what the readers fetched
    # with the config's devices: this host's devices (its rows cut into that many contiguous slices), and per batch
    # run the busiest one's in-document attention tiles (attention_block, default 128) and real tokens over the mean
    devices: int | None = None
    device_tiles: list[float] = field(default_factory=list)
    device_tokens: list[float] = field(default_factory=list)


class DeviceShares:
    """With the config's ``devices``: per batch, the busiest of this host's devices (its rows cut into contiguous
    slices, as the trainers shard the batch axis) over the mean, in in-document attention tiles (at
    ``attention_block``, when it divides the row length) and in real tokens."""

    def __init__(self, cfg: PipelineConfig, shard: ShardConfig | str):
        self.devices = cfg.devices // shard.count if cfg.devices and isinstance(shard, ShardConfig) else None
        self.block = cfg.attention_block or DEFAULT_BLOCK
        self.tiles: list[float] = []
        self.tokens: list[float] = []

    def add(self, seg: np.ndarray) -> None:
        """Count one batch's segment ids (rows, tokens)."""
        if not self.devices:
            return
        if seg.shape[1] % self.block == 0:
            tiles = (block_structure(seg, self.block) != EMPTY).reshape(seg.shape[0], -1).sum(axis=1)
            self.tiles.append(busiest_over_mean(tiles, self.devices))
        self.tokens.append(busiest_over_mean(np.count_nonzero(seg, axis=1), self.devices))


def run_pipeline(
    cfg: PipelineConfig, steps: int, *, progress=None, documents=None, warn=None, step_s: float = 0.0
) -> PipelineRunReport:
    """Iterate ``steps`` batches (fewer when the data ends) in the config's format and measure them.

    ``step_s``: a simulated training step (seconds slept after each batch), to see whether the loader keeps up
    with a step of that length; ``warn``: called with a line when the step waited for the loader.
    """
    t0 = time.perf_counter()
    built = build_canonical(cfg, documents)
    build_s = time.perf_counter() - t0
    it = StallMeter(iter(built.dataset), stats_folder=built.stats_folder, warn=warn)
    shares = DeviceShares(cfg, built.config.shard)
    real = slots = done = 0
    shapes: set[tuple[int, int]] = set()
    first_at = None
    end = t0
    workers = f", {cfg.workers} worker processes starting" if cfg.workers else ""
    doing(f"waiting for the first batch{workers}")
    with ExitStack() as stack:  # the bar from the first batch on: until then the live line says what is awaited
        try:
            advance = None
            for _ in range(steps):
                try:
                    batch = next(it)
                except StopIteration:
                    break
                seg = batch["segment_ids"]
                if first_at is None:
                    first_at = time.perf_counter()
                    advance = stack.enter_context(progress(steps)) if progress else None
                else:
                    real += int(np.count_nonzero(seg))
                    slots += seg.size
                shapes.add((int(seg.shape[0]), int(seg.shape[1])))
                shares.add(seg)
                # the conversion the configured pipeline pays (timed, then dropped)
                to_format(batch, cfg.format, boundary_targets=cfg.boundary_targets, positions=cfg.positions)
                done += 1
                if advance:
                    advance()
                if step_s:
                    time.sleep(step_s)
                end = time.perf_counter()  # the rates end with the last step (not the report's wait or the close)
        finally:
            loader = it.report()
            it.close()
    doing(None)
    span = end - first_at if first_at is not None and done > 1 else float("nan")
    return PipelineRunReport(
        config=RunSettings(cfg.source_label, cfg.mode, cfg.workers, cfg.format, cfg.batch_size),
        documents=built.documents,
        batches=done,
        build_s=build_s,
        startup_s=(first_at - t0 - build_s) if first_at is not None else float("nan"),
        batches_per_s=(done - 1) / span if done > 1 else 0.0,
        tokens_per_s=slots / span if done > 1 else 0.0,
        real_tokens_per_s=real / span if done > 1 else 0.0,
        efficiency=real / slots if slots else 0.0,
        plan_efficiency=built.plan_efficiency,
        shapes=sorted([list(s) for s in shapes]),
        format=cfg.format,
        loader=loader,
        devices=shares.devices,
        device_tiles=shares.tiles,
        device_tokens=shares.tokens,
    )
