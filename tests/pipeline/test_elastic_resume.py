"""Many hosts and elastic resume, hosts run in one process (N pipelines with different shard indices).

Documents carry their id in every token (token = id + 1; padding 0) and canonical batches carry each piece's
offset in its document (``positions``), so every delivered token slot names (document, offset): exactly-once
is asserted document by document, token by token.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datatools.grain.portable_state import host_state
from datatools.io.sources.documents import ArrayDocuments
from datatools.kernels.attention_blocks import EMPTY, block_structure
from datatools.pipeline import ShardConfig, build_canonical, parse_config

MODES = {
    "planned": {"packing": {"ctx": 128}},
    "streaming": {"packing": {"ctx": 128, "mode": "streaming", "window": 40}},
    "bucketing": {"bucketing": {"boundaries": [32, 64, 128]}},
}
SHUFFLES = {"full": {"kind": "full"}, "block": {"kind": "block", "io_block_size": 4, "window_blocks": 8}}
BATCH = 12  # divides over 1, 2, 3 and 4 hosts


def id_documents(lengths) -> ArrayDocuments:
    """Document i is ``len_i`` tokens, all ``i + 1``."""
    lengths = np.asarray(lengths, np.int64)
    return ArrayDocuments(
        np.repeat(np.arange(1, lengths.shape[0] + 1, dtype=np.int32), lengths),
        np.concatenate(([0], np.cumsum(lengths))),
    )


@pytest.fixture(scope="module")
def docs():
    rng = np.random.default_rng(7)
    return id_documents(np.clip(rng.lognormal(3.5, 0.9, 500), 1, 300).astype(np.int64))


def cfg(mode, shuffle, hosts=1, index=0, **extra):
    return parse_config(
        {
            "source": {"path": "ids"},
            "batch_size": BATCH,
            "seed": 9,
            "drop_remainder": False,
            "shuffle": SHUFFLES[shuffle],
            **MODES[mode],
            "shard": {"index": index, "count": hosts},
            **extra,
        }
    )


def delivered(batches, docs) -> np.ndarray:
    """How many times each token of the data was delivered (int64, one per token of the flat array)."""
    count = np.zeros(int(docs.offsets[-1]), np.int64)
    for b in batches:
        real = b["segment_ids"] > 0
        doc = b["tokens"][real].astype(np.int64) - 1
        np.add.at(count, docs.offsets[doc] + b["positions"][real], 1)
    return count


def assert_exactly_once(batches, docs):
    count = delivered(batches, docs)
    lost, repeated = np.flatnonzero(count == 0), np.flatnonzero(count > 1)
    doc_of = np.searchsorted(docs.offsets, np.arange(count.shape[0]), side="right") - 1
    assert not lost.size, f"documents {np.unique(doc_of[lost])[:10].tolist()} lost tokens"
    assert not repeated.size, f"documents {np.unique(doc_of[repeated])[:10].tolist()} delivered twice"


def union(per_host: list[dict]) -> dict:
    return {k: np.concatenate([b[k] for b in per_host]) for k in per_host[0]}


def assert_batches_equal(a: dict, b: dict, where: str):
    for k in ("tokens", "segment_ids", "positions", "loss_mask"):
        np.testing.assert_array_equal(a[k], b[k], err_msg=f"{where}: {k}")


@pytest.mark.parametrize("before, after", [(4, 2), (2, 4), (1, 3)])
@pytest.mark.parametrize("shuffle", list(SHUFFLES))
@pytest.mark.parametrize("mode", list(MODES))
def test_elastic_restore_delivers_every_document_once(docs, mode, shuffle, before, after):
    one_host = list(build_canonical(cfg(mode, shuffle), docs).dataset)
    assert len(one_host) > 8
    assert_exactly_once(one_host, docs)
    k = len(one_host) // 3
    # N hosts run k steps and save their states.
    iters = [iter(build_canonical(cfg(mode, shuffle, before, h), docs).dataset) for h in range(before)]
    seen = []
    for step in range(k):
        rows = [next(it) for it in iters]
        assert_batches_equal(union(rows), one_host[step], f"{before} hosts, step {step}")
        seen += rows
    state = host_state([it.get_state() for it in iters])
    # M hosts restore that state and run to the end of the epoch.
    iters = [iter(build_canonical(cfg(mode, shuffle, after, h), docs).dataset) for h in range(after)]
    for it in iters:
        it.set_state(state)
    rest = [list(it) for it in iters]
    assert {len(r) for r in rest} == {len(one_host) - k}
    for step, rows in enumerate(zip(*rest)):  # the global order continues unchanged
        assert_batches_equal(union(list(rows)), one_host[k + step], f"{after} hosts, step {k + step}")
        seen += rows
    assert_exactly_once(seen, docs)


@pytest.mark.parametrize("mode, workers", [("planned", 0), ("streaming", 2), ("bucketing", 0)])
def test_restore_is_deterministic_with_workers_and_epochs(docs, mode, workers):
    """Two epochs, a restore into 3 hosts (one with Grain workers) continues as the 2 hosts would have."""
    two = [iter(build_canonical(cfg(mode, "block", 2, h, num_epochs=2), docs).dataset) for h in range(2)]
    total = len(list(build_canonical(cfg(mode, "block", num_epochs=2), docs).dataset))
    k = total // 2 + 1  # into the second epoch
    for _ in range(k):
        [next(it) for it in two]
    state = host_state([it.get_state() for it in two])
    expected = [union(list(rows)) for rows in zip(*[list(it) for it in two])]
    three = [
        iter(build_canonical(cfg(mode, "block", 3, h, num_epochs=2, workers=workers * (h == 1)), docs).dataset)
        for h in range(3)
    ]
    for it in three:
        it.set_state(state)
    got = [union(list(rows)) for rows in zip(*[list(it) for it in three])]
    three[1].close()
    assert len(got) == len(expected) == total - k
    for step, (a, b) in enumerate(zip(got, expected)):
        assert_batches_equal(a, b, f"step {k + step}")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"seed": 10}, "seed: saved 9, this pipeline 10"),
        ({"packing": {"ctx": 64}}, "packing: saved"),
        ({"batch_size": 24}, "batch_size: saved 12, this pipeline 24"),
    ],
)
def test_a_state_refuses_another_config(docs, change, message):
    it = iter(build_canonical(cfg("planned", "full"), docs).dataset)
    next(it)
    state = it.get_state()
    other = iter(build_canonical(cfg("planned", "full", **change), docs).dataset)
    with pytest.raises(ValueError, match=message):
        other.set_state(state)


def test_a_state_refuses_other_data(docs):
    it = iter(build_canonical(cfg("streaming", "full"), docs).dataset)
    next(it)
    other = id_documents(np.diff(docs.offsets)[::-1].copy())  # same documents and tokens, other lengths order
    with pytest.raises(ValueError, match="lengths_crc32"):
        iter(build_canonical(cfg("streaming", "full"), other).dataset).set_state(it.get_state())


def test_host_states_must_agree(docs):
    iters = [iter(build_canonical(cfg("planned", "full", 2, h), docs).dataset) for h in range(2)]
    next(iters[0])
    next(iters[0])
    next(iters[1])
    with pytest.raises(ValueError, match="host 1's state differs"):
        host_state([it.get_state() for it in iters])


def test_batch_size_must_divide_over_the_hosts(docs):
    with pytest.raises(ValueError, match="batch_size=12, shard.count=5"):
        build_canonical(cfg("planned", "full", 5, 0), docs)
    with pytest.raises(ValueError, match="does not divide over 5 hosts"):
        build_canonical(cfg("bucketing", "full", 5, 0), docs)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lengths=st.lists(st.integers(0, 200), min_size=1, max_size=120),
    window=st.integers(1, 50),
    hosts=st.sampled_from([1, 2, 3]),
    mode=st.sampled_from(list(MODES)),
    seed=st.integers(0, 2**32),
)
def test_every_mode_delivers_each_token_once_per_epoch(lengths, window, hosts, mode, seed):
    """Any lengths (empty documents included), window and host count: one epoch delivers each token once."""
    docs = id_documents(lengths)
    if not sum(lengths):
        return
    section = dict(MODES[mode])
    if mode == "streaming":
        section = {"packing": {**section["packing"], "window": window}}
    c = parse_config(
        {
            "source": {"path": "ids"},
            "batch_size": 6,
            "seed": seed,
            "drop_remainder": False,
            **section,
            "shard": {"index": 0, "count": 1},
        }
    )
    per_host = [
        list(build_canonical(c.replace(shard=ShardConfig(index=h, count=hosts)), docs).dataset) for h in range(hosts)
    ]
    assert len({len(p) for p in per_host}) == 1
    assert_exactly_once([b for p in per_host for b in p], docs)


CANONICAL = ("tokens", "segment_ids", "positions", "loss_mask")
BALANCE_MODES = {
    **MODES,
    "curriculum": {"curriculum": {"lengths": [32, 64, 128], "tokens_per_batch": 1536, "tile": 16}},
    "lanes": {"packing": {"ctx": 128, "mode": "streaming", "read_order": "lanes", "window": 40}},
}


def device_tiles(batch: dict, devices: int, block: int) -> np.ndarray:
    """Non-empty ``block`` tiles of each device's contiguous slice of a global batch (from its segment ids)."""
    rows = batch["segment_ids"].shape[0]
    per_row = (block_structure(batch["segment_ids"], block) != EMPTY).reshape(rows, -1).sum(axis=1)
    return per_row.reshape(devices, -1).sum(axis=1)


@pytest.mark.parametrize("mode", list(BALANCE_MODES))
def test_balanced_batches_hold_the_same_rows_spread_over_the_devices(docs, mode):
    """devices: 4: each global batch holds the rows of the unbalanced one (as a multiset), its busiest device's
    tile work is never above the drawn order's and below it on average; 2 hosts read the one-host batches."""

    def make(hosts=1, index=0, **extra):
        c = parse_config(
            {"source": {"path": "ids"}, "batch_size": BATCH, "seed": 9, "drop_remainder": False}
            | {"shuffle": SHUFFLES["block" if mode == "lanes" else "full"], **BALANCE_MODES[mode]}
            | {"shard": {"index": index, "count": hosts}}
            | extra
        )
        return list(build_canonical(c, docs).dataset)

    drawn, balanced = make(), make(devices=4, attention_block=16)
    assert len(drawn) == len(balanced) > 4
    assert_exactly_once(balanced, docs)
    busiest = []
    for a, b in zip(drawn, balanced):
        assert sorted(map(bytes, a["tokens"])) == sorted(map(bytes, b["tokens"]))
        if a["tokens"].shape[0] % 4 == 0:
            busiest.append((device_tiles(a, 4, 16).max(), device_tiles(b, 4, 16).max()))
            assert busiest[-1][1] <= busiest[-1][0]
    if mode != "curriculum":  # one length a batch: its rows are already balanced
        assert sum(b for _, b in busiest) < sum(a for a, _ in busiest)
    hosts = [make(2, h, devices=4, attention_block=16) for h in range(2)]
    for step, rows in enumerate(zip(*hosts)):
        assert_batches_equal(union([{k: r[k] for k in CANONICAL} for r in rows]), balanced[step], f"step {step}")


@pytest.mark.parametrize("mode", list(MODES))
def test_balanced_batches_restore_exactly_on_another_host_count(docs, mode):
    """A state saved by 4 hosts with devices: 4 restores into 2 hosts: the same global batches, each token once."""
    one_host = list(build_canonical(cfg(mode, "block", devices=4), docs).dataset)
    k = len(one_host) // 3
    iters = [iter(build_canonical(cfg(mode, "block", 4, h, devices=4), docs).dataset) for h in range(4)]
    seen = [next(it) for _ in range(k) for it in iters]
    state = host_state([it.get_state() for it in iters])
    iters = [iter(build_canonical(cfg(mode, "block", 2, h, devices=4), docs).dataset) for h in range(2)]
    for it in iters:
        it.set_state(state)
    rest = [list(it) for it in iters]
    for step, rows in enumerate(zip(*rest)):
        assert_batches_equal(union(list(rows)), one_host[k + step], f"step {k + step}")
        seen += rows
    assert_exactly_once(seen, docs)


@pytest.mark.slow  # ~13 s on 2 cores (2 worker processes start)
@pytest.mark.parametrize("across", [1, 3])
def test_balanced_batches_are_the_same_with_two_workers(docs, across):
    """Streaming packing, devices: 4 (rows exchanged across 3 batches too): Grain's 2 worker processes give the
    batches of none."""
    zero = list(build_canonical(cfg("streaming", "block", devices=4, balance_across=across), docs).dataset)
    it = iter(build_canonical(cfg("streaming", "block", devices=4, workers=2, balance_across=across), docs).dataset)
    two = list(it)
    it.close()
    assert len(zero) == len(two)
    for step, (a, b) in enumerate(zip(zero, two)):
        assert_batches_equal(a, b, f"step {step}")


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 200), min_size=1, max_size=120),
    devices=st.sampled_from([2, 3, 6]),
    hosts=st.sampled_from([1, 2, 3]),
    mode=st.sampled_from(list(MODES)),
    seed=st.integers(0, 2**32),
)
def test_balanced_modes_deliver_each_token_once_per_epoch(lengths, devices, hosts, mode, seed):
    """devices set (any that the hosts divide): one epoch over every host delivers each token once."""
    if devices % hosts or not sum(lengths):
        return
    docs = id_documents(lengths)
    c = parse_config(
        {"source": {"path": "ids"}, "batch_size": 6, "seed": seed, "drop_remainder": False, "devices": devices}
        | MODES[mode]
    )
    per_host = [
        list(build_canonical(c.replace(shard=ShardConfig(index=h, count=hosts)), docs).dataset) for h in range(hosts)
    ]
    assert len({len(p) for p in per_host}) == 1
    assert_exactly_once([b for p in per_host for b in p], docs)


def test_devices_must_divide_the_batch_and_hold_whole_hosts(docs):
    with pytest.raises(ValueError, match="batch_size=12 must be a multiple of devices=5"):
        cfg("planned", "full", devices=5)
    with pytest.raises(ValueError, match="devices=2 must be a multiple of shard.count=4"):
        cfg("planned", "full", 4, 0, devices=2)


ACROSS_MODES = ("planned", "streaming")  # balance_across exchanges rows between batches of one shape


@pytest.mark.parametrize("mode", ACROSS_MODES)
def test_rows_exchanged_across_batches_stay_in_their_group_and_balance_better(docs, mode):
    """devices: 6 (2 rows a device), balance_across: 3: the rows of each group of 3 batches are those of the same
    3 batches as drawn (as a multiset), each token once per epoch, 2 hosts read the one-host batches, and the busiest
    device's tiles over the mean, summed over the batches, are below balancing each batch alone."""

    def make(hosts=1, index=0, **extra):
        c = cfg(mode, "full", hosts, index, devices=6, attention_block=16, **extra)
        return list(build_canonical(c, docs).dataset)

    alone, across = make(), make(balance_across=3)
    drawn = list(build_canonical(cfg(mode, "full"), docs).dataset)
    assert len(drawn) == len(across) > 6
    assert_exactly_once(across, docs)
    for g in range(0, len(drawn), 3):
        rows = [sorted(bytes(r) for b in batches[g : g + 3] for r in b["tokens"]) for batches in (drawn, across)]
        assert rows[0] == rows[1], f"group {g // 3}"
    moved = sum(sorted(map(bytes, a["tokens"])) != sorted(map(bytes, b["tokens"])) for a, b in zip(drawn, across))
    assert moved > 0  # the contents changed: rows went to other batches of their group

    def ratio(batches):
        loads = [device_tiles(b, 6, 16) for b in batches if b["tokens"].shape[0] == BATCH]
        return sum(x.max() / max(x.mean(), 1e-9) for x in loads)

    assert ratio(across) < ratio(alone)
    hosts = [make(2, h, balance_across=3) for h in range(2)]
    for step, rows in enumerate(zip(*hosts)):
        assert_batches_equal(union([{k: r[k] for k in CANONICAL} for r in rows]), across[step], f"step {step}")


@pytest.mark.parametrize("mode", ACROSS_MODES)
def test_rows_exchanged_across_batches_restore_exactly_on_another_host_count(docs, mode):
    """A state saved by 3 hosts inside a group (balance_across: 4) restores into 2 hosts: the same global batches,
    each token once."""
    extra = {"devices": 6, "balance_across": 4}
    one_host = list(build_canonical(cfg(mode, "block", **extra), docs).dataset)
    k = 5  # inside the second group
    iters = [iter(build_canonical(cfg(mode, "block", 3, h, **extra), docs).dataset) for h in range(3)]
    seen = [next(it) for _ in range(k) for it in iters]
    state = host_state([it.get_state() for it in iters])
    iters = [iter(build_canonical(cfg(mode, "block", 2, h, **extra), docs).dataset) for h in range(2)]
    for it in iters:
        it.set_state(state)
    rest = [list(it) for it in iters]
    for step, rows in enumerate(zip(*rest)):
        assert_batches_equal(union(list(rows)), one_host[k + step], f"step {k + step}")
        seen += rows
    assert_exactly_once(seen, docs)
    other = iter(build_canonical(cfg(mode, "block", **{**extra, "devices": 3}), docs).dataset)
    with pytest.raises(ValueError):  # the batches' contents depend on the devices: refused, not silently changed
        other.set_state(state)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(0, 200), min_size=1, max_size=120),
    devices=st.sampled_from([2, 3, 6]),
    hosts=st.sampled_from([1, 2, 3]),
    across=st.integers(2, 5),
    mode=st.sampled_from(ACROSS_MODES),
    seed=st.integers(0, 2**32),
)
def test_rows_exchanged_across_batches_deliver_each_token_once_per_epoch(lengths, devices, hosts, across, mode, seed):
    """balance_across G (any devices the hosts divide): two epochs over every host deliver each token twice."""
    if devices % hosts or not sum(lengths):
        return
    docs = id_documents(lengths)
    c = parse_config(
        {"source": {"path": "ids"}, "batch_size": 6, "seed": seed, "drop_remainder": False, "devices": devices}
        | {"balance_across": across, "num_epochs": 2}
        | MODES[mode]
    )
    per_host = [
        list(build_canonical(c.replace(shard=ShardConfig(index=h, count=hosts)), docs).dataset) for h in range(hosts)
    ]
    assert len({len(p) for p in per_host}) == 1
    count = delivered([b for p in per_host for b in p], docs)
    assert (count == 2).all()


def test_balance_across_needs_devices_and_one_shape(docs):
    with pytest.raises(ValueError, match="set devices"):
        cfg("planned", "full", balance_across=2)
    with pytest.raises(ValueError, match="not bucketing"):
        cfg("bucketing", "full", devices=4, balance_across=2)
