"""Run a built pipeline for N batches and measure it: batches/s, tokens/s, efficiency, shapes."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from datatools.base.progress import doing
from datatools.base.reports import Report
from datatools.grain.balanced_schedule import DEFAULT_BLOCK
from datatools.kernels.attention_blocks import EMPTY, block_structure
from datatools.kernels.balance import busiest_over_mean
from datatools.kernels.batch_layouts import to_format
from datatools.pipeline import PipelineConfig, ShardConfig, build_canonical
from datatools.pipeline.stalls import LoaderReport, StallMeter

if TYPE_CHECKING:
    from datatools.pipeline.sources import OpenedDocuments

# a progress bar over N steps (batches): entered once the first batch came, it gives ``advance()`` (one step done)
Progress = Callable[[int], AbstractContextManager[Callable[[], None]]]
Batch = dict[str, np.ndarray]  # a canonical batch: tokens, segment_ids, positions, loss_mask (rows, tokens)


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


@dataclass
class _Tally:
    """What the batches of a run measured: their real tokens and slots (after the first), how many ran, their
    shapes, each device's share (``shares``), when the first came and when the last step ended."""

    shares: DeviceShares
    end: float
    real: int = 0
    slots: int = 0
    done: int = 0
    shapes: set[tuple[int, int]] = field(default_factory=set)
    first_at: float | None = None

    def add(self, seg: np.ndarray) -> bool:
        """A batch's segment ids counted; True for the first batch (its time is the startup's: its tokens are
        kept out of the rates)."""
        first = self.first_at is None
        if first:
            self.first_at = time.perf_counter()
        else:
            self.real += int(np.count_nonzero(seg))
            self.slots += seg.size
        self.shapes.add((int(seg.shape[0]), int(seg.shape[1])))
        self.shares.add(seg)
        return first


def run_pipeline(
    cfg: PipelineConfig,
    steps: int,
    *,
    progress: Progress | None = None,
    documents: OpenedDocuments | None = None,
    warn: Callable[[str], None] | None = None,
    step_s: float = 0.0,
) -> PipelineRunReport:
    """Iterate ``steps`` batches (fewer when the data ends) in the config's format and measure them.

    ``step_s``: a simulated training step (seconds slept after each batch), to see whether the loader keeps up
    with a step of that length; ``warn``: called with a line when the step waited for the loader.
    """
    t0 = time.perf_counter()
    built = build_canonical(cfg, documents)
    build_s = time.perf_counter() - t0
    it: StallMeter[Batch] = StallMeter(iter(built.dataset), stats_folder=built.stats_folder, warn=warn)
    tally = _Tally(DeviceShares(cfg, built.config.shard), end=t0)
    workers = f", {cfg.workers} worker processes starting" if cfg.workers else ""
    doing(f"waiting for the first batch{workers}")
    loader = _run_batches(it, cfg, steps, tally, progress, step_s)
    doing(None)
    first_at, done, real, slots = tally.first_at, tally.done, tally.real, tally.slots
    span = tally.end - first_at if first_at is not None and done > 1 else float("nan")
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
        shapes=sorted([list(s) for s in tally.shapes]),
        format=cfg.format,
        loader=loader,
        devices=tally.shares.devices,
        device_tiles=tally.shares.tiles,
        device_tokens=tally.shares.tokens,
    )


def _run_batches(
    it: StallMeter[Batch], cfg: PipelineConfig, steps: int, tally: _Tally, progress: Progress | None, step_s: float
) -> LoaderReport:
    """Up to ``steps`` batches of ``it``, each counted in ``tally`` and converted to the config's format (the
    conversion the configured pipeline pays), then ``step_s`` slept; the progress bar from the first batch on (until
    then the live line says what is awaited). Returns the loader's report; ``it`` is closed."""
    with ExitStack() as stack:
        try:
            advance = None
            for _ in range(steps):
                try:
                    batch = next(it)
                except StopIteration:
                    break
                if tally.add(batch["segment_ids"]):
                    advance = stack.enter_context(progress(steps)) if progress else None
                # the conversion the configured pipeline pays (timed, then dropped)
                to_format(batch, cfg.format, boundary_targets=cfg.boundary_targets, positions=cfg.positions)
                tally.done += 1
                if advance:
                    advance()
                if step_s:
                    time.sleep(step_s)
                tally.end = time.perf_counter()  # the rates end with the last step (not the report's wait or the close)
        finally:
            loader = it.report()
            it.close()
    return loader
