"""Reading a token store from a bucket behind a slow link (issue 31): the sharded layout, lanes, read-ahead, stalls.

Every test here reads from moto's S3 server through :class:`~datatools.testing.slow_proxy.SlowProxy` (a few ms
per request), so the reads really are concurrent requests with latency, counted at the proxy.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datatools.io.formats.store as store_mod
from datatools.cli import main
from datatools.io.formats.store import TokenStore, write_store
from datatools.io.sources.documents import StoreDocuments
from datatools.io.storage import read_stats
from datatools.kernels.packing import PackOptions
from datatools.pipeline import build_canonical
from datatools.pipeline.config import parse_config

CTX = 512


def lengths_of(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(np.log(120), 1.0, n), 1, 3 * CTX).astype(np.int64)


def write(path, lengths: np.ndarray, seed: int = 1) -> np.ndarray:
    """A store of documents of ``lengths`` (random ids below 1000) at ``path``; its flat tokens."""
    tokens = np.random.default_rng(seed).integers(0, 1000, int(lengths.sum()), dtype=np.uint16)
    write_store(
        path,
        [(tokens, lengths)],
        num_tokens=int(lengths.sum()),
        num_documents=int(lengths.shape[0]),
        dtype=np.dtype(np.uint16),
        manifest={"vocab_size": 1000},
    )
    return tokens


@pytest.fixture()
def small_objects(monkeypatch):
    """Stored objects of 4,096 tokens in inner chunks of 256, so a small store has many of both."""
    monkeypatch.setattr(store_mod, "TOKEN_CHUNK", 4096)
    monkeypatch.setattr(store_mod, "READ_CHUNK", 256)


def config(url: str, **changes) -> dict:
    cfg = {
        "source": {"path": url},
        "shuffle": {"kind": "block", "io_block_size": 8, "window_blocks": 16},
        "packing": {"mode": "streaming", "ctx": CTX, "window": 64},
        "batch_size": 8,
        "drop_remainder": False,
        "workers": 0,
        "format": "datatools",
        "seed": 3,
    }
    for key, value in changes.items():
        cfg[key] = value
    return cfg


def all_batches(cfg: dict, documents=None) -> list[dict]:
    built = build_canonical(parse_config(cfg), documents)
    return [{k: np.asarray(v) for k, v in b.items()} for b in built.dataset]


def same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b))


def test_batches_from_the_sharded_layout_equal_the_old_layout_and_a_local_store(
    tmp_path, slow_s3, small_objects, monkeypatch
):
    bucket, proxy = slow_s3
    lengths = lengths_of(600, seed=0)
    write(tmp_path / "local", lengths)
    write(f"{bucket}/new", lengths)
    inner = store_mod.READ_CHUNK
    monkeypatch.setattr(store_mod, "READ_CHUNK", 1 << 30)  # the layout before shards: one zstd chunk per object
    write(f"{bucket}/old", lengths)  # (as version 3 writes a store smaller than an inner chunk; version 2 is refused)
    monkeypatch.setattr(store_mod, "READ_CHUNK", inner)
    new, old = TokenStore(f"{bucket}/new"), TokenStore(f"{bucket}/old")
    assert new.version == 3 and new.sharded and new.read_granularity == 256 and new.object_tokens == 4096
    assert not old.sharded and old.read_granularity == 4096
    for changes in (
        {},  # block shuffle, streaming packing in lanes
        {"shard": {"index": 1, "count": 2}},
        {"shuffle": {"kind": "full"}, "packing": {"mode": "planned", "ctx": CTX}},
        {"packing": {"mode": "streaming", "ctx": CTX, "window": 64, "read_order": "window"}},
    ):
        local = all_batches(config(str(tmp_path / "local"), **changes))
        proxy.reset_stats()
        assert same(all_batches(config(f"{bucket}/new", **changes)), local), changes
        assert proxy.stats().requests > 0  # read through the proxy
        assert same(all_batches(config(f"{bucket}/old", **changes)), local), changes


def test_lanes_give_every_token_once_per_epoch_and_each_host_its_own_blocks(tmp_path):
    lengths = lengths_of(2000, seed=4)
    tokens = write(tmp_path / "s", lengths)
    cfg = config(str(tmp_path / "s"), num_epochs=2, batch_size=8)
    cfg["packing"]["lane_period"] = 2
    one = all_batches(cfg)
    built = build_canonical(parse_config(cfg))
    per_epoch = built.schedule.num_batches(0)
    for epoch in range(2):
        got = np.concatenate(
            [b["tokens"][b["segment_ids"] > 0] for b in one[epoch * per_epoch : (epoch + 1) * per_epoch]]
        )
        assert np.array_equal(np.sort(got), np.sort(tokens.astype(np.int32)))  # every token once per epoch
    blocks = []
    for host in range(4):
        cfg_h = {**cfg, "shard": {"index": host, "count": 4}}
        mine = all_batches(cfg_h)
        assert same(
            [{k: v for k, v in b.items()} for b in mine],
            [{k: v[2 * host : 2 * host + 2] for k, v in b.items()} for b in one],
        )
        schedule = build_canonical(parse_config(cfg_h)).schedule
        docs = np.concatenate(
            [schedule.pieces(0, j, 2 * host, 2 * host + 2)[0] for j in range(schedule.regular_batches(0))]
        )
        blocks.append(set((docs // 8).tolist()))
    for a in range(4):
        for b in range(a + 1, 4):
            assert not blocks[a] & blocks[b]  # no io block read by two hosts (before the epoch's last batches)


def test_read_ahead_stays_within_its_budget(tmp_path, slow_s3, small_objects):
    """The reader's slab is its budget, allocated once (a hard cap: it never grows), read-ahead at most half of it;
    the batches equal a local store's."""
    bucket, proxy = slow_s3
    lengths = lengths_of(1500, seed=2)
    write(tmp_path / "local", lengths)
    write(f"{bucket}/s", lengths)
    budget = 40 * 256 * 2  # 40 inner chunks of 256 uint16 tokens
    docs = StoreDocuments(TokenStore(f"{bucket}/s"), cache_bytes=budget)
    before = read_stats.snapshot()
    got = all_batches(config(f"{bucket}/s"), documents=docs)
    counted = read_stats.subtract(read_stats.snapshot(), before)
    assert same(got, all_batches(config(str(tmp_path / "local"))))
    reader = docs.reader
    assert counted.prefetched_requests > 0  # batches were read ahead
    assert 0 < reader.peak_ahead_bytes <= 3 * budget // 4  # the next batches' half, and a quarter further ahead
    assert reader._slab.nbytes == reader.held_bytes <= budget  # measured on the array itself, after the run
    assert counted.bytes_fetched >= counted.bytes_delivered > 0


def late_reads_of(cfg: dict, batches: int) -> read_stats.ReadCounters:
    """The read counters of the first ``batches`` batches of ``cfg``, taken one by one."""
    built = build_canonical(parse_config(cfg))
    before = read_stats.snapshot()
    it = iter(built.dataset)
    for _ in range(batches):
        next(it)
    it.close()
    return read_stats.subtract(read_stats.snapshot(), before)


@pytest.mark.parametrize("shape", ["host 0 of 4, lanes", "1 host, window order", "full shuffle, planned"])
def test_no_read_is_late(slow_s3, small_objects, shape, monkeypatch):
    """Every extent a batch reads was asked for by the read-ahead before the batch was built (``late_reads`` 0),
    whatever the shuffle and the host's share; with the read-ahead switched off, the same count sees every read
    late (the count has the power to fail)."""
    bucket, proxy = slow_s3
    proxy.latency_s = 0.02
    write(f"{bucket}/s", lengths_of(1500, seed=9))
    changes: dict = {"num_epochs": None}
    if shape.startswith("host 0 of 4"):
        changes["shard"] = {"index": 0, "count": 4}
    elif shape.startswith("1 host, window"):
        changes["packing"] = {"mode": "streaming", "ctx": CTX, "window": 64, "read_order": "window"}
    else:
        changes["packing"] = {"ctx": CTX}
        changes["shuffle"] = {"kind": "full"}
    cfg = config(f"{bucket}/s", **changes)
    counted = late_reads_of(cfg, 30)
    assert counted.requests > 0 and counted.late_reads == 0
    assert counted.prefetched_requests > 0
    monkeypatch.setattr(StoreDocuments, "reads_ahead", property(lambda self: False))  # read-ahead off
    off = late_reads_of(cfg, 30)
    assert off.late_reads > 0 and off.prefetched_requests == 0


KILLED_CHILD = r"""
import json, sys, time
from datatools.pipeline import build_canonical
from datatools.pipeline.config import parse_config
built = build_canonical(parse_config(json.loads(sys.argv[1])))
it = iter(built.dataset)
for _ in range(3):
    next(it)
open(sys.argv[2], "w").write(json.dumps(it.get_state()))
for _ in range(1000):  # reads ahead, until the parent kills it
    next(it)
"""


def test_a_kill_during_read_ahead_loses_nothing(tmp_path, slow_s3):
    bucket, proxy = slow_s3
    proxy.latency_s = 0.05  # reads are in flight when the kill comes
    lengths = lengths_of(3000, seed=6)
    write(f"{bucket}/s", lengths)
    cfg = config(f"{bucket}/s", num_epochs=None)
    state = tmp_path / "state.json"
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_CHILD, json.dumps(cfg), str(state)], env={**os.environ}, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while not state.exists() or not state.read_text():
        assert child.poll() is None and time.monotonic() < deadline, "the child ended before saving its state"
        time.sleep(0.05)
    time.sleep(0.3)  # in the middle of reading ahead
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    built = build_canonical(parse_config(cfg))
    resumed = iter(built.dataset)
    resumed.set_state(json.loads(state.read_text()))
    straight = iter(build_canonical(parse_config(cfg)).dataset)
    for _ in range(3):
        next(straight)
    for _ in range(4):
        a, b = next(resumed), next(straight)
        assert all(np.array_equal(a[k], b[k]) for k in a)
    assert TokenStore(f"{bucket}/s").num_tokens == int(lengths.sum())  # the store is untouched


def test_the_pipeline_reports_its_waits_and_reads(tmp_path, slow_s3, small_objects, capsys):
    bucket, proxy = slow_s3
    write(f"{bucket}/s", lengths_of(1500, seed=8))
    cfg = tmp_path / "p.yaml"
    cfg.write_text(json.dumps(config(f"{bucket}/s")))
    out = tmp_path / "r.json"
    assert main(["pipeline", str(cfg), "--steps", "6", "--json", str(out), "--step-time", "0.05"]) == 0
    loader = json.loads(out.read_text())["loader"]
    assert loader["steps"] == 6
    assert loader["requests"] > 0 and loader["requests_per_step"] > 0
    assert loader["bytes_fetched"] >= loader["bytes_delivered"] > 0
    assert loader["fetched_per_delivered"] >= 1
    assert 0 <= loader["wait_p50_ms"] <= loader["wait_p99_ms"] <= loader["wait_max_ms"]
    assert loader["late_reads"] == 0  # every read was issued ahead of its batch
    assert loader["request_latency_p50_ms"] >= 0.8 * 5  # every request paid the proxy's 5 ms
    printed = " ".join(capsys.readouterr().out.split())
    assert "fetched / delivered" in printed
    assert "fetched: the stored chunks read (whole inner chunks, read-ahead included)" in printed  # says its units


def test_a_store_sent_to_a_worker_carries_its_offsets(slow_s3, small_objects):
    """A Grain worker gets the store pickled: the offsets the parent read come with it (from a bucket, reading them
    again made every worker's first batch wait ~1 s at +100 ms); the token arrays are opened again there."""
    import pickle

    bucket, proxy = slow_s3
    lengths = lengths_of(300, seed=4)
    tokens = write(f"{bucket}/s", lengths)
    store = TokenStore(f"{bucket}/s")
    offsets = store.offsets
    proxy.reset_stats()
    sent = pickle.loads(pickle.dumps(store))
    np.testing.assert_array_equal(sent.offsets, offsets)
    assert proxy.stats().requests == 0  # nothing read again
    np.testing.assert_array_equal(sent.read(10, 500), tokens[10:500])
    assert pickle.loads(pickle.dumps(TokenStore(f"{bucket}/s")))._offsets is None  # not read: not sent


def test_a_store_in_a_bucket_reads_each_run_of_inner_chunks_with_one_request(slow_s3, small_objects):
    """Every shard's index comes from ``shard_index.bin``, read with the offsets and sent to workers with them: a
    read of inner chunks in a shard never read before is one ranged GET (tensorstore fetched the shard's index
    first: a round trip more, in every process)."""
    import pickle

    bucket, proxy = slow_s3
    lengths = lengths_of(600, seed=5)
    tokens = write(f"{bucket}/s", lengths)
    store = TokenStore(f"{bucket}/s")
    assert store.ranged_reads and store.offsets.shape[0] == 601
    sent = pickle.loads(pickle.dumps(store))
    assert sent._shard_table is not None  # noqa: SLF001 -- read with the offsets, carried
    np.testing.assert_array_equal(sent.read(0, 100), tokens[:100])  # opens the array (its zarr.json)
    proxy.reset_stats()
    for k in range(1, 4):  # shards never read: inner chunks 2-5 of shard k, back to back
        begin = k * 4096 + 2 * 256 + 17
        np.testing.assert_array_equal(sent.read(begin, begin + 3 * 256), tokens[begin : begin + 3 * 256])
        assert proxy.stats().requests == k
    assert proxy.stats().bytes_down < 3 * 4 * 2 * 256 * 2  # four inner chunks of each, not whole shards


def test_a_lane_schedule_sent_to_a_worker_carries_its_hosts_lanes_first_window_plans():
    """Planning an epoch counts every lane's windows' rows (no plan made); sent to a Grain worker, the schedule
    plans each lane's first window once and carries it, and the worker's first batch then issues its reads at once
    (no numba start-up and window plans first: ~0.6 s at the start of every worker). What it carries is what it
    would plan itself."""
    import pickle

    from datatools.grain.lane_schedule import LaneLayout, LaneSchedule
    from datatools.io.sources.documents import ArrayDocuments

    lengths = lengths_of(3000, seed=6)
    docs = ArrayDocuments(np.zeros(int(lengths.sum()), np.int32), np.concatenate(([0], np.cumsum(lengths))))

    def schedule() -> LaneSchedule:
        return LaneSchedule(
            docs,
            PackOptions(CTX),
            LaneLayout(io_block_size=8, period=2),
            window=64,
            batch_size=8,
            drop_remainder=False,
            seed=3,
        )

    parent = schedule()
    parent.num_batches(0)  # plans epoch 0, as the parent's build does
    worker = pickle.loads(pickle.dumps(parent))
    assert sorted(worker._plans) == [(0, lane, 0) for lane in range(parent.lanes)]
    fresh = schedule()
    for lane in range(parent.lanes):
        got_plan, got_order = worker._plans[(0, lane, 0)]
        want_plan, want_order = fresh.window_plan(0, lane, 0)
        np.testing.assert_array_equal(got_order, want_order)
        for field in ("doc", "start", "length", "row_splits"):
            np.testing.assert_array_equal(getattr(got_plan, field), getattr(want_plan, field))
    for j in range(4):
        for a, b in zip(worker.pieces(0, j, 0, 8), fresh.pieces(0, j, 0, 8)):
            np.testing.assert_array_equal(a, b)

    # a host's dataset says which host reads it: only its lanes' plans go (host 1 of 4: rows 2-3, lanes 4-7), and
    # a second host's dataset over the same schedule widens them; the batches are the same as a fresh schedule's
    from datatools.grain.host_batches import HostBatchesMapDataset

    host = schedule()
    HostBatchesMapDataset(host, index=1, count=4)
    sent = pickle.loads(pickle.dumps(host))
    assert sorted(sent._plans) == [(0, lane, 0) for lane in range(4, 8)]
    for j in range(4):
        for a, b in zip(sent.pieces(0, j, 2, 4), fresh.pieces(0, j, 2, 4)):
            np.testing.assert_array_equal(a, b)
    HostBatchesMapDataset(host, index=3, count=4)
    assert sorted(pickle.loads(pickle.dumps(host))._plans) == [(0, lane, 0) for lane in range(4, 16)]


def test_lanes_read_ahead_whole_windows_only_for_the_rows_of_their_own_lanes():
    """Before the epoch's last batches a batch's rows come one from each of its lanes, and reading ahead a lane's
    whole window (its io blocks once, in one request each) serves the next ~2 * window batches; the last batches
    take the lanes' leftover rows (a lane's may be split between two hosts): ahead, only their pieces (whole windows
    there read ~4x the bytes the epoch's tail used when it was dealt row by row, and steps waited for them, issue
    31)."""
    from datatools.grain.lane_schedule import LaneLayout, LaneSchedule
    from datatools.io.sources.documents import ArrayDocuments

    lengths = lengths_of(3000, seed=7)
    docs = ArrayDocuments(np.zeros(int(lengths.sum()), np.int32), np.concatenate(([0], np.cumsum(lengths))))
    schedule = LaneSchedule(
        docs,
        PackOptions(CTX),
        LaneLayout(io_block_size=8, period=2),
        window=64,
        batch_size=8,
        drop_remainder=False,
        seed=5,
    )
    regular, batches = schedule.regular_batches(0), schedule.num_batches(0)
    assert 0 < regular < batches  # the schedule has a tail
    for j in range(batches):
        for lo, hi in ((0, 4), (4, 8)):  # host 0 and host 1 of 2
            doc, start, length = schedule.pieces(0, j, lo, hi)
            ahead = schedule.ahead_pieces(0, j, lo, hi)
            if j >= regular:
                for a, b in zip(ahead, (doc, start, length)):
                    np.testing.assert_array_equal(a, b)
            else:  # whole documents of the rows' windows: every piece inside one of them
                assert set(doc.tolist()) <= set(ahead[0].tolist())
                np.testing.assert_array_equal(ahead[2], lengths[ahead[0]])


@pytest.mark.parametrize("seed", [0, 3])
def test_a_hosts_tail_batches_read_about_its_own_lanes_blocks(seed):
    """The epoch's tail is dealt column by column: each row position of the tail batches takes a run of the
    lane-ordered leftover rows, so host h's positions read the leftovers of a run of lanes, about its own (row by
    row, each host's tail rows came from every host's lanes: ~3/4 of the io blocks its tail read were other
    hosts', 4 hosts). Counted from the io blocks the tail batches' pieces read: each host's lanes are a run, in
    host order, a lane read by two hosts only at a run's edge, and at most a quarter of the blocks other hosts'."""
    from datatools.grain.lane_schedule import LaneLayout, LaneSchedule
    from datatools.io.sources.documents import ArrayDocuments
    from datatools.kernels.shuffle import lane_blocks

    lengths = np.clip(np.random.default_rng(seed).lognormal(4, 1, 12000), 1, 256).astype(np.int64)
    docs = ArrayDocuments(np.zeros(int(lengths.sum()), np.int32), np.concatenate(([0], np.cumsum(lengths))))
    hosts, share, period, io_block = 4, 8, 2, 8
    layout = LaneLayout(io_block_size=io_block, period=period)
    schedule = LaneSchedule(
        docs, PackOptions(128), layout, window=64, batch_size=hosts * share, drop_remainder=True, seed=seed
    )
    regular, batches = schedule.regular_batches(0), schedule.num_batches(0)
    assert batches - regular >= 8  # several full tail batches
    lane_of = np.zeros(schedule.num_blocks, np.int64)
    for lane, blocks in enumerate(lane_blocks(schedule.num_blocks, schedule.lanes, seed=seed, epoch=0)):
        lane_of[blocks] = lane
    runs, foreign, read = [], 0, 0
    for h in range(hosts):
        doc = np.concatenate([schedule.pieces(0, j, h * share, (h + 1) * share)[0] for j in range(regular, batches)])
        lanes = lane_of[np.unique(doc // io_block)]
        foreign += int(np.count_nonzero(lanes // (share * period) != h))
        read += lanes.shape[0]
        runs.append(np.unique(lanes))
    assert all(runs[h].max() <= runs[h + 1].min() for h in range(hosts - 1))  # a run each, in host order
    assert np.bincount(np.concatenate(runs)).max() <= 2
    assert 4 * foreign <= read, (foreign, read)


@pytest.mark.parametrize("seed", [0, 3])
def test_an_epochs_first_batches_read_little_more_than_they_deliver(seed):
    """Every lane begins the epoch at once and its read-ahead reads a window whole, so each lane's first windows are
    short (a quarter, then a half window: ``RAMP``): over the first 30, 45 and 60 batches (read ahead 8 more), the
    documents host 0 of 4 reads hold at most twice the tokens its batches deliver (whole staggered first windows:
    4.2-4.5x over 30, 3.0 over 45; a quarter window alone: 2.7-3.1 over 45). The users' shape scaled: a window of
    1,024 documents of ~1/10 of a row, two lanes per row position, each lane ~2,300 documents."""
    from datatools.grain.lane_schedule import LaneLayout, LaneSchedule
    from datatools.io.sources.documents import ArrayDocuments

    lengths = np.clip(np.random.default_rng(seed).lognormal(4, 1, 150_000), 1, 1024).astype(np.int64)
    docs = ArrayDocuments(np.zeros(int(lengths.sum()), np.int16), np.concatenate(([0], np.cumsum(lengths))))
    share = 8  # host 0 of 4: rows [0, 8) of batches of 32
    schedule = LaneSchedule(
        docs,
        PackOptions(1024),
        LaneLayout(io_block_size=16, period=2),
        window=1024,
        batch_size=4 * share,
        drop_remainder=True,
        seed=seed,
    )
    for batches in (30, 45, 60):
        read, delivered = np.zeros(lengths.shape[0], bool), 0
        for k in range(batches + 8):
            for doc in (schedule.pieces(0, k, 0, share)[0], schedule.ahead_pieces(0, k, 0, share)[0]):
                read[doc] = True
            if k < batches:
                delivered += int(schedule.pieces(0, k, 0, share)[2].sum())
        assert lengths[read].sum() <= 2 * delivered, (batches, lengths[read].sum() / delivered)


@pytest.mark.parametrize("seed", [0, 3])
def test_an_epochs_first_batches_read_about_one_chunk_a_lane(tmp_path, monkeypatch, seed):
    """Inner chunks larger than a lane's first window (a Levanter cache's 1 MiB chunks under blocks of ~2 chunks,
    first windows of ~0.76 chunk): a lane whose first window would cross a chunk's edge begins the epoch at that
    edge, so its first window lies in one chunk. Counted in chunks of a local store, as a bucket fetches them: the
    chunks host 0 of 4 reads for the first 30 and 60 batches (read ahead 8 more) hold at most 2.5x the tokens its
    batches deliver (one chunk a lane: ~2.1x); every lane beginning at its first block's first document reads
    4.4x over 30 (the same count, the rotation switched off, fails)."""
    from datatools.grain.lane_schedule import LaneLayout, LaneSchedule

    lengths = np.clip(np.random.default_rng(seed).lognormal(np.log(30), 1, 70_000), 1, 512).astype(np.int64)
    write(tmp_path / "s", lengths)
    docs = StoreDocuments(TokenStore(tmp_path / "s"))
    chunk, offsets, share = docs.store.read_granularity, docs.store.offsets, 4
    assert 0.6 * chunk < 256 * lengths.mean() < chunk < 674 * lengths.mean() / 1.5  # the Levanter row's proportions

    def fetched_per_delivered(batches: int) -> float:
        schedule = LaneSchedule(
            docs, PackOptions(512), LaneLayout(674, 2), window=1024, batch_size=4 * share, drop_remainder=True
        )
        read, delivered = np.zeros(-(-int(offsets[-1]) // chunk), bool), 0
        for k in range(batches + 8):
            for doc, start, n in (schedule.pieces(0, k, 0, share), schedule.ahead_pieces(0, k, 0, share)):
                begin = offsets[doc] + start
                for a, b in zip(begin // chunk, (begin + np.maximum(n, 1) - 1) // chunk + 1):
                    read[a:b] = True
            if k < batches:
                delivered += int(schedule.pieces(0, k, 0, share)[2].sum())
        return int(read.sum()) * chunk / delivered

    for batches in (30, 60):
        assert fetched_per_delivered(batches) <= 2.5, batches
    monkeypatch.setattr(LaneSchedule, "_starts", lambda self, blocks, window: np.zeros(len(blocks), np.int64))
    assert fetched_per_delivered(30) > 2.5  # the count has power: every lane at its first block's first document


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    algorithm=st.sampled_from(["best_fit_decreasing", "first_fit_decreasing", "next_fit", "best_fit", "concat_split"]),
    max_segments=st.sampled_from([None, 3]),
    align=st.sampled_from([1, 1, 64]),
)
def test_lane_row_counts_counted_equal_the_windows_plans(seed, algorithm, max_segments, align):
    """An epoch's lane plan counts the rows of every window with the packer's counting kernel, all windows in one
    call (no plan made; options the counting kernels do not cover, align > 1, are planned): the row counts are
    those of the windows' plans, row for row."""
    from datatools.grain.lane_schedule import LaneLayout, LaneSchedule
    from datatools.grain.streaming_schedule import plan_window
    from datatools.io.sources.documents import ArrayDocuments

    if algorithm == "concat_split" and max_segments is not None:
        max_segments = None
    lengths = lengths_of(1500, seed=seed)
    docs = ArrayDocuments(np.zeros(int(lengths.sum()), np.int32), np.concatenate(([0], np.cumsum(lengths))))
    options = PackOptions(CTX, algorithm, max_segments, align)
    schedule = LaneSchedule(
        docs, options, LaneLayout(io_block_size=8), window=64, batch_size=4, drop_remainder=False, seed=seed
    )
    e = schedule._epoch(0)  # noqa: SLF001 -- the lane plan itself
    for lane in range(schedule.lanes):
        cuts = e.cuts[lane]
        planned = [
            plan_window(schedule.lengths, schedule._lane_docs(e, lane, int(a), int(b)), options)[0].num_rows
            for a, b in zip(cuts[:-1], cuts[1:])
        ]
        np.testing.assert_array_equal(np.diff(e.row_starts[lane]), planned)


def test_a_block_shuffle_of_blocks_under_half_a_read_says_the_block_size_that_reads_whole_chunks(slow_s3):
    """Inner chunks of 4,096 tokens (this store's default read) under blocks of 2 documents (~280 tokens): the
    pipeline warns, naming the chunk and a block size that reads whole chunks; blocks of that size do not."""
    bucket, _ = slow_s3
    lengths = lengths_of(400, seed=4)
    write(f"{bucket}/w", lengths)
    chunk = TokenStore(f"{bucket}/w").read_granularity
    with pytest.warns(UserWarning, match=rf"io_block_size 2 documents .* \({chunk:,} tokens, its inner chunk\)"):
        build_canonical(parse_config(config(f"{bucket}/w", shuffle={"kind": "block", "io_block_size": 2})))
    fit = -(-chunk // int(lengths.mean()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_canonical(parse_config(config(f"{bucket}/w", shuffle={"kind": "block", "io_block_size": fit})))
