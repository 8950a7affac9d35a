"""FeistelPermutation and BlockShuffle: bijection, keys, statistics, windows, shards."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools import BlockShuffle, FeistelPermutation
from datatools.kernels.shuffle import _base_key, _round_keys, default_rounds

# ---------------------------------------------------------------- bijection


@pytest.mark.parametrize("n", [1, 2, 3, 7, 1000, 65535, 65536, 65537, 2**18 + 1, 2**20 + 1, 3_000_017])
def test_bijection_and_inverse(n):
    perm = FeistelPermutation(n, seed=12345)
    image = perm.indices()
    assert image.dtype == np.int64
    np.testing.assert_array_equal(np.sort(image), np.arange(n))
    np.testing.assert_array_equal(perm.inverse(image), np.arange(n))
    for i in np.linspace(0, n - 1, 7).astype(int):  # scalar path agrees with the vectorized one
        assert perm(int(i)) == image[i] and perm.inverse(int(image[i])) == i


@pytest.mark.slow  # make test: the other bijection tests; make test-all: this one too (~10 s)
def test_random_large_n_bijection():
    n = int(np.random.default_rng(2026).integers(1_000_000, 4_000_000))
    image = FeistelPermutation(n, seed=99, epoch=3).indices()
    assert np.unique(image).size == n and image.min() == 0 and image.max() == n - 1


def test_sampled_injectivity_near_2_pow_40():
    for n in (2**40 - 3, 2**40, 2**40 + 12345):
        perm = FeistelPermutation(n, seed=2**63 + 17)
        idx = np.unique(np.random.default_rng(n % 1000).integers(0, n, size=400_000))
        out = perm(idx)
        assert out.min() >= 0 and out.max() < n
        assert np.unique(out).size == idx.size
        np.testing.assert_array_equal(perm.inverse(out), idx)


def test_domain_is_next_power_of_two_and_walks_are_short():
    for n, bits in [(2, 2), (5, 3), (1000, 10), (1024, 10), (1025, 11), (2**33 + 1, 34)]:
        assert FeistelPermutation(n, 0).domain_bits == bits
    # at most 2 network evaluations on average: at least half the domain lies inside [0, n)
    for n in (3, 5, 1025, 65537):
        assert n / 2 ** FeistelPermutation(n, 0).domain_bits >= 0.5


def test_seeds_and_epochs_give_different_permutations():
    n = 10_000
    base = FeistelPermutation(n, 1).indices()
    assert not np.array_equal(base, FeistelPermutation(n, 2).indices())
    assert not np.array_equal(base, FeistelPermutation(n, 1, epoch=1).indices())
    np.testing.assert_array_equal(base, FeistelPermutation(n, 1).indices())  # deterministic
    assert not np.array_equal(base, np.arange(n))
    # 64-bit seeds: seeds differing only in the high bits differ
    assert not np.array_equal(FeistelPermutation(n, 5).indices(), FeistelPermutation(n, 5 + 2**40).indices())


def test_array_shape_is_kept():
    perm = FeistelPermutation(100, 3)
    idx = np.arange(12).reshape(3, 4)
    assert perm(idx).shape == (3, 4)
    np.testing.assert_array_equal(perm(idx).ravel(), perm(idx.ravel()))


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: FeistelPermutation(0, 1), ValueError),
        (lambda: FeistelPermutation(10, -1), ValueError),
        (lambda: FeistelPermutation(10, 2**64), ValueError),
        (lambda: FeistelPermutation(10, 1.5), TypeError),
        (lambda: FeistelPermutation(10.0, 1), TypeError),
        (lambda: FeistelPermutation(10, 1, rounds=5), ValueError),
        (lambda: FeistelPermutation(10, 1)(10), ValueError),
        (lambda: FeistelPermutation(10, 1)(-1), ValueError),
        (lambda: FeistelPermutation(10, 1)(np.array([0, 11])), ValueError),
        (lambda: FeistelPermutation(10, 1)(2.0), TypeError),
        (lambda: FeistelPermutation(10, 1)(np.array([0.5])), TypeError),
    ],
)
def test_bad_input(call, error):
    with pytest.raises(error):
        call()


# ---------------------------------------------------------------- statistics
#
# The tests run on the real implementation. A reference network in numpy, with a
# pluggable round function, checks that the kernel is the documented construction
# and that the same tests reject weak round functions (so they have power).


def _mix32(z):
    z = z.astype(np.uint32)
    z = (z ^ (z >> np.uint32(16))) * np.uint32(0x7FEB352D)
    z = (z ^ (z >> np.uint32(15))) * np.uint32(0x846CA68B)
    return z ^ (z >> np.uint32(16))


def reference_orders(n, seeds, round_fn, rounds=None):
    """Permutation of range(n) for each seed, as an (S, n) array, using a numpy Feistel network."""
    rounds = rounds or default_rounds(n)
    bits = max(2, (n - 1).bit_length())
    low_bits, high_bits = bits // 2, bits - bits // 2
    low_mask, high_mask = np.uint32((1 << low_bits) - 1), np.uint32((1 << high_bits) - 1)
    keys = np.stack([_round_keys(np.uint64(_base_key(int(s), 0)), rounds) for s in seeds])  # (S, R)
    x = np.broadcast_to(np.arange(n, dtype=np.uint64), (len(seeds), n)).copy()

    def network(x):
        hi = (x >> np.uint64(low_bits)).astype(np.uint32)
        lo = (x & np.uint64(low_mask)).astype(np.uint32)
        for r in range(rounds):
            k = keys[:, r : r + 1]
            with np.errstate(over="ignore"):
                if r % 2 == 0:
                    hi ^= round_fn(lo + k) & high_mask
                else:
                    lo ^= round_fn(hi + k) & low_mask
        return (hi.astype(np.uint64) << np.uint64(low_bits)) | lo.astype(np.uint64)

    x = network(x)
    while (outside := x >= n).any():
        x = np.where(outside, network(x), x)
    return x.astype(np.int64)


def _orders(n, num_seeds):
    return np.stack([FeistelPermutation(n, s).indices() for s in range(num_seeds)])


def chi2_critical(df, z=3.719):  # Wilson-Hilferty; z = 3.719 is p = 1e-4
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi2(counts):
    counts = np.asarray(counts, dtype=np.float64)
    expected = counts.sum() / counts.size
    return float(((counts - expected) ** 2 / expected).sum())


def ordering_counts(orders):
    n = orders.shape[1]
    codes = np.zeros(orders.shape[0], dtype=np.int64)
    for j in range(n):
        codes = codes * n + orders[:, j]
    _, counts = np.unique(codes, return_counts=True)
    return np.concatenate([counts, np.zeros(math.factorial(n) - counts.size)])


def uniform_first(orders):
    return np.bincount(orders[:, 0], minlength=orders.shape[1])


def consecutive_pairs(orders):
    n = orders.shape[1]
    pairs = orders[:, 0] * n + orders[:, 1]
    counts = np.bincount(pairs, minlength=n * n)
    off_diagonal = ~np.eye(n, dtype=bool).ravel()
    return counts[off_diagonal]


STAT_TESTS = [
    ("all 120 orderings of n=5", 5, 24_000, ordering_counts, 119),
    ("first position, n=10", 10, 20_000, uniform_first, 9),
    ("consecutive outputs, n=16", 16, 24_000, consecutive_pairs, 239),
]


@pytest.mark.parametrize("name, n, seeds, counter, df", STAT_TESTS)
def test_statistics_of_the_real_permutation(name, n, seeds, counter, df):
    orders = _orders(n, seeds)
    assert chi2(counter(orders)) < chi2_critical(df), name


def test_default_rounds():
    assert [default_rounds(n) for n in (2, 5, 8, 9, 16, 17, 256, 257, 10**9)] == [36, 24, 24, 18, 18, 16, 10, 8, 8]


def test_reference_network_matches_the_kernel():
    for n in (5, 16, 1000, 65537):
        np.testing.assert_array_equal(reference_orders(n, range(20), _mix32), _orders(n, 20))


WEAK_ROUND_FUNCTIONS = {
    "identity (linear)": lambda x: x,
    "one multiply, low bits": lambda x: x * np.uint32(0x9E3779B1),
    "depends on the key only (high bits)": lambda x: x >> np.uint32(24),
}


@pytest.mark.parametrize("weak", WEAK_ROUND_FUNCTIONS)
def test_statistical_tests_reject_weak_round_functions(weak):
    failures = 0
    for _name, n, seeds, counter, df in STAT_TESTS:
        orders = reference_orders(n, range(seeds), WEAK_ROUND_FUNCTIONS[weak])
        failures += chi2(counter(orders)) >= chi2_critical(df)
    assert failures >= 1


# ---------------------------------------------------------------- block shuffle


def windows_of(order, n, block, window):
    """Split an order into consecutive windows of `window` whole io blocks; None if impossible."""
    sizes = np.full(-(-n // block), block)
    sizes[-1] = n - (sizes.size - 1) * block
    blocks = order // block
    result, start = [], 0
    while start < n:
        seen, count = set(), 0
        end = start
        while end < n and (len(seen) < window or count < sum(sizes[b] for b in seen)):
            b = int(blocks[end])
            if b not in seen:
                if len(seen) == window:
                    return None
                seen.add(b)
            end += 1
            if count + 1 == sum(sizes[x] for x in seen) and len(seen) == window:
                count += 1
                break
            count += 1
        if count != sum(sizes[b] for b in seen):
            return None
        result.append(seen)
        start = end
    return result


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 3000),
    block=st.integers(1, 70),
    window=st.integers(1, 12),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 5),
)
def test_block_shuffle_is_a_permutation_that_keeps_windows(n, block, window, seed, epoch):
    bs = BlockShuffle(n, io_block_size=block, window_blocks=window, seed=seed)
    order = bs.indices(epoch)
    np.testing.assert_array_equal(np.sort(order), np.arange(n))
    wins = windows_of(order, n, block, window)
    assert wins is not None, "some window mixes records of more than window_blocks io blocks"
    assert all(len(w) == window for w in wins[:-1])
    i = int(np.random.default_rng(seed % 97).integers(0, n))
    assert bs.index(i, epoch) == order[i]


def test_block_shuffle_epochs_and_seeds_differ():
    a = BlockShuffle(10_000, io_block_size=64, window_blocks=16, seed=1)
    assert not np.array_equal(a.indices(0), a.indices(1))
    assert not np.array_equal(a.indices(0), BlockShuffle(10_000, io_block_size=64, window_blocks=16, seed=2).indices(0))
    np.testing.assert_array_equal(a.indices(3), a.indices(3))


def test_block_shuffle_mixes_materials():
    # 64 consecutive records per material, batch 128: storage order draws 2 materials per batch.
    bs = BlockShuffle(2**18, io_block_size=64, window_blocks=1024, seed=0)
    groups = bs.indices(0).reshape(-1, 128) // 64
    distinct = np.mean([np.unique(g).size for g in groups])
    assert distinct > 100  # a full shuffle gives ~124.9


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 2000),
    block=st.integers(1, 40),
    window=st.integers(1, 10),
    count=st.integers(1, 10),
    seed=st.integers(0, 1000),
    epoch=st.integers(0, 3),
)
def test_shards_are_disjoint_cover_everything_and_keep_blocks_whole(n, block, window, count, seed, epoch):
    bs = BlockShuffle(n, io_block_size=block, window_blocks=window, seed=seed)
    if count > window:
        with pytest.raises(ValueError, match="window_blocks"):
            bs.shard(0, count)
        return
    shares = [bs.shard(h, count) for h in range(count)]
    orders = [s.indices(epoch) for s in shares]
    assert [len(o) for o in orders] == [s.length(epoch) for s in shares]
    everything = np.concatenate(orders)
    np.testing.assert_array_equal(np.sort(everything), np.arange(n))
    owner = np.empty(n, dtype=np.int64)
    for h, o in enumerate(orders):
        owner[o] = h
    blocks = np.arange(n) // block
    for b in np.unique(blocks):  # an io block is read by one host only
        assert np.unique(owner[blocks == b]).size == 1


def test_block_shuffle_bad_input():
    with pytest.raises(ValueError):
        BlockShuffle(0, io_block_size=1, window_blocks=1, seed=0)
    with pytest.raises(ValueError):
        BlockShuffle(10, io_block_size=0, window_blocks=1, seed=0)
    with pytest.raises(ValueError):
        BlockShuffle(10, io_block_size=2, window_blocks=0, seed=0)
    with pytest.raises(ValueError):
        BlockShuffle(10, io_block_size=2, window_blocks=2, seed=0).index(10)
    with pytest.raises(ValueError):
        BlockShuffle(10, io_block_size=2, window_blocks=2, seed=0).shard(2, 2)
