"""Keyed pseudorandom permutations: a Feistel bijection on [0, n) and a windowed block shuffle.

:class:`FeistelPermutation`: an alternating Feistel network on [0, 2^b) (b >= 2 the smallest with 2^b >= n), an index
landing at or past n sent through again (cycle walking: under 2 passes on average); O(1) memory and expected time per
index, forward and inverse. F(k, x) = lowbias32((x + k) mod 2**32), halves of at most 31 bits (n <= 2**62), keys from
splitmix64 of (seed, epoch, tag). :class:`BlockShuffle`: Levanter's ``BlockShuffleConfig(io_block_size,
window_blocks, perm_type="feistel")``: io blocks permuted, then the records of each window of blocks.
"""

from __future__ import annotations

import numbers
from typing import overload

import numba
import numpy as np

from datatools.base.checks import MAX_RECORDS, check_int, short_repr

MAX_AUTO_ROUNDS = 36
_MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / golden ratio: splitmix64's increment


def _mix64_py(z: int) -> int:
    z &= _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _check_seed(seed) -> int:
    seed = check_int(seed, "seed")
    if not 0 <= seed <= _MASK64:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    return seed


def _check_rounds(rounds, n: int) -> int:
    if rounds is None:
        return default_rounds(n)
    rounds = check_int(rounds, "rounds", minimum=4)
    if rounds % 2:
        raise ValueError(f"rounds must be even, got {rounds}")
    return rounds


def _base_key(seed: int, epoch: int, tag: int = 0) -> int:
    return _mix64_py(seed ^ _mix64_py(epoch + GOLDEN) ^ _mix64_py(tag * 0xD1B54A32D192ED03 + 1))


def _domain_bits(n: int) -> int:
    return max(2, (n - 1).bit_length())


def default_rounds(n: int) -> int:
    """``max(8, 2 * ceil(36 / b))`` rounds for a b-bit domain (8 from n > 256 on): with halves of 1-4 bits, 8
    rounds leave bias a chi-squared test over n = 5's 120 orderings finds."""
    return max(8, 2 * -(-36 // _domain_bits(n)))


@numba.njit(cache=True, nogil=True, inline="always")
def _mix64(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True, nogil=True, inline="always")
def _round(x, key):
    """F(key, x) = mix32(x + key), all mod 2**32 (numba widens, so every step is cast back)."""
    z = np.uint32(x + key)
    z = np.uint32((z ^ (z >> np.uint32(16))) * np.uint32(0x7FEB352D))
    z = np.uint32((z ^ (z >> np.uint32(15))) * np.uint32(0x846CA68B))
    return np.uint32(z ^ (z >> np.uint32(16)))


@numba.njit(cache=True, nogil=True)
def _fill_round_keys(base, keys):
    for r in range(keys.shape[0]):
        keys[r] = np.uint32(_mix64(base + np.uint64(r + 1) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32))


def _round_keys(base: np.uint64, rounds: int) -> np.ndarray:
    """uint32 (rounds,): the Feistel round keys of ``base`` (filled by a kernel; this wrapper is not one, which would
    compile the kernel again into its own code on a cold cache)."""
    keys = np.empty(rounds, np.uint32)
    _fill_round_keys(base, keys)
    return keys


@numba.njit(cache=True, nogil=True, inline="always")
def _network(x, keys, low_bits, low_mask, high_mask, inverse):
    """One pass of the alternating Feistel network over a domain of 2**bits (halves <= 31 bits)."""
    hi = np.uint32(x >> low_bits)
    lo = np.uint32(x & np.uint64(low_mask))
    rounds = keys.shape[0]
    for t in range(rounds):
        r = rounds - 1 - t if inverse else t
        if r % 2 == 0:
            hi = np.uint32(hi ^ (_round(lo, keys[r]) & high_mask))
        else:
            lo = np.uint32(lo ^ (_round(hi, keys[r]) & low_mask))
    return (np.uint64(hi) << low_bits) | np.uint64(lo)


@numba.njit(cache=True, nogil=True, inline="always")
def _params(n):
    bits = 2
    while (np.uint64(1) << np.uint64(bits)) < np.uint64(n):
        bits += 1
    low_bits = bits // 2
    high_bits = bits - low_bits
    low_mask = np.uint32((np.uint64(1) << np.uint64(low_bits)) - np.uint64(1))
    high_mask = np.uint32((np.uint64(1) << np.uint64(high_bits)) - np.uint64(1))
    return np.uint64(low_bits), low_mask, high_mask


@numba.njit(cache=True, nogil=True)
def _permute_one(i, n, keys, inverse):
    """Cycle-walk index i through the network until it lands in [0, n)."""
    if n == 1:
        return np.int64(0)
    low_bits, low_mask, high_mask = _params(n)
    un = np.uint64(n)
    x = np.uint64(i)
    while True:
        x = _network(x, keys, low_bits, low_mask, high_mask, inverse)
        if x < un:
            return np.int64(x)


_CHUNK = 1024


@numba.njit(cache=True, nogil=True)
def _permute_array(idx, n, keys, inverse, out):
    """Permute many indices, chunk by chunk, round-major (the inner loops vectorize); values still outside [0, n)
    are compacted and go through again."""
    if n == 1:
        out[:] = 0
        return
    low_bits, low_mask, high_mask = _params(n)
    un = np.uint64(n)
    hi = np.empty(_CHUNK, np.uint32)
    lo = np.empty(_CHUNK, np.uint32)
    slot = np.empty(_CHUNK, np.int64)
    rounds = keys.shape[0]
    for c0 in range(0, idx.shape[0], _CHUNK):
        m = min(_CHUNK, idx.shape[0] - c0)
        for j in range(m):
            x = np.uint64(idx[c0 + j])
            hi[j] = np.uint32(x >> low_bits)
            lo[j] = np.uint32(x & np.uint64(low_mask))
            slot[j] = c0 + j
        while m > 0:
            for t in range(rounds):
                r = rounds - 1 - t if inverse else t
                k = keys[r]
                if r % 2 == 0:
                    for j in range(m):
                        hi[j] = np.uint32(hi[j] ^ (_round(lo[j], k) & high_mask))
                else:
                    for j in range(m):
                        lo[j] = np.uint32(lo[j] ^ (_round(hi[j], k) & low_mask))
            outside = 0
            for j in range(m):
                x = (np.uint64(hi[j]) << low_bits) | np.uint64(lo[j])
                if x < un:
                    out[slot[j]] = np.int64(x)
                else:
                    hi[outside] = hi[j]
                    lo[outside] = lo[j]
                    slot[outside] = slot[j]
                    outside += 1
            m = outside


def _as_index_array(index, n: int) -> tuple[np.ndarray, bool]:
    """Validate indices into [0, n); return (int64 array, is_scalar)."""
    if isinstance(index, (bool, np.bool_)):
        raise TypeError(f"index must be an integer, got {short_repr(index)}")
    if isinstance(index, numbers.Integral):
        i = int(index)
        if not 0 <= i < n:
            raise ValueError(f"index {i} out of range [0, {n})")
        return np.array([i], dtype=np.int64), True
    arr = np.asarray(index)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"indices must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= n:
            raise ValueError(f"index {lo if lo < 0 else hi} out of range [0, {n})")
    return arr, False


class FeistelPermutation:
    """A keyed pseudorandom bijection on [0, n) (1 <= n <= 2**62) per 64-bit ``seed`` and ``epoch``; ``rounds``: an
    even number >= 4, None for :func:`default_rounds`. ``perm(i)`` of an int is an int, of an integer array an int64
    array of its shape; ``perm.inverse(j)`` undoes it."""

    def __init__(self, n: int, seed: int, *, epoch: int = 0, rounds: int | None = None):
        self.n = check_int(n, "n", minimum=1, maximum=MAX_RECORDS)
        self.seed = _check_seed(seed)
        self.epoch = check_int(epoch, "epoch", minimum=0)
        self.rounds = _check_rounds(rounds, self.n)
        self._keys = _round_keys(np.uint64(_base_key(self.seed, self.epoch)), self.rounds)

    @property
    def domain_bits(self) -> int:
        """Bits of the network's domain: the smallest b >= 2 with 2**b >= n."""
        return _domain_bits(self.n)

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"FeistelPermutation(n={self.n}, seed={self.seed}, epoch={self.epoch}, rounds={self.rounds})"

    def _apply(self, index, inverse: bool):
        arr, scalar = _as_index_array(index, self.n)
        if scalar:
            return int(_permute_one(arr[0], self.n, self._keys, inverse))
        flat = np.ascontiguousarray(arr).reshape(-1)
        out = np.empty(flat.shape[0], dtype=np.int64)
        _permute_array(flat, self.n, self._keys, inverse, out)
        return out.reshape(arr.shape)

    @overload
    def __call__(self, index: int) -> int: ...
    @overload
    def __call__(self, index: np.ndarray) -> np.ndarray: ...
    def __call__(self, index: int | np.ndarray) -> int | np.ndarray:
        """The image of ``index`` (int or integer array) under the permutation."""
        return self._apply(index, False)

    @overload
    def inverse(self, index: int) -> int: ...
    @overload
    def inverse(self, index: np.ndarray) -> np.ndarray: ...
    def inverse(self, index: int | np.ndarray) -> int | np.ndarray:
        """The preimage of ``index``: ``perm.inverse(perm(i)) == i``."""
        return self._apply(index, True)

    def indices(self) -> np.ndarray:
        """The whole permutation as an int64 array of length n."""
        return self(np.arange(self.n, dtype=np.int64))


@numba.njit(cache=True, nogil=True)
def _auto_rounds(n):
    """default_rounds(n) inside numba."""
    bits = 2
    while (np.int64(1) << bits) < n:
        bits += 1
    return max(8, 2 * ((36 + bits - 1) // bits))


@numba.njit(cache=True, nogil=True, inline="always")
def _share_blocks(num_blocks, K, host, count):
    """(windows, the host's blocks in a full window, in the last window)."""
    W = (num_blocks + K - 1) // K
    n_last_window = num_blocks - (W - 1) * K
    m_full = (K - host + count - 1) // count if host < K else 0
    m_last = (n_last_window - host + count - 1) // count if host < n_last_window else 0
    return W, m_full, m_last


@numba.njit(cache=True, nogil=True)
def _share_start(w, W, m_full, m_last, B, deficit, owns_partial, w_partial):
    """First local position of window w in one host's share (w in [0, W])."""
    if w < W:
        blocks = w * m_full
    else:
        blocks = (W - 1) * m_full + m_last
    s = blocks * B
    if owns_partial and w > w_partial:
        s -= deficit
    return s


@numba.njit(cache=True, nogil=True)
def _block_shuffle(idx, out, n, B, K, num_blocks, host, count, block_keys, base_key, rounds):
    """Map local positions of host ``host``'s share to record indices (see BlockShuffle)."""
    W, m_full, m_last = _share_blocks(num_blocks, K, host, count)
    last = n - (num_blocks - 1) * B  # records in the last block
    deficit = B - last
    # Where did the partial (last) block land, and is it in this host's share?
    q = _permute_one(num_blocks - 1, num_blocks, block_keys, True)
    w_partial = q // K
    t_partial = q - w_partial * K
    owns_partial = deficit > 0 and (t_partial % count) == host
    j_partial = (t_partial - host) // count
    wkeys = np.empty(rounds if rounds > 0 else MAX_AUTO_ROUNDS, np.uint32)
    keyed_window = -1
    for a in range(idx.shape[0]):
        i = idx[a]
        if m_full > 0:
            w = min(i // (m_full * B), W - 1)
        else:
            w = W - 1
        while w > 0 and i < _share_start(w, W, m_full, m_last, B, deficit, owns_partial, w_partial):
            w -= 1
        while w < W - 1 and i >= _share_start(w + 1, W, m_full, m_last, B, deficit, owns_partial, w_partial):
            w += 1
        s0 = _share_start(w, W, m_full, m_last, B, deficit, owns_partial, w_partial)
        size = _share_start(w + 1, W, m_full, m_last, B, deficit, owns_partial, w_partial) - s0
        if w != keyed_window:  # each window (and host) gets its own permutation of its records
            salt = np.uint64(w) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(host) * np.uint64(0xD1B54A32D192ED03)
            _fill_round_keys(_mix64(base_key ^ _mix64(salt + np.uint64(count))), wkeys)
            keyed_window = w
        r = rounds if rounds > 0 else _auto_rounds(size)
        k = _permute_one(i - s0, size, wkeys[:r], False)
        # k indexes the concatenation of this host's blocks in window w.
        if owns_partial and w == w_partial:
            cut = j_partial * B
            if k < cut:
                slot = k // B
                off = k - slot * B
            elif k < cut + last:
                slot = j_partial
                off = k - cut
            else:
                k2 = k - cut - last
                slot = j_partial + 1 + k2 // B
                off = k2 - (slot - j_partial - 1) * B
        else:
            slot = k // B
            off = k - slot * B
        p = w * K + host + slot * count
        block = _permute_one(p, num_blocks, block_keys, False)
        out[a] = block * B + off


class BlockShuffle:
    """Windowed block shuffle of ``n`` records: near-random order at near-sequential I/O. [0, n) is cut into io
    blocks of ``io_block_size`` records (one read; the last may be partial), the blocks permuted, each window of
    ``window_blocks`` consecutive permuted blocks (the reader's buffer) has its records permuted, keyed by the 64-bit
    ``seed`` and the epoch. ``rounds``: for both permutations, None for :func:`default_rounds` of each domain.
    ``index(i, epoch)`` is O(1)."""

    def __init__(
        self,
        n: int,
        *,
        io_block_size: int,
        window_blocks: int,
        seed: int,
        rounds: int | None = None,
        _host: int = 0,
        _count: int = 1,
    ):
        self.n = check_int(n, "n", minimum=1, maximum=MAX_RECORDS)
        self.io_block_size = check_int(io_block_size, "io_block_size", minimum=1, maximum=MAX_RECORDS)
        self.window_blocks = check_int(window_blocks, "window_blocks", minimum=1, maximum=MAX_RECORDS)
        self.seed = _check_seed(seed)
        self.num_blocks = -(-self.n // self.io_block_size)
        self.rounds = rounds if rounds is None else _check_rounds(rounds, self.n)
        self.host, self.count = _host, _count
        self._len = self.share_length()
        self._epoch_cache: tuple[int, np.ndarray, np.uint64] | None = None

    def share_length(self) -> int:
        """Records in this share, before removing the partial block's deficit."""
        if self.count == 1:
            return self.n
        windows, m_full, m_last = _share_blocks(self.num_blocks, self.window_blocks, self.host, self.count)
        return int(((windows - 1) * m_full + m_last) * self.io_block_size)

    def __len__(self) -> int:
        """Records in this (share of the) order; for a share, in epoch 0."""
        return self.length(0)

    def length(self, epoch: int = 0) -> int:
        """Records in this share in ``epoch`` (only a share that holds the partial block differs by epoch)."""
        if self.count == 1:
            return self.n
        keys, _ = self._keys(epoch)
        B = self.io_block_size
        deficit = self.num_blocks * B - self.n
        if deficit == 0:
            return self._len
        q = int(_permute_one(self.num_blocks - 1, self.num_blocks, keys, True))
        t = q % self.window_blocks
        return self._len - (deficit if t % self.count == self.host else 0)

    def __repr__(self) -> str:
        share = f", share {self.host}/{self.count}" if self.count > 1 else ""
        return (
            f"BlockShuffle(n={self.n}, io_block_size={self.io_block_size}, "
            f"window_blocks={self.window_blocks}, seed={self.seed}{share})"
        )

    def _keys(self, epoch: int):
        epoch = check_int(epoch, "epoch", minimum=0)
        if self._epoch_cache is None or self._epoch_cache[0] != epoch:
            block_rounds = self.rounds or default_rounds(self.num_blocks)
            block_keys = _round_keys(np.uint64(_base_key(self.seed, epoch, 1)), block_rounds)
            self._epoch_cache = (epoch, block_keys, np.uint64(_base_key(self.seed, epoch, 2)))
        return self._epoch_cache[1], self._epoch_cache[2]

    def index(self, i, epoch: int = 0):
        """Record index at position ``i`` (int or integer array) of ``epoch``'s order."""
        block_keys, base = self._keys(epoch)
        arr, scalar = _as_index_array(i, self.length(epoch))
        flat = np.ascontiguousarray(arr).reshape(-1)
        out = np.empty(flat.shape[0], dtype=np.int64)
        _block_shuffle(
            flat,
            out,
            self.n,
            self.io_block_size,
            self.window_blocks,
            self.num_blocks,
            self.host,
            self.count,
            block_keys,
            base,
            self.rounds or 0,
        )
        return int(out[0]) if scalar else out.reshape(arr.shape)

    def indices(self, epoch: int = 0) -> np.ndarray:
        """The whole order of ``epoch``: int64 array of record indices."""
        return self.index(np.arange(self.length(epoch), dtype=np.int64), epoch)

    def shard(self, index: int, count: int) -> BlockShuffle:
        """Host ``index`` of ``count`` hosts' share: in every window host h takes the io blocks at slots h, h + count,
        ... and permutes their records. Shares are disjoint, cover [0, n) and differ in length by at most one window's
        blocks. ValueError for count < 1, index outside [0, count), or count > window_blocks (each host needs a block
        a window)."""
        count = check_int(count, "count", minimum=1)
        index = check_int(index, "index", minimum=0)
        if index >= count:
            raise ValueError(f"shard index {index} out of range [0, {count})")
        if self.count != 1:
            raise ValueError("shard() of a shard is not supported; shard the full BlockShuffle")
        if count > self.window_blocks:
            raise ValueError(
                f"count={count} hosts need window_blocks >= {count} (got {self.window_blocks}) "
                "so that every window gives each host whole io blocks"
            )
        return BlockShuffle(
            self.n,
            io_block_size=self.io_block_size,
            window_blocks=self.window_blocks,
            seed=self.seed,
            rounds=self.rounds,
            _host=index,
            _count=count,
        )


def lane_blocks(num_blocks: int, lanes: int, *, seed: int, epoch: int = 0) -> list[np.ndarray]:
    """The io blocks of each of ``lanes`` lanes in ``epoch``: the blocks in a Feistel order of (seed, epoch), block
    ``q`` of that order dealt to lane ``q % lanes`` (see :mod:`datatools.grain.lane_schedule`)."""
    num_blocks = check_int(num_blocks, "num_blocks", minimum=1, maximum=MAX_RECORDS)
    lanes = check_int(lanes, "lanes", minimum=1)
    order = FeistelPermutation(num_blocks, seed, epoch=epoch).indices()
    return [order[lane::lanes] for lane in range(lanes)]


def lane_order(n: int, *, io_block_size: int, lanes: int, window: int, seed: int, epoch: int = 0) -> np.ndarray:
    """Records [0, n) in the order a reader in lanes takes them, without packing (the record-level model of
    :class:`~datatools.grain.lane_schedule.LaneSchedule`): each lane reads its blocks (:func:`lane_blocks`) a seeded
    window of ``window`` records at a time; position ``i`` comes from lane ``i % lanes`` while every lane has records,
    then the leftovers lane by lane (the schedule deals its leftover rows column by column over its last batches:
    the model has no batches, and the leftovers are the last few percent of an epoch)."""
    n = check_int(n, "n", minimum=1, maximum=MAX_RECORDS)
    size = check_int(io_block_size, "io_block_size", minimum=1)
    window = check_int(window, "window", minimum=1)
    per_lane = []
    for lane, blocks in enumerate(lane_blocks(-(-n // size), lanes, seed=seed, epoch=epoch)):
        records = (blocks[:, None] * size + np.arange(size, dtype=np.int64)).reshape(-1)
        records = records[records < n] if blocks.size else records
        rng = np.random.default_rng([seed, epoch, lane])
        for a in range(0, records.shape[0], window):
            records[a : a + window] = rng.permutation(records[a : a + window])
        per_lane.append(records)
    least = min(r.shape[0] for r in per_lane)
    head = np.stack([r[:least] for r in per_lane], axis=1).reshape(-1)
    return np.concatenate([head, *(r[least:] for r in per_lane)])
