"""Global batch schedules and one host's share of them: the streaming transforms' batches recomputed from lengths,
hosts that read only their own rows, and the fill-order bucketing kernel."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grain
from conftest import random_docs
from datatools.grain import (
    BatchRowsMapDataset,
    BucketBatchIterDataset,
    BucketSchedule,
    DocumentOrder,
    DocumentsMapDataset,
    FeistelShuffleMapDataset,
    HostBatchesMapDataset,
    PackedRowsMapDataset,
    PlannedSchedule,
    StreamingPackIterDataset,
    StreamingSchedule,
    streaming_schedule,
)
from datatools.io.sources.documents import ArrayDocuments, DocumentSource
from datatools.kernels.bucket import fill_order_batches
from datatools.kernels.packing import PackOptions

NO_THREADS = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


class CountingDocuments(DocumentSource):
    """A document source that counts the tokens read through it (pieces only: no flat-array shortcut)."""

    def __init__(self, docs: ArrayDocuments):
        self.docs, self.tokens_read = docs, 0

    def __len__(self):
        return len(self.docs)

    def lengths(self):
        return self.docs.lengths()

    def read_pieces(self, doc, start, length):
        out = self.docs.read_pieces(doc, start, length)
        self.tokens_read += out.shape[0]
        return out


@settings(max_examples=40, deadline=None)
@given(
    bucket_of=st.lists(st.integers(0, 3), max_size=200),
    sizes=st.lists(st.integers(1, 6), min_size=4, max_size=4),
    drop=st.booleans(),
)
def test_fill_order_is_what_a_stream_emits(bucket_of, sizes, drop):
    """Simulated item by item: a bucket's batch is emitted when its last item arrives; remainders last."""
    items, splits, bucket = fill_order_batches(bucket_of, sizes, drop_remainder=drop)
    buffers, expected = [[] for _ in sizes], []
    for i, k in enumerate(bucket_of):
        buffers[k].append(i)
        if len(buffers[k]) == sizes[k]:
            expected.append((k, buffers[k]))
            buffers[k] = []
    if not drop:
        expected += [(k, b) for k, b in enumerate(buffers) if b]
    got = [(int(bucket[b]), items[splits[b] : splits[b + 1]].tolist()) for b in range(bucket.shape[0])]
    assert got == expected


def test_bucket_schedule_gives_the_streaming_bucketers_batches():
    """With the same document order, the schedule's batches are BucketBatchIterDataset's, batch for batch."""
    docs = ArrayDocuments.from_list(random_docs(300, seed=5, mean_log=4.0, max_len=600))
    bounds, sizes = [64, 128, 256], [8, 4, 2]
    stream = BatchRowsMapDataset(FeistelShuffleMapDataset(DocumentsMapDataset(docs), seed=3), 16)
    streamed = list(BucketBatchIterDataset(stream.to_iter_dataset(NO_THREADS), boundaries=bounds, batch_sizes=sizes))
    schedule = BucketSchedule(docs, DocumentOrder(len(docs), "full", seed=3), boundaries=bounds, batch_sizes=sizes)
    planned = list(HostBatchesMapDataset(schedule).to_iter_dataset(NO_THREADS))
    assert len(planned) == len(streamed) > 20
    for a, b in zip(planned, streamed):
        for k in b:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize("algorithm", ["best_fit_decreasing", "first_fit"])
@pytest.mark.parametrize("shuffle_rows", [True, False])
def test_streaming_schedule_gives_the_streaming_packers_rows(algorithm, shuffle_rows):
    """With the same document order, the schedule's rows (epoch 0, one row per batch) are StreamingPackIterDataset's,
    row for row: both plan each window with plan_window and order its rows by (seed, epoch 0, window)."""
    docs = ArrayDocuments.from_list(random_docs(260, seed=6, mean_log=4.2, max_len=700))
    stream = FeistelShuffleMapDataset(DocumentsMapDataset(docs), seed=3).to_iter_dataset(NO_THREADS)
    packer = StreamingPackIterDataset(stream, PackOptions(256, algorithm), window=40, seed=7, shuffle_rows=shuffle_rows)
    streamed = list(packer)
    schedule = StreamingSchedule(
        docs,
        DocumentOrder(len(docs), "full", seed=3),
        PackOptions(256, algorithm),
        window=40,
        batch_size=1,
        drop_remainder=False,
        seed=7,
    )
    planned = list(HostBatchesMapDataset(schedule).to_iter_dataset(NO_THREADS))
    assert len(planned) == len(streamed) > 40
    if shuffle_rows:
        for a, b in zip(planned, streamed):
            for k in b:
                np.testing.assert_array_equal(a[k][0], b[k], err_msg=k)
    else:  # the plan's own order within each window: the same rows, windows in the same order
        starts = schedule.window_starts(0)
        for w in range(starts.shape[0] - 1):
            window = slice(int(starts[w]), int(starts[w + 1]))
            got = sorted(tuple(r["tokens"].tolist()) for r in streamed[window])
            assert got == sorted(tuple(b["tokens"][0].tolist()) for b in planned[window])


def test_a_streaming_batch_is_filled_straight_from_its_windows_plans(monkeypatch):
    """A streaming batch's rows are filled from the cached window plans themselves, one fill per window the batch
    spans (no plan of the batch's rows made first: that cost as much again as the fill), and they are the rows its
    ``rows_plan`` names, the rest padding."""
    docs = ArrayDocuments.from_list(random_docs(300, seed=11, mean_log=4.0, max_len=600))
    order = DocumentOrder(len(docs), "none", seed=0)
    schedule = StreamingSchedule(docs, order, PackOptions(128), window=20, batch_size=16, drop_remainder=False, seed=3)
    batches = schedule.num_batches(0)
    expected = [docs.pack_rows(schedule.rows_plan(0, j, 0, 16), None) for j in range(batches)]
    filled = []
    real_pack_rows = ArrayDocuments.pack_rows

    def pack_rows(self, plan, rows, **kw):
        filled.append(plan)
        return real_pack_rows(self, plan, rows, **kw)

    def no_batch_plan(*args):
        raise AssertionError("a plan of the batch's rows was made to fill it")

    monkeypatch.setattr(ArrayDocuments, "pack_rows", pack_rows)
    monkeypatch.setattr(streaming_schedule, "plan_runs", no_batch_plan)
    starts = schedule.window_starts(0)
    spans = 0
    for j in range(batches):
        filled.clear()
        got = schedule.read(0, j, 0, 16)
        first, last = 16 * j, min(16 * j + 16, int(starts[-1])) - 1
        windows = range(int(np.searchsorted(starts, first, "right")) - 1, int(np.searchsorted(starts, last, "right")))
        assert len(filled) == len(windows) and all(p is schedule.window_plan(0, w)[0] for p, w in zip(filled, windows))
        spans += len(windows) > 1
        n = expected[j]["tokens"].shape[0]
        for k, want in expected[j].items():
            assert got[k].shape == (16, 128)
            np.testing.assert_array_equal(got[k][:n], want, err_msg=k)
            np.testing.assert_array_equal(got[k][n:], 0, err_msg=k)
    assert batches > 10 and spans > 5 and expected[-1]["tokens"].shape[0] < 16  # batches across windows; a short last


def schedules(docs, batch):
    order = DocumentOrder(len(docs), "block", seed=2, io_block_size=4, window_blocks=4)
    rows = FeistelShuffleMapDataset(PackedRowsMapDataset(docs, 128), seed=2)
    return {
        "planned": PlannedSchedule(rows, batch, drop_remainder=False, ctx=128),
        "streaming": StreamingSchedule(
            docs, order, PackOptions(128), window=30, batch_size=batch, drop_remainder=False
        ),
        "bucketing": BucketSchedule(docs, order, boundaries=[32, 128], batch_sizes=[batch, batch // 2]),
    }


@pytest.mark.parametrize("mode", ["planned", "streaming", "bucketing"])
def test_hosts_read_only_their_own_rows(mode):
    """Four hosts together read exactly the tokens one host reads: no host reads another's rows."""
    base = ArrayDocuments.from_list(random_docs(200, seed=8, mean_log=3.6, max_len=400))
    one = CountingDocuments(base)
    whole = list(HostBatchesMapDataset(schedules(one, 8)[mode]).to_iter_dataset(NO_THREADS))
    hosts = [CountingDocuments(base) for _ in range(4)]
    shares = [
        list(HostBatchesMapDataset(schedules(h, 8)[mode], index=i, count=4).to_iter_dataset(NO_THREADS))
        for i, h in enumerate(hosts)
    ]
    assert one.tokens_read == int(base.lengths().sum())  # drop_remainder false: every token, once
    assert sum(h.tokens_read for h in hosts) == one.tokens_read
    assert max(h.tokens_read for h in hosts) < one.tokens_read / 2
    for j, batch in enumerate(whole):
        for k in batch:
            np.testing.assert_array_equal(np.concatenate([s[j][k] for s in shares]), batch[k])


@pytest.mark.parametrize("counted", [1, 3, 4096])
@pytest.mark.parametrize("overflow", ["split", "truncate"])
def test_streaming_window_starts_are_the_windows_planned(monkeypatch, counted, overflow):
    """Each window's rows, counted ``counted`` windows a kernel call (split) or planned (truncate), are the rows of
    its own plan (what rows_plan reads): the epoch's row and batch counts are the packer's."""
    monkeypatch.setattr(streaming_schedule, "WINDOWS_COUNTED", counted)
    docs = ArrayDocuments.from_list(random_docs(150, seed=9, mean_log=3.8, max_len=400))
    options = PackOptions(128, overflow=overflow)
    schedule = StreamingSchedule(
        docs, DocumentOrder(len(docs), "full", seed=4), options, window=16, batch_size=4, drop_remainder=True
    )
    rows = [
        streaming_schedule.plan_window(schedule.lengths, schedule._window_docs(1, w), options)[0].num_rows
        for w in range(schedule.num_windows)
    ]
    np.testing.assert_array_equal(schedule.window_starts(1), np.concatenate(([0], np.cumsum(rows))))


def test_epochs_and_forever():
    """Streaming epochs differ in length; global batch j is found across them, and num_epochs None never ends."""
    docs = ArrayDocuments.from_list(random_docs(150, seed=9, mean_log=3.8, max_len=400))
    order = DocumentOrder(len(docs), "full", seed=4)
    schedule = StreamingSchedule(docs, order, PackOptions(128), window=16, batch_size=4, drop_remainder=True)
    two = HostBatchesMapDataset(schedule, num_epochs=2)
    assert len(two) == schedule.num_batches(0) + schedule.num_batches(1)
    forever = HostBatchesMapDataset(schedule, num_epochs=None)
    for j in (0, len(two) - 1, len(two) + 5):
        epoch, i = forever.locate(j)
        assert 0 <= i < schedule.num_batches(epoch)
        np.testing.assert_array_equal(forever[j]["tokens"], schedule.read(epoch, i, 0, 4)["tokens"])
    with pytest.raises(IndexError):
        two[len(two)]


HANG_S = 60  # only a bound for a thread that would otherwise wait for ever: no assertion on time


class SlowEpochs:
    """A schedule recording which thread counted each epoch. With ``release``, an epoch after the first is counted
    only once ``release`` is set (``counting`` is set when such a count starts): a batch that waited for that count
    would wait until the test lets it go, whatever the machine's speed."""

    def __init__(self, batches: int, release: threading.Event | None = None):
        self.batches, self.release = batches, release
        self.row_counts, self.shapes = (4,), [(4, 8)]
        self.counted: dict[int, str] = {}
        self.counting = threading.Event()
        self._lock = threading.Lock()

    def num_batches(self, epoch: int) -> int:
        with self._lock:
            if epoch not in self.counted:
                if epoch > 0 and self.release is not None:
                    self.counting.set()
                    self.release.wait(HANG_S)
                self.counted[epoch] = threading.current_thread().name
        return self.batches

    def batch_rows(self, epoch: int, j: int) -> int:
        return 4

    def read(self, epoch: int, j: int, lo: int, hi: int) -> dict[str, np.ndarray]:
        return {"tokens": np.full((hi - lo, 8), epoch * 100 + j, np.int32)}


def test_the_next_epoch_is_counted_in_the_background_from_mid_epoch():
    """Past the middle of an epoch the next one is counted in a thread of its own (its plan ready before its first
    batch is asked for), once; a batch of an epoch already counted never waits for an epoch being counted. The
    count of epoch 1 is held until the batches are in hand: an order of events, not a time."""
    release = threading.Event()
    schedule = SlowEpochs(batches=10, release=release)
    host = HostBatchesMapDataset(schedule, num_epochs=None)
    for j in range(5):
        assert host[j]["tokens"][0, 0] == j
    assert not schedule.counting.is_set()  # before the middle: nothing counted ahead
    taken: list[int] = []

    def take() -> None:  # the middle: epoch 1 counted in the background, these batches not held by it
        taken.extend(int(host[j]["tokens"][0, 0]) for j in (5, 6))

    taker = threading.Thread(target=take, daemon=True)
    taker.start()
    taker.join(HANG_S)  # a batch held by the count would wait here for ever (the count waits for the test)
    held = 1 not in schedule.counted
    release.set()
    assert taken == [5, 6] and held
    assert schedule.counting.wait(HANG_S)  # the count started without a batch of epoch 1 asked for
    deadline = time.monotonic() + HANG_S
    while 1 not in schedule.counted and time.monotonic() < deadline:
        time.sleep(0.01)
    assert schedule.counted[1] == "datatools-plan-ahead"
    assert host[10]["tokens"][0, 0] == 100  # epoch 1, batch 0: its count was ready
    assert set(schedule.counted) == {0, 1}


def test_a_bounded_run_counts_no_epoch_past_its_last():
    schedule = SlowEpochs(batches=4)
    host = HostBatchesMapDataset(schedule, num_epochs=1)
    assert [int(host[j]["tokens"][0, 0]) for j in range(4)] == [0, 1, 2, 3]
    time.sleep(0.05)
    assert set(schedule.counted) == {0}


def test_an_epoch_cache_drops_the_least_recently_used():
    """Planning the next epoch ahead must not drop the current one: with ``keep`` 3, epochs 1, 2 and 3 stay held
    after 0 .. 3 are asked for (and 2 again), each computed once (dropping all when full planned the current epoch
    again: two epochs in nine at the local benchmark's shape)."""
    from datatools.grain.schedule import EpochCache

    computed: list[int] = []
    cache = EpochCache(keep=3)
    for epoch in (0, 1, 2, 2, 3, 2, 1):
        assert cache.get(epoch, lambda e: computed.append(e) or e * 10) == epoch * 10
    assert computed == [0, 1, 2, 3]
    assert cache.held() == [1, 2, 3]


def test_a_lanes_run_plans_each_epoch_once(monkeypatch):
    """A host's batches over five epochs, the next epoch planned ahead in its thread from each epoch's middle:
    every epoch's lanes are planned once (counted), and the batches are the same as a schedule asked afresh."""
    from datatools.grain.lane_schedule import LaneLayout, LaneSchedule

    lengths = np.random.default_rng(9).integers(1, 200, 1500)
    docs = ArrayDocuments(np.arange(int(lengths.sum()), dtype=np.int32), np.concatenate(([0], np.cumsum(lengths))))
    planned: list[int] = []
    plan_epoch = LaneSchedule._plan_epoch
    watched: LaneSchedule | None = None  # the schedule whose plans are counted

    def counted(self, epoch):
        if self is watched:
            planned.append(epoch)
        return plan_epoch(self, epoch)

    def schedule() -> LaneSchedule:
        layout = LaneLayout(io_block_size=8, period=2)
        return LaneSchedule(docs, PackOptions(256), layout, window=64, batch_size=4, drop_remainder=True, seed=2)

    monkeypatch.setattr(LaneSchedule, "_plan_epoch", counted)
    fresh = HostBatchesMapDataset(schedule(), num_epochs=None)
    ends = [fresh._end_of(epoch) for epoch in range(5)]
    watched = schedule()
    host = HostBatchesMapDataset(watched, num_epochs=None)
    batches = []
    for j in range(ends[-1]):
        batches.append(host[j]["tokens"])
        for thread in threading.enumerate():  # the plan ahead done before the next batch: the order that re-planned
            if thread.name == "datatools-plan-ahead":
                thread.join(HANG_S)
    assert sorted(planned) == sorted(set(planned)) and set(range(5)) <= set(planned)
    for j in (0, ends[1] + 3, ends[3] - 1, ends[4] - 1):
        np.testing.assert_array_equal(batches[j], fresh[j]["tokens"])
