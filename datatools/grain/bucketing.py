"""Bucketing as a Grain ``IterDataset``: an adapter over the bucket schedule's filler and batch builder
(:func:`~datatools.kernels.bucket.fill_order_batches`, :func:`~datatools.grain.bucket_schedule.bucket_rows`)."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import numpy.typing as npt

import grain
from datatools.base.checks import OVERFLOW_POLICIES, check_choice
from datatools.grain.bucket_schedule import bucket_pieces, bucket_rows
from datatools.grain.document_blocks import document_block
from datatools.kernels.bucket import check_buckets, fill_order_batches

Piece = tuple[int, np.ndarray]  # (start in its document, the piece's tokens)
Group = tuple[int, list[Piece]]  # (bucket, pieces)


def _encode_groups(groups: list[Group]) -> str:
    """Buffered pieces as one ASCII string (a constant state structure for Grain checkpoints)."""
    head = [len(groups)] + [k for k, _ in groups] + [len(p) for _, p in groups]
    meta = [(start, piece.shape[0]) for _, pieces in groups for start, piece in pieces]
    tokens = [piece for _, pieces in groups for _, piece in pieces]
    raw = (
        np.asarray(head, np.int64).tobytes()
        + np.asarray(meta, np.int64).reshape(-1).tobytes()
        + (np.concatenate(tokens).astype(np.int32).tobytes() if tokens else b"")
    )
    return base64.b64encode(raw).decode("ascii")


def _decode_groups(text: str) -> list[Group]:
    raw = base64.b64decode(text.encode("ascii"))
    g = int(np.frombuffer(raw[:8], np.int64)[0])
    head = np.frombuffer(raw[8 : 8 + 16 * g], np.int64)
    buckets, sizes = head[:g].tolist(), head[g:].tolist()
    at = 8 + 16 * g
    meta = np.frombuffer(raw[at : at + 16 * sum(sizes)], np.int64).reshape(-1, 2).tolist()
    tokens = np.frombuffer(raw[at + 16 * sum(sizes) :], np.int32)
    ends = np.cumsum([n for _, n in meta], dtype=np.int64).tolist()
    pieces = [(start, tokens[end - n : end].copy()) for (start, n), end in zip(meta, ends)]
    cuts = np.cumsum([0] + sizes).tolist()
    return [(k, pieces[a:b]) for k, a, b in zip(buckets, cuts, cuts[1:])]


class _BucketIterator(grain.DatasetIterator):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    def __init__(self, parent: grain.DatasetIterator, ds: BucketBatchIterDataset):
        super().__init__(parent)
        self._ds = ds
        self._buffers: list[list[Piece]] = [[] for _ in ds.boundaries]
        self._ready: list[Group] = []  # full batches not yet yielded (a split document can fill two)
        self._flushing = False

    def _add(self, flat: np.ndarray, lengths: np.ndarray) -> None:
        """Cut an element's documents at the longest bucket and fill the buckets' batches with the pieces, after
        the buffered ones (:func:`fill_order_batches`); full batches become ready."""
        ds, longest = self._ds, int(self._ds.boundaries[-1])
        if ds.overflow == "error" and lengths.size and int(lengths.max()) > longest:
            raise ValueError(
                f"document of length {int(lengths.max())} > the largest bucket {longest} (overflow='error')"
            )
        doc, start, length, bucket = bucket_pieces(lengths, ds.boundaries, ds.overflow)
        at = np.concatenate(([0], np.cumsum(lengths)))[doc] + start
        new = [(int(s), np.asarray(flat[a : a + n], np.int32)) for s, a, n in zip(start, at, length.tolist())]
        held = np.asarray([len(b) for b in self._buffers], np.int64)
        if not (held + np.bincount(bucket, minlength=held.shape[0]) >= ds.batch_sizes).any():  # no batch completes
            for k, piece in zip(bucket.tolist(), new):
                self._buffers[k].append(piece)
            return
        pieces = [p for b in self._buffers for p in b] + new  # the buffered pieces arrived first
        items, splits, batch_bucket = fill_order_batches(
            np.concatenate((np.repeat(np.arange(held.shape[0]), held), bucket)), ds.batch_sizes
        )
        self._buffers = [[] for _ in ds.boundaries]
        for b, k in enumerate(batch_bucket.tolist()):
            group = [pieces[i] for i in items[splits[b] : splits[b + 1]].tolist()]
            if len(group) == ds.batch_sizes[k]:
                self._ready.append((k, group))
            else:  # a bucket's remainder (after its full batches): it waits for more pieces
                self._buffers[k] = group

    def __next__(self) -> dict[str, np.ndarray]:
        ds = self._ds
        while not self._ready and not self._flushing:
            try:
                flat, lengths = document_block(next(self._parent), ds.feature)
            except StopIteration:
                self._flushing = True
                if not ds.drop_remainder:
                    self._ready.extend((k, b) for k, b in enumerate(self._buffers) if b)
                self._buffers = [[] for _ in ds.boundaries]
                break
            self._add(flat, lengths)
        if not self._ready:
            raise StopIteration
        k, pieces = self._ready.pop(0)
        n = len(pieces)
        return bucket_rows(
            lambda doc, start, length: np.concatenate([pieces[i][1] for i in doc.tolist()]),
            np.arange(n, dtype=np.int64),
            np.asarray([s for s, _ in pieces], np.int64),
            np.asarray([p.shape[0] for _, p in pieces], np.int64),
            rows=int(ds.batch_sizes[k]),
            width=int(ds.boundaries[k]),
            pad_id=ds.pad_id,
        )

    def get_state(self) -> dict[str, Any]:
        return {
            "parent": self._parent.get_state(),
            "buffers": _encode_groups(list(enumerate(self._buffers)) + self._ready),
            "flushing": int(self._flushing),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state["parent"])
        groups = _decode_groups(state["buffers"])
        n = len(self._ds.boundaries)
        self._buffers = [pieces for _, pieces in groups[:n]]
        self._ready = groups[n:]
        self._flushing = bool(state["flushing"])


class BucketBatchIterDataset(grain.IterDataset):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    """Group documents by length into buckets and yield fixed-shape padded batches.

    Bucket k holds pieces of length in ``(boundaries[k - 1], boundaries[k]]``; with ``batch_sizes[k]`` pieces it
    yields a canonical batch of shape (batch_sizes[k], boundaries[k]), the batches of
    :class:`~datatools.grain.bucket_schedule.BucketSchedule` over the same order (see
    :func:`datatools.bucket_boundaries`, :func:`datatools.bucket_batch_sizes`). At most ``sum(batch_sizes) -
    len(boundaries)`` pieces wait; at the end each bucket's remainder is padded with empty rows, or dropped with
    ``drop_remainder``. The state holds the parent's state and the buffered pieces (base64).

    Args:
      parent: an IterDataset of documents: 1-D token arrays, dicts with ``feature``, or document blocks.
      boundaries, batch_sizes: increasing bucket lengths (tokens); rows per batch, one per bucket (or one for all).
      overflow: documents longer than the last boundary: ``split``, ``truncate``, ``drop``, ``error``.
      pad_id: token id written at padding.
    """

    def __init__(
        self,
        parent: grain.IterDataset,
        *,
        boundaries: npt.ArrayLike,
        batch_sizes: npt.ArrayLike,
        overflow: str = "split",
        drop_remainder: bool = False,
        feature: str = "tokens",
        pad_id: int = 0,
    ):
        super().__init__(parent)
        self.boundaries, self.batch_sizes = check_buckets(boundaries, batch_sizes)
        self.overflow = check_choice(overflow, "overflow", OVERFLOW_POLICIES)
        self.drop_remainder = bool(drop_remainder)
        self.feature = feature
        self.pad_id = int(pad_id)

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """The (rows, tokens) shape of each bucket's batches."""
        return [(int(b), int(n)) for b, n in zip(self.batch_sizes, self.boundaries)]

    def __iter__(self) -> _BucketIterator:
        return _BucketIterator(self._parent.__iter__(), self)

    def __str__(self) -> str:
        return f"BucketBatchIterDataset(shapes={self.shapes})"
