"""Documents of a random-access source as a ``grain.MapDataset``, readable a block at a time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import grain
from datatools.io.sources.documents import as_document_source


class DocumentsMapDataset(grain.MapDataset):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    """Element i is document i's tokens (a 1-D array) of any document ``source``
    (:mod:`datatools.io.sources.documents`).

    ``BatchRowsMapDataset(shuffled(DocumentsMapDataset(src)), 256)`` gives *document blocks* of 256 documents read
    in one gather (:meth:`get_batch`), which the streaming packer and the bucketer take (Grain's overhead per block).
    """

    def __init__(self, source: object):
        super().__init__()
        self._docs = as_document_source(source)
        self._lengths = self._docs.lengths()

    def __len__(self) -> int:
        return len(self._docs)

    def __str__(self) -> str:
        return f"DocumentsMapDataset({self._docs!r})"

    def __getitem__(self, index: int | slice) -> Any:  # a document, or a slice of the dataset
        if isinstance(index, slice):
            return self.slice(index)
        return self._docs[index % len(self._docs)]

    def get_batch(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """A document block: ``tokens`` (int32, the documents back to back) and ``lengths`` (int64)."""
        doc = np.asarray(indices, dtype=np.int64) % len(self._docs)
        lengths = self._lengths[doc]
        return {"tokens": self._docs.read_pieces(doc, np.zeros_like(doc), lengths), "lengths": lengths}
