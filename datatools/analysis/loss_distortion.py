"""How far averaging the loss per packed row or per batch moves each document's weight from the unpacked objective.

``row_mean``: each row weighs 1, a piece with ``n`` of its row's ``T`` targets ``n / T``, against unpacked rows under
a per-row mean (the ``document`` loss weighting). ``batch_mean``: rows shuffled into batches of ``batch_size``, a
piece weighs ``n / T_b``, against the token mean (the ``token`` weighting; also micro-batches). A piece has
``length - 1`` targets; a document's relative weight (its pieces added) is its share of the objective over its share
of the reference; documents with no target are left out. Over :data:`MAX_DOCUMENTS` documents, a seeded sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from datatools.base.checks import DEFAULT_ALGORITHM, as_lengths, check_int
from datatools.base.reports import Report
from datatools.kernels.packing import pack_lengths

QUANTILES = (0.01, 0.1, 0.5, 0.9, 0.99)
DEFAULT_BATCH_SIZE = 32
MAX_DOCUMENTS = 10_000_000  # documents: over this, the view is computed on a sample of this many
BLOCK = 65_536  # consecutive documents a block of the sample (whole stretches of the input, in its order)


@dataclass(frozen=True)
class WeightDistortion(Report):
    """The distribution of documents' relative weight under one averaging."""

    averaging: str  # row_mean or batch_mean
    reference: str  # the loss weighting that gives the unpacked objective: document or token
    documents: int  # documents with at least one target
    over_2x: float  # fraction of documents weighted more than twice their unpacked weight
    under_half: float  # fraction weighted less than half
    quantiles: dict[str, float]  # p1, p10, p50, p90, p99 of the relative weight
    min: float
    max: float


@dataclass(frozen=True)
class LossDistortion(Report):
    """Both views for one packed plan (``algorithm`` at ``ctx`` tokens, batches of ``batch_size`` rows)."""

    ctx: int
    algorithm: str
    batch_size: int
    rows: int
    row_mean: WeightDistortion
    batch_mean: WeightDistortion
    documents_total: int = 0  # documents of the input
    documents_analyzed: int = 0  # documents the plan was made of (all, or the sample)
    selection: str = "all"  # how they were chosen: all, or the random blocks (seed)


def sample_documents(
    lengths: np.ndarray | Sequence[int], limit: int = MAX_DOCUMENTS, *, seed: int = 0, block: int = BLOCK
) -> tuple[np.ndarray, str]:
    """(int64 lengths, how chosen): all of ``lengths`` up to ``limit`` documents, else ``limit // block`` random
    blocks of ``block`` consecutive documents (``seed``), in input order, reading only those slices."""
    limit = check_int(limit, "max_documents", minimum=1)
    block = check_int(block, "block", minimum=1)
    n = int(np.shape(lengths)[0]) if np.ndim(lengths) == 1 else -1
    if n <= limit:
        return as_lengths(lengths), "all"
    blocks = -(-n // block)
    take = max(limit // block, 1)
    chosen = np.sort(np.random.default_rng(seed).choice(blocks, take, replace=False))
    parts = [as_lengths(np.asarray(lengths[b * block : (b + 1) * block]), f"lengths[{b * block}:]") for b in chosen]
    return np.concatenate(parts), f"random: {take:,} blocks of {block:,} consecutive documents (seed {seed})"


def _relative(weight: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Per document: (weight / sum) / (ref / sum); NaN where ``ref`` is 0."""
    out = np.full(weight.shape, np.nan)
    keep = ref > 0
    if keep.any():
        out[keep] = (weight[keep] / weight.sum()) / (ref[keep] / ref.sum())
    return out


def _distribution(averaging: str, reference: str, rel: np.ndarray) -> WeightDistortion:
    """The summary of relative weights (documents with no target left out)."""
    rel = rel[~np.isnan(rel)]
    qs = np.quantile(rel, QUANTILES) if rel.size else np.full(len(QUANTILES), np.nan)
    return WeightDistortion(
        averaging,
        reference,
        int(rel.size),
        float(np.mean(rel > 2.0)) if rel.size else 0.0,
        float(np.mean(rel < 0.5)) if rel.size else 0.0,
        {f"p{round(q * 100)}": float(v) for q, v in zip(QUANTILES, qs)},
        float(rel.min(initial=np.inf)) if rel.size else float("nan"),
        float(rel.max(initial=0.0)) if rel.size else float("nan"),
    )


def relative_weights(
    lengths: npt.ArrayLike,
    ctx: int,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    algorithm: str = DEFAULT_ALGORITHM,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, int]:
    """(per-row-mean, per-batch-mean relative weight: float64 per document, NaN without a target; rows of the plan)
    for ``lengths`` packed by ``algorithm`` into rows of ``ctx`` tokens, the rows shuffled (``seed``) into batches
    of ``batch_size``. Bad lengths, ctx, batch_size or algorithm: ValueError naming the value."""
    lengths = as_lengths(lengths)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    plan = pack_lengths(lengths, ctx, algorithm=algorithm, overflow="split")
    docs = lengths.shape[0]
    targets = np.maximum(plan.length.astype(np.float64) - 1.0, 0.0)  # per piece
    row_of = np.repeat(np.arange(plan.num_rows, dtype=np.int64), np.diff(plan.row_splits))
    row_targets = np.bincount(row_of, weights=targets, minlength=plan.num_rows)

    def per_document(values: np.ndarray) -> np.ndarray:
        return np.bincount(plan.doc, weights=values, minlength=docs)

    piece_row_targets = row_targets[row_of]
    by_row = np.divide(targets, piece_row_targets, out=np.zeros_like(targets), where=piece_row_targets > 0)
    row_rel = _relative(per_document(by_row), per_document(targets > 0))

    batch_of_row = np.empty(plan.num_rows, np.int64)
    batch_of_row[np.random.default_rng(seed).permutation(plan.num_rows)] = (
        np.arange(plan.num_rows, dtype=np.int64) // batch_size
    )
    batch_targets = np.bincount(batch_of_row, weights=row_targets)[batch_of_row][row_of]
    by_batch = np.divide(targets, batch_targets, out=np.zeros_like(targets), where=batch_targets > 0)
    return row_rel, _relative(per_document(by_batch), per_document(targets)), int(plan.num_rows)


def loss_distortion(
    lengths: np.ndarray | Sequence[int],
    ctx: int,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    algorithm: str = DEFAULT_ALGORITHM,
    seed: int = 0,
    max_documents: int = MAX_DOCUMENTS,
    block: int = BLOCK,
) -> LossDistortion:
    """:func:`relative_weights`' distribution under both averagings, on at most ``max_documents`` documents
    (:func:`sample_documents`)."""
    total = int(np.shape(lengths)[0]) if np.ndim(lengths) == 1 else 0
    sample, selection = sample_documents(lengths, max_documents, seed=seed, block=block)
    row_rel, batch_rel, rows = relative_weights(sample, ctx, batch_size=batch_size, algorithm=algorithm, seed=seed)
    return LossDistortion(
        int(ctx),
        algorithm,
        int(batch_size),
        rows,
        _distribution("row_mean", "document", row_rel),
        _distribution("batch_mean", "token", batch_rel),
        total or int(sample.shape[0]),
        int(sample.shape[0]),
        selection,
    )
