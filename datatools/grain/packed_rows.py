"""Planned packing: packed rows of a random-access document source as a ``grain.MapDataset``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import grain
from datatools.base.checks import DEFAULT_ALGORITHM
from datatools.io.formats.plan_file import PlanFile
from datatools.io.sources.documents import DocumentSource, as_document_source
from datatools.kernels.packing import PackOptions, PackPlan, pack
from datatools.kernels.packing.plan_format import gather_rows


class PackedRowsMapDataset(grain.MapDataset):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    """Packed rows, planned once from every document's length, with random access: row ``i`` (an index past
    ``len(ds)`` wraps) is built on demand, its pieces read in one call, so shuffling, sharding and checkpoints come
    from Grain. Elements are canonical rows: int32 arrays of shape (ctx,).

    Args:
      source: any document source (:mod:`datatools.io.sources.documents`: ``__len__``, ``lengths()``, ``read_pieces``).
      ctx: row length (tokens).
      algorithm, max_segments, align, overflow: as :func:`datatools.pack_lengths`.
      plan: a precomputed ``PackPlan`` over ``source``, or a :class:`~datatools.io.formats.plan_file.PlanFile`; then the
        packing options are ignored.
      pad_id: token id written at padding.
    """

    def __init__(
        self,
        source: object,
        ctx: int | None = None,
        *,
        algorithm: str = DEFAULT_ALGORITHM,
        max_segments: int | None = None,
        align: int = 1,
        overflow: str = "split",
        plan: PackPlan | PlanFile | None = None,
        pad_id: int = 0,
    ):
        super().__init__()
        self._docs = as_document_source(source)
        if plan is None:
            if ctx is None:
                raise ValueError("PackedRowsMapDataset needs ctx (or a plan)")
            plan = pack(self._docs.lengths(), PackOptions(ctx, algorithm, max_segments, align, overflow))
        elif plan.max_doc >= len(self._docs):
            raise ValueError(f"plan refers to document {plan.max_doc} but the source has {len(self._docs)}")
        if plan.num_rows == 0:
            raise ValueError("no rows to pack: the source holds no tokens")
        self.plan = plan
        self._pad_id = int(pad_id)

    def __len__(self) -> int:
        return self.plan.num_rows

    def __str__(self) -> str:
        p = self.plan
        rows = f"rows={p.num_rows}, efficiency={p.efficiency:.4f}"
        return f"PackedRowsMapDataset(algorithm={p.algorithm}, ctx={p.ctx}, {rows})"

    def get_batch(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """Rows ``indices`` stacked: int32 arrays of shape (len(indices), ctx), one read for all their pieces."""
        rows = np.asarray(indices, dtype=np.int64) % self.plan.num_rows
        if isinstance(self.plan, PlanFile):
            return self._docs.pack_rows(self.plan.rows_plan(rows), None, pad_id=self._pad_id)
        return self._docs.pack_rows(self.plan, rows, pad_id=self._pad_id)

    @property
    def docs(self) -> DocumentSource:
        """The document source the rows are read from."""
        return self._docs

    def plan_rows(self, indices: Sequence[int]) -> tuple[PackPlan | PlanFile, np.ndarray]:
        """``(plan, rows)``: the plan the rows ``indices`` come from and their row ids in it (an index past
        ``len(ds)`` wraps)."""
        return self.plan, np.asarray(indices, dtype=np.int64) % self.plan.num_rows

    def rows_plan(self, indices: Sequence[int]) -> PackPlan:
        """Rows ``indices`` as one small plan whose row ``i`` is row ``indices[i]`` (an index past ``len(ds)``
        wraps): what :meth:`get_batch` reads, and where each piece lies."""
        p, rows = self.plan_rows(indices)
        if isinstance(p, PlanFile):
            return p.rows_plan(rows)
        return gather_rows(
            p.row_splits, p.doc, p.start, p.length, rows, ctx=p.ctx, align=p.align, algorithm=p.algorithm
        )

    def pieces(self, indices: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(doc, start, length)`` of every piece rows ``indices`` read (what :meth:`get_batch` reads)."""
        sub = self.rows_plan(indices)
        return sub.doc, sub.start, sub.length

    def __getitem__(self, index: int | slice) -> Any:  # a row (dict of arrays), or a slice of the dataset
        if isinstance(index, slice):
            return self.slice(index)
        batch = self.get_batch([index])
        return {k: v[0] for k, v in batch.items()}

    def _getitems(self, indices: Sequence[int]) -> list[dict[str, np.ndarray]]:
        batch = self.get_batch(indices)
        return [{k: v[i] for k, v in batch.items()} for i in range(len(indices))]
