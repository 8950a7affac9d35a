"""The store reader issues reads in the order they are needed: a bounded number in flight, a batch's own reads
ahead of read-ahead (issue 31: with everything issued at once, the next batch waited for the eight after it)."""

from __future__ import annotations

import functools
import random
import threading
import time

import numpy as np
import pytest
import tensorstore as ts
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools.io.formats.shard_reads import JoinedRead
from datatools.io.sources import documents
from datatools.io.sources.documents import StorePieceReader

EXTENT = 16  # tokens per extent of the fake store


class FakeRemoteStore:
    """A store in a bucket whose reads complete only when the test says so (tensorstore promises), in any order;
    token t is ``t % 1000``; ``object_extents`` extents to a stored object (a read never crosses one)."""

    def __init__(self, extents: int, object_extents: int = 1):
        self.path = "s3://bucket/store"
        self.read_granularity = EXTENT
        self.object_tokens = EXTENT * object_extents
        self.dtype = np.dtype(np.uint16)
        self.num_tokens = extents * EXTENT
        self.offsets = np.arange(0, self.num_tokens + 1, EXTENT, dtype=np.int64)  # one document per extent
        self.issued: list[int] = []  # extents, in the order their reads were issued
        self.reads: list[tuple[int, int]] = []  # (first extent, extents) of each read issued
        self.promises: dict[int, tuple[ts.Promise, int, int]] = {}  # first extent -> (promise, begin, end)
        self.lock = threading.Lock()

    retries_failed_reads = False  # a failed read fails (none does here)

    def read_async(self, begin: int, end: int, *, batch=None, out=None):
        """The read of tokens ``[begin, end)`` (a :class:`~datatools.io.formats.token_array.TokenArray`'s), copied into
        ``out`` once the test completes it."""
        assert begin % EXTENT == 0 and begin // self.object_tokens == (end - 1) // self.object_tokens
        promise, future = ts.Promise.new()
        with self.lock:
            self.issued.extend(range(begin // EXTENT, -(-end // EXTENT)))
            self.reads.append((begin // EXTENT, -(-end // EXTENT) - begin // EXTENT))
            self.promises[begin // EXTENT] = (promise, begin, end)
        return JoinedRead([future], functools.partial(_copied, out=out))

    def complete(self, extent: int) -> None:
        """Complete the read in flight that begins at ``extent``."""
        with self.lock:
            promise, begin, end = self.promises.pop(extent)
        promise.set_result(np.arange(begin, end, dtype=np.int64) % 1000)

    def in_flight(self) -> list[int]:
        """The first extent of every read in flight."""
        with self.lock:
            return sorted(self.promises)


def _copied(reads: list, *, out) -> np.ndarray:
    """The one read's tokens, copied into the arrays ``out`` in order when given."""
    tokens, at = reads[0].result(), 0
    for piece in out or ():
        piece[:] = tokens[at : at + piece.shape[0]]
        at += piece.shape[0]
    return tokens


def _wait_for(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_a_batch_read_goes_before_the_read_ahead_queued_before_it(monkeypatch):
    monkeypatch.setattr(documents, "MAX_IN_FLIGHT", 4)
    store = FakeRemoteStore(extents=64)
    reader = StorePieceReader(store, cache_bytes=64 * EXTENT * 2 * 4)
    ahead = np.arange(0, 20)
    assert reader.prefetch(ahead, np.zeros(20, np.int64), np.full(20, EXTENT))  # 20 queued: 4 issued
    assert store.issued == [0, 1, 2, 3]
    needed = np.array([40, 41, 42, 10, 11])  # three new extents, two that read-ahead queued (not yet issued)
    got: list[np.ndarray] = []
    t = threading.Thread(target=lambda: got.append(reader.read_pieces(needed, np.zeros(5), np.full(5, EXTENT))))
    t.start()

    def queued() -> bool:  # the batch's reads are queued (its five extents pinned): only then complete reads
        with reader._lock:
            return int(reader._pins.sum()) == 5

    _wait_for(queued)
    for _ in range(5):  # complete the oldest read in flight: the batch's go next
        _wait_for(lambda: len(store.in_flight()) == 4)
        store.complete(store.in_flight()[0])
    want = [10, 11, 40, 41, 42]  # before any other read-ahead, in the store's order (runs of one object together)
    _wait_for(lambda: len(store.issued) >= 4 + len(want))
    assert store.issued[4 : 4 + len(want)] == want
    while t.is_alive():
        if store.in_flight():
            store.complete(store.in_flight()[0])
        time.sleep(0.001)
    want = np.concatenate([np.arange(d * EXTENT, (d + 1) * EXTENT) % 1000 for d in needed])
    np.testing.assert_array_equal(got[0], want)
    assert len(store.in_flight()) <= 4


def test_read_ahead_leaves_the_rest_of_the_flight_to_the_next_batch(monkeypatch):
    """Read-ahead takes at most MAX_AHEAD_IN_FLIGHT of the MAX_IN_FLIGHT requests: a batch's reads are issued at
    once, not behind a full flight of read-ahead that a server serves first."""
    monkeypatch.setattr(documents, "MAX_IN_FLIGHT", 6)
    monkeypatch.setattr(documents, "MAX_AHEAD_IN_FLIGHT", 2)
    store = FakeRemoteStore(extents=64)
    reader = StorePieceReader(store, cache_bytes=64 * EXTENT * 2 * 4)
    assert reader.prefetch(np.arange(0, 20), np.zeros(20, np.int64), np.full(20, EXTENT))
    assert store.issued == [0, 1]  # 20 queued, 2 in flight
    needed = np.array([40, 50, 60])
    got: list[np.ndarray] = []
    t = threading.Thread(target=lambda: got.append(reader.read_pieces(needed, np.zeros(3), np.full(3, EXTENT))))
    t.start()
    _wait_for(lambda: len(store.issued) == 5)
    assert store.issued[2:] == [40, 50, 60]  # at once, beside the read-ahead in flight
    for extent in (40, 50, 60):
        store.complete(extent)
    t.join(10)
    np.testing.assert_array_equal(
        got[0], np.concatenate([np.arange(d * EXTENT, (d + 1) * EXTENT) % 1000 for d in needed])
    )
    store.complete(0)  # a read-ahead done: the next one goes, still two at most
    _wait_for(lambda: len(store.issued) == 6)
    assert store.issued[5] == 2 and store.in_flight() == [1, 2]


def test_consecutive_extents_of_one_object_are_one_read(monkeypatch):
    monkeypatch.setattr(documents, "MAX_IN_FLIGHT", 3)
    store = FakeRemoteStore(extents=64, object_extents=4)
    reader = StorePieceReader(store, cache_bytes=64 * EXTENT * 2 * 4)
    ahead = np.array([1, 2, 3, 4, 5, 9, 20])  # objects of 4 extents: runs [1-3], [4-5], [9], [20]
    assert reader.prefetch(ahead, np.zeros(7, np.int64), np.full(7, EXTENT))
    assert store.reads == [(1, 3), (4, 2), (9, 1)]  # three reads in flight (the cap), the fourth queued
    store.complete(4)
    _wait_for(lambda: len(store.reads) == 4)
    assert store.reads[3] == (20, 1)
    for first in (1, 9, 20):
        store.complete(first)
    got = reader.read_pieces(ahead, np.zeros(7, np.int64), np.full(7, EXTENT))  # all held: no read
    np.testing.assert_array_equal(got, np.concatenate([np.arange(d * EXTENT, (d + 1) * EXTENT) % 1000 for d in ahead]))
    assert len(store.reads) == 4


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 47), min_size=1, max_size=12), min_size=1, max_size=6),
    st.integers(1, 6),
    st.integers(0, 2**32 - 1),
)
def test_reads_complete_in_any_order_and_give_the_tokens(batches, cap, seed):
    """Read-ahead of some batches, then their reads, with reads completed in a random order by another thread:
    every batch gets its tokens, never more than ``cap`` reads are in flight, and every read is issued once per
    time its extent is not held."""
    mp = pytest.MonkeyPatch()
    mp.setattr(documents, "MAX_IN_FLIGHT", cap)
    store = FakeRemoteStore(extents=48, object_extents=1 + seed % 4)
    reader = StorePieceReader(store, cache_bytes=48 * EXTENT * 2)  # every extent fits: each is read once
    stop = threading.Event()
    most = [0]
    rnd = random.Random(seed)  # the server thread's own (hypothesis's random belongs to the test's thread)

    def server() -> None:
        while not stop.is_set():
            flight = store.in_flight()
            most[0] = max(most[0], len(flight))
            if flight:
                store.complete(rnd.choice(flight))
            else:
                time.sleep(0.0005)

    def read_all() -> None:
        for docs in batches[1:]:
            reader.prefetch(np.asarray(docs), np.zeros(len(docs), np.int64), np.full(len(docs), EXTENT))
        for docs in batches:
            got.append(reader.read_pieces(np.asarray(docs), np.zeros(len(docs), np.int64), np.full(len(docs), EXTENT)))

    got: list[np.ndarray] = []
    threading.Thread(target=server, daemon=True).start()
    reading = threading.Thread(target=read_all, daemon=True)
    try:
        reading.start()
        reading.join(30)
        assert not reading.is_alive(), "the reads never completed (a read queued and never issued)"
    finally:
        stop.set()
        mp.undo()
    for docs, tokens in zip(batches, got, strict=True):
        want = np.concatenate([np.arange(d * EXTENT, (d + 1) * EXTENT) % 1000 for d in docs])
        np.testing.assert_array_equal(tokens, want)
    assert most[0] <= cap
    assert sorted(store.issued) == sorted(set(store.issued))  # every extent read once (the slab holds them all)


class InstantStore(FakeRemoteStore):
    """:class:`FakeRemoteStore` whose reads complete as they are issued."""

    def read_async(self, begin: int, end: int, *, batch=None, out=None):
        future = super().read_async(begin, end, batch=batch, out=out)
        self.complete(begin // EXTENT)
        return future


def test_read_ahead_a_host_never_used_stops_counting_against_its_room():
    """A lane's window is read ahead whole and its host uses a part of it: the rest, asked for by no later prefetch,
    stops counting as read ahead after ``AHEAD_KEPT`` prefetches, so the further read-ahead is never refused for
    room the finished windows hold (it was, from batch ~150 of host 0 of 4: only the next batch was read ahead)."""
    store = InstantStore(extents=4000)
    reader = StorePieceReader(store, cache_bytes=600 * EXTENT * 2)  # 600 slots: 150 for the far read-ahead
    region = 8  # extents of each batch's window (a document per extent)
    refused = []
    for k in range(100):
        window = np.arange(k * region, (k + 1) * region)
        if not reader.prefetch(window, np.zeros(region, np.int64), np.full(region, EXTENT), near=False):
            refused.append(k)
        if k >= 4:  # batch k - 4 is built: it uses half of its window
            used = np.arange((k - 4) * region, (k - 4) * region + region // 2)
            np.testing.assert_array_equal(
                reader.read_pieces(used, np.zeros(used.shape[0], np.int64), np.full(used.shape[0], EXTENT)),
                np.arange(used[0] * EXTENT, (used[-1] + 1) * EXTENT) % 1000,
            )
    assert refused == []
    assert reader.late_reads == 0


WINDOW = 40  # extents of a lane's window in the walk below: batch k draws from window k // 4


def _batch_pieces(k: int) -> np.ndarray:
    """Extents (one document each) batch ``k`` reads: four spread over its window, as a lane's rows are."""
    return WINDOW * (k // 4) + k % 4 + np.arange(0, WINDOW, 10)


def test_the_next_batches_pieces_are_issued_before_the_windows_read_ahead_for_later_ones(monkeypatch):
    """The host's reader issues reads in batch order: each batch's own pieces at its batch number, a lane's whole
    window (what reads cheapest for a batch further ahead) after the pieces of the batches up to ``WINDOWS_AFTER``
    later. Counted on a server that answers in the order asked (as moto did): every piece of batches 0-8 is issued
    before any extent only a window asked for. With the windows issued at their own batch's number
    (``WINDOWS_AFTER`` 0) the window of batch 2 went before the pieces of batch 3 and later, the wait at step 2."""
    from types import SimpleNamespace

    from datatools.grain import host_reader
    from datatools.grain.host_reader import BatchWalk, prefetcher

    monkeypatch.setattr(documents, "MAX_IN_FLIGHT", 4)
    monkeypatch.setattr(documents, "MAX_AHEAD_IN_FLIGHT", 4)
    store = FakeRemoteStore(extents=8 * WINDOW)
    reader = StorePieceReader(store, cache_bytes=8 * WINDOW * EXTENT * 2)  # holds every extent: no budget refuses

    class Docs:
        def prefetch(self, doc, start, length, *, near: bool = True, order: int = 0) -> bool:
            return reader.prefetch(doc, start, length, near=near, order=order)

        def prefetching_together(self):
            return reader.prefetching_together()

    def pieces(epoch, j, lo, hi):
        doc = _batch_pieces(j)
        return doc, np.zeros(doc.shape[0], np.int64), np.full(doc.shape[0], EXTENT)

    def window(epoch, j, lo, hi):
        doc = WINDOW * (j // 4) + np.arange(WINDOW)
        return doc, np.zeros(WINDOW, np.int64), np.full(WINDOW, EXTENT)

    schedule = SimpleNamespace(docs=Docs(), pieces=pieces, ahead_pieces=window)
    walk = BatchWalk(lambda k: k, prefetch=prefetcher(schedule, lambda k: (0, k, 0, 1)), build_ahead=0)
    assert walk.next() == 0  # batches 0 .. READ_AHEAD asked for, batch 0 built (its build reads nothing here)
    served = 0
    while served < len(store.reads):  # answer each read in the order it was issued
        first = store.reads[served][0]
        _wait_for(lambda first=first: first in store.in_flight())
        store.complete(first)
        served += 1
    order = {c: i for i, c in enumerate(store.issued)}
    assert len(order) == len(store.issued)  # each extent read once
    ahead = host_reader.READ_AHEAD
    own = np.unique(np.concatenate([_batch_pieces(k) for k in range(ahead + 1)]))
    windows_only = np.setdiff1d(np.arange(WINDOW * (ahead // 4 + 1)), own)
    late = [
        k  # batches a piece of which was issued after an extent only a window asked for
        for k in range(1, ahead + 1)
        if max(order[c] for c in _batch_pieces(k).tolist()) > min(order[c] for c in windows_only.tolist())
    ]
    assert late == []
    assert sorted(order) == list(range(WINDOW * (ahead // 4 + 1)))  # the windows read whole, after


def test_a_read_takes_the_queued_extents_beside_it_along_whatever_their_order(monkeypatch):
    """Queued read-ahead next to a needed extent, in the same stored object, is read by the same ranged request
    (one request, not two), though its own issue order is later."""
    monkeypatch.setattr(documents, "MAX_IN_FLIGHT", 1)
    store = FakeRemoteStore(extents=32, object_extents=8)
    reader = StorePieceReader(store, cache_bytes=32 * EXTENT * 2)
    assert reader.prefetch(np.array([0]), np.zeros(1, np.int64), np.full(1, EXTENT), order=0)  # in flight
    assert reader.prefetch(np.array([20]), np.zeros(1, np.int64), np.full(1, EXTENT), order=1)
    assert reader.prefetch(np.array([3, 5, 6, 9]), np.zeros(4, np.int64), np.full(4, EXTENT), order=7)
    got: list[np.ndarray] = []
    t = threading.Thread(target=lambda: got.append(reader.read_pieces([4], [0], [EXTENT])))
    t.start()
    _wait_for(lambda: int(reader._pins.sum()) == 1)
    store.complete(0)
    _wait_for(lambda: len(store.reads) == 2)
    assert store.reads[1] == (3, 4)  # extent 4 with 3, 5 and 6 (9 is in the next object), before order 1's 20
    store.complete(3)
    t.join(10)
    np.testing.assert_array_equal(got[0], np.arange(4 * EXTENT, 5 * EXTENT) % 1000)


def test_a_batchs_pieces_and_the_window_around_them_queued_together_are_one_request():
    """The host's reader queues a batch's pieces and the window read ahead around them together: the pieces go
    first and take the window's extents beside them in their object along (one request; issued call by call, the
    piece went alone and the window's extents on either side of it after, in two more)."""
    store = FakeRemoteStore(extents=32, object_extents=8)
    reader = StorePieceReader(store, cache_bytes=32 * EXTENT * 2)

    def ask(doc: np.ndarray, order: int) -> bool:
        return reader.prefetch(doc, np.zeros(doc.shape[0], np.int64), np.full(doc.shape[0], EXTENT), order=order)

    with reader.prefetching_together():
        assert ask(np.array([2]), 5) and ask(np.arange(8), 14)
        assert store.reads == []  # queued, not issued, inside the block
    assert store.reads == [(0, 8)]
    assert ask(np.array([10]), 5) and ask(np.arange(8, 16), 14)
    assert store.reads == [(0, 8), (10, 1), (8, 2), (11, 5)]
