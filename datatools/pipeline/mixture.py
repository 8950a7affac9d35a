"""A config's ``sources:`` (a mixture) in the pipeline: their order, identity and weight changes.

The streaming and bucketing schedules read a mixture in a :class:`~datatools.grain.mixture_order.MixtureOrder`.
Weights are the one part of a config that may change at a restore: the identity records them as a history
``[[position, [w0, w1, ...]], ...]`` (documents drawn over all epochs), and restoring into other weights adds an
entry at the first position the consumed batches do not depend on (:func:`reweighted_history`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from datatools.grain.host_batches import HostBatchesMapDataset
from datatools.grain.mixture_order import MixtureOrder
from datatools.grain.schedule import RestartableSchedule, Schedule
from datatools.io.sources.mixed_documents import MixedDocuments
from datatools.pipeline.config import PipelineConfig

WEIGHTS_KEY = "mixture_weights"  # the identity entry that may differ at a restore
# a mixture's weight history: [[position, weights], ...], the first at position 0
History: TypeAlias = list[list[Any]]


def initial_history(cfg: PipelineConfig) -> History:
    """``[[0, weights]]``: the config's weights from the first document on."""
    return [[0, [float(s.weight) for s in cfg.mixture_sources]]]


def draw_rates(cfg: PipelineConfig, docs: MixedDocuments, weights: npt.ArrayLike) -> list[float]:
    """The documents' draw rates that give ``weights``: the weights (``share: documents``), or each over its
    source's mean document length (``share: tokens``)."""
    w = np.asarray(weights, np.float64)
    if cfg.mixture.share == "documents":
        rates: list[float] = w.tolist()
        return rates
    lengths = docs.lengths()
    tokens = np.array([lengths[a:b].sum() for a, b in zip(docs.offsets[:-1], docs.offsets[1:])], np.float64)
    empty = (tokens == 0) & (docs.sizes > 0)
    if empty.any():
        raise ValueError(
            f"{docs.names[int(np.flatnonzero(empty)[0])]}: this source of the mixture holds no tokens; "
            f"its weight is a share of the tokens (mixture.share: tokens)"
        )
    mean = np.divide(tokens, docs.sizes, out=np.ones_like(tokens), where=docs.sizes > 0)
    rates = (w / mean).tolist()
    return rates


def mixture_order(cfg: PipelineConfig, docs: MixedDocuments, history: History | None = None) -> MixtureOrder:
    """The :class:`MixtureOrder` of the config over ``docs`` (a MixedDocuments), with ``history``'s weights."""
    sh = cfg.shuffle
    rates = [(p, draw_rates(cfg, docs, w)) for p, w in (history or initial_history(cfg))]
    return MixtureOrder(
        docs.sizes,
        rates,
        mode=cfg.mixture.epoch,
        epoch_documents=cfg.mixture.epoch_documents,
        shuffle=sh.kind,
        seed=cfg.seed,
        io_block_size=sh.io_block_size,
        window_blocks=sh.window_blocks,
    )


def mixture_identity(cfg: PipelineConfig, docs: MixedDocuments, history: History | None = None) -> dict[str, Any]:
    """The identity entries of a mixture: how its epochs end and each source's documents (a change refuses a
    state), and the weight history (a change is a reweighting)."""
    return {
        "mixture": repr((cfg.mixture.epoch, cfg.mixture.epoch_documents, cfg.mixture.share, docs.sizes.tolist())),
        WEIGHTS_KEY: [[int(p), [float(x) for x in w]] for p, w in (history or initial_history(cfg))],
    }


def reweighted_history(
    cfg: PipelineConfig,
    saved: object,
    consumed: int,
    schedule_of: Callable[[History], tuple[Schedule, HostBatchesMapDataset]],
) -> History:
    """The weight history of a pipeline restored after ``consumed`` global batches from a state whose history was
    ``saved``, with ``cfg``'s weights: ``saved`` when they are those in force, else ``saved`` up to the restore
    point plus ``[point, new weights]``. ``schedule_of(history) -> (schedule, host)`` builds the pipeline's."""
    try:
        if not isinstance(saved, (list, tuple)):  # the state's value as read: anything
            raise TypeError
        history: History = [[int(p), [float(x) for x in w]] for p, w in saved]  # [position, weights]
    except (TypeError, ValueError):
        raise ValueError(f"state: {WEIGHTS_KEY} must be a list of [position, [weights]]; got {saved!r:.200}") from None
    weights = initial_history(cfg)[0][1]
    if not history or history[0][0] != 0 or any(len(w) != len(weights) for _, w in history):
        raise ValueError(f"state: {WEIGHTS_KEY} {history!r:.200} does not fit a mixture of {len(weights)} sources")
    if history[-1][1] == weights:
        return history
    schedule, host = schedule_of(history)
    if cfg.num_epochs is not None and consumed >= len(host):
        return history  # the run is over: nothing is drawn any more
    if not isinstance(schedule, RestartableSchedule):  # the config gives a mixture streaming packing or bucketing
        raise TypeError(f"{type(schedule).__name__} has no restart position: a mixture's weights cannot change")
    epoch, j = host.locate(consumed)
    point = epoch * schedule.order.n + schedule.restart_position(epoch, j)
    return [e for e in history if e[0] < point] + [[point, weights]]
