"""Bucket boundaries (exact DP), batch sizes, the batching kernel, efficiency figures."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools import bucket_batch_sizes, bucket_batches, bucket_boundaries, padding_efficiency


def padded_slots(lengths, boundaries):
    idx = np.searchsorted(boundaries, lengths, side="left")
    return int(np.asarray(boundaries)[idx].sum())


def brute_force(lengths, k, tile, max_len):
    cands = list(range(tile, max_len + 1, tile))
    best = None
    for r in range(1, k + 1):
        for combo in itertools.combinations(cands[:-1], r - 1):
            b = list(combo) + [max_len]
            cost = padded_slots(lengths, b)
            best = cost if best is None else min(best, cost)
    return best


@settings(max_examples=80, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 64), min_size=1, max_size=40), k=st.integers(1, 4), tile=st.sampled_from([1, 4, 8])
)
def test_dp_equals_brute_force(lengths, k, tile):
    max_len = -(-max(lengths) // tile) * tile
    b = bucket_boundaries(lengths, k, tile=tile)
    assert len(b) <= k and b[-1] == max_len and np.all(b % tile == 0) and np.all(np.diff(b) > 0)
    assert padded_slots(lengths, b) == brute_force(lengths, k, tile, max_len)


@settings(max_examples=50, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 500), min_size=1, max_size=200),
    k=st.integers(1, 5),
    budget=st.integers(1024, 4096),
    multiple=st.sampled_from([1, 2, 4]),
    overflow=st.sampled_from(["split", "truncate", "drop"]),
    drop_remainder=st.booleans(),
)
def test_batches_fit_their_bucket_and_budget(lengths, k, budget, multiple, overflow, drop_remainder):
    lengths = np.array(lengths)
    b = bucket_boundaries(lengths, k, tile=32, max_len=256, overflow=overflow)
    sizes = bucket_batch_sizes(b, token_budget=budget, multiple_of=multiple)
    assert np.all(sizes * b <= budget) and np.all(sizes % multiple == 0)
    plan = bucket_batches(lengths, b, sizes, overflow=overflow, drop_remainder=drop_remainder)
    kept = 0
    for i in range(plan.num_batches):
        k_ = plan.batch_bucket[i]
        items = slice(plan.batch_splits[i], plan.batch_splits[i + 1])
        n_items = plan.batch_splits[i + 1] - plan.batch_splits[i]
        assert 1 <= n_items <= sizes[k_]
        assert n_items * b[k_] <= budget
        assert np.all(plan.length[items] <= b[k_])  # every document fits its bucket
        if k_ > 0:
            assert np.all(plan.length[items] > b[k_ - 1])  # ... and is in the smallest that fits
        if drop_remainder:
            assert n_items == sizes[k_]
        kept += int(plan.length[items].sum())
    # conservation: every token is in exactly one batch, or counted as dropped
    assert kept + plan.dropped_tokens == lengths.sum()
    pieces = list(zip(plan.doc.tolist(), plan.start.tolist(), plan.length.tolist()))
    assert len(pieces) == len(set(pieces))


def test_fixed_batch_size_and_errors():
    assert bucket_batch_sizes([128, 256], batch_size=8).tolist() == [8, 8]
    assert bucket_batch_sizes([128, 256, 1024], token_budget=4096, multiple_of=4).tolist() == [32, 16, 4]
    with pytest.raises(ValueError, match="exactly one"):
        bucket_batch_sizes([128], batch_size=8, token_budget=100)
    with pytest.raises(ValueError, match="fewer than"):
        bucket_batch_sizes([128, 1024], token_budget=1000)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: bucket_boundaries([1, 2], 0), "num_buckets must be >= 1"),
        (lambda: bucket_boundaries([1, 2], 2, tile=0), "tile must be >= 1"),
        (lambda: bucket_boundaries([], 2), "empty"),
        (lambda: bucket_boundaries([1, -2], 2), "negative"),
        (lambda: bucket_boundaries([1, 2], 2, tile=8, max_len=12), "not a multiple"),
        (lambda: bucket_boundaries([1, 300], 2, max_len=256, overflow="error"), "document 1 has length 300"),
        (lambda: bucket_batches([1, 2], [128, 64], 4), "ascending"),
        (lambda: bucket_batches([1, 2], [64, 128], [4]), "one size"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_overflow_at_max_len():
    b = bucket_boundaries([10, 1000], 2, tile=128, max_len=256, overflow="split")
    plan = bucket_batches([10, 1000], b, 4, overflow="split")
    assert plan.length.sum() == 1010 and plan.dropped_tokens == 0
    plan = bucket_batches([10, 1000], b, 4, overflow="truncate")
    assert plan.dropped_tokens == 1000 - 256
    plan = bucket_batches([10, 1000], b, 4, overflow="drop")
    assert plan.dropped_tokens == 1000 and plan.doc.tolist() == [0]


def test_efficiency_figures_by_hand():
    lengths = [100, 200, 300, 400]
    eff = padding_efficiency(lengths, max_len=512, batch_size=2)
    assert eff["pad_to_max"]["efficiency"] == pytest.approx(1000 / 2048)
    assert eff["pad_to_batch_max"]["efficiency"] == pytest.approx(1000 / (2 * 200 + 2 * 400))
    assert eff["pad_to_batch_max"]["shapes"] == 2
    plan = bucket_batches(lengths, [256, 512], 2)
    assert plan.efficiency == pytest.approx(1000 / (2 * 256 + 2 * 512)) and plan.shapes == [(2, 256), (2, 512)]


def test_optimal_buckets_beat_baselines_on_skewed_lengths():
    rng = np.random.default_rng(0)
    lengths = rng.lognormal(np.log(170), 0.78, size=20_000).round().clip(1, 1024).astype(int)
    eff = padding_efficiency(lengths, max_len=1024, batch_size=64)
    b4 = bucket_boundaries(lengths, 4, max_len=1024)
    plan = bucket_batches(lengths, b4, 64)
    assert plan.efficiency > eff["pad_to_max"]["efficiency"] * 2
    b8 = bucket_boundaries(lengths, 8, max_len=1024)
    assert bucket_batches(lengths, b8, 64).efficiency >= plan.efficiency
