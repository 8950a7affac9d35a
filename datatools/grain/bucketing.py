"""Bucketing: an ``IterDataset`` that yields fixed-shape padded batches, one shape per bucket."""

from __future__ import annotations

import base64

import numpy as np

import grain
from datatools.base.checks import OVERFLOW_POLICIES, check_choice, check_int
from datatools.grain.document_blocks import document_block

Group = tuple[int, list[tuple[int, np.ndarray]]]  # (bucket, [(start in document, piece tokens), ...])


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
    groups, m, t = [], 0, 0
    for k, size in zip(buckets, sizes):
        pieces = []
        for start, n in meta[m : m + size]:
            pieces.append((start, tokens[t : t + n].copy()))
            t += n
        m += size
        groups.append((k, pieces))
    return groups


def padded_batch(pieces: list[tuple[int, np.ndarray]], batch_size: int, length: int, pad_id: int = 0) -> dict:
    """A canonical batch of shape (batch_size, length): one piece per row, rows past the pieces empty."""
    out = {"tokens": np.full((batch_size, length), pad_id, np.int32)}
    for key in ("segment_ids", "positions", "loss_mask"):
        out[key] = np.zeros((batch_size, length), np.int32)
    for r, (start, piece) in enumerate(pieces):
        n = piece.shape[0]
        out["tokens"][r, :n] = piece
        out["segment_ids"][r, :n] = 1
        out["positions"][r, :n] = np.arange(start, start + n, dtype=np.int32)
        out["loss_mask"][r, : n - 1] = 1
    return out


class _BucketIterator(grain.DatasetIterator):
    def __init__(self, parent, ds: BucketBatchIterDataset):
        super().__init__(parent)
        self._ds = ds
        self._buffers: list[list[tuple[int, np.ndarray]]] = [[] for _ in ds.boundaries]
        self._ready: list[Group] = []  # full batches not yet yielded (a split document can fill two)
        self._flushing = False

    def _pieces(self, tokens: np.ndarray):
        ds, longest = self._ds, self._ds.boundaries[-1]
        n = tokens.shape[0]
        if n <= longest:
            return [(0, tokens)] if n else []
        if ds.overflow == "split":
            return [(s, tokens[s : s + longest]) for s in range(0, n, longest)]
        if ds.overflow == "truncate":
            return [(0, tokens[:longest])]
        if ds.overflow == "drop":
            return []
        raise ValueError(f"document of length {n} > the largest bucket {longest} (overflow='error')")

    def __next__(self):
        ds = self._ds
        while not self._ready and not self._flushing:
            try:
                flat, lengths = document_block(next(self._parent), ds.feature)
            except StopIteration:
                self._flushing = True
                # The parent is exhausted: each bucket's remainder becomes a batch of the full shape.
                if not ds.drop_remainder:
                    self._ready.extend((k, b) for k, b in enumerate(self._buffers) if b)
                self._buffers = [[] for _ in ds.boundaries]
                break
            for tokens in np.split(flat, np.cumsum(lengths)[:-1]) if lengths.shape[0] > 1 else [flat]:
                for start, piece in self._pieces(tokens):
                    k = int(np.searchsorted(ds.boundaries, piece.shape[0]))
                    self._buffers[k].append((start, np.asarray(piece, np.int32)))
                    if len(self._buffers[k]) == ds.batch_sizes[k]:
                        self._ready.append((k, self._buffers[k]))
                        self._buffers[k] = []
        if not self._ready:
            raise StopIteration
        k, pieces = self._ready.pop(0)
        return padded_batch(pieces, ds.batch_sizes[k], int(ds.boundaries[k]), ds.pad_id)

    def get_state(self):
        return {
            "parent": self._parent.get_state(),
            "buffers": _encode_groups(list(enumerate(self._buffers)) + self._ready),
            "flushing": int(self._flushing),
        }

    def set_state(self, state):
        self._parent.set_state(state["parent"])
        groups = _decode_groups(state["buffers"])
        n = len(self._ds.boundaries)
        self._buffers = [pieces for _, pieces in groups[:n]]
        self._ready = groups[n:]
        self._flushing = bool(state["flushing"])


class BucketBatchIterDataset(grain.IterDataset):
    """Group documents by length into buckets and yield fixed-shape padded batches.

    Bucket k holds pieces of length <= ``boundaries[k]`` (and more than the previous
    boundary); when it has ``batch_sizes[k]`` pieces it yields a canonical batch of
    shape (batch_sizes[k], boundaries[k]). So the whole run uses at most
    ``len(boundaries)`` shapes: one XLA program each. Choose boundaries with
    :func:`datatools.bucket_boundaries` and sizes with
    :func:`datatools.bucket_batch_sizes` (a fixed batch or a token budget).

    The buffer is bounded: at most ``sum(batch_sizes) - len(boundaries)`` pieces wait.
    When the parent ends, each bucket's remainder is yielded padded to the full batch
    shape with empty rows (``segment_ids`` 0), or dropped with ``drop_remainder``.
    Checkpoints are exact: the state holds the parent's state and the buffered pieces
    (base64, bounded as above).

    Args:
      parent: an IterDataset of documents: 1-D token arrays, dicts with ``feature``,
        or document blocks (see :class:`DocumentsMapDataset`).
      boundaries: increasing bucket lengths (tokens).
      batch_sizes: rows per batch, one per bucket, or one int for all.
      overflow: documents longer than the last boundary are ``split`` into pieces of
        that length (positions count on), ``truncate``d, ``drop``ped, or an ``error``.
      drop_remainder: drop the partial batches at the end instead of padding them.
      feature: the dict key of the tokens when elements are dicts.
      pad_id: token id written at padding.
    """

    def __init__(
        self,
        parent: grain.IterDataset,
        *,
        boundaries,
        batch_sizes,
        overflow: str = "split",
        drop_remainder: bool = False,
        feature: str = "tokens",
        pad_id: int = 0,
    ):
        super().__init__(parent)
        bounds = [check_int(b, "boundary", minimum=1) for b in np.asarray(boundaries).reshape(-1).tolist()]
        if not bounds or any(b >= c for b, c in zip(bounds, bounds[1:])):
            raise ValueError(f"boundaries must be a non-empty increasing list of lengths; got {list(boundaries)}")
        if isinstance(batch_sizes, (int, np.integer)):
            batch_sizes = [batch_sizes] * len(bounds)
        sizes = [check_int(b, "batch size", minimum=1) for b in list(batch_sizes)]
        if len(sizes) != len(bounds):
            raise ValueError(f"{len(sizes)} batch sizes for {len(bounds)} buckets")
        self.boundaries = np.asarray(bounds, np.int64)
        self.batch_sizes = sizes
        self.overflow = check_choice(overflow, "overflow", OVERFLOW_POLICIES)
        self.drop_remainder = bool(drop_remainder)
        self.feature = feature
        self.pad_id = int(pad_id)

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """The (rows, tokens) shape of each bucket's batches."""
        return [(b, int(n)) for b, n in zip(self.batch_sizes, self.boundaries)]

    def __iter__(self):
        return _BucketIterator(self._parent.__iter__(), self)

    def __str__(self) -> str:
        return f"BucketBatchIterDataset(shapes={self.shapes})"
