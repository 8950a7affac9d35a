"""A config's global batch sequence: the schedule of its mode (:func:`schedule_mode`), built by its constructor
in one table (:data:`SCHEDULES`). A new mode is one schedule module in :mod:`datatools.grain`, one constructor
here and one row of the table.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import grain
from datatools.grain.balanced_schedule import DEFAULT_BLOCK, BalancedSchedule
from datatools.grain.bucket_schedule import BucketSchedule
from datatools.grain.curriculum_schedule import Curriculum, CurriculumSchedule
from datatools.grain.host_batches import DocumentOrder, PlannedSchedule
from datatools.grain.lane_schedule import LaneLayout, LaneSchedule
from datatools.grain.mixture_order import MixtureOrder
from datatools.grain.packed_rows import PackedRowsMapDataset
from datatools.grain.schedule import PlannedRowsSchedule, Schedule
from datatools.grain.shuffle import BlockShuffleMapDataset, FeistelShuffleMapDataset
from datatools.grain.streaming_schedule import StreamingSchedule
from datatools.io.formats.plan_file import PlanFile
from datatools.io.sources.documents import DocumentSource
from datatools.io.sources.mixed_documents import MixedDocuments
from datatools.kernels.bucket import bucket_batch_sizes, bucket_boundaries
from datatools.kernels.packing import pack
from datatools.kernels.packing.plan_format import lengths_identity
from datatools.pipeline.config import PackingConfig, PipelineConfig
from datatools.pipeline.mixture import History, mixture_order

# A constructor: (config, documents, a mixture's weight history or None) -> (schedule, planned packing's efficiency)
Constructor = Callable[[PipelineConfig, DocumentSource, History | None], tuple[PlannedRowsSchedule, float | None]]


def schedule_mode(cfg: PipelineConfig) -> str:
    """The key of :data:`SCHEDULES` the config asks for."""
    p = cfg.packing
    if cfg.curriculum is not None:
        return "curriculum"
    if p is None:
        return "bucketing"  # the schema asks for exactly one section
    if p.mode == "planned":
        return "planned"
    if p.read_order == "lanes" and cfg.shuffle.kind == "block" and cfg.sources is None:
        return "lanes"  # lanes deal one source's io blocks; a mixture reads in window order
    return "streaming"


def build_schedule(
    cfg: PipelineConfig, docs: DocumentSource, history: History | None = None
) -> tuple[Schedule, float | None]:
    """The global batch sequence of the config over ``docs`` and planned packing's efficiency (else None);
    ``history``: a mixture's weights over time, default the config's. With ``devices``, each batch's rows are
    ordered for them (:class:`~datatools.grain.balanced_schedule.BalancedSchedule`), exchanged between
    ``balance_across`` consecutive batches when above 1."""
    schedule, efficiency = SCHEDULES[schedule_mode(cfg)](cfg, docs, history)
    if cfg.devices is not None and cfg.devices > 1:
        block = cfg.attention_block or DEFAULT_BLOCK
        return BalancedSchedule(schedule, devices=cfg.devices, block=block, across=cfg.balance_across), efficiency
    return schedule, efficiency


def _packing(cfg: PipelineConfig) -> PackingConfig:
    if cfg.packing is None:  # schedule_mode chose a packing mode from this section
        raise ValueError("config: packing is required")
    return cfg.packing


def _order(cfg: PipelineConfig, docs: DocumentSource, history: History | None) -> DocumentOrder | MixtureOrder:
    """The documents' order per epoch: a mixture's, or the config's shuffle of one source."""
    if cfg.sources is not None:
        assert isinstance(docs, MixedDocuments)  # a mixture's documents (open_mixture)
        return mixture_order(cfg, docs, history)
    sh = cfg.shuffle
    return DocumentOrder(
        len(docs), sh.kind, seed=cfg.seed, io_block_size=sh.io_block_size, window_blocks=sh.window_blocks
    )


def _shuffle_map(ds: grain.MapDataset, cfg: PipelineConfig) -> grain.MapDataset:
    """``ds`` (packed rows) shuffled per epoch as the config says: the global order, the same on every host."""
    if cfg.shuffle.kind == "block":
        return BlockShuffleMapDataset(
            ds, io_block_size=cfg.shuffle.io_block_size, window_blocks=cfg.shuffle.window_blocks, seed=cfg.seed
        )
    if cfg.shuffle.kind == "full":
        return FeistelShuffleMapDataset(ds, seed=cfg.seed)
    return ds


def _plan_file(p: PackingConfig, path: str, source: str, docs: DocumentSource) -> PlanFile:
    """The plan directory ``path`` (``packing.plan``), memory-mapped, checked against the source's documents and
    ``packing.ctx``."""
    plan = PlanFile(path)
    plan.check_identity(lengths_identity(docs.lengths()), source)
    if p.ctx is not None and p.ctx != plan.ctx:
        raise ValueError(
            f"config: packing.ctx={p.ctx} but {p.plan} was planned for ctx {plan.ctx}; drop packing.ctx "
            f"or re-pack (datatools pack {p.plan} OUT --ctx {p.ctx})"
        )
    return plan


def planned(
    cfg: PipelineConfig, docs: DocumentSource, history: History | None = None
) -> tuple[PlannedRowsSchedule, float | None]:
    """``packing.mode: planned``: one plan over every document (or ``packing.plan``), its rows shuffled per epoch;
    global batch j is rows ``[j * B, (j + 1) * B)``."""
    p = _packing(cfg)
    if p.plan is not None:
        plan = _plan_file(p, p.plan, cfg.one_source.path, docs)
        rows = PackedRowsMapDataset(docs, plan=plan, pad_id=cfg.pad_id)
    else:
        rows = PackedRowsMapDataset(docs, plan=pack(docs.lengths(), p.options()), pad_id=cfg.pad_id)
    if cfg.drop_remainder and rows.plan.num_rows < cfg.batch_size:
        raise ValueError(f"{rows.plan.num_rows} packed rows make no full batch of {cfg.batch_size}")
    schedule = PlannedSchedule(
        _shuffle_map(rows, cfg), cfg.batch_size, drop_remainder=cfg.drop_remainder, ctx=rows.plan.ctx, pad_id=cfg.pad_id
    )
    return schedule, rows.plan.efficiency


def streaming(
    cfg: PipelineConfig, docs: DocumentSource, history: History | None = None
) -> tuple[PlannedRowsSchedule, float | None]:
    """``packing.mode: streaming``: :class:`~datatools.grain.streaming_schedule.StreamingSchedule`."""
    p = _packing(cfg)
    return StreamingSchedule(
        docs,
        _order(cfg, docs, history),
        p.options(),
        window=p.window,
        batch_size=cfg.batch_size,
        drop_remainder=cfg.drop_remainder,
        seed=cfg.seed,
        pad_id=cfg.pad_id,
    ), None


def lanes(
    cfg: PipelineConfig, docs: DocumentSource, history: History | None = None
) -> tuple[PlannedRowsSchedule, float | None]:
    """``packing.read_order: lanes``: :class:`~datatools.grain.lane_schedule.LaneSchedule`."""
    p, sh = _packing(cfg), cfg.shuffle
    return LaneSchedule(
        docs,
        p.options(),
        LaneLayout(sh.io_block_size, p.lane_period),
        window=p.window,
        batch_size=cfg.batch_size,
        drop_remainder=cfg.drop_remainder,
        seed=cfg.seed,
        pad_id=cfg.pad_id,
    ), None


def bucketing(
    cfg: PipelineConfig, docs: DocumentSource, history: History | None = None
) -> tuple[PlannedRowsSchedule, float | None]:
    """``bucketing``: :class:`~datatools.grain.bucket_schedule.BucketSchedule` over the given boundaries (or those
    of least padding), with batch sizes from the batch or a token budget."""
    b = cfg.bucketing
    if b is None:  # schedule_mode chose this mode from the section
        raise ValueError("config: bucketing is required")
    order = _order(cfg, docs, history)
    if b.boundaries is not None:
        bounds = np.asarray(sorted(b.boundaries), np.int64)
    else:
        overflow = "split" if b.overflow == "error" else b.overflow
        bounds = bucket_boundaries(docs.lengths(), b.num_buckets, tile=b.tile, max_len=b.max_len, overflow=overflow)
    batch_size = cfg.batch_size if b.token_budget is None else None
    sizes = bucket_batch_sizes(bounds, batch_size=batch_size, token_budget=b.token_budget, multiple_of=b.multiple_of)
    return BucketSchedule(
        docs,
        order,
        boundaries=bounds,
        batch_sizes=sizes,
        overflow=b.overflow,
        drop_remainder=cfg.drop_remainder,
        pad_id=cfg.pad_id,
    ), None


def curriculum(
    cfg: PipelineConfig, docs: DocumentSource, history: History | None = None
) -> tuple[PlannedRowsSchedule, float | None]:
    """``curriculum``: :class:`~datatools.grain.curriculum_schedule.CurriculumSchedule`."""
    c = cfg.curriculum
    if c is None:  # schedule_mode chose this mode from the section
        raise ValueError("config: curriculum is required")
    curriculum = Curriculum(c.lengths, c.tokens_per_batch, c.schedule, c.odds, c.cycles, c.pack_length)
    schedule = CurriculumSchedule(
        docs, curriculum, shuffle=cfg.shuffle.kind != "none", seed=cfg.seed, pad_id=cfg.pad_id
    )
    return schedule, None


SCHEDULES: dict[str, Constructor] = {
    "planned": planned,
    "streaming": streaming,
    "lanes": lanes,
    "bucketing": bucketing,
    "curriculum": curriculum,
}
