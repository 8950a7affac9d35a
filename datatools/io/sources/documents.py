"""Random-access document collections that packed rows are read from.

A *document source* (a subclass of :class:`DocumentSource`, the one base class: what the layers above use is declared
there, with defaults) has ``len()``, ``source[i]``, ``lengths()`` (int64 tokens per document) and
``read_pieces(doc, start, length)``: the pieces ``tokens(doc[j])[start[j]:start[j] + length[j]]`` back to back as
int32. :class:`ArrayDocuments` reads a flat (maybe memory-mapped) array; :class:`StoreDocuments` a token
store through :class:`StorePieceReader` (the chunks the pieces touch, read concurrently and ahead of need into a
bounded slab); :class:`ChunkedDocuments` a table input one shard at a time (decoded shards in a bounded
:class:`ShardSlab`, a batch's rows filled from it in one pass).
All are picklable (caches start empty in each process), so they serve as Grain data sources in worker processes.
"""

from __future__ import annotations

import functools
import heapq
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager, contextmanager, nullcontext

import numba
import numpy as np
import numpy.typing as npt
import tensorstore as ts

from datatools.base import array_pool
from datatools.base.checks import as_lengths
from datatools.io import storage
from datatools.io.formats.token_array import TokenArray, TokenRead
from datatools.io.storage import read_stats
from datatools.kernels.packing import PackPlan, check_token_ids, materialize, materialize_pieces
from datatools.kernels.packing.materialize import check_plan_rows, materialize_located, new_batch
from datatools.kernels.packing.plan_format import row_pieces

DEFAULT_CACHE_BYTES = 512 << 20  # decoded store chunks kept per process
LOCAL_EXTENT_TOKENS = 1 << 20  # a local read's extent when the budget holds the store (tokens; at least an inner
# chunk, at most a stored object: a store's whole 2^20-token shard). Each tensorstore read of a local file costs
# ~0.2 ms of CPU beside decoding (2,437 reads of one 2^14-token inner chunk: 0.60 s; 39 of a whole shard: 0.15 s),
# and at 2^18 tokens 1 host read local_read.py's 100M-token store 1.13-1.17x slower (the first batch no earlier)
MIN_REMOTE_SLOTS = 768  # extents a remote reader holds at least (a Levanter cache's 1 MiB chunks: 768 MiB; at host 0
# of 4, +100 ms, 1 GiB peaked at 1.60 GB RSS, over the 1.5 GB target, and 512 MiB left 28 of 500 steps waiting)
MAX_IN_FLIGHT = 64  # extent reads a reader has issued and not yet received (per process); the rest wait, in order
MAX_AHEAD_IN_FLIGHT = 32  # of them, reads for batches still to come: the rest of the flight is the next batch's
MAX_RUN = 32  # consecutive extents of one stored object read as one (one ranged request: 1 MiB of a v3 store)
NEEDED = -1  # the issue order of a read a batch being built waits for: before every read-ahead (issue order >= 0)
AHEAD_KEPT = 16  # prefetch calls (a host's reader makes one a batch) an extent read ahead stays counted as read ahead
# without a later prefetch asking for it again: then it is an ordinary held extent (reused least recently used first)
TABLE_CACHE_BYTES = 256 << 20  # decoded table shards kept per process (a shard is often tens of MB)


class DocumentSource(ABC):
    """What packers, bucketers, schedules and the Grain datasets read documents through: the base of every document
    source. A subclass gives ``len``, :meth:`lengths` and :meth:`read_pieces`; what the layers above use besides is
    declared here with the defaults of a source that holds its documents or reads them on demand, each overridden by
    the sources it differs for (never probed for)."""

    in_memory: bool = False  # reads cost no I/O: the pipeline uses no reader threads (ArrayDocuments, unmapped)

    @abstractmethod
    def __len__(self) -> int:
        """Number of documents."""

    @abstractmethod
    def lengths(self) -> np.ndarray:
        """int64 (num_documents,): every document's length in tokens."""

    @abstractmethod
    def read_pieces(self, doc: npt.ArrayLike, start: npt.ArrayLike, length: npt.ArrayLike) -> np.ndarray:
        """The pieces ``doc[j]``, tokens ``[start[j], start[j] + length[j])``, back to back as int32 (one bulk read)."""

    def __getitem__(self, i: int) -> np.ndarray:
        i = check_index(i, len(self))
        return self.read_pieces([i], [0], [self.lengths()[i]])

    def pack_rows(
        self, plan: PackPlan, rows: npt.ArrayLike | None, pad_id: int = 0, out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """Rows ``rows`` of ``plan`` (a :class:`~datatools.kernels.packing.PackPlan` over this source) as a canonical
        batch (into ``out`` when given, see :func:`~datatools.kernels.packing.materialize`): pieces read in one call."""
        return materialize_pieces(plan, self.read_pieces, rows, pad_id=pad_id, out=out)

    @property
    def reads_ahead(self) -> bool:
        """Whether reads issued ahead of need (:meth:`prefetch`) pay: False unless the documents are far (a store in
        object storage)."""
        return False

    def next_extent_starts(self, doc: np.ndarray) -> np.ndarray | None:
        """int64: for each of ``doc``, the first document that begins in a later read extent than it (an aligned
        stored chunk, the least one read fetches; ``len(self)`` if none); None where reads are not made of aligned
        extents. A property of the data, not of where it lies: a schedule using it gives the same batches from a
        disk and from a bucket."""
        return None

    def prefetch(
        self, doc: npt.ArrayLike, start: npt.ArrayLike, length: npt.ArrayLike, *, near: bool = True, order: int = 0
    ) -> bool:
        """Start reading these pieces (of a batch still to come) without waiting, issued after the read-ahead of a
        lower ``order`` (a batch number: the next batches' pieces before a lane's window for later ones); True when
        nothing is left to ask for (a source that does not read ahead has nothing to start)."""
        return True

    def forget_read_ahead(self) -> None:
        """Let later reads reuse what was read ahead for a walk that was abandoned (a restore); nothing to forget for
        a source that does not read ahead."""
        return None

    def prefetching_together(self) -> AbstractContextManager[None]:
        """A block whose :meth:`prefetch` calls are queued before any of their reads is issued (a batch's pieces
        and the window around them: one ranged request for both); nothing to hold for a source that does not read
        ahead."""
        return nullcontext()


def extent_starts_after(offsets: np.ndarray, extent: int, doc: np.ndarray) -> np.ndarray:
    """int64: for each of ``doc``, the first document at or past the boundary of ``extent``-token extents after its
    first token (``len(offsets) - 1`` if none), documents laid out by ``offsets``; O(log n) each. What
    :meth:`DocumentSource.next_extent_starts` gives for documents read in aligned extents."""
    boundary = (np.asarray(offsets[np.asarray(doc, np.int64)], np.int64) // extent + 1) * extent
    found: np.ndarray = np.minimum(np.searchsorted(offsets, boundary, side="left"), len(offsets) - 1)
    return found.astype(np.int64)


class ArrayDocuments(DocumentSource):
    """Documents in one flat array: ``tokens[offsets[i]:offsets[i + 1]]`` is document i.

    ``tokens`` may be a ``np.memmap`` (a NumPy token file read on demand by the OS).

    Args:
      tokens: 1-D integer array, every document's tokens back to back.
      offsets: (num_documents + 1,) non-decreasing integers from 0 to ``len(tokens)``.
    """

    def __init__(self, tokens: np.ndarray, offsets: npt.ArrayLike):
        # A memory-mapped file is pickled as its mapping (file, dtype, offset, shape), not as its data.
        self._mapping: tuple[str, str, int, tuple[int, ...]] | None = None  # (file, dtype, offset, shape)
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

    def __getstate__(self) -> dict[str, object]:
        """What a pickle holds: a memory-mapped file's mapping, not its tokens."""
        if self._mapping is None:
            return self.__dict__
        return {**self.__dict__, "tokens": None}

    def __setstate__(self, state: dict[str, object]) -> None:
        """Restored from a pickle: a memory-mapped file mapped again."""
        self.__dict__.update(state)
        if self._mapping is not None:
            name, dtype, offset, shape = self._mapping
            self.tokens = np.asarray(np.memmap(name, dtype=np.dtype(dtype), mode="r", offset=offset, shape=shape))

    @classmethod
    def from_list(cls, docs: Iterable[npt.ArrayLike]) -> ArrayDocuments:
        """From a list of 1-D token arrays (tests, small data)."""
        arrays = [np.asarray(d, dtype=np.int32).reshape(-1) for d in docs]
        lengths = np.fromiter((d.shape[0] for d in arrays), np.int64, count=len(arrays))
        flat = np.concatenate(arrays) if arrays else np.zeros(0, np.int32)
        return cls(flat, np.concatenate(([0], np.cumsum(lengths))))

    def __len__(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        i = check_index(i, len(self))
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def pack_rows(
        self, plan: PackPlan, rows: npt.ArrayLike | None, pad_id: int = 0, out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """Rows filled straight from the flat tokens (no intermediate gather of the pieces), into ``out`` when
        given."""
        return materialize(
            plan,
            self.tokens,
            self.offsets,
            rows,
            pad_id=pad_id,
            check_values=False,  # checked once
            out=out,
        )

    def read_pieces(self, doc: npt.ArrayLike, start: npt.ArrayLike, length: npt.ArrayLike) -> np.ndarray:
        d, a, n = check_pieces(doc, start, length, self.lengths())
        out = np.empty(int(n.sum()), np.int32)
        gather_at(self.tokens, self.offsets[d] + a, n, np.cumsum(n) - n, out)
        return out

    def __repr__(self) -> str:
        return f"ArrayDocuments(documents={len(self)}, tokens={self.tokens.shape[0]})"


class StorePieceReader:
    """Reads pieces of a token store or a Levanter cache (a :class:`~datatools.io.formats.token_array.TokenArray`,
    through its
    ``read_async`` alone) in aligned *extents*, many at once, ahead of need, into a fixed slab.

    An extent is the array's ``read_granularity`` tokens (locally, when the budget holds the whole store, a stored
    object up to :data:`LOCAL_EXTENT_TOKENS`: fewer reads, each read once. Not when it does not: each larger extent
    holds other lanes' io blocks, which a slab smaller than the store evicts before they are read: 1 host over a
    1B-token store re-read ~8x, 6x slower). Extents live
    in the slots of one preallocated array (the *slab*), gathered from by one numba call; which extent is in which
    slot, when each was last used and whether it was read ahead are numpy arrays (no per-extent Python work).

    Missing extents are queued by issue order (a read a batch waits for first, then read-ahead by its ``order``,
    the batch number the host's reader gives, then first asked first), at most :data:`MAX_IN_FLIGHT` reads in
    flight (tensorstore futures; each completion fills its slots and issues the next queued), a read taking the
    queued extents beside it along (one ranged request). Read-ahead (:meth:`prefetch`) holds the next batches' own
    pieces at most
    half the slab, what lies further ahead (a lane's whole window) at most a quarter of it (issued all at
    once, a far store served them in no useful order: steps waited up to 8 s at +100 ms, issue 31). A full slab
    reuses the least recently used slot no read holds (a used one before one read ahead). The slab never grows: its
    bytes are the budget, a hard cap; a read that needs more extents at once than :attr:`part_slots` is done in parts
    (:meth:`parts`). Requests, bytes, waits, latencies and late reads (extents a batch needed that no read-ahead had
    asked for) go to :mod:`datatools.io.storage.read_stats`.

    Args:
      store: the token store (or a Levanter cache, read the same way).
      cache_bytes: bytes of the slab per process. None: :data:`DEFAULT_CACHE_BYTES`, and from a bucket at least
        :data:`MIN_REMOTE_SLOTS` extents.
    """

    def __init__(self, store: TokenArray, cache_bytes: int | None = None):
        self.store = store
        self.cache_bytes = cache_bytes  # None: DEFAULT_CACHE_BYTES, and remotely at least MIN_REMOTE_SLOTS extents
        self._ready = False
        self._lock = threading.RLock()  # re-entrant: a read that completes at once calls back in the issuing thread

    def __getstate__(self) -> dict[str, object]:
        """What a pickle holds: the store and the budget (the slab starts empty in each process)."""
        return {"store": self.store, "cache_bytes": self.cache_bytes}

    def __setstate__(self, state: dict[str, object]) -> None:
        """Restored from a pickle: set up again on first use."""
        self.__dict__.update(state, _ready=False, _lock=threading.RLock())

    def __deepcopy__(self, memo: dict[int, object]) -> StorePieceReader:
        """A new reader of the same store and budget (its slab empty)."""
        return StorePieceReader(self.store, self.cache_bytes)

    def _setup(self) -> None:
        """The slab and its tables, on first use in each process (call with the lock held)."""
        if self._ready:
            return
        e = self.store.read_granularity
        remote = storage.location(self.store.path).reads_are_requests
        if not remote:  # no latency, no bytes over a wire: fewer, larger reads cost less CPU
            if self.store.num_tokens * self.store.dtype.itemsize <= (self.cache_bytes or DEFAULT_CACHE_BYTES):
                e = max(e, LOCAL_EXTENT_TOKENS // e * e)  # the whole store held: each extent read once
            e = min(self.store.object_tokens, e)
        self.extent, self.itemsize = e, self.store.dtype.itemsize
        self._per_object = max(1, self.store.object_tokens // e)  # extents in one stored object
        extents = max(1, -(-self.store.num_tokens // e))
        slots = max(1, (self.cache_bytes or DEFAULT_CACHE_BYTES) // (e * self.itemsize))
        if remote and self.cache_bytes is None:  # coarse inner chunks (a Levanter cache's, 1 MiB) hold the lane
            slots = max(slots, MIN_REMOTE_SLOTS)  # windows of fewer lanes: hold enough of them
        slots = int(min(extents, slots))
        self.held_bytes = slots * e * self.itemsize  # the slab, allocated once (the budget: never grown)
        # the most extents read ahead and not yet used, and the most one read holds at once (a slab that holds the
        # whole store: all of them, nothing is ever evicted)
        self.ahead_slots = slots if slots == extents else slots // 2
        self.part_slots = slots if slots == extents else slots - self.ahead_slots
        self._slab = array_pool.filled_gradually((slots, e), self.store.dtype)
        self._slot_of = np.full(extents, -1, np.int64)  # extent -> slot (-1: not held)
        self._extent_in = np.full(slots, -1, np.int64)  # slot -> extent (-1: free)
        self._last_used = np.zeros(slots, np.int64)  # the read tick that last used each slot
        self._ahead = np.zeros(slots, bool)  # read ahead and not used by a read yet
        self._far = np.zeros(slots, bool)  # (where _ahead) read ahead for a batch further off than the next
        self._ahead_at = np.zeros(slots, np.int64)  # (where _ahead) the prefetch call that last asked for it
        self._prefetches = 0  # prefetch calls so far
        self._pins = np.zeros(slots, np.int64)  # reads in progress holding each slot
        # slot -> (done once in the slab, extent): queued, in flight
        self._pending: dict[int, tuple[Future[None], int]] = {}
        self._queue: list[tuple[int, int, int]] = []  # a heap of (issue order, ticket, slot) of reads to issue
        self._queued = np.zeros(slots, bool)
        self._ticket = np.zeros(slots, np.int64)  # the ticket of a queued slot's live heap entry (others: stale)
        self._order = np.zeros(slots, np.int64)  # the issue order a queued slot waits at
        self._tickets = 0
        self._in_flight = 0  # reads issued and not yet received
        self._ahead_in_flight = 0  # of them, read-ahead (issued for a batch still to come)
        self._pumping = False
        self._deferred = 0  # prefetching_together blocks open: reads are queued, issued when the last one ends
        # (read, callback) issued under the lock, callbacks added after it (_issuing)
        self._issued: list[tuple[TokenRead, Callable[[TokenRead], None]]] = []
        self._free = list(range(slots - 1, -1, -1))  # slots holding nothing (a stack: the lowest on top)
        self._tick = 0
        self.late_reads = 0  # extents a read needed that no read-ahead had asked for (read when needed)
        self.peak_ahead_bytes = 0  # the most bytes read ahead and not yet used: at most half the slab
        self._ready = True

    @property
    def slots(self) -> int:
        with self._lock:
            self._setup()
            return int(self._slab.shape[0])

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

    def _free_slot(self, prefetch: bool) -> int:
        """A slot to put a new extent in (lock held): a free one, else the least recently used that no read holds
        and no read is filling (for a prefetch: not one read ahead either); -1 when there is none."""
        if self._free:
            return self._free.pop()
        movable = self._pins == 0
        if self._pending:
            movable[list(self._pending)] = False
        for mask in (movable & ~self._ahead,) if prefetch else (movable & ~self._ahead, movable):
            candidates = np.flatnonzero(mask)
            if candidates.size:
                s = int(candidates[np.argmin(self._last_used[candidates])])
                self._slot_of[self._extent_in[s]] = -1
                self._extent_in[s] = -1
                self._ahead[s] = False
                return s
        return -1

    def _issue(self, ids: np.ndarray, prefetch: bool, far: bool = False, order: int = 0) -> int:
        """Queue the reads of the extents of ``ids`` not held (lock held), issue what the queue allows; how many of
        ``ids`` are not held when it stops (a prefetch stops at half the slab read ahead, or when no slot is free).
        A prefetch is queued at its ``order``; a needed read goes before every read-ahead (:data:`NEEDED`), with the
        queued read-ahead of its extents (the queued extents beside them go in the same ranged requests:
        :meth:`_run_of`; moved to the head as well, those 3 extents away took 13-20 requests for batches more than
        8 ahead before each of the first batches' last read at host 0 of 4)."""
        missing = ids[self._slot_of[ids] < 0]
        if prefetch:  # the next batches' pieces within ahead_slots, what lies further ahead within half of it
            self._expire_read_ahead()
            held = self._slot_of[ids]
            held = held[held >= 0]
            if not far:
                self._far[held] = False  # now needed by a near batch: counted as near
            self._ahead_at[held[self._ahead[held]]] = self._prefetches  # asked for again: still read ahead
            # extents already in the slab and needed again: kept as read-ahead (a prefetch reusing the least recently
            # used slot evicted them for other extents of the same window, and they were read again, late)
            kind = self._ahead & (self._far if far else ~self._far)
            room = max(0, (self.ahead_slots // 2 if far else self.ahead_slots) - int(kind.sum()))
            settled = held[~self._ahead[held] & (self._pins[held] == 0)]
            settled = settled[[int(s) not in self._pending for s in settled.tolist()]] if self._pending else settled
            settled = settled[:room]
            self._ahead[settled], self._far[settled], self._ahead_at[settled] = True, far, self._prefetches
            missing = missing[: room - settled.shape[0]]
        else:
            self.late_reads += int(missing.shape[0])
            read_stats.record(late_reads=int(missing.shape[0]))
        new = []
        for c in missing.tolist():
            s = self._reserve(c, prefetch)
            if s < 0:
                break
            self._far[s], self._ahead_at[s] = far, self._prefetches
            new.append(s)
        if prefetch:  # queued already for a later batch (a window read ahead): now at this batch's order
            queued = self._slot_of[ids]
            queued = queued[queued >= 0]
            earlier = queued[self._queued[queued] & (self._order[queued] > order)].tolist()
            self._enqueue(sorted(earlier + new, key=lambda q: self._extent_in[q]), order)
        else:
            held = self._slot_of[ids]
            waiting = held[held >= 0]
            waiting = waiting[self._queued[waiting] & self._ahead[waiting]]  # queued by read-ahead: needed now
            self._ahead[held[held >= 0]] = False  # needed now: no longer read-ahead (issued without waiting)
            self._ahead[waiting] = False
            head = sorted(set(waiting.tolist()).union(new), key=lambda q: self._extent_in[q])  # store order
            self._enqueue(head, NEEDED)
        self._pump()
        return int((self._slot_of[ids] < 0).sum())

    def _expire_read_ahead(self) -> None:
        """Count as read ahead no more what no prefetch asked for in the last :data:`AHEAD_KEPT` calls (lock held):
        the rest of a lane's window its host's rows never used (the window done, the lane on to its next) was
        counted against the room of the further read-ahead for good, and from batch ~150 of host 0 of 4 only the
        next batch was read ahead. Reads in progress keep theirs."""
        stale = self._ahead & (self._ahead_at < self._prefetches - AHEAD_KEPT) & (self._pins == 0)
        if self._pending:
            stale[list(self._pending)] = False
        self._ahead[stale] = False

    def _enqueue(self, slots: list[int], order: int) -> None:
        """Queue the reads of ``slots`` at issue ``order``, in the order given (lock held); a slot queued already
        moves to this order (its earlier entry goes stale)."""
        for s in slots:
            self._tickets += 1
            self._ticket[s], self._queued[s], self._order[s] = self._tickets, True, order
            heapq.heappush(self._queue, (order, self._tickets, s))

    def _head(self) -> int:
        """The slot whose read is issued next (lock held): the lowest issue order, first queued first; -1 when none
        is queued."""
        queue = self._queue
        while queue and not (self._queued[queue[0][2]] and self._ticket[queue[0][2]] == queue[0][1]):
            heapq.heappop(queue)  # issued with a run, or moved to an earlier order
        return queue[0][2] if queue else -1

    def _run_of(self, s: int) -> list[int]:
        """The slots read with ``s``'s extent in one ranged request (lock held): the queued extents on either side
        of it in the same stored object, at most :data:`MAX_RUN` in all, in store order; taken off the queue."""
        c = int(self._extent_in[s])
        lo_end, hi_end = (
            c // self._per_object * self._per_object,
            min((c // self._per_object + 1) * self._per_object, self._slot_of.shape[0]),
        )
        slot_of, queued = self._slot_of, self._queued
        a, b = c, c + 1
        while b < hi_end and b - a < MAX_RUN and slot_of[b] >= 0 and queued[slot_of[b]]:
            b += 1
        while a > lo_end and b - a < MAX_RUN and slot_of[a - 1] >= 0 and queued[slot_of[a - 1]]:
            a -= 1
        run: list[int] = slot_of[a:b].tolist()
        queued[run] = False
        return run

    def _reserve(self, c: int, prefetch: bool) -> int:
        """A slot for extent ``c``, its read queued (lock held); -1 when a prefetch finds no slot to reuse."""
        s = self._free_slot(prefetch)
        if s < 0:
            if prefetch:
                return -1
            raise RuntimeError(  # parts() keeps a read within part_slots: only reads of several threads at once
                f"{self.store.path}: the read budget ({self.held_bytes >> 20} MiB, {self._slab.shape[0]} extents) "
                f"is held by reads in progress; read from one thread (the host's reader) or raise cache_bytes"
            )
        self._pending[s] = (Future[None](), c)
        self._slot_of[c], self._extent_in[s], self._ahead[s] = s, c, prefetch
        self._last_used[s] = self._tick
        end = min((c + 1) * self.extent, self.store.num_tokens)
        read_stats.record(bytes_fetched=(end - c * self.extent) * self.itemsize)
        return s

    def _pump(self) -> None:
        """Issue queued reads in issue order while :meth:`_can_issue` (lock held), in one ``ts.Batch``: the
        queued extents beside the next one in its stored object are the same read (:meth:`_run_of`: one ranged
        request)."""
        if self._pumping or self._deferred or not self._queue:  # pumping: a read completed at once, called back
            return
        self._pumping = True
        try:
            while self._can_issue():
                with ts.Batch() as batch:
                    while self._can_issue():
                        run = self._run_of(self._head())
                        first = self._pending[run[0]][1]
                        read = self._read_run(first, run, batch)
                        ahead = bool(self._ahead[run].all())
                        self._in_flight += 1
                        self._ahead_in_flight += ahead
                        read_stats.record(requests=1, prefetched=int(self._ahead[run].any()))
                        self._issued.append(
                            (
                                read,
                                functools.partial(self._received, run=run, ahead=ahead, issued=time.perf_counter()),
                            )
                        )
        finally:
            self._pumping = False

    def _read_run(self, first: int, run: list[int], batch: ts.Batch) -> TokenRead:
        """The read of extents ``first, first + 1, ...`` into the slab's slots ``run`` (a token store decodes
        straight into each slot; a Levanter cache reads the run once and copies it in)."""
        e, n = self.extent, self.store.num_tokens
        end = min((first + len(run)) * e, n)
        slots = [self._slab[s, : min(e, end - c * e)] for c, s in enumerate(run, first)]
        return self.store.read_async(first * e, end, batch=batch, out=slots)

    def _can_issue(self) -> bool:
        """Whether the head of the queue may be issued (lock held): fewer than :data:`MAX_IN_FLIGHT` reads in flight
        and, for a read-ahead, fewer than :data:`MAX_AHEAD_IN_FLIGHT` (with the whole flight read-ahead at start-up,
        a needed read queued behind ~128 of them and a step waited ~1.2 s at +100 ms)."""
        head = self._head()
        if head < 0 or self._in_flight >= MAX_IN_FLIGHT:
            return False
        return not self._ahead[head] or self._ahead_in_flight < MAX_AHEAD_IN_FLIGHT

    @contextmanager
    def _issuing(self) -> Iterator[None]:
        """The reader's lock for a block that may issue reads; their callbacks are added once it is released (a
        tensorstore future runs callbacks under its own lock: added under ours, the two locks deadlocked)."""
        try:
            with self._lock:
                yield
        finally:  # reads issued before an error in the block still need their callbacks (or stay in flight)
            with self._lock:
                issued, self._issued = self._issued, []
            for read, callback in issued:  # on the thread that completes it (or here, at once, when it is done)
                read.add_done_callback(callback)

    def _received(self, read: TokenRead, *, run: list[int], ahead: bool, issued: float) -> None:
        """A read into the slots of ``run`` completed (on a tensorstore thread): the tokens are in the slab, the next
        read issued, each slot's future done. A failed read stays pending: :meth:`_settle` reads it again."""
        error: BaseException | None = None
        try:
            read.result()
        except BaseException as exc:  # noqa: BLE001 -- handed to whoever waits for these extents
            error = exc
        with self._issuing():
            self._in_flight -= 1
            self._ahead_in_flight -= ahead
            dones = [self._pending[s][0] for s in run]
            if error is None:
                for s in run:
                    del self._pending[s]
            self._pump()
        read_stats.record(latency_s=time.perf_counter() - issued)
        for done in dones:
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)

    def _settle(self, slots: np.ndarray) -> float:
        """Wait until the extents in ``slots`` are in the slab; the seconds waited."""
        with self._lock:
            waiting = [(s, self._pending[s]) for s in slots.tolist() if s in self._pending]
        if not waiting:
            return 0.0
        t0 = time.perf_counter()
        for s, (done, c) in waiting:
            try:
                done.result()
            except (ValueError, OSError) as exc:  # read it again through the store's checked path: the error names
                try:  # the chunk (a ranged read's error names it already: the checked path would not refuse more)
                    if not self.store.retries_failed_reads:
                        raise exc
                    value = self.store.read(c * self.extent, min((c + 1) * self.extent, self.store.num_tokens))
                except BaseException:
                    with self._lock:
                        if self._pending.get(s, (None,))[0] is done:
                            del self._pending[s]
                            self._slot_of[c], self._extent_in[s] = -1, -1
                            self._free.append(s)
                    raise
                with self._lock:
                    if self._pending.get(s, (None,))[0] is done:
                        self._slab[s, : value.shape[0]] = value
                        del self._pending[s]
        return time.perf_counter() - t0

    def _begin(self, doc: npt.ArrayLike, start: npt.ArrayLike) -> np.ndarray:
        """The store positions (tokens) where pieces ``(doc, start)`` begin, int64."""
        return self.store.offsets[np.asarray(doc, np.int64)] + np.asarray(start, np.int64)

    def prefetch(
        self, doc: npt.ArrayLike, start: npt.ArrayLike, length: npt.ArrayLike, *, near: bool = True, order: int = 0
    ) -> bool:
        """Start reading these pieces (of a batch still to come) without waiting, issued after every read of a
        lower ``order`` (the host's reader: a batch's own pieces at its batch number, a lane's window later). True
        when every extent is now held or queued; False when the read-ahead budget ran out first:
        :attr:`ahead_slots` for a batch's own pieces (``near``), half of it for what is read further ahead (a
        lane's whole window, used over many batches: with 1 host's 256 lanes the windows alone filled the budget,
        and the next batches' own pieces were refused and read late)."""
        with self._issuing():
            self._setup()
            self._prefetches += 1
            ids = self._extents_of(self._begin(doc, start), np.asarray(length, np.int64))
            left = self._issue(ids, prefetch=True, far=not near, order=order)
            self.peak_ahead_bytes = max(self.peak_ahead_bytes, int(self._ahead.sum()) * self.extent * self.itemsize)
        return left == 0

    @contextmanager
    def prefetching_together(self) -> Iterator[None]:
        """Queue the reads of the :meth:`prefetch` calls in the block (from this thread) before any is issued: a
        batch's pieces at its order and the window around them later go out as one ranged request per run (issued
        call by call, the pieces went alone and the window after: 25% more requests at host 0 of 4)."""
        with self._issuing():
            self._setup()
            self._deferred += 1
            try:
                yield
            finally:
                self._deferred -= 1
                self._pump()

    @contextmanager
    def holding(self, begin: np.ndarray, length: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Hold the extents of the pieces ``[begin, begin + length)`` (store positions) in the slab, pinned, while
        the block runs; gives ``(slab, slot_of)``: token t is ``slab[slot_of[t // extent], t % extent]``."""
        with self._issuing():
            self._setup()
            ids = self._extents_of(begin, length)
            self._tick += 1
            if ids.shape[0] > self.part_slots:
                raise ValueError(
                    f"{self.store.path}: a read of {ids.shape[0]} extents at once is more than the "
                    f"{self.part_slots} the read budget holds beside its read-ahead (read it in parts())"
                )
            before = self._slot_of[ids]
            held = before >= 0
            self._pins[before[held]] += 1  # pinned first: reading the missing ones must not reuse their slots
            self._issue(ids, prefetch=False)
            slots = self._slot_of[ids]
            self._pins[slots[~held]] += 1
            self._ahead[slots] = False
            self._last_used[slots] = self._tick
        try:
            waited = self._settle(slots)
            # not a copy (one int64 per extent of the store: 8 MB a batch for 16B tokens in 16,384-token extents):
            # the entries of pinned extents do not change while they are pinned, and the block reads only those
            yield self._slab, self._slot_of
        finally:
            with self._lock:
                self._pins[slots] = np.maximum(self._pins[slots] - 1, 0)
        read_stats.record(bytes_delivered=int(length.sum()) * self.itemsize, wait_s=waited)

    def forget_read_ahead(self) -> None:
        """Let later reads reuse every slot read ahead (the walk that asked for them was abandoned: a restore)."""
        with self._lock:
            if self._ready:
                self._ahead[:] = False

    def parts(
        self, begin: np.ndarray, length: np.ndarray, cuts: np.ndarray | None = None
    ) -> list[tuple[int, int]] | None:
        """Pieces ``[a, b)`` of ``(begin, length)`` (store positions), in order, whose extents fit one read
        (:attr:`part_slots`): one part when they all fit. ``cuts``: the piece indices a part may end at (a row's
        first piece; default any piece). None when the pieces between two cuts alone do not fit."""
        with self._lock:
            self._setup()
        n = int(begin.shape[0])
        # a slab holding every extent of the store (locally, the budget holds it) holds any pieces at once: their
        # extents not counted (a second _extents_of a batch, ~3% of a local 32 x 1024 batch's CPU)
        if n == 0 or self.part_slots >= self._slot_of.shape[0]:
            return [(0, n)]
        cuts = np.arange(n + 1, dtype=np.int64) if cuts is None else np.asarray(cuts, np.int64)
        if self._extents_of(begin, length).shape[0] <= self.part_slots:
            return [(0, n)]
        e = self.extent
        first = begin // e
        counts = np.where(length > 0, (begin + np.maximum(length, 1) - 1) // e - first + 1, 0)
        out: list[tuple[int, int]] = []
        a = 0
        while a < n:
            c = counts[a:]
            ids = np.repeat(first[a:], c) + np.arange(int(c.sum()), dtype=np.int64) - np.repeat(np.cumsum(c) - c, c)
            owner = np.repeat(np.arange(c.shape[0], dtype=np.int64), c)
            _, at = np.unique(ids, return_index=True)
            distinct = np.cumsum(np.bincount(owner[at], minlength=c.shape[0]))  # extents of pieces a .. a + i
            fits = cuts[(cuts > a) & (cuts <= n)]
            fits = fits[distinct[fits - a - 1] <= self.part_slots]
            if fits.shape[0] == 0:
                return None
            out.append((a, int(fits[-1])))
            a = out[-1][1]
        return out

    def read_pieces(self, doc: npt.ArrayLike, start: npt.ArrayLike, length: npt.ArrayLike) -> np.ndarray:
        """The pieces ``doc[j]``, tokens ``[start[j], start[j] + length[j])``, back to back as int32, read in parts
        that fit the read budget (:meth:`parts`)."""
        begin, n = self._begin(doc, start), np.asarray(length, np.int64)
        out = np.empty(int(n.sum()), np.int32)
        parts = self.parts(begin, n)
        if parts is None:  # a piece longer than a read holds: cut every piece at extent boundaries
            begin, n = _at_extents(begin, n, self.extent)
            parts = self.parts(begin, n)
            assert parts is not None  # a piece within one extent fits any read (part_slots >= 1)
        at = np.concatenate(([0], np.cumsum(n)))
        for a, b in parts:
            with self.holding(begin[a:b], n[a:b]) as (slab, slot_of):
                _gather_extents(slab.reshape(-1), slot_of, self.extent, begin[a:b], n[a:b], out[at[a] : at[b]])
        return out


def _at_extents(begin: np.ndarray, length: np.ndarray, e: int) -> tuple[np.ndarray, np.ndarray]:
    """Pieces ``[begin, begin + length)`` cut where they cross a multiple of ``e``: the same tokens in the same
    order, each piece inside one extent."""
    keep = length > 0
    begin, length = begin[keep], length[keep]
    first, last = begin // e, (begin + length - 1) // e
    counts = last - first + 1
    ids = (
        np.repeat(first, counts)
        + np.arange(int(counts.sum()), dtype=np.int64)
        - np.repeat(np.cumsum(counts) - counts, counts)
    )
    lo = np.maximum(np.repeat(begin, counts), ids * e)
    hi = np.minimum(np.repeat(begin + length, counts), (ids + 1) * e)
    return lo, hi - lo


@numba.njit(cache=True, nogil=True)
def _gather_extents(
    flat: np.ndarray, slot_of: np.ndarray, extent: int, begin: np.ndarray, length: np.ndarray, out: np.ndarray
) -> None:
    """Copy piece j (store tokens ``[begin[j], begin[j] + length[j])``) from the flat slab into ``out``, back to
    back: token t is at ``slot_of[t // extent] * extent + t % extent``."""
    k = 0
    for j in range(begin.shape[0]):
        t = begin[j]
        left = length[j]
        while left > 0:
            c = t // extent
            off = t - c * extent
            take = min(left, extent - off)
            src = slot_of[c] * extent + off
            for i in range(take):
                out[k + i] = flat[src + i]
            k += take
            t += take
            left -= take


def documents_per_read(read_tokens: int, mean_tokens: float) -> int:
    """Documents of ``mean_tokens`` tokens on average that fill one read of a store (``read_tokens``: its
    :attr:`~datatools.io.formats.store.TokenStore.read_granularity`, the inner chunk a read in a bucket fetches): the
    block shuffle's ``io_block_size`` whose blocks each cost about one whole read, not a read per block (issue 52)."""
    return -(-int(read_tokens) // int(max(1.0, mean_tokens)))


class StoreDocuments(DocumentSource):
    """A :class:`TokenStore` (or a Levanter cache) as a document source, pieces read through a cached
    :class:`StorePieceReader`."""

    def __init__(self, store: TokenArray, cache_bytes: int | None = None):
        self.store = store
        self.reader = StorePieceReader(store, cache_bytes)

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, i: int) -> np.ndarray:
        i = check_index(i, len(self.store))
        off = self.store.offsets
        return self.reader.read_pieces([i], [0], [off[i + 1] - off[i]])

    def lengths(self) -> np.ndarray:
        return self.store.lengths()

    def next_extent_starts(self, doc: np.ndarray) -> np.ndarray:
        """Extents are the store's inner chunks (its ``read_granularity``)."""
        return extent_starts_after(self.store.offsets, int(self.store.read_granularity), doc)

    def read_pieces(self, doc: npt.ArrayLike, start: npt.ArrayLike, length: npt.ArrayLike) -> np.ndarray:
        return self.reader.read_pieces(*check_pieces(doc, start, length, self.lengths()))

    def pack_rows(
        self, plan: PackPlan, rows: npt.ArrayLike | None, pad_id: int = 0, out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """Rows filled straight from the reader's slab (one copy of each token), their extents held meanwhile."""
        rows = check_plan_rows(plan, rows)
        sel, splits = row_pieces(plan.row_splits, rows)
        begin = self.store.offsets[plan.doc[sel]] + plan.start[sel]
        length = plan.length[sel].astype(np.int64)
        parts = self.reader.parts(begin, length, cuts=splits)
        if parts is None:  # a row reads more extents than one read holds: its pieces gathered in parts, then copied
            return super().pack_rows(plan, rows, pad_id=pad_id, out=out)
        if len(parts) > 1 and out is None:
            out = new_batch(rows.shape[0], plan.ctx)
        for a, b in parts:  # rows whose pieces fit the read budget at once (one part, unless a batch is huge)
            r0, r1 = int(np.searchsorted(splits, a)), int(np.searchsorted(splits, b))
            part_out = out if out is None or len(parts) == 1 else {k: v[r0:r1] for k, v in out.items()}
            with self.reader.holding(begin[a:b], length[a:b]) as (slab, slot_of):
                got = materialize(
                    plan,
                    slab.reshape(-1),
                    self.store.offsets,
                    rows[r0:r1],
                    pad_id=pad_id,
                    out=part_out,
                    extents=(slot_of, self.reader.extent),
                )
            if len(parts) == 1:
                return got
        assert out is not None
        return out

    @property
    def reads_ahead(self) -> bool:
        """Whether reading ahead pays: a store in object storage (locally it made the first batch 1.5-3x later)."""
        return storage.location(self.store.path).reads_are_requests

    def prefetch(
        self, doc: npt.ArrayLike, start: npt.ArrayLike, length: npt.ArrayLike, *, near: bool = True, order: int = 0
    ) -> bool:
        """Start reading these pieces without waiting (:meth:`StorePieceReader.prefetch`)."""
        return self.reader.prefetch(doc, start, length, near=near, order=order)

    def forget_read_ahead(self) -> None:
        """:meth:`StorePieceReader.forget_read_ahead`."""
        self.reader.forget_read_ahead()

    def prefetching_together(self) -> AbstractContextManager[None]:
        """:meth:`StorePieceReader.prefetching_together`."""
        return self.reader.prefetching_together()

    def __repr__(self) -> str:
        return f"StoreDocuments({self.store!r})"


def check_pieces(
    doc: npt.ArrayLike, start: npt.ArrayLike, length: npt.ArrayLike, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(doc, start, length)`` as int64 arrays, checked inside their documents (IndexError/ValueError naming one)."""
    doc, start, length = (
        as_lengths(np.asarray(x).reshape(-1), name)  # a scalar as one piece
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


def check_index(i: int, n: int) -> int:
    """Document ``i`` of ``n`` as an index from 0 (negative counts from the end); IndexError when out of range."""
    if not -n <= i < n:
        raise IndexError(f"document {i} out of range for {n} documents")
    return i % n


class ShardSlab:
    """Decoded shards' int32 tokens in one array of ``capacity`` tokens, so that a batch's pieces, from any of the
    shards held, are filled into rows by one kernel pass straight from it (no per-shard pass, no copy of the pieces
    first): a slab of Parquet row groups read whole costs what reading them costs, plus one copy each.

    Shards are placed one after another; one that does not fit before the end goes to the start, and the shards its
    place overlaps (and those left between the last place and the end) are let go: first in, first out. The
    array's pages are taken as they are first written, so a slab larger than its input costs only the tokens put in
    it; in 4 KiB pages (:func:`~datatools.base.array_pool.filled_gradually`: 160 MB of shards faulted in for
    0.09 s of CPU; numpy's huge pages took 0.02 s alone but 0.25-0.33 s inside a pipeline, the kernel compacting
    memory for them). Each shard's decoded buffer is freed once copied, for the next decode to use again (a plain
    read of the column reuses one buffer; keeping every decoded buffer faulted in fresh pages for all of them).

    Args:
      capacity: tokens the slab holds (its array is ``4 * capacity`` bytes, paged in as used).
      num_shards: shards of the input (``begin`` has one entry each).

    Attributes:
      begin: int64 (num_shards,): where shard k's tokens start in :attr:`tokens`, -1 when it is not held.
      placed: shards put in (decodes copied in), counted over the slab's life.
    """

    def __init__(self, capacity: int, num_shards: int):
        self.capacity = max(1, int(capacity))
        self.tokens = array_pool.filled_gradually((self.capacity,), np.int32)  # paged in as written
        self.begin = np.full(int(num_shards), -1, np.int64)
        self._order: deque[tuple[int, int]] = deque()  # (shard, begin) in the order they were placed
        self._at = 0  # where the next shard goes
        self.placed = 0

    def fits_without_eviction(self, n: int) -> bool:
        """Whether ``n`` more tokens fit after the last shard placed, letting none go."""
        return self._at + int(n) <= self.capacity

    def put(self, k: int, tokens: np.ndarray) -> None:
        """Copy shard ``k``'s tokens in (as int32), letting go of the shards their place overlaps."""
        n = int(tokens.shape[0])
        if n > self.capacity:
            raise ValueError(f"a shard of {n:,} tokens does not fit a slab of {self.capacity:,}")
        if self.begin[k] >= 0:
            return
        if self._at + n > self.capacity:  # to the start: the shards between here and the end go first
            self._evict_while(lambda b: b >= self._at)
            self._at = 0
        end = self._at + n
        self._evict_while(lambda b: self._at <= b < end)
        self.tokens[self._at : end] = tokens
        self.begin[k] = self._at
        self._order.append((k, self._at))
        self._at = end
        self.placed += 1

    def _evict_while(self, overlaps: Callable[[int], bool]) -> None:
        """Let go of the oldest shards while the oldest one's place passes ``overlaps``."""
        while self._order and overlaps(self._order[0][1]):
            k, _ = self._order.popleft()
            self.begin[k] = -1


class ChunkedDocuments(DocumentSource):
    """Documents of an input read shard by shard on demand (Parquet row groups, Arrow batches, JSON Lines blocks).

    Memory holds the lengths and a :class:`ShardSlab` of at most ``cache_bytes`` of decoded shards (at least the
    largest shard; first in, first out). A batch's rows are filled from the slab by one kernel pass
    (:meth:`pack_rows`); a full shuffle over more shards than the slab holds decodes a shard per read: pre-tokenize
    such data into a token store instead.

    Args:
      lengths: int64 tokens per document, every shard's documents in order.
      shard_docs: documents per shard (sums to ``len(lengths)``).
      load: ``load(k) -> (tokens, lengths)`` of shard k; picklable.
      cache_bytes: decoded shard bytes kept per process.
      slab: the shards already read, in a slab (what the pass for the lengths decoded, whose lengths are these), kept
        here and not read again while they stay.
    """

    def __init__(
        self,
        lengths: np.ndarray,
        shard_docs: np.ndarray,
        load: Callable[[int], tuple[np.ndarray, np.ndarray]],
        name: str = "",
        cache_bytes: int = TABLE_CACHE_BYTES,
        slab: ShardSlab | None = None,
    ):
        self._lengths = np.asarray(lengths, np.int64)
        self.shard_docs = np.asarray(shard_docs, np.int64)
        if int(self.shard_docs.sum()) != self._lengths.shape[0]:
            raise ValueError(f"shards hold {int(self.shard_docs.sum())} documents, lengths {self._lengths.shape[0]}")
        self.first_doc = np.concatenate(([0], np.cumsum(self.shard_docs)))
        self._offsets = np.concatenate(([0], np.cumsum(self._lengths)))  # every document's first token
        self._shard_tokens = np.diff(self._offsets[self.first_doc])  # tokens per shard
        # the largest shard and the input's tokens: what the slab's size follows (asked for every batch)
        self._largest = int(self._shard_tokens.max()) if self._shard_tokens.size else 0
        self._total = int(self._offsets[-1])
        self.load, self.name, self.cache_bytes = load, name, int(cache_bytes)
        self.shard_reads = 0
        self._slab = slab if slab is not None and slab.capacity >= self._slab_capacity() else None
        self._lock = threading.Lock()  # Grain reads with many threads: one decodes a shard, the others wait for it

    def __getstate__(self) -> dict[str, object]:
        """What a pickle holds: no lock, no decoded shards (each process reads its own)."""
        return {k: v for k, v in self.__dict__.items() if k != "_lock"} | {"_slab": None, "shard_reads": 0}

    def __setstate__(self, state: dict[str, object]) -> None:
        """Restored from a pickle, with a lock of its own."""
        self.__dict__.update(state, _lock=threading.Lock())

    def __len__(self) -> int:
        return int(self._lengths.shape[0])

    def lengths(self) -> np.ndarray:
        return self._lengths

    def _slab_capacity(self) -> int:
        """Tokens the slab holds: ``cache_bytes`` of them (at least the largest shard), no more than the input."""
        return max(1, min(self._total, max(self.cache_bytes // 4, self._largest)))

    def _held(self) -> ShardSlab:
        if self._slab is None or self._slab.capacity < self._slab_capacity():
            self._slab = ShardSlab(self._slab_capacity(), self.shard_docs.shape[0])
        return self._slab

    def _read_shard(self, k: int) -> None:
        """Decode shard ``k`` into the slab, checked against its lengths (the caller holds the lock)."""
        tokens, lengths = self.load(k)
        first, n = int(self.first_doc[k]), int(self.shard_docs[k])
        if lengths.shape[0] != n or not np.array_equal(lengths, self._lengths[first : first + n]):
            raise ValueError(f"{self.name}: shard {k} changed since its lengths were read")
        self.shard_reads += 1
        self._held().put(k, tokens)

    def _locate(self, doc: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(tokens, begin)``: piece j is ``tokens[begin[j]:begin[j] + length[j]]``. The shards the pieces need are
        read into the slab; when they all stay held, ``tokens`` is the slab itself, else (more than it holds at
        once) the pieces are gathered a shard at a time into a new array. The caller holds the lock."""
        slab = self._held()
        begin = np.empty(doc.shape[0], np.int64)
        args = (doc, start, length, self._offsets, self.first_doc, self._lengths.shape[0])
        missing = _slab_positions(*args, slab.begin, begin)  # one pass: the common case, every shard held
        if missing == -1:
            return slab.tokens, begin
        if missing == -2:  # a piece outside its document
            check_pieces(doc, start, length, self._lengths)  # raises, naming it
        shard = np.searchsorted(self.first_doc, doc, side="right") - 1
        needed = np.unique(shard)
        for k in needed[slab.begin[needed] < 0].tolist():
            self._read_shard(k)
        if _slab_positions(*args, slab.begin, begin) == -1:
            return slab.tokens, begin
        out = np.empty(int(length.sum()), np.int32)
        dst = np.cumsum(length) - length
        within = self._offsets[doc] - self._offsets[self.first_doc[shard]] + start  # from the shard's first token
        for k in needed.tolist():  # one shard at a time: read it (again), copy its pieces out
            if slab.begin[k] < 0:
                self._read_shard(k)
            sel = np.flatnonzero(shard == k)
            gather_at(slab.tokens, slab.begin[k] + within[sel], length[sel], dst[sel], out)
        return out, dst

    def release(self) -> None:
        """Let go of the decoded shards held here (a copy read in worker processes starts with none)."""
        with self._lock:
            self._slab = None

    def read_pieces(self, doc: npt.ArrayLike, start: npt.ArrayLike, length: npt.ArrayLike) -> np.ndarray:
        d, a, n = check_pieces(doc, start, length, self._lengths)
        out = np.empty(int(n.sum()), np.int32)
        with self._lock:
            tokens, begin = self._locate(d, a, n)
            gather_at(tokens, begin, n, np.cumsum(n) - n, out)
        return out

    def pack_rows(
        self, plan: PackPlan, rows: npt.ArrayLike | None, pad_id: int = 0, out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """Rows filled from the slab by one kernel pass (no copy of the pieces first), into ``out`` when given."""
        with self._lock:  # a shard read for another thread's batch must not overwrite this one's while it fills
            return materialize_located(plan, self._locate, rows, pad_id=pad_id, out=out)

    def __repr__(self) -> str:
        return f"ChunkedDocuments({self.name!r}, documents={len(self)}, shards={self.shard_docs.shape[0]})"


@numba.njit(cache=True, nogil=True)
def _slab_positions(
    doc: np.ndarray,
    start: np.ndarray,
    length: np.ndarray,
    offsets: np.ndarray,
    first_doc: np.ndarray,
    num_docs: int,
    shard_begin: np.ndarray,
    begin: np.ndarray,
) -> int:
    """Where each piece starts in a slab of shards (``shard_begin``: a shard's place, -1 when not held) into
    ``begin``: -1 when every piece's shard is held, -2 for a piece outside its document, else a piece whose shard is
    not held (a vectorized search, unique and gather took 49 us a batch of 32 x 1024; this pass ~10)."""
    for j in range(doc.shape[0]):
        d = doc[j]
        if d < 0 or d >= num_docs or start[j] < 0 or length[j] < 0:
            return -2
        if start[j] + length[j] > offsets[d + 1] - offsets[d]:
            return -2
        lo, hi = 0, first_doc.shape[0] - 1  # the shard: the last first_doc <= d
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if first_doc[mid] <= d:
                lo = mid
            else:
                hi = mid
        at = shard_begin[lo]
        if at < 0:
            return j
        begin[j] = at + offsets[d] - offsets[first_doc[lo]] + start[j]
    return -1


@numba.njit(cache=True, nogil=True)
def gather_at(tokens: np.ndarray, begin: np.ndarray, length: np.ndarray, dst: np.ndarray, out: np.ndarray) -> None:
    """Copy ``tokens[begin[j]:begin[j] + length[j]]`` to ``out[dst[j]:dst[j] + length[j]]`` for every piece j."""
    for j in range(begin.shape[0]):
        src, d = begin[j], dst[j]
        for t in range(length[j]):
            out[d + t] = tokens[src + t]


def as_document_source(source: object) -> DocumentSource:
    """``source``, checked to be a :class:`DocumentSource` (TypeError naming its type: a token store or a Levanter
    cache is read as one through :class:`StoreDocuments`)."""
    if isinstance(source, DocumentSource):
        return source
    raise TypeError(
        f"expected a document source (a subclass of datatools.io.sources.documents.DocumentSource: lengths(), "
        f"read_pieces(), "
        f"len(); a token store or Levanter cache: StoreDocuments(store)); got {type(source).__name__}"
    )
