"""Random-access document collections that packed rows are read from.

A *document source* (:class:`DocumentSource`) has ``len()``, ``source[i]`` (the
tokens of document i), ``lengths()`` (int64 tokens per document, cheap) and
``read_pieces(doc, start, length)``: the pieces ``tokens(doc[j])[start[j]:start[j] +
length[j]]`` back to back in one int32 array. Implementations:

* :class:`ArrayDocuments`: a flat token array (in memory, or a memory-mapped NumPy
  file) plus offsets; pieces gathered by a numba kernel;
* :class:`StoreDocuments`: a :class:`~datatools.io.store.TokenStore` through
  :class:`StorePieceReader`: the inner chunks the pieces touch are read concurrently,
  ahead of need when the pipeline says what comes next (:meth:`StoreDocuments.prefetch`),
  into a bounded cache, so a row of pieces costs no more than the chunks it touches;
* :class:`ChunkedDocuments`: a table input (Parquet, Arrow, JSON Lines, HF
  directory) read on demand, one shard (row group, record batches, block of lines)
  at a time, decoded shards kept in a bounded LRU cache.

All are picklable (caches start empty in each process), so they serve as Grain data
sources in worker processes.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numba
import numpy as np

from datatools.base.checks import as_lengths
from datatools.io import read_stats
from datatools.io.store import TokenStore
from datatools.kernels.packing import check_token_ids

DEFAULT_CACHE_BYTES = 512 << 20  # decoded store chunks kept per process
TABLE_CACHE_BYTES = 256 << 20  # decoded table shards kept per process (a shard is often tens of MB)


@runtime_checkable
class DocumentSource(Protocol):
    """What packers, bucketers and the Grain datasets read documents from.

    Optional: ``source[i]`` (one document), and an ``in_memory`` attribute telling the
    pipeline that reads cost no I/O (then it uses no reader threads).
    """

    def __len__(self) -> int: ...

    def lengths(self) -> np.ndarray:
        """int64 tokens per document."""
        ...

    def read_pieces(self, doc, start, length) -> np.ndarray:
        """The pieces ``doc[j]``, tokens ``[start[j], start[j] + length[j])``, back to back as int32."""
        ...


@numba.njit(cache=True)
def _gather(tokens, offsets, doc, start, length, out):
    """Copy each piece from the flat token array into ``out``, back to back."""
    k = 0
    for j in range(doc.shape[0]):
        src = offsets[doc[j]] + start[j]
        for t in range(length[j]):
            out[k + t] = tokens[src + t]
        k += length[j]


class PieceReadingSource:
    """Base of the document sources: packed rows built from :meth:`read_pieces` (one bulk read per batch)."""

    in_memory = False

    def pack_rows(self, plan, rows, pad_id: int = 0, out: dict | None = None) -> dict[str, np.ndarray]:
        """Rows ``rows`` of ``plan`` (a :class:`~datatools.kernels.packing.PackPlan` over this source) as a canonical
        batch: all their pieces read in one call, then filled by a numba kernel (into ``out`` when given: a
        canonical batch of ``len(rows)`` rows the caller owns, see :func:`~datatools.kernels.packing.materialize`)."""
        from datatools.kernels.packing import materialize_pieces

        return materialize_pieces(plan, self.read_pieces, rows, pad_id=pad_id, out=out)


class ArrayDocuments(PieceReadingSource):
    """Documents in one flat array: ``tokens[offsets[i]:offsets[i + 1]]`` is document i.

    ``tokens`` may be a ``np.memmap`` (a NumPy token file read on demand by the OS).

    Args:
      tokens: 1-D integer array, every document's tokens back to back.
      offsets: (num_documents + 1,) non-decreasing integers from 0 to ``len(tokens)``.
    """

    def __init__(self, tokens, offsets):
        # A memory-mapped file is pickled as its mapping (file, dtype, offset, shape), not as its data.
        self._mapping = None
        if isinstance(tokens, np.memmap) and tokens.filename and tokens.base is not None:
            self._mapping = (tokens.filename, tokens.dtype.str, int(tokens.offset), tokens.shape)
        tokens = np.asarray(tokens)
        offsets = np.asarray(offsets, dtype=np.int64)
        if tokens.ndim != 1 or tokens.dtype.kind not in "iu":
            raise ValueError(f"tokens must be a 1-D integer array, got {tokens.dtype} {tokens.shape}")
        if offsets.ndim != 1 or offsets.size < 1 or offsets[0] != 0 or offsets[-1] != tokens.shape[0]:
            raise ValueError(f"offsets must run from 0 to len(tokens)={tokens.shape[0]}; got shape {offsets.shape}")
        if (np.diff(offsets) < 0).any():
            raise ValueError("offsets must not decrease")
        if tokens.dtype.itemsize >= 4 and tokens.dtype != np.int32:
            check_token_ids(tokens)
        self.tokens, self.offsets = tokens, offsets
        self.in_memory = self._mapping is None

    def __getstate__(self):
        if self._mapping is None:
            return self.__dict__
        return {**self.__dict__, "tokens": None}

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self._mapping is not None:
            name, dtype, offset, shape = self._mapping
            self.tokens = np.asarray(np.memmap(name, dtype=np.dtype(dtype), mode="r", offset=offset, shape=shape))

    @classmethod
    def from_list(cls, docs) -> ArrayDocuments:
        """From a list of 1-D token arrays (tests, small data)."""
        docs = [np.asarray(d, dtype=np.int32).reshape(-1) for d in docs]
        lengths = np.fromiter((d.shape[0] for d in docs), np.int64, count=len(docs))
        flat = np.concatenate(docs) if docs else np.zeros(0, np.int32)
        return cls(flat, np.concatenate(([0], np.cumsum(lengths))))

    def __len__(self) -> int:
        return self.offsets.shape[0] - 1

    def __getitem__(self, i: int) -> np.ndarray:
        i = _check_index(i, len(self))
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def pack_rows(self, plan, rows, pad_id: int = 0, out: dict | None = None) -> dict[str, np.ndarray]:
        """Rows filled straight from the flat tokens (no intermediate gather of the pieces), into ``out`` when
        given."""
        from datatools.kernels.packing import materialize

        return materialize(
            plan,
            self.tokens,
            self.offsets,
            rows,
            pad_id=pad_id,
            check_values=False,  # checked once
            out=out,
        )

    def read_pieces(self, doc, start, length) -> np.ndarray:
        doc, start, length = check_pieces(doc, start, length, self.lengths())
        out = np.empty(int(length.sum()), np.int32)
        _gather(self.tokens, self.offsets, doc, start, length, out)
        return out

    def __repr__(self) -> str:
        return f"ArrayDocuments(documents={len(self)}, tokens={self.tokens.shape[0]})"


class StorePieceReader:
    """Reads pieces of a :class:`TokenStore` in aligned *extents*, many at once, ahead of need, from a bounded cache.

    An extent is :attr:`TokenStore.read_granularity` tokens, aligned: the inner chunk of a sharded store (so a
    piece of a few KB costs at most one or two inner chunks fetched), the whole stored chunk of an older store.
    A read of many pieces issues every missing extent at once (tensorstore futures: its own threads do the
    I/O, concurrently, with no lock held while they run) and waits for them together; :meth:`prefetch` issues
    the extents of batches still to come and returns at once, within half the byte budget, so the reads of
    the next batches overlap the work on this one. Extents already read or in flight are never read again
    while cached; the least recently used finished ones are evicted past ``cache_bytes``.

    Every request, the bytes fetched and delivered, the time waited and each request's latency are counted in
    :mod:`datatools.io.read_stats`.

    Args:
      store: the token store.
      cache_bytes: decoded extent bytes kept (per process), those in flight included.
    """

    def __init__(self, store: TokenStore, cache_bytes: int = DEFAULT_CACHE_BYTES):
        self.store = store
        self.cache_bytes = int(cache_bytes)
        self._reset()

    def _reset(self) -> None:
        self._cache: OrderedDict[int, _Extent] = OrderedDict()
        self._held = 0
        self.chunk_reads = 0  # extents fetched by this process
        self._ahead_bytes = 0  # bytes of extents read ahead (cached or in flight) that no read has used yet
        self.peak_ahead_bytes = 0  # the most of them at any time: at most half the budget and one extent
        self.peak_held_after_read = 0  # most bytes held when a read returned (<= the budget, or that read's extents)
        self._lock = threading.Lock()  # guards the cache only; no I/O runs under it
        self._extent: int | None = None

    def __getstate__(self):
        return {"store": self.store, "cache_bytes": self.cache_bytes}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset()

    def __deepcopy__(self, memo):
        return StorePieceReader(self.store, self.cache_bytes)

    @property
    def extent(self) -> int:
        """Tokens per extent (the store's read granularity)."""
        if self._extent is None:
            self._extent = self.store.read_granularity
        return self._extent

    def _extents_of(self, begin: np.ndarray, length: np.ndarray) -> np.ndarray:
        """Sorted unique extent numbers the pieces ``[begin, begin + length)`` touch (vectorized)."""
        keep = length > 0
        if not keep.any():
            return np.zeros(0, np.int64)
        e = self.extent
        first, last = begin[keep] // e, (begin[keep] + length[keep] - 1) // e
        counts = last - first + 1
        steps = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        return np.unique(np.repeat(first, counts) + steps)

    def _issue(self, ids, prefetch: bool) -> tuple[list[_Extent], int]:
        """The cache entries of extents ``ids``, reading those missing (call with the lock held).

        A prefetch stops once the extents read ahead and not yet used reach half the budget (fewer entries than
        ids then); a read takes every extent it needs. Returns (entries, extents issued)."""
        e, n = self.extent, self.store.num_tokens
        entries, issued = [], 0
        for c in ids.tolist():
            entry = self._cache.get(c)
            if entry is None:
                if prefetch and self._ahead_bytes >= self.cache_bytes // 2:
                    break
                begin, end = c * e, min((c + 1) * e, n)
                entry = _Extent(self.store, begin, end, prefetch)
                self._cache[c] = entry
                self._held += entry.nbytes
                if prefetch:
                    self._ahead_bytes += entry.nbytes
                self.chunk_reads += 1
                issued += 1
            else:
                self._cache.move_to_end(c)
                if entry.ahead and not prefetch:  # read ahead, now used
                    entry.ahead = False
                    self._ahead_bytes -= entry.nbytes
            entries.append(entry)
        return entries, issued

    def _evict(self, keep: set) -> None:
        """While past the budget, drop the least recently used finished extents not in ``keep``: those already
        used first, then those read ahead (call with the lock held)."""
        for used_only in (True, False):
            if self._held <= self.cache_bytes:
                return
            for c in list(self._cache):
                if self._held <= self.cache_bytes:
                    return
                entry = self._cache[c]
                if c in keep or not entry.done() or (used_only and entry.ahead):
                    continue
                del self._cache[c]
                self._held -= entry.nbytes
                if entry.ahead:
                    self._ahead_bytes -= entry.nbytes

    def prefetch(self, doc, start, length) -> bool:
        """Start reading the extents of these pieces (of a batch still to come) without waiting. True when every
        extent is now cached or in flight; False when the read-ahead half of the budget ran out first."""
        begin = self.store.offsets[np.asarray(doc, np.int64)] + np.asarray(start, np.int64)
        ids = self._extents_of(begin, np.asarray(length, np.int64))
        with self._lock:
            entries, _ = self._issue(ids, prefetch=True)
            self.peak_ahead_bytes = max(self.peak_ahead_bytes, self._ahead_bytes)
            self._evict(set(ids.tolist()))
        return len(entries) == ids.shape[0]

    def read_pieces(self, doc, start, length) -> np.ndarray:
        begin = self.store.offsets[np.asarray(doc, np.int64)] + np.asarray(start, np.int64)
        length = np.asarray(length, np.int64)
        out = np.empty(int(length.sum()), np.int32)
        ids = self._extents_of(begin, length)
        if not ids.size:
            return out
        with self._lock:
            entries, _ = self._issue(ids, prefetch=False)
        t0 = time.perf_counter()
        arrays = [entry.result() for entry in entries]  # the reads run concurrently; this waits for the last
        waited = time.perf_counter() - t0
        buf = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
        # Extent ids[i] sits at buf[i * e:]: a token t of the pieces is at index(t // e) * e + t % e (a piece
        # crossing extents finds the next one right after, since every extent it touches is in ids).
        e = self.extent
        where = np.searchsorted(ids, begin // e) * e + begin % e
        _gather(buf, where, np.arange(begin.shape[0], dtype=np.int64), np.zeros_like(begin), length, out)
        with self._lock:
            self._evict(set(ids.tolist()))
            self.peak_held_after_read = max(self.peak_held_after_read, self._held)
        read_stats.record(bytes_delivered=int(length.sum()) * self.store.dtype.itemsize, wait_s=waited)
        return out


class _Extent:
    """One extent's read: a tensorstore future until it is done, then its tokens (counted in read_stats).
    ``ahead``: read ahead of need and not used by a read yet."""

    __slots__ = ("_future", "_value", "_t0", "nbytes", "_store", "_begin", "ahead")

    def __init__(self, store: TokenStore, begin: int, end: int, prefetch: bool):
        self._store, self._begin, self.ahead = store, begin, prefetch
        self.nbytes = (end - begin) * store.dtype.itemsize
        self._value: np.ndarray | None = None
        self._t0 = time.perf_counter()
        self._future = store.tokens[begin:end].read()
        self._future.add_done_callback(self._done)
        read_stats.record(requests=1, bytes_fetched=self.nbytes, prefetched=int(prefetch))

    def _done(self, _future) -> None:
        read_stats.record(latency_s=time.perf_counter() - self._t0)

    def done(self) -> bool:
        return self._value is not None or self._future.done()

    def result(self) -> np.ndarray:
        if self._value is None:
            try:
                self._value = self._future.result()
            except ValueError:  # the store names the chunk: read it again through its checked path
                end = self._begin + self.nbytes // self._store.dtype.itemsize
                self._value = self._store.read_tokens(self._begin, end)
            self._future = None
        return self._value


class StoreDocuments(PieceReadingSource):
    """A :class:`TokenStore` as a document source, pieces read through a cached :class:`StorePieceReader`."""

    def __init__(self, store: TokenStore, cache_bytes: int = DEFAULT_CACHE_BYTES):
        self.store = store
        self.reader = StorePieceReader(store, cache_bytes)

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, i: int) -> np.ndarray:
        i = _check_index(i, len(self.store))
        off = self.store.offsets
        return self.reader.read_pieces([i], [0], [off[i + 1] - off[i]])

    def lengths(self) -> np.ndarray:
        return self.store.lengths()

    def read_pieces(self, doc, start, length) -> np.ndarray:
        return self.reader.read_pieces(*check_pieces(doc, start, length, self.lengths()))

    def prefetch(self, doc, start, length) -> bool:
        """Start reading these pieces (of a batch still to come) without waiting; see
        :meth:`StorePieceReader.prefetch`."""
        return self.reader.prefetch(doc, start, length)

    def __repr__(self) -> str:
        return f"StoreDocuments({self.store!r})"


def check_pieces(doc, start, length, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(doc, start, length)`` as int64 arrays, each piece inside its document (vectorized); IndexError/ValueError
    naming the first piece that is not."""
    doc, start, length = (
        as_lengths(np.asarray(x).reshape(-1) if np.ndim(x) else [x], name)
        for x, name in ((doc, "doc"), (start, "start"), (length, "length"))
    )
    if not doc.shape == start.shape == length.shape:
        raise ValueError(
            f"doc, start and length must have one value per piece; got {doc.size}, {start.size}, {length.size}"
        )
    if doc.size:
        if doc.min() < 0 or doc.max() >= lengths.shape[0]:
            bad = doc[(doc < 0) | (doc >= lengths.shape[0])][0]
            raise IndexError(f"document {int(bad)} out of range for {lengths.shape[0]} documents")
        bad = (start < 0) | (length < 0) | (start + length > lengths[doc])
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"piece [{int(start[j])}, {int(start[j] + length[j])}) is outside document "
                f"{int(doc[j])} of {int(lengths[doc[j]])} tokens"
            )
    return doc, start, length


def _check_index(i: int, n: int) -> int:
    if not -n <= i < n:
        raise IndexError(f"document {i} out of range for {n} documents")
    return i % n


@numba.njit(cache=True)
def _gather_at(tokens, offsets, doc, start, length, dst, out):
    """Copy piece j (document ``doc[j]`` of a shard) to ``out[dst[j]:dst[j] + length[j]]``."""
    for j in range(doc.shape[0]):
        src = offsets[doc[j]] + start[j]
        d = dst[j]
        for t in range(length[j]):
            out[d + t] = tokens[src + t]


class ChunkedDocuments(PieceReadingSource):
    """Documents of an input read shard by shard on demand (Parquet row groups, Arrow batches, JSON Lines blocks).

    Memory holds the lengths, and at most ``cache_bytes`` of decoded shards (least
    recently used evicted first; one shard is always kept). Reading documents in
    storage order, or block-shuffled, decodes each shard about once; a full shuffle
    of documents over many shards decodes a shard per read: pre-tokenize such data
    into a token store (chunked for random access) instead.

    Args:
      lengths: int64 tokens per document, every shard's documents in order.
      shard_docs: documents per shard (sums to ``len(lengths)``).
      load: ``load(k) -> (tokens, lengths)`` of shard k; picklable.
      cache_bytes: decoded shard bytes kept per process.
    """

    def __init__(
        self,
        lengths: np.ndarray,
        shard_docs: np.ndarray,
        load: Callable,
        name: str = "",
        cache_bytes: int = TABLE_CACHE_BYTES,
    ):
        self._lengths = np.asarray(lengths, np.int64)
        self.shard_docs = np.asarray(shard_docs, np.int64)
        if int(self.shard_docs.sum()) != self._lengths.shape[0]:
            raise ValueError(f"shards hold {int(self.shard_docs.sum())} documents, lengths {self._lengths.shape[0]}")
        self.first_doc = np.concatenate(([0], np.cumsum(self.shard_docs)))
        self.load, self.name, self.cache_bytes = load, name, int(cache_bytes)
        self._cache: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._held = 0
        self.shard_reads = 0
        self._lock = threading.Lock()  # Grain reads with many threads: one decodes a shard, the others wait for it

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_lock"} | {
            "_cache": OrderedDict(),
            "_held": 0,
            "shard_reads": 0,
        }

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._lengths.shape[0]

    def lengths(self) -> np.ndarray:
        return self._lengths

    def _shard(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            return self._shard_locked(k)

    def _shard_locked(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        hit = self._cache.get(k)
        if hit is not None:
            self._cache.move_to_end(k)
            return hit
        tokens, lengths = self.load(k)
        first, n = int(self.first_doc[k]), int(self.shard_docs[k])
        if lengths.shape[0] != n or not np.array_equal(lengths, self._lengths[first : first + n]):
            raise ValueError(f"{self.name}: shard {k} changed since its lengths were read")
        entry = (np.asarray(tokens, np.int32), np.concatenate(([0], np.cumsum(lengths))))
        self.shard_reads += 1
        self._cache[k] = entry
        self._held += entry[0].nbytes
        while self._held > self.cache_bytes and len(self._cache) > 1:
            _, old = self._cache.popitem(last=False)
            self._held -= old[0].nbytes
        return entry

    def __getitem__(self, i: int) -> np.ndarray:
        i = _check_index(i, len(self))
        return self.read_pieces([i], [0], [self._lengths[i]])

    def read_pieces(self, doc, start, length) -> np.ndarray:
        doc, start, length = check_pieces(doc, start, length, self._lengths)
        dst = np.concatenate(([0], np.cumsum(length)[:-1])) if length.size else length
        out = np.empty(int(length.sum()), np.int32)
        shard = np.searchsorted(self.first_doc, doc, side="right") - 1
        for k in np.unique(shard).tolist():  # one pass per shard touched, a kernel call each
            sel = np.flatnonzero(shard == k)
            tokens, offsets = self._shard(k)
            _gather_at(tokens, offsets, doc[sel] - self.first_doc[k], start[sel], length[sel], dst[sel], out)
        return out

    def __repr__(self) -> str:
        return f"ChunkedDocuments({self.name!r}, documents={len(self)}, shards={self.shard_docs.shape[0]})"


class _ProtocolSource(PieceReadingSource):
    """Any object with ``len()``, ``lengths()`` and ``read_pieces`` given the sources' ``pack_rows``."""

    def __init__(self, source):
        self.source = source
        self.in_memory = bool(getattr(source, "in_memory", False))

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i: int) -> np.ndarray:
        i = _check_index(i, len(self))
        return self.read_pieces([i], [0], [self.lengths()[i]])

    def lengths(self) -> np.ndarray:
        return self.source.lengths()

    def read_pieces(self, doc, start, length) -> np.ndarray:
        return self.source.read_pieces(doc, start, length)


def as_document_source(source) -> PieceReadingSource:
    """A document source with ``pack_rows``: datatools' sources as they are, a :class:`TokenStore` in
    :class:`StoreDocuments`, any other :class:`DocumentSource` in an adapter."""
    if isinstance(source, TokenStore):
        return StoreDocuments(source)
    if isinstance(source, PieceReadingSource):
        return source
    if isinstance(source, DocumentSource):
        return _ProtocolSource(source)
    raise TypeError(
        f"expected a document source (lengths(), read_pieces(), len()) or a TokenStore; got {type(source).__name__}"
    )
