"""Bucketing as a global schedule: each epoch's batches computed from the shuffled documents' lengths.

Documents are cut at the longest bucket (the overflow policy), each piece goes to the bucket of its length, and a
bucket's batch is complete when its last piece arrives (:func:`datatools.kernels.bucket.fill_order_batches`, as the
streaming bucketer); each bucket's partial batch ends the epoch, padded, or is dropped. Memory: the epoch's pieces
in batch order (about 24 bytes a document).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import numpy.typing as npt

from datatools.base.checks import OVERFLOW_POLICIES, check_choice
from datatools.grain.host_batches import empty_rows
from datatools.grain.schedule import DocumentOrderLike, EpochCache
from datatools.io.sources.documents import DocumentSource
from datatools.kernels.bucket import check_buckets, fill_order_batches
from datatools.kernels.packing import PackPlan, cut_pieces, materialize_pieces


def bucket_rows(
    read_pieces: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    doc: np.ndarray,
    start: np.ndarray,
    length: np.ndarray,
    *,
    rows: int,
    width: int,
    pad_id: int = 0,
) -> dict[str, np.ndarray]:
    """A bucket's batch (of the schedule and the Grain transform): ``rows`` rows of ``width`` tokens, row i holding
    piece i (int64 ``doc``, ``start``, ``length``, read through ``read_pieces`` in one call), the rest empty."""
    n = int(doc.shape[0])
    out = empty_rows(rows, width, pad_id, fill_from=n)
    if n:
        plan = PackPlan.one_piece_rows(width, doc, start, length, "bucket")
        materialize_pieces(plan, read_pieces, pad_id=pad_id, out={k: v[:n] for k, v in out.items()})
    return out


def bucket_pieces(lengths: np.ndarray, boundaries: np.ndarray, overflow: str) -> tuple[np.ndarray, ...]:
    """``(doc, start, length, bucket)`` of the pieces of documents of ``lengths`` cut at the longest bucket."""
    doc, start, length, _, _ = cut_pieces(lengths, int(boundaries[-1]), overflow)
    return doc, start, length, np.searchsorted(boundaries, length)


class BucketSchedule:
    """Global batches of length bucketing (see the module docstring) of ``docs`` (``lengths()``, ``read_pieces``)
    in ``order`` (:class:`~datatools.grain.host_batches.DocumentOrder`): ``boundaries`` are the increasing bucket
    lengths (tokens), ``batch_sizes`` the rows of each bucket's global batches; ``overflow``: documents longer than
    the last boundary (``split``, ``truncate``, ``drop``, ``error``)."""

    def __init__(
        self,
        docs: DocumentSource,
        order: DocumentOrderLike,
        *,
        boundaries: npt.ArrayLike,
        batch_sizes: npt.ArrayLike,
        overflow: str = "split",
        drop_remainder: bool = False,
        pad_id: int = 0,
    ):
        self.docs, self.order = docs, order
        self.lengths = np.asarray(docs.lengths(), np.int64)
        self.boundaries, self.batch_sizes = check_buckets(boundaries, batch_sizes)
        self.overflow = check_choice(overflow, "overflow", OVERFLOW_POLICIES)
        self.drop_remainder, self.pad_id = bool(drop_remainder), int(pad_id)
        self.positions = int(order.n)  # documents read per epoch (a mixture's may differ from the documents held)
        # A sampled mixture reads other documents each epoch: its batch count is the epoch's own.
        self._fixed = bool(order.same_documents_every_epoch)
        self.row_counts = tuple(sorted(set(self.batch_sizes.tolist())))
        self.shapes = [(int(b), int(n)) for b, n in zip(self.batch_sizes, self.boundaries)]
        self._epochs = EpochCache(keep=2)
        bucket = bucket_pieces(self.lengths, self.boundaries, self.overflow)[3]  # names a document too long
        counts = np.bincount(bucket, minlength=self.boundaries.shape[0])  # pieces per bucket: the same every epoch
        full, rest = np.divmod(counts, self.batch_sizes)
        self._batches = int(full.sum()) + (0 if drop_remainder else int(np.count_nonzero(rest)))

    def epoch_batches(self, epoch: int) -> tuple[np.ndarray, ...]:
        """``(doc, start, length, batch_splits, batch_bucket, position)`` of the epoch: batch b is pieces
        ``[batch_splits[b], batch_splits[b + 1])``; ``position``: each piece's document's place in the epoch's
        order."""
        return self._epochs.get(epoch, self._epoch_batches)

    def _epoch_batches(self, epoch: int) -> tuple[np.ndarray, ...]:
        docs = self.order(np.arange(self.positions, dtype=np.int64), epoch)
        position, start, length, bucket = bucket_pieces(self.lengths[docs], self.boundaries, self.overflow)
        items, splits, batch_bucket = fill_order_batches(bucket, self.batch_sizes, drop_remainder=self.drop_remainder)
        return (
            docs[position[items]],
            start[items],
            length[items].astype(np.int64),
            splits,
            batch_bucket,
            position[items].astype(np.int64),
        )

    def num_batches(self, epoch: int) -> int:
        return self._batches if self._fixed else int(self.epoch_batches(epoch)[3].shape[0]) - 1

    def restart_position(self, epoch: int, j: int) -> int:
        """See :class:`~datatools.grain.schedule.RestartableSchedule`: the position after the last document
        batches ``0 .. j - 1`` hold a piece of."""
        if j <= 0:
            return 0
        *_, splits, _, position = self.epoch_batches(epoch)
        return int(position[splits[0] : splits[j]].max()) + 1

    def batch_rows(self, epoch: int, j: int) -> int:
        return int(self.batch_sizes[self.epoch_batches(epoch)[4][j]])

    def rows_plan(self, epoch: int, j: int, lo: int, hi: int) -> PackPlan:
        """Rows ``[lo, hi)`` of global batch ``j`` that hold data (a prefix: a bucket's last batch may end early),
        one piece a row, as one plan of the bucket's width."""
        doc, start, length, splits, bucket, _ = self.epoch_batches(epoch)
        a = splits[j] + lo
        b = max(min(splits[j] + hi, splits[j + 1]), a)
        return PackPlan.one_piece_rows(
            int(self.boundaries[bucket[j]]),
            np.asarray(doc[a:b], np.int64),
            np.asarray(start[a:b], np.int64),
            np.asarray(length[a:b], np.int64),
            "bucket",
        )

    def epoch_rows(
        self, epoch: int, batches: int, chunk: int = 1 << 20
    ) -> Iterator[tuple[np.ndarray, np.ndarray, PackPlan]]:
        """The rows of global batches ``[0, batches)`` of ``epoch`` that hold data, in order, ``chunk`` rows at a time:
        ``(batch, row, plan)``, each row's batch and row within it (int64) and the rows as one plan of one piece a
        row (its ``ctx`` the longest bucket's: the rows of one chunk may come from several buckets)."""
        doc, start, length, splits, _, _ = self.epoch_batches(epoch)
        end = int(splits[batches])
        for a in range(0, end, chunk):
            i = np.arange(a, min(end, a + chunk), dtype=np.int64)
            b = np.searchsorted(splits, i, side="right") - 1
            plan = PackPlan.one_piece_rows(
                int(self.boundaries[-1]),
                np.asarray(doc[i], np.int64),
                np.asarray(start[i], np.int64),
                np.asarray(length[i], np.int64),
                "bucket",
            )
            yield b.astype(np.int64), i - splits[b], plan

    def read(self, epoch: int, j: int, lo: int, hi: int) -> dict[str, np.ndarray]:
        plan = self.rows_plan(epoch, j, lo, hi)
        return bucket_rows(
            self.docs.read_pieces, plan.doc, plan.start, plan.length, rows=hi - lo, width=plan.ctx, pad_id=self.pad_id
        )
