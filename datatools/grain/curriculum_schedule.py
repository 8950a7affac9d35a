"""A length curriculum as a global schedule (dataset decomposition): every batch of one of K lengths.

Every document is cut into pieces of the lengths and the remainders packed into rows, once, from the lengths
(:func:`~datatools.kernels.curriculum.curriculum_rows`); each epoch, each length's rows take a seeded order (a
Feistel permutation per length and epoch) and the schedule draws each batch's length
(:func:`~datatools.kernels.curriculum.curriculum_order`), so every piece is read once per epoch. Memory: the pieces
(about 20 bytes each, a few per document) and one byte per batch of the epochs in use.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from datatools.grain.schedule import Delivered, EpochCache
from datatools.grain.streaming_schedule import RowsPlanSchedule
from datatools.io.sources.documents import DocumentSource
from datatools.kernels.curriculum import GROW_P2, CurriculumRows, curriculum_order, curriculum_rows, grow_p2_odds
from datatools.kernels.packing import PackPlan
from datatools.kernels.packing.plan_format import gather_rows
from datatools.kernels.shuffle import GOLDEN, FeistelPermutation


def schedule_odds(
    schedule: str | list[Any] | tuple[Any, ...], k: int, odds: npt.ArrayLike | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(odds (S, K), until (S,))`` of a schedule: ``grow_p2``, ``mix`` (``odds``, default all 1) or a list of
    stages (objects or mappings with ``until`` and ``odds``)."""
    if schedule == GROW_P2:
        return grow_p2_odds(k)[None, :], np.ones(1)
    if schedule == "mix":
        o = np.ones(k) if odds is None else np.asarray(odds, np.float64)
        return o[None, :], np.ones(1)
    if isinstance(schedule, str):
        raise ValueError(f"schedule must be 'mix', 'grow_p2' or a list of stages; got {schedule!r}")
    stages = [(s["until"], s["odds"]) if isinstance(s, dict) else (s.until, s.odds) for s in schedule]
    return np.asarray([o for _, o in stages], np.float64), np.asarray([u for u, _ in stages], np.float64)


@dataclass(frozen=True)
class Curriculum:
    """What a length curriculum is (the pipeline config's ``curriculum:`` section, checked there), apart from the
    order and the padding every schedule has.

    Args:
      lengths: the K row lengths (tokens), increasing.
      tokens_per_batch: token slots of every global batch (rows = tokens_per_batch / length).
      schedule, odds: ``grow_p2``, ``mix`` (``odds``, default 1 each) or a list of stages ``{until, odds}``.
      cycles: cycles per epoch, each running the whole schedule.
      pack_length: the length whose rows hold the packed remainders (default:
        :func:`~datatools.kernels.curriculum.pack_length_index`).
    """

    lengths: Sequence[int]
    tokens_per_batch: int
    schedule: str | list[Any] | tuple[Any, ...] = GROW_P2
    odds: npt.ArrayLike | None = None
    cycles: int = 1
    pack_length: int | None = None


class CurriculumSchedule(RowsPlanSchedule):
    """Global batches of a length curriculum (see the module docstring) of ``docs`` (``lengths()``, ``pack_rows``).

    Args:
      curriculum: the lengths, the batch's token slots, the schedule and its cycles (:class:`Curriculum`).
      shuffle: put each length's rows in a seeded order per epoch (else their fixed order).
      seed: the decomposition's choices, the rows' order and the draws.
      pad_id: token id written at padding.
    """

    def __init__(
        self, docs: DocumentSource, curriculum: Curriculum, *, shuffle: bool = True, seed: int = 0, pad_id: int = 0
    ):
        c = curriculum
        self.docs = docs
        self.rows: CurriculumRows = curriculum_rows(
            docs.lengths(), c.lengths, c.tokens_per_batch, seed=seed, pack_length=c.pack_length
        )
        self.sizes = self.rows.sizes
        self.odds, self.until = schedule_odds(c.schedule, self.sizes.shape[0], c.odds)
        self.cycles, self.shuffle, self.seed, self.pad_id = int(c.cycles), bool(shuffle), int(seed), int(pad_id)
        self.batches_per_length = self.rows.batches
        self._batches = int(self.batches_per_length.sum())
        self.row_counts = tuple(sorted(set(self.rows.rows_per_batch.tolist())))
        self.shapes = [(int(r), int(n)) for r, n in zip(self.rows.rows_per_batch, self.sizes)]
        self._epochs = EpochCache(keep=2)
        self._perms = EpochCache(keep=4 * self.sizes.shape[0] + 1)  # (length, epoch) -> its rows' permutation

    def epoch_order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """``(length index, ordinal)`` of every global batch of the epoch: batch j is the ``ordinal[j]``-th batch
        of length ``lengths[index[j]]`` in the epoch."""
        return self._epochs.get(epoch, self._epoch_order)

    def _epoch_order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        index = curriculum_order(
            self.batches_per_length, self.odds, self.until, seed=self.seed, epoch=epoch, cycles=self.cycles
        )
        ordinal = np.empty(index.shape[0], np.int64)
        for k in range(self.sizes.shape[0]):
            at = np.flatnonzero(index == k)
            ordinal[at] = np.arange(at.shape[0])
        return index, ordinal

    def num_batches(self, epoch: int) -> int:
        return self._batches

    def batch_rows(self, epoch: int, j: int) -> int:
        return int(self.rows.rows_per_batch[self.epoch_order(epoch)[0][j]])

    def _row_ids(self, epoch: int, j: int, lo: int, hi: int) -> tuple[int, np.ndarray]:
        """(length index, the rows of that length's plan) that rows [lo, hi) of global batch ``j`` hold; rows past
        the length's last row are padding, left out."""
        index, ordinal = self.epoch_order(epoch)
        k = int(index[j])
        plan = self.rows.plans[k]
        rows = int(ordinal[j]) * int(self.rows.rows_per_batch[k]) + np.arange(lo, hi, dtype=np.int64)
        return k, self._perm(k, epoch, rows[rows < plan.num_rows])

    def _perm(self, k: int, epoch: int, rows: np.ndarray, *, inverse: bool = False) -> np.ndarray:
        """Row ids of length ``k``'s plan at positions ``rows`` of its epoch order (int64); ``inverse``: the
        positions of row ids ``rows``."""
        if not self.shuffle or not rows.size:
            return rows
        n = self.rows.plans[k].num_rows
        seed = (self.seed + GOLDEN * (k + 1)) % (1 << 64)
        perm = self._perms.get((k, epoch), lambda _: FeistelPermutation(n, seed, epoch=epoch))
        return np.asarray(perm.inverse(rows) if inverse else perm(rows), np.int64)

    def document_pieces(self, epoch: int, d: int) -> list[tuple[int, int, int, int]]:
        """See :class:`~datatools.grain.schedule.DocumentPiecesSchedule`: ``d``'s pieces in each length's plan, their
        rows' places in the length's epoch order (the inverse permutation), the batch of that length holding each."""
        index, _ = self.epoch_order(epoch)
        out = []
        for k, plan in enumerate(self.rows.plans):
            hit = np.flatnonzero(np.asarray(plan.doc) == d)
            if not hit.size:
                continue
            rows = np.searchsorted(np.asarray(plan.row_splits), hit, side="right") - 1
            rows = self._perm(k, epoch, rows, inverse=True)
            per = int(self.rows.rows_per_batch[k])
            batches = np.flatnonzero(index == k)
            start, length = np.asarray(plan.start)[hit].tolist(), np.asarray(plan.length)[hit].tolist()
            for pos, a, n in zip(rows.tolist(), start, length):
                if pos // per < batches.shape[0]:
                    out.append((int(batches[pos // per]), pos % per, a, n))
        return out

    def delivered(self, epoch: int, batches: int, chunk: int = 1 << 22) -> Iterator[Delivered]:
        """See :class:`~datatools.grain.schedule.DeliveredSchedule`: the batches of length k among ``[0, batches)``
        deliver a prefix of that length's rows in its epoch order: the whole plan when all, the whole plan less the
        rest when more than half, else the prefix (row ids in ``chunk``-row parts)."""
        index, _ = self.epoch_order(epoch)
        drawn = np.bincount(index[:batches], minlength=self.sizes.shape[0])
        for k, plan in enumerate(self.rows.plans):
            m = min(int(drawn[k]) * int(self.rows.rows_per_batch[k]), plan.num_rows)
            a, b, sign = 0, m, 1
            if 2 * m > plan.num_rows:
                yield Delivered(plan=plan)
                a, b, sign = m, plan.num_rows, -1
            for lo in range(a, b, chunk):
                rows = self._perm(k, epoch, np.arange(lo, min(lo + chunk, b), dtype=np.int64))
                yield Delivered(plan=plan, rows=rows, sign=sign)

    def rows_plan(self, epoch: int, j: int, lo: int, hi: int) -> PackPlan:
        """Rows [lo, hi) of global batch ``j`` that hold data, as one plan of that batch's length."""
        k, rows = self._row_ids(epoch, j, lo, hi)
        p = self.rows.plans[k]
        return gather_rows(p.row_splits, p.doc, p.start, p.length, rows, ctx=p.ctx, align=1, algorithm=p.algorithm)
