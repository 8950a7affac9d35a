"""How well an order mixes stored groups (consecutive records of one source: a material, a book) into batches, and
what it costs in contiguous reads: storage order, a full Feistel shuffle, the block shuffle and its lanes order.

Two views: :func:`shuffle_report` counts records in the order they are read (no lengths, no packing);
:func:`packed_mix_stats` measures what a batch holds after packing (every piece's document, group and tokens, from a
pipeline's schedule: :mod:`datatools.pipeline.packed_mix`), the view that ranks the read orders as a trained model's
evaluation loss does (``docs/shuffle-quality.md``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TypedDict, Unpack

import numba
import numpy as np

from datatools.base.checks import check_int
from datatools.base.reports import Report
from datatools.jobs.write_order import written_order
from datatools.kernels.shuffle import BlockShuffle, FeistelPermutation, lane_order


def expected_distinct_groups(n: int, group_size: int, batch_size: int) -> float:
    """Expected distinct groups of ``group_size`` consecutive records of [0, n) (the last may be smaller) in a batch
    of S = ``batch_size`` records drawn without replacement: sum over groups g of 1 - C(n - m_g, S) / C(n, S)."""

    def log_comb(a: int, b: int) -> float:
        return math.lgamma(a + 1) - math.lgamma(b + 1) - math.lgamma(a - b + 1)

    full, last = divmod(n, group_size)
    sizes = [(group_size, full)] + ([(last, 1)] if last else [])
    total = 0.0
    for m, count in sizes:
        miss = 0.0 if n - m < batch_size else math.exp(log_comb(n - m, batch_size) - log_comb(n, batch_size))
        total += count * (1.0 - miss)
    return total


@numba.njit(cache=True)
def _block_reads(order: np.ndarray, block_size: int, cache_blocks: int, batch_size: int, out: np.ndarray) -> None:
    """io-block reads per batch for a reader with a FIFO cache of ``cache_blocks`` blocks."""
    num_blocks = (order.max() // block_size) + 1
    loaded_at = np.full(num_blocks, -(1 << 62), np.int64)
    loads = 0
    for b in range(out.shape[0]):
        reads = 0
        for i in range(b * batch_size, (b + 1) * batch_size):
            blk = order[i] // block_size
            if loaded_at[blk] < loads - cache_blocks:
                loaded_at[blk] = loads
                loads += 1
                reads += 1
        out[b] = reads


@dataclass(frozen=True)
class OrderStats(Report):
    """Figures of one order over its whole batches (means per batch; displacement in records)."""

    groups_per_batch: float  # distinct stored groups in a batch
    groups_per_batch_min: int
    mean_displacement: float  # |position in the order - record index|, records
    mean_displacement_fraction: float  # the same over n
    runs_per_batch: float  # maximal runs of consecutive records (each one contiguous read)
    block_reads_per_batch: float  # io blocks read with a cache of window_blocks blocks


@dataclass(frozen=True)
class PackedOrderStats(Report):
    """One order's batches after packing (means per batch over ``batches`` batches): what a batch holds.

    The mix distance is the total-variation distance between the batch's group mix (each group's share of the
    batch's real tokens) and the corpus's (each group's share of all tokens): 0 when the batch holds every group in
    its corpus share, 1 - share when it holds one group only; the KL divergence weighs the same mixes in nats."""

    batches: int
    documents_per_batch: float  # distinct documents with a piece in the batch
    groups_per_batch: float  # distinct stored groups with a piece in the batch
    mix_distance: float  # mean total-variation distance of a batch's group mix from the corpus's (0..1)
    mix_kl: float  # mean KL(batch's group mix || corpus's), nats


@dataclass(frozen=True)
class ShuffleReport(Report):
    """What :func:`shuffle_report` measured: the parameters, a full shuffle's expected groups per batch and each
    order's figures."""

    n: int
    io_block_size: int
    window_blocks: int
    group_size: int
    batch_size: int
    seed: int
    epoch: int
    expected_groups_per_batch: float
    orders: dict[str, OrderStats]  # "none" (storage order), "full" (Feistel), "block" (block shuffle), "lanes"
    lanes: int = 256  # lanes of the "lanes" order (batch_size x lane_period of a pipeline)
    lane_window: int = 1024  # records per lane window
    lane_cache_blocks: int = 0  # the reader's cache for the "lanes" order: every lane's window and the next block
    write_seed: int | None = None  # the store's documents were shuffled with this seed when written (None: input order)
    packed: dict[str, PackedOrderStats] | None = (
        None  # the same orders after a pipeline's packing (shuffle-report --config)
    )


def packed_mix_stats(
    batches: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]], corpus_mix: np.ndarray
) -> PackedOrderStats:
    """:class:`PackedOrderStats` of ``batches``: ``(document, group, tokens)`` int arrays per batch, one entry per
    piece of a document in the batch (a document may have several pieces); ``corpus_mix``: float (groups,), each
    group's share of the corpus's tokens (sum 1)."""
    q = np.asarray(corpus_mix, np.float64)
    docs, groups, tv, kl = [], [], [], []
    for doc, group, tokens in batches:
        doc, group = np.asarray(doc, np.int64), np.asarray(group, np.int64)
        held, where = np.unique(group, return_inverse=True)
        p = np.bincount(where, weights=np.asarray(tokens, np.float64), minlength=held.shape[0])
        p = p / p.sum()
        qh = q[held]
        docs.append(np.unique(doc).shape[0])
        groups.append(held.shape[0])
        # groups the batch lacks are off by their whole corpus share: 1 - qh.sum() of the sum of |p - q|
        tv.append(0.5 * (float(np.abs(p - qh).sum()) + max(0.0, 1.0 - float(qh.sum()))))
        kl.append(float(np.sum(p * np.log(p / qh))))
    if not docs:
        raise ValueError("no batches to measure")
    return PackedOrderStats(
        batches=len(docs),
        documents_per_batch=float(np.mean(docs)),
        groups_per_batch=float(np.mean(groups)),
        mix_distance=float(np.mean(tv)),
        mix_kl=float(np.mean(kl)),
    )


def order_stats(
    order: np.ndarray,
    *,
    group_size: int,
    batch_size: int,
    io_block_size: int,
    window_blocks: int,
    written: np.ndarray | None = None,
) -> OrderStats:
    """Figures for one order of store positions: groups per batch, displacement, contiguous runs and block reads
    per batch. ``written``: the input record at each store position of a store shuffled when written
    (:func:`~datatools.jobs.write_order.written_order`); groups and displacement are then counted in the input's
    order (where the groups are consecutive), runs and reads in the store's."""
    n = order.shape[0]
    num_batches = n // batch_size
    batches = np.sort(order[: num_batches * batch_size].reshape(num_batches, batch_size), axis=1)
    source = order if written is None else written[order]
    groups = np.sort(source[: num_batches * batch_size].reshape(num_batches, batch_size), axis=1) // group_size
    distinct = 1 + np.count_nonzero(np.diff(groups, axis=1), axis=1)
    runs = 1 + np.count_nonzero(np.diff(batches, axis=1) != 1, axis=1)
    reads = np.empty(num_batches, np.int64)
    _block_reads(order, io_block_size, window_blocks, batch_size, reads)
    displacement = np.abs(source - np.arange(n))
    return OrderStats(
        groups_per_batch=float(distinct.mean()),
        groups_per_batch_min=int(distinct.min()),
        mean_displacement=float(displacement.mean()),
        mean_displacement_fraction=float(displacement.mean() / n),
        runs_per_batch=float(runs.mean()),
        block_reads_per_batch=float(reads.mean()),
    )


@dataclass(frozen=True)
class ShuffleSettings:
    """What :func:`shuffle_report` compares its orders with: ``io_block_size`` records a contiguous read,
    ``window_blocks`` io blocks a shuffle window (and the reader's cache when counting reads; ``lanes``: every
    lane's window of blocks and one more), ``group_size`` records a stored group, ``batch_size`` records a batch,
    the shuffles' ``seed`` and ``epoch``, ``lanes`` x ``lane_window`` records of the lanes order
    (:func:`~datatools.kernels.shuffle.lane_order`). ``write_seed``: the orders read a store whose records were
    shuffled with that seed when written (``pretokenize --shuffle-seed``); groups are consecutive in the input."""

    io_block_size: int
    window_blocks: int
    group_size: int
    batch_size: int
    seed: int = 0
    epoch: int = 0
    lanes: int = 256
    lane_window: int = 1024
    write_seed: int | None = None

    def check(self, n: int) -> None:
        """ValueError naming the first setting out of range for ``n`` records (a batch of more than ``n``)."""
        for name in ("io_block_size", "window_blocks", "group_size", "batch_size"):
            check_int(getattr(self, name), name, minimum=1)
        if self.batch_size > n:
            raise ValueError(f"batch_size={self.batch_size} exceeds n={n}")
        check_int(self.lanes, "lanes", minimum=1)
        check_int(self.lane_window, "lane_window", minimum=1)


class ShuffleFields(TypedDict, total=False):
    """:class:`ShuffleSettings`' fields by name, as :func:`shuffle_report` takes them: typed one by one (a test
    keeps the two equal)."""

    io_block_size: int
    window_blocks: int
    group_size: int
    batch_size: int
    seed: int
    epoch: int
    lanes: int
    lane_window: int
    write_seed: int | None


def shuffle_report(n: int, settings: ShuffleSettings | None = None, **fields: Unpack[ShuffleFields]) -> ShuffleReport:
    """Compare no shuffle, full Feistel shuffle, block shuffle and the block shuffle read in lanes on [0, n)
    records read as ``settings`` say (:class:`ShuffleSettings`; ``fields``: its fields by name, over
    ``settings``: ``shuffle_report(n, io_block_size=64, window_blocks=1024, group_size=64, batch_size=128)``)."""
    s = ShuffleSettings(**fields) if settings is None else replace(settings, **fields)
    n = check_int(n, "n", minimum=1)
    s.check(n)
    lane_cache = s.lanes * (-(-s.lane_window // s.io_block_size) + 2)
    written = None if s.write_seed is None else written_order(n, s.write_seed)
    return ShuffleReport(
        n=n,
        io_block_size=s.io_block_size,
        window_blocks=s.window_blocks,
        group_size=s.group_size,
        batch_size=s.batch_size,
        seed=s.seed,
        epoch=s.epoch,
        expected_groups_per_batch=expected_distinct_groups(n, s.group_size, s.batch_size),
        orders={
            name: order_stats(
                order,
                group_size=s.group_size,
                batch_size=s.batch_size,
                io_block_size=s.io_block_size,
                window_blocks=lane_cache if name == "lanes" else s.window_blocks,
                written=written,
            )
            for name, order in _orders(n, s).items()
        },
        lanes=s.lanes,
        lane_window=s.lane_window,
        lane_cache_blocks=lane_cache,
        write_seed=s.write_seed,
    )


def _orders(n: int, s: ShuffleSettings) -> dict[str, np.ndarray]:
    """The four orders of [0, n) compared: the storage order, a full Feistel shuffle, the block shuffle, and the
    block shuffle read in lanes."""
    return {
        "none": np.arange(n, dtype=np.int64),
        "full": FeistelPermutation(n, s.seed, epoch=s.epoch).indices(),
        "block": BlockShuffle(n, io_block_size=s.io_block_size, window_blocks=s.window_blocks, seed=s.seed).indices(
            s.epoch
        ),
        "lanes": lane_order(
            n, io_block_size=s.io_block_size, lanes=s.lanes, window=s.lane_window, seed=s.seed, epoch=s.epoch
        ),
    }
