"""Random-access document collections that packed rows are read from.

A *document source* has ``len()``, ``source[i]`` (the tokens of document i),
``lengths()`` (int64 tokens per document, cheap) and
``read_pieces(doc, start, length)``: the pieces ``tokens(doc[j])[start[j]:start[j] +
length[j]]`` back to back in one int32 array. Two implementations:

* :class:`ArrayDocuments`: every token in memory (flat array + offsets), pieces
  gathered by a numba kernel;
* :class:`~datatools.store.TokenStore` through :class:`StorePieceReader`: the store's
  compressed chunks are read whole, once, into a bounded LRU cache, so a row of
  pieces costs no more than the chunks it touches.

Both are picklable, so they serve as Grain data sources in worker processes.
"""

from __future__ import annotations

from collections import OrderedDict

import numba
import numpy as np

from datatools.store import TOKEN_CHUNK, TokenStore

DEFAULT_CACHE_BYTES = 512 << 20  # decoded store chunks kept per process


@numba.njit(cache=True)
def _gather(tokens, offsets, doc, start, length, out):
    """Copy each piece from the flat token array into ``out``, back to back."""
    k = 0
    for j in range(doc.shape[0]):
        src = offsets[doc[j]] + start[j]
        for t in range(length[j]):
            out[k + t] = tokens[src + t]
        k += length[j]


class ArrayDocuments:
    """Documents held in memory: ``tokens[offsets[i]:offsets[i + 1]]`` is document i.

    Args:
      tokens: 1-D integer array, every document's tokens back to back.
      offsets: (num_documents + 1,) non-decreasing integers from 0 to ``len(tokens)``.
    """

    def __init__(self, tokens, offsets):
        tokens = np.asarray(tokens)
        offsets = np.asarray(offsets, dtype=np.int64)
        if tokens.ndim != 1 or tokens.dtype.kind not in "iu":
            raise ValueError(f"tokens must be a 1-D integer array, got {tokens.dtype} {tokens.shape}")
        if offsets.ndim != 1 or offsets.size < 1 or offsets[0] != 0 or offsets[-1] != tokens.shape[0]:
            raise ValueError(f"offsets must run from 0 to len(tokens)={tokens.shape[0]}; got shape {offsets.shape}")
        if (np.diff(offsets) < 0).any():
            raise ValueError("offsets must not decrease")
        self.tokens, self.offsets = tokens, offsets

    @classmethod
    def from_list(cls, docs) -> "ArrayDocuments":
        """From a list of 1-D token arrays (tests, small data)."""
        docs = [np.asarray(d, dtype=np.int32).reshape(-1) for d in docs]
        lengths = np.fromiter((d.shape[0] for d in docs), np.int64, count=len(docs))
        flat = np.concatenate(docs) if docs else np.zeros(0, np.int32)
        return cls(flat, np.concatenate(([0], np.cumsum(lengths))))

    def __len__(self) -> int:
        return self.offsets.shape[0] - 1

    def __getitem__(self, i: int) -> np.ndarray:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"document {i} out of range for {n} documents")
        i %= n
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def read_pieces(self, doc, start, length) -> np.ndarray:
        out = np.empty(int(np.sum(length, dtype=np.int64)), np.int32)
        _gather(self.tokens, self.offsets, np.asarray(doc, np.int64), np.asarray(start, np.int64),
                np.asarray(length, np.int64), out)
        return out

    def __repr__(self) -> str:
        return f"ArrayDocuments(documents={len(self)}, tokens={self.tokens.shape[0]})"


class StorePieceReader:
    """Reads pieces of a :class:`TokenStore` through an LRU cache of whole decoded chunks.

    Args:
      store: the token store.
      cache_bytes: decoded chunk bytes kept (per process); the least recently used
        chunk is evicted first.
    """

    def __init__(self, store: TokenStore, cache_bytes: int = DEFAULT_CACHE_BYTES):
        self.store = store
        self.cache_bytes = int(cache_bytes)
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._held = 0
        self.chunk_reads = 0

    def __getstate__(self):
        return {"store": self.store, "cache_bytes": self.cache_bytes, "_cache": OrderedDict(), "_held": 0,
                "chunk_reads": 0}

    def _chunk(self, c: int) -> np.ndarray:
        arr = self._cache.get(c)
        if arr is not None:
            self._cache.move_to_end(c)
            return arr
        arr = self.store.read_tokens(c * TOKEN_CHUNK, min((c + 1) * TOKEN_CHUNK, self.store.num_tokens))
        self.chunk_reads += 1
        self._cache[c] = arr
        self._held += arr.nbytes
        while self._held > self.cache_bytes and len(self._cache) > 1:
            _, old = self._cache.popitem(last=False)
            self._held -= old.nbytes
        return arr

    def read_pieces(self, doc, start, length) -> np.ndarray:
        begin = self.store.offsets[np.asarray(doc, np.int64)] + np.asarray(start, np.int64)
        length = np.asarray(length, np.int64)
        out = np.empty(int(length.sum()), np.int32)
        k = 0
        for a, n in zip(begin.tolist(), length.tolist()):  # one slice per piece (a few per row), not per token
            while n:
                c, off = divmod(a, TOKEN_CHUNK)
                take = min(n, TOKEN_CHUNK - off)
                out[k : k + take] = self._chunk(c)[off : off + take]
                k, a, n = k + take, a + take, n - take
        return out


def as_document_source(source):
    """A source with ``lengths()`` and ``read_pieces``: ArrayDocuments as is, a TokenStore wrapped in a
    cached :class:`StorePieceReader`, a path opened as a token store."""
    if isinstance(source, TokenStore):
        return _StoreDocuments(source)
    if hasattr(source, "lengths") and hasattr(source, "read_pieces") and hasattr(source, "__len__"):
        return source
    raise TypeError(f"expected ArrayDocuments, a TokenStore or an object with lengths() and read_pieces(); "
                    f"got {type(source).__name__}")


class _StoreDocuments:
    """A TokenStore with cached piece reads: the document-source interface over a store."""

    def __init__(self, store: TokenStore, cache_bytes: int = DEFAULT_CACHE_BYTES):
        self.store = store
        self.reader = StorePieceReader(store, cache_bytes)

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, i: int) -> np.ndarray:
        n = len(self.store)
        if not -n <= i < n:
            raise IndexError(f"document {i} out of range for {n} documents")
        i %= n
        off = self.store.offsets
        return self.reader.read_pieces([i], [0], [off[i + 1] - off[i]])

    def lengths(self) -> np.ndarray:
        return self.store.lengths()

    def read_pieces(self, doc, start, length) -> np.ndarray:
        return self.reader.read_pieces(doc, start, length)

    def __repr__(self) -> str:
        return f"StoreDocuments({self.store!r})"
