"""The one reader of a host (:mod:`datatools.grain.host_reader`): batches in order, reads issued ahead in batch
order within the source's budget, finished batches bounded by count. Everything is counted in a log of events; no
test times anything.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grain
from datatools.grain import host_reader
from datatools.grain.host_batches import HostBatchesMapDataset
from datatools.grain.host_reader import BUILD_AHEAD, READ_AHEAD, BatchWalk, HostBatchesIterDataset


class _Log:
    """What a walk did, in order: ("prefetch", k, near), ("refused", k), ("build", k, handed at the time)."""

    def __init__(self, budget: int | None = None):
        self.events: list[tuple] = []
        self.lock = threading.Lock()
        self.budget = budget  # batches read ahead and not yet built (None: no limit)
        self.ahead: set[int] = set()
        self.walk: BatchWalk | None = None

    def prefetch(self, k: int, near: bool) -> bool:
        with self.lock:
            if self.budget is not None and k not in self.ahead and len(self.ahead) >= self.budget:
                self.events.append(("refused", k))
                return False
            self.ahead.add(k)
            self.events.append(("prefetch", k, near))
            return True

    def build(self, k: int) -> int:
        with self.lock:
            self.ahead.discard(k)
            handed = self.walk.handed if self.walk is not None else 0
            self.events.append(("build", k, handed))
        return k

    def of(self, kind: str) -> list[tuple]:
        return [e for e in self.events if e[0] == kind]


def _walk(log: _Log, **kwargs) -> BatchWalk:
    walk = BatchWalk(log.build, prefetch=log.prefetch, **kwargs)
    log.walk = walk
    return walk


@settings(max_examples=30, deadline=None)
@given(
    start=st.integers(0, 20),
    count=st.integers(1, 40),
    read_ahead=st.integers(0, 10),
    build_ahead=st.integers(0, 3),
    budget=st.one_of(st.none(), st.integers(1, 6)),
)
def test_batches_come_in_order_each_read_ahead_in_batch_order_before_it_is_built(
    start, count, read_ahead, build_ahead, budget
):
    log = _Log(budget)
    walk = _walk(log, start=start, stop=start + count, read_ahead=read_ahead, build_ahead=build_ahead)
    assert [walk.next() for _ in range(count)] == list(range(start, start + count))
    with pytest.raises(StopIteration):
        walk.next()
    events = log.events
    builds = [e[1] for e in log.of("build")]
    assert builds == list(range(start, start + count))  # each batch built once, in order
    prefetched = [e[1] for e in log.of("prefetch")]
    assert prefetched == list(range(start, start + count))  # each batch's reads issued once, in batch order
    for k in range(start, start + count):
        issued = events.index(next(e for e in events if e[:2] == ("prefetch", k)))
        built = events.index(next(e for e in events if e[:2] == ("build", k)))
        assert issued < built  # no batch is built before its reads were issued: no late read
        building = start + sum(1 for e in events[:issued] if e[0] == "build")  # the batch being built next
        assert log.of("prefetch")[k - start][2] == (k <= building + 1)  # its own pieces for it and the next
    for e in log.of("build"):  # at most build_ahead finished batches wait for the consumer, plus the one being built
        assert e[1] - start <= e[2] + max(build_ahead, 0)


def test_reads_are_issued_read_ahead_batches_past_the_one_built():
    log = _Log()
    walk = _walk(log, start=0, stop=100)
    walk.next()
    first_build = log.events.index(("build", 0, 0))
    assert [e[1] for e in log.events[:first_build]] == list(range(READ_AHEAD + 1))  # the first batch's own reads first
    assert [e[2] for e in log.events[:first_build]] == [True, True] + [False] * (READ_AHEAD - 1)
    walk.close()


def test_a_refused_batch_is_offered_again_and_the_budget_is_never_exceeded():
    log = _Log(budget=2)
    walk = _walk(log, start=0, stop=30, build_ahead=0)
    for _ in range(30):
        walk.next()
    refused = [e[1] for e in log.of("refused")]
    assert refused and all(any(p[1] == k for p in log.of("prefetch")) for k in refused)
    assert len(log.ahead) == 0


def test_a_build_error_is_raised_at_its_batch_and_ends_the_walk():
    def build(k: int) -> int:
        if k == 3:
            raise OSError("s3://bucket/store/tokens/c/0: Access Denied")
        return k

    walk = BatchWalk(build, start=0, stop=10)
    assert [walk.next() for _ in range(3)] == [0, 1, 2]
    with pytest.raises(OSError, match="Access Denied"):
        walk.next()
    with pytest.raises(StopIteration):
        walk.next()


def test_closing_a_walk_stops_its_builder():
    release = threading.Event()
    built: list[int] = []

    def build(k: int) -> int:
        built.append(k)
        if k == 1:
            release.wait(60)
        return k

    walk = BatchWalk(build, start=0, stop=None)
    assert walk.next() == 0
    release.set()
    walk.close()  # waits for the batch being built, then the thread ends
    assert walk._thread is not None and not walk._thread.is_alive()
    assert built[-1] <= 1 + BUILD_AHEAD
    with pytest.raises(StopIteration):
        walk.next()


EXIT_CHILD = """
import numpy as np
from datatools.grain.host_reader import BatchWalk

def build(k):
    return np.full(1 << 16, k).sum()  # work in numpy while the interpreter ends

walk = BatchWalk(build, start=0, stop=None)
walk.next()
print("done")
"""


def test_a_process_ending_with_a_walk_running_exits_cleanly():
    """A walk left running at exit is closed first (a builder thread inside native code as the interpreter ended
    aborted the process: "terminate called without an active exception")."""
    import subprocess
    import sys

    for _ in range(5):
        done = subprocess.run([sys.executable, "-c", EXIT_CHILD], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stdout.strip() == "done" and "terminate" not in done.stderr


class _Schedule:
    """Batches of 4 rows over 3 epochs of 7 batches; pieces name the batch."""

    row_counts = (4,)
    shapes = [(4, 2)]

    def __init__(self):
        self.docs = self
        self.reads_ahead = True
        self.prefetched: list[int] = []
        self.forgotten = 0

    def num_batches(self, epoch: int) -> int:
        return 7

    def batch_rows(self, epoch: int, j: int) -> int:
        return 4

    def pieces(self, epoch, j, lo, hi):
        return np.array([epoch * 7 + j]), np.array([lo]), np.array([hi - lo])

    ahead_pieces = pieces

    def read(self, epoch, j, lo, hi):
        return {"tokens": np.full((hi - lo, 2), epoch * 7 + j, np.int32)}

    def prefetch(self, doc, start, length, *, near: bool = True, order: int = 0) -> bool:
        self.prefetched.append(int(doc[0]))
        return True

    def forget_read_ahead(self) -> None:
        self.forgotten += 1

    def prefetching_together(self):
        return contextlib.nullcontext()


def test_the_iterator_state_is_the_next_global_batch_and_restores_anywhere():
    schedule = _Schedule()
    host = HostBatchesMapDataset(schedule, index=1, count=2, num_epochs=3)
    ds = HostBatchesIterDataset(host, host)
    assert isinstance(ds, grain.IterDataset)
    it = iter(ds)
    got = [int(next(it)["tokens"][0, 0]) for _ in range(5)]
    assert got == [0, 1, 2, 3, 4] and it.get_state() == {"next_index": 5}
    it.set_state({"next_index": 15})
    assert schedule.forgotten == 1
    assert [int(b["tokens"][0, 0]) for b in it] == list(range(15, 21))
    assert it.get_state() == {"next_index": 21}
    assert schedule.prefetched[:2] == [0, 1]  # read ahead in batch order from the start
    with pytest.raises(ValueError, match="next_index"):
        it.set_state({"next_index": -1})


def test_read_ahead_is_a_count_of_batches_not_a_time():
    assert not [name for name in vars(host_reader) if name.endswith("_S")]


def test_a_walk_that_reads_ahead_hands_over_its_first_batch_once_the_next_is_built():
    """At +100 ms the second batch's pieces cost more requests than a step gives the server time for: the first
    batch is handed over with the next one built (PRIME), so step 1 does not wait for them."""
    building_1, release_1 = threading.Event(), threading.Event()

    def build(k: int) -> int:
        if k == 1:
            building_1.set()
            assert release_1.wait(30)
        return k

    walk = BatchWalk(build, start=0, stop=10, prefetch=lambda k, near: True)
    assert walk.prime == host_reader.PRIME == 2
    got: list[int] = []
    consumer = threading.Thread(target=lambda: got.append(walk.next()))
    consumer.start()
    assert building_1.wait(30)
    assert walk._queue.qsize() == 0 and got == []  # batch 0 built, held back while batch 1 is built
    release_1.set()
    consumer.join(30)
    assert got == [0] and walk.next() == 1
    walk.close()
    assert BatchWalk(build, prefetch=None).prime == 1  # nothing read ahead (a local source): no wait for a second
