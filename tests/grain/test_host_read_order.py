"""The order a process reads its batches in: the next batch first, read-ahead in the process's own stride.

A fake schedule records when each batch's read begins and ends and which batches were read ahead, so the
rules of :class:`~datatools.grain.host_batches.HostBatchesMapDataset` are checked without any I/O:

* the first batch is read alone;
* at most :data:`~datatools.grain.host_batches.BATCHES_IN_FLIGHT` lower batches are read beside a batch, so
  reads begin in index order when Grain's threads ask for many at once;
* read-ahead follows the stride the process reads (every P-th batch for worker w of P), from the start;
* once the first batch is read, the reads of the next ones begin before they are asked for.
"""

from __future__ import annotations

import threading
import time

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools.grain import host_batches
from datatools.grain.host_batches import BATCHES_IN_FLIGHT, HostBatchesMapDataset


class _Docs:
    reads_ahead = True  # as a store in a bucket

    def __init__(self):
        self.prefetched: list[int] = []

    def prefetch(self, doc, start, length) -> bool:
        self.prefetched.append(int(doc[0]))
        return True


class _Schedule:
    """Batches of one row; ``read`` sleeps ``read_s`` and records (batch, begin, end, reads in flight)."""

    row_counts = (1,)
    shapes = [(1, 4)]

    def __init__(self, batches: int = 64, read_s: float = 0.02):
        self.batches, self.read_s, self.docs = batches, read_s, _Docs()
        self.fast: set[int] = set()  # batches read at once
        self.log: list[tuple[int, float, float, int]] = []
        self._lock = threading.Lock()
        self._in_flight = 0

    def num_batches(self, epoch: int) -> int:
        return self.batches

    def batch_rows(self, epoch: int, j: int) -> int:
        return 1

    def pieces(self, epoch: int, j: int, lo: int, hi: int):
        return np.array([j]), np.array([0]), np.array([1])

    ahead_pieces = pieces

    def read(self, epoch: int, j: int, lo: int, hi: int):
        with self._lock:
            self._in_flight += 1
            flying = self._in_flight
        begin = time.perf_counter()
        time.sleep(0.0 if j in self.fast else self.read_s)
        with self._lock:
            self._in_flight -= 1
            self.log.append((j, begin, time.perf_counter(), flying))
        return {"tokens": np.full((1, 4), j, np.int32)}


def _ask_at_once(ds: HostBatchesMapDataset, indices: list[int]) -> None:
    """Ask for ``indices`` from as many threads at once (as Grain's reader threads do)."""
    barrier = threading.Barrier(len(indices))

    def ask(i: int) -> None:
        barrier.wait()
        ds[i]

    threads = [threading.Thread(target=ask, args=(i,)) for i in indices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@settings(max_examples=15, deadline=None)
@given(st.permutations(list(range(8))))
def test_batches_asked_for_at_once_begin_in_index_order(order):
    schedule = _Schedule()
    ds = HostBatchesMapDataset(schedule, num_epochs=1)
    gather, host_batches.FIRST_BATCH_GATHER_S = host_batches.FIRST_BATCH_GATHER_S, 0.3  # wide: a loaded machine
    try:
        _ask_at_once(ds, list(order))
    finally:
        host_batches.FIRST_BATCH_GATHER_S = gather
    log = sorted(schedule.log, key=lambda r: r[1])
    assert sorted(r[0] for r in log) == list(range(8))  # every batch once
    assert log[0][0] == 0  # the lowest first, alone
    assert log[0][3] == 1
    assert max(r[3] for r in log) <= BATCHES_IN_FLIGHT
    # a batch began only when fewer than BATCHES_IN_FLIGHT - 1 lower batches were still unread
    for j, begin, _, _ in log:
        lower_open = [r for r in log if r[0] < j and r[2] > begin + 1e-3]
        assert len(lower_open) <= BATCHES_IN_FLIGHT - 1, (j, lower_open)


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 4), st.integers(0, 3))
def test_read_ahead_follows_the_workers_stride_from_the_first_batch(workers, worker):
    worker %= workers
    schedule = _Schedule(read_s=0.0)
    ds = HostBatchesMapDataset(schedule, num_epochs=1, stride=workers)
    mine = list(range(worker, schedule.batches, workers))[:6]
    for i in mine:
        ds[i]
    assert schedule.docs.prefetched, "nothing was read ahead"
    assert all(k % workers == worker for k in schedule.docs.prefetched), schedule.docs.prefetched
    assert schedule.docs.prefetched[0] == mine[0]  # the first batch's own reads first, no other batch with them
    assert mine[1] not in schedule.docs.prefetched[:1]


def test_a_wrong_stride_is_corrected_by_the_gaps_seen():
    schedule = _Schedule(read_s=0.0)
    ds = HostBatchesMapDataset(schedule, num_epochs=1, stride=4)
    for i in range(5):  # one process reading every batch: stride 1, not 4
        ds[i]
    assert set(range(1, 5)) <= set(schedule.docs.prefetched)


def test_once_the_first_batch_is_read_the_next_batches_reads_start_unasked():
    schedule = _Schedule(read_s=0.0)
    ds = HostBatchesMapDataset(schedule, num_epochs=1, stride=2)
    ds[0]  # worker 0 of 2: its first batch, read alone, then the reads of its next batches begin
    assert schedule.docs.prefetched[0] == 0
    assert schedule.docs.prefetched[1:] == list(range(2, 2 + 2 * host_batches.READ_AHEAD, 2))


def test_the_first_batch_is_handed_over_with_the_next_ones_read():
    schedule = _Schedule(read_s=0.0)
    ds = HostBatchesMapDataset(schedule, num_epochs=1, stride=2)
    first = ds[0]
    warm = [2 * n for n in range(1, host_batches.WARM_BATCHES + 1)]  # worker 0 of 2: its next batches
    assert schedule.log[0][0] == 0 and sorted(r[0] for r in schedule.log[1:]) == warm  # read before 0 came back
    assert int(first["tokens"][0, 0]) == 0
    for k in warm:  # the batches read early, handed over without a second read
        assert int(ds[k]["tokens"][0, 0]) == k
    assert len(schedule.log) == 1 + len(warm)
    after = 2 * (host_batches.WARM_BATCHES + 1)
    ds[after]
    assert [r[0] for r in schedule.log[1 + len(warm) :]] == [after]


def test_a_slow_warm_up_holds_the_first_batch_back_at_most_warm_s(monkeypatch):
    monkeypatch.setattr(host_batches, "WARM_S", 0.05)
    schedule = _Schedule(read_s=0.4)
    ds = HostBatchesMapDataset(schedule, num_epochs=1, stride=1)
    t0 = time.perf_counter()
    ds[0]
    assert time.perf_counter() - t0 < 0.4 + 0.3  # its own read, and at most WARM_S (plus slack) for batch 1
    warm = list(range(1, host_batches.WARM_BATCHES + 1))
    for k in warm:
        assert int(ds[k]["tokens"][0, 0]) == k  # the warm-up's reads, waited for where they are asked
    assert sorted(r[0] for r in schedule.log) == [0, *warm]  # each read once


def test_a_workers_first_batch_waits_for_the_other_workers_next_batches_until_the_deadline(tmp_path, monkeypatch):
    monkeypatch.setattr(host_batches.read_stats, "share_in", lambda folder: None)
    ds = HostBatchesMapDataset(_Schedule(read_s=0.0), num_epochs=1, stride=2)  # worker 0 of 2
    ds.stats_folder = str(tmp_path)
    t0 = time.perf_counter()  # before the timer starts: the touch is at least 0.3 s after it
    threading.Timer(0.3, lambda: (tmp_path / "read-1").touch()).start()  # worker 1: batch 1 read at 0.3 s
    threading.Timer(0.6, lambda: (tmp_path / "read-3").touch()).start()  # and its next batch (3) at 0.6 s
    ds[0]
    assert 0.6 <= time.perf_counter() - t0 < host_batches.WARM_S  # held back until batches 1 and 3 were read
    assert (tmp_path / "read-0").exists() and (tmp_path / "read-2").exists()  # its own batches, said read
    assert (tmp_path / "given-0").exists()  # and its first, said handed over
    monkeypatch.setattr(host_batches, "WARM_S", 0.2)
    monkeypatch.setattr(host_batches, "FIRST_BATCH_BY_S", 0.6)
    late = HostBatchesMapDataset(_Schedule(read_s=0.0), num_epochs=1, stride=2)
    late.stats_folder = str(tmp_path / "none")  # no other worker says anything: until FIRST_BATCH_BY_S
    (tmp_path / "none").mkdir()
    t0 = time.perf_counter()
    late[0]
    assert 0.6 - 0.05 <= time.perf_counter() - t0 < 0.6 + 0.3


def test_a_later_workers_first_batch_goes_once_the_batch_before_it_is_handed_over(tmp_path, monkeypatch):
    """Worker 1 of 2: its first batch (1) reads at once, its warm-up's (3, 5) take 2 s. Worker 0 hands batch 0
    over at 0.3 s: the step after it asks for batch 1, so worker 1 hands it over then, not after its warm-up
    (nor after worker 0's batch 2 is read); the warm-up's reads go on and are handed over when asked for."""
    monkeypatch.setattr(host_batches.read_stats, "share_in", lambda folder: None)
    schedule = _Schedule(read_s=2.0)
    schedule.fast = {1}
    ds = HostBatchesMapDataset(schedule, num_epochs=1, stride=2)
    ds.stats_folder = str(tmp_path)
    t0 = time.perf_counter()
    threading.Timer(0.3, lambda: (tmp_path / "given-0").touch()).start()
    assert int(ds[1]["tokens"][0, 0]) == 1
    assert 0.3 <= time.perf_counter() - t0 < 1.5
    assert (tmp_path / "read-1").exists() and (tmp_path / "given-1").exists()
    assert int(ds[3]["tokens"][0, 0]) == 3  # the warm-up's read, handed over: not read again
    assert [r[0] for r in schedule.log].count(3) == 1


def test_the_warm_up_ends_by_first_batch_by_s_after_the_iterator_began(monkeypatch):
    """A first batch slow to read is not held back for its warm-up past FIRST_BATCH_BY_S after the start."""
    monkeypatch.setattr(host_batches, "WARM_S", 5.0)
    monkeypatch.setattr(host_batches, "FIRST_BATCH_BY_S", 0.3)
    schedule = _Schedule(read_s=3.0)
    schedule.fast = {0}
    ds = HostBatchesMapDataset(schedule, num_epochs=1, stride=1)
    t0 = time.perf_counter()
    assert int(ds[0]["tokens"][0, 0]) == 0
    assert 0.3 - 0.05 <= time.perf_counter() - t0 < 2.5  # held to the deadline, not for the 3 s warm reads
    assert int(ds[1]["tokens"][0, 0]) == 1  # the warm-up's read, still handed over
    assert [r[0] for r in schedule.log].count(1) == 1
    sent = HostBatchesMapDataset(_Schedule(), num_epochs=1).__getstate__()  # what Grain sends a worker
    assert time.monotonic() - sent["_started"] < 5  # a worker counts from the iterator's start, not its own


def test_a_later_workers_first_read_waits_for_the_lower_workers_first_batch(tmp_path, monkeypatch):
    """Worker 1 of 2 begins its first read (batch 1) only once worker 0's first batch (0) is read (``read-0``):
    whether worker 0 said it began (``first-0``) before worker 1 started or after; a worker 0 that never says
    anything is waited for FIRST_SEEN_S at most. Worker 0 (batch 0: no lower batch) reads at once, and so does a
    first batch below TURNS_FROM_TOKENS."""
    monkeypatch.setattr(host_batches.read_stats, "share_in", lambda folder: None)
    monkeypatch.setattr(host_batches, "WARM_S", 0.0)
    monkeypatch.setattr(host_batches, "FIRST_BATCH_BY_S", 0.0)  # no warm-up after the read (7 s a case: no read-2)
    monkeypatch.setattr(host_batches, "TURNS_FROM_TOKENS", 4)  # these batches of 1 x 4 tokens take turns

    def first_read_begins(folder, index: int, events: list[tuple[float, str]]) -> float:
        folder.mkdir()
        t0 = time.perf_counter()  # before the timers: a touch at ``at`` is at least ``at`` after it
        for at, name in events:
            threading.Timer(at, lambda name=name: (folder / name).touch()).start()
        schedule = _Schedule(read_s=0.0)
        ds = HostBatchesMapDataset(schedule, num_epochs=1, stride=2)
        ds.stats_folder = str(folder)
        assert int(ds[index]["tokens"][0, 0]) == index
        assert (folder / f"read-{index}").exists()
        return schedule.log[0][1] - t0

    assert first_read_begins(tmp_path / "said", 1, [(0.0, "first-0"), (0.8, "read-0")]) >= 0.8
    assert (tmp_path / "said" / "first-1").exists()  # and said it began its own
    assert first_read_begins(tmp_path / "late", 1, [(0.3, "first-0"), (0.8, "read-0")]) >= 0.8
    silent = first_read_begins(tmp_path / "silent", 1, [])
    assert host_batches.FIRST_SEEN_S - 0.05 <= silent < host_batches.STAGGER_S / 6
    assert first_read_begins(tmp_path / "lowest", 0, []) < host_batches.FIRST_SEEN_S
    monkeypatch.undo()  # a first batch below TURNS_FROM_TOKENS (here 1 x 4 tokens) takes no turn
    monkeypatch.setattr(host_batches.read_stats, "share_in", lambda folder: None)
    monkeypatch.setattr(host_batches, "WARM_S", 0.0)
    monkeypatch.setattr(host_batches, "FIRST_BATCH_BY_S", 0.0)
    assert first_read_begins(tmp_path / "small", 1, [(0.0, "first-0"), (5.0, "read-0")]) < 2.5
    assert not (tmp_path / "small" / "first-1").exists()
