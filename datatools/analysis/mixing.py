"""Does each batch hold what a mixture's weights promise? Per source, the mean and the worst batch share of tokens
and of documents (pieces: a split document counts once per piece) against its weight, and groups per batch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from datatools.base.reports import Report


@dataclass(frozen=True)
class SourceMixing(Report):
    """One source's part of the batches looked at (shares are fractions of a batch, 0..1)."""

    name: str
    weight: float  # the source's weight, normalized (sum 1 over the sources)
    documents: int  # document pieces drawn from it, over all batches looked at
    tokens: int  # its real tokens over all batches looked at
    token_share_mean: float  # mean over batches of its share of the batch's real tokens
    token_share_worst: float  # the batch share furthest from the weight
    token_share_worst_deviation: float  # |token_share_worst - weight|
    document_share_mean: float
    document_share_worst: float
    document_share_worst_deviation: float
    groups_per_batch: float | None  # mean distinct groups (group_size consecutive documents) per batch; None: no size


@dataclass(frozen=True)
class MixingReport(Report):
    """How far each batch's mixture is from the weights, over ``batches`` batches of a pipeline."""

    config: str
    mode: str  # streaming | bucketing | planned
    epoch: str  # the mixture's epoch: sample | exhaust (one source: '-')
    share: str  # what the weights are shares of: tokens | documents
    batches: int  # batches looked at (from the first)
    group_size: int | None
    groups_per_batch: float | None  # mean distinct groups of all sources per batch
    groups_per_batch_min: int | None
    sources: list[SourceMixing]


def _worst(share: np.ndarray, target: float) -> tuple[float, float]:
    i = int(np.argmax(np.abs(share - target)))
    return float(share[i]), float(abs(share[i] - target))


def mixing_stats(
    tokens: np.ndarray,
    documents: np.ndarray,
    weights: npt.ArrayLike,
    names: Sequence[str],
    *,
    source_groups: np.ndarray | None = None,
) -> list[SourceMixing]:
    """Per-source figures over batches from ``tokens`` and ``documents``, int64 (batches, sources): real tokens and
    document pieces of each source per batch; ``weights`` (> 0, normalized here) and ``names``, one per source;
    ``source_groups``: optional int64 (batches, sources), distinct groups of each source per batch."""
    tokens = np.asarray(tokens, np.int64)
    documents = np.asarray(documents, np.int64)
    w = np.asarray(weights, np.float64)
    if tokens.ndim != 2 or tokens.shape != documents.shape or tokens.shape[1] != w.shape[0] or tokens.shape[0] == 0:
        raise ValueError(
            f"tokens {tokens.shape} and documents {documents.shape} must be (batches >= 1, {w.shape[0]} sources)"
        )
    w = w / w.max()  # scaled into (0, 1] first: a sum of weights near 1e308 is inf (every weight read 0.0)
    w = w / w.sum()
    tok_share = tokens / np.maximum(tokens.sum(axis=1, keepdims=True), 1)
    doc_share = documents / np.maximum(documents.sum(axis=1, keepdims=True), 1)
    out = []
    for k, name in enumerate(names):
        tw, tdev = _worst(tok_share[:, k], w[k])
        dw, ddev = _worst(doc_share[:, k], w[k])
        out.append(
            SourceMixing(
                str(name),
                float(w[k]),
                int(documents[:, k].sum()),
                int(tokens[:, k].sum()),
                float(tok_share[:, k].mean()),
                tw,
                tdev,
                float(doc_share[:, k].mean()),
                dw,
                ddev,
                None if source_groups is None else float(np.asarray(source_groups)[:, k].mean()),
            )
        )
    return out
