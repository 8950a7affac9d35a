"""What each read order puts in a batch after packing, from a pipeline's schedule (lengths alone, no token read).

``shuffle-report`` counts records in read order; a trained model sees rows, and streaming packing decides which
documents share a batch: a full shuffle's windowed packing fills a batch's consecutive rows with consecutive pieces of
the same few documents, lanes fill each row from its own lane. :func:`packed_mix` builds the config's own schedule
under each of the report's orders (``none``, ``full``, ``block`` in window order, ``lanes``) and measures each batch's
documents, stored groups and group mix against the corpus's
(:func:`~datatools.analysis.shuffle_quality.packed_mix_stats`). On the shuffle study's corpus the mean mix distance
ranks all six orders as their evaluation losses do (``docs/shuffle-quality.md``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np

from datatools.analysis.shuffle_quality import PackedOrderStats, packed_mix_stats
from datatools.base.checks import check_int
from datatools.grain.schedule import PlannedRowsSchedule
from datatools.jobs.write_order import written_order
from datatools.pipeline.config import PipelineConfig, ShuffleConfig
from datatools.pipeline.schedules import build_schedule
from datatools.pipeline.sources import OpenedDocuments, open_config_documents

ORDERS = ("none", "full", "block", "lanes")  # shuffle-report's rows


def order_config(cfg: PipelineConfig, order: str, *, io_block_size: int, window_blocks: int) -> PipelineConfig:
    """``cfg`` read in ``order``: its streaming packing (ctx, window, batch, seed) with the shuffle and read order of
    the report's row: ``none`` / ``full`` (window order), ``block`` (``io_block_size`` x ``window_blocks``, window
    order), ``lanes`` (the same block sizes, read in lanes)."""
    if order not in ORDERS:
        raise ValueError(f"order {order!r}: one of {', '.join(ORDERS)}")
    p = cfg.packing
    if p is None or p.mode != "streaming" or cfg.sources is not None or cfg.curriculum is not None:
        raise ValueError("the orders after packing need a config of one source with packing.mode streaming")
    kind = order if order in ("none", "full") else "block"
    shuffle = ShuffleConfig(kind=kind, io_block_size=io_block_size, window_blocks=window_blocks)  # type: ignore[arg-type]
    packing = dataclasses.replace(p, read_order="lanes" if order == "lanes" else "window")
    return cfg.replace(shuffle=shuffle, packing=packing, devices=None)


def _batches(schedule: PlannedRowsSchedule, count: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(document, tokens) of every piece of the first ``count`` global batches (epoch after epoch)."""
    epoch = j = 0
    for _ in range(count):
        while j >= schedule.num_batches(epoch):
            if schedule.num_batches(epoch) == 0:
                return
            epoch, j = epoch + 1, 0
        plan = schedule.rows_plan(epoch, j, 0, schedule.batch_rows(epoch, j))
        j += 1
        yield np.asarray(plan.doc, np.int64), np.asarray(plan.length, np.int64)


def packed_mix(
    cfg: PipelineConfig,
    *,
    group_size: int,
    batches: int = 1000,
    io_block_size: int | None = None,
    window_blocks: int | None = None,
    write_seed: int | None = None,
    documents: OpenedDocuments | None = None,
) -> dict[str, PackedOrderStats]:
    """Each of :data:`ORDERS` over the first ``batches`` global batches of ``cfg`` read in it (:func:`order_config`).

    Args:
      group_size: consecutive documents of the input per stored group (a source, a material).
      io_block_size, window_blocks: the block shuffle's sizes (default the config's).
      write_seed: the store was written with ``pretokenize --shuffle-seed`` this seed: groups are counted in the
        input's order (store position ``j`` holds input document ``written_order[j]``).
      documents: the config's source, already opened (only its lengths are used).
    """
    group_size = check_int(group_size, "group_size", minimum=1)
    batches = check_int(batches, "batches", minimum=1)
    docs = open_config_documents(cfg, documents)
    lengths = np.asarray(docs.lengths(), np.int64)
    n = lengths.shape[0]
    source = written_order(n, write_seed) if write_seed is not None else np.arange(n, dtype=np.int64)
    group_of = source // group_size  # the stored group of the document at each store position
    corpus = np.bincount(group_of, weights=lengths, minlength=int(group_of.max()) + 1)
    corpus_mix = corpus / corpus.sum()
    io = io_block_size or cfg.shuffle.io_block_size
    window = window_blocks or cfg.shuffle.window_blocks
    out = {}
    for order in ORDERS:
        schedule, _ = build_schedule(order_config(cfg, order, io_block_size=io, window_blocks=window), docs)
        assert isinstance(schedule, PlannedRowsSchedule)  # streaming and lanes schedules say their rows' pieces
        pieces = ((doc, group_of[doc], tokens) for doc, tokens in _batches(schedule, batches))
        out[order] = packed_mix_stats(pieces, corpus_mix)
    return out
