"""The mixing report of a config: each batch's share of tokens and documents per source, against the weights.

:func:`mix_report` runs the config's own pipeline over stand-in documents with the sources' real lengths whose
every token is its document's id: no token is read, yet every slot names its document (hence source and group).
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import numpy.typing as npt

from datatools.analysis.mixing import MixingReport, mixing_stats
from datatools.base.checks import check_int
from datatools.base.progress import StepsProgress
from datatools.io.sources.documents import DocumentSource, check_pieces
from datatools.io.sources.mixed_documents import MixedDocuments
from datatools.pipeline.build import build_canonical
from datatools.pipeline.config import PipelineConfig, ShardConfig
from datatools.pipeline.sources import OpenedDocuments, open_config_documents


class _IdDocuments(DocumentSource):
    """Documents of given lengths whose every token is ``first_id + i + 1`` for document i (no storage)."""

    in_memory = True

    def __init__(self, lengths: npt.ArrayLike, first_id: int):
        self._lengths = np.asarray(lengths, np.int64)
        self.first_id = int(first_id)

    def __len__(self) -> int:
        return int(self._lengths.shape[0])

    def lengths(self) -> np.ndarray:
        return self._lengths

    def read_pieces(self, doc: npt.ArrayLike, start: npt.ArrayLike, length: npt.ArrayLike) -> np.ndarray:
        doc, start, length = check_pieces(doc, start, length, self._lengths)
        return np.repeat(doc + self.first_id + 1, length).astype(np.int32)


def _counts(
    batch: dict[str, np.ndarray], offsets: np.ndarray, group_size: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int | None]:
    """(tokens per source, pieces per source, distinct groups per source, distinct groups) of one batch."""
    k = offsets.shape[0] - 1
    seg = batch["segment_ids"]
    real = seg > 0
    doc = batch["tokens"][real].astype(np.int64) - 1
    source = np.searchsorted(offsets, doc, side="right") - 1
    tokens = np.bincount(source, minlength=k)
    first = real & np.concatenate((np.ones((seg.shape[0], 1), bool), seg[:, 1:] != seg[:, :-1]), axis=1)
    piece_doc = batch["tokens"][first].astype(np.int64) - 1
    piece_source = np.searchsorted(offsets, piece_doc, side="right") - 1
    pieces = np.bincount(piece_source, minlength=k)
    if group_size is None:
        return tokens, pieces, None, None
    group = np.unique(np.stack([piece_source, (piece_doc - offsets[piece_source]) // group_size], axis=1), axis=0)
    return tokens, pieces, np.bincount(group[:, 0], minlength=k), group.shape[0]


def mix_report(
    cfg: PipelineConfig,
    *,
    batches: int = 1000,
    group_size: int | None = None,
    name: str = "",
    documents: OpenedDocuments | None = None,
    progress: StepsProgress | None = None,
) -> MixingReport:
    """The mixing report of ``cfg`` (``sources``: a mixture; ``source``: one source, share 1), named ``name``, over
    its first ``batches`` global batches (fewer when the data ends).

    Args:
      group_size: documents per stored group in each source (storage order), for groups per batch; None: none.
      documents: already opened sources (as :func:`~datatools.pipeline.build.build_canonical` takes them).
      progress: ``progress(total)``: a context manager giving ``advance()``, called after each batch (the CLI's
        :func:`~datatools.base.progress.count_progress`).
    """
    batches = check_int(batches, "batches", minimum=1)
    if group_size is not None:
        group_size = check_int(group_size, "group_size", minimum=1)
    docs = open_config_documents(cfg, documents)
    if cfg.sources is not None:
        assert isinstance(docs, MixedDocuments)  # a mixture's documents (open_mixture)
        offsets, names = docs.offsets, list(docs.names)
        weights = [s.weight for s in cfg.sources]
        stand: DocumentSource = MixedDocuments(
            [_IdDocuments(s.lengths(), int(offsets[k])) for k, s in enumerate(docs.sources)], names=names
        )
    else:
        offsets, names, weights = np.array([0, len(docs)], np.int64), [cfg.one_source.path], [1.0]
        stand = _IdDocuments(docs.lengths(), 0)
    host = build_canonical(cfg.replace(workers=0, shard=ShardConfig(), attention_block=None), stand).batches
    count = min(batches, len(host))
    k = len(names)
    tokens, pieces = np.zeros((count, k), np.int64), np.zeros((count, k), np.int64)
    groups = np.zeros((count, k), np.int64) if group_size else None
    total_groups = np.zeros(count, np.int64)
    with progress(count) if progress else nullcontext(lambda: None) as advance:
        for j in range(count):  # one batch at a time: the schedule's own reads, counted by vectorized bincounts
            t, p, g, n = _counts(host[j], offsets, group_size)
            tokens[j], pieces[j] = t, p
            if groups is not None and g is not None and n is not None:  # (counted whenever groups are)
                groups[j], total_groups[j] = g, n
            advance()
    return MixingReport(
        name,
        cfg.mode,
        cfg.mixture.epoch if cfg.sources is not None else "-",
        cfg.mixture.share if cfg.sources is not None else "tokens",
        count,
        group_size,
        float(total_groups.mean()) if groups is not None else None,
        int(total_groups.min()) if groups is not None else None,
        mixing_stats(tokens, pieces, weights, names, source_groups=groups),
    )
