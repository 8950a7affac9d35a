"""How far averaging the loss per packed row or per batch moves each document's weight from the unpacked objective.

Packing puts a varying number of documents in a row, and a varying number of target
tokens in a batch. A step that *averages* the loss per row, or per (micro-)batch,
silently reweights documents; this view measures by how much, for a dataset's lengths
at one ctx, from lengths alone (no tokens read):

``row_mean`` (per-row mean of a packed plan)
    each row weighs 1 and its targets share it: a document piece with ``n`` of the row's
    ``T`` targets weighs ``n / T``. Compared with the objective that unpacked rows (one
    piece per row, padded) give under a per-row mean: every piece weighs 1 -- the
    ``document`` loss weighting.
``batch_mean`` (per-batch token mean)
    the packed rows shuffled into batches of ``batch_size`` rows, each batch weighing 1
    and its ``T_b`` targets sharing it: a piece weighs ``n / T_b``. Compared with the
    token mean over the whole data set (every target token weighs the same) -- the
    ``token`` loss weighting. Averaging micro-batch means under gradient accumulation is
    this view with the micro-batch as the batch.

A document's *relative weight* is its share of the averaged objective divided by its
share of the reference objective (1: unchanged; 2: it counts twice what the unpacked
objective gives it); split documents add up their pieces. Targets are counted as the
pipeline's ``boundary_targets: mask`` makes them: ``length - 1`` per piece. Documents
with no target (one token) are left out. Everything is vectorized numpy over the plan's
pieces (the plan itself is :func:`~datatools.kernels.packing.pack_lengths`), so 10^7
lengths take seconds. Over :data:`MAX_DOCUMENTS` documents (the plan would take ~50 bytes a
document: 50 GB at 10^9) the view is computed on a seeded random sample of whole blocks of
:data:`BLOCK` consecutive documents (:func:`sample_documents`), as the report says
(``documents_analyzed``, ``selection``): the distortion is a distribution over documents, which
a sample of 10^7 estimates to well under a point.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from datatools.base.checks import as_lengths, check_int
from datatools.base.reports import Report
from datatools.kernels.packing import pack_lengths

QUANTILES = (0.01, 0.1, 0.5, 0.9, 0.99)
DEFAULT_BATCH_SIZE = 32
MAX_DOCUMENTS = 10_000_000  # documents: over this, the view is computed on a sample of this many
BLOCK = 65_536  # consecutive documents a block of the sample (whole stretches of the input, in its order)


@dataclass(frozen=True)
class WeightDistortion(Report):
    """The distribution of documents' relative weight (their share of the objective / their share of the
    reference objective) under one averaging."""

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


def sample_documents(lengths, limit: int = MAX_DOCUMENTS, *, seed: int = 0, block: int = BLOCK):
    """(int64 lengths, how chosen): all of ``lengths`` when they are at most ``limit`` documents, else
    ``limit // block`` blocks of ``block`` consecutive documents (the last block may be shorter) drawn at random
    without replacement (``seed``), in input order. Reads only the chosen slices (a memory-mapped file stays on
    disk)."""
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
    """Per document: (weight / sum) / (ref / sum); NaN where ``ref`` is 0 (a document with no target)."""
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
    lengths, ctx: int, *, batch_size: int = DEFAULT_BATCH_SIZE, algorithm: str = "best_fit_decreasing", seed: int = 0
) -> tuple[np.ndarray, np.ndarray, int]:
    """(per-row-mean relative weight, per-batch-mean relative weight, rows of the plan): float64 per document,
    NaN for a document with no target (module docstring).

    Args:
      lengths: tokens per document.
      ctx: row length (tokens); longer documents are split into ctx pieces.
      batch_size: rows per batch of the per-batch view.
      algorithm: the packing algorithm of the plan.
      seed: of the shuffle of rows into batches.

    Raises:
      ValueError: bad lengths, ctx, batch_size or algorithm (naming the value).
    """
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
    lengths,
    ctx: int,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    algorithm: str = "best_fit_decreasing",
    seed: int = 0,
    max_documents: int = MAX_DOCUMENTS,
    block: int = BLOCK,
) -> LossDistortion:
    """The distribution of :func:`relative_weights` under both averagings (arguments as there), on at most
    ``max_documents`` documents (:func:`sample_documents`, blocks of ``block``, the same ``seed``)."""
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
