"""Several document sources read as one: source k's document i is document ``offsets[k] + i``; a read of pieces
makes one bulk read per source touched (each keeps its own reader and cache). The mixture's order is
:class:`datatools.grain.mixture_order.MixtureOrder`'s; this module only reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from datatools.io.sources.documents import DocumentSource, as_document_source, check_pieces


class MixedDocuments(DocumentSource):
    """The documents of ``sources`` back to back (see the module docstring).

    Args:
      sources: document sources (:func:`~datatools.io.sources.documents.as_document_source` accepts each).
      names: one label per source (reports and messages); default ``source0``, ``source1``, ...
    """

    def __init__(self, sources: Sequence[object], names: Sequence[str] | None = None):
        self.sources = [as_document_source(s) for s in sources]
        if not self.sources:
            raise ValueError("a mixture needs at least one source")
        self.names = list(names) if names is not None else [f"source{k}" for k in range(len(self.sources))]
        if len(self.names) != len(self.sources):
            raise ValueError(f"{len(self.names)} names for {len(self.sources)} sources")
        self.sizes = np.array([len(s) for s in self.sources], np.int64)
        self.offsets = np.concatenate(([0], np.cumsum(self.sizes)))
        self._lengths = np.concatenate([np.asarray(s.lengths(), np.int64) for s in self.sources])
        self.in_memory = all(s.in_memory for s in self.sources)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def lengths(self) -> np.ndarray:
        return self._lengths

    def read_pieces(self, doc: npt.ArrayLike, start: npt.ArrayLike, length: npt.ArrayLike) -> np.ndarray:
        doc, start, length = check_pieces(doc, start, length, self._lengths)
        source = np.searchsorted(self.offsets, doc, side="right") - 1
        if source.size and source.min() == source.max():  # one source: its own bulk read, no reassembly
            k = int(source[0])
            return self.sources[k].read_pieces(doc - self.offsets[k], start, length)
        dst = np.concatenate(([0], np.cumsum(length)))
        out = np.empty(int(dst[-1]), np.int32)
        for k in np.unique(source).tolist():  # one bulk read per source touched, pieces scattered back in order
            sel = np.flatnonzero(source == k)
            flat = self.sources[k].read_pieces(doc[sel] - self.offsets[k], start[sel], length[sel])
            within = np.concatenate(([0], np.cumsum(length[sel])))  # piece j goes to out[dst[sel[j]]:...]
            rep = np.repeat(dst[sel] - within[:-1], length[sel])
            out[rep + np.arange(flat.shape[0])] = flat
        return out

    def __repr__(self) -> str:
        return f"MixedDocuments({', '.join(f'{n}: {s}' for n, s in zip(self.names, self.sources))})"
