"""Length bucketing, where rows cannot be packed: each document padded only to its bucket's tile-aligned boundary,
few buckets (2-8: XLA compiles one program per shape), token-budget batches; pad-to-max baselines to compare.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from datatools.base.checks import (
    MAX_BATCH,
    MAX_BUCKETS,
    MAX_CTX,
    MAX_TOKEN_BUDGET,
    OVERFLOW_POLICIES,
    as_lengths,
    check_choice,
    check_int,
    short_repr,
)
from datatools.kernels.packing import cut_pieces


@numba.njit(cache=True)
def optimal_boundaries(cand, counts, num_buckets):
    """Exact DP: <= num_buckets of the ascending candidate boundaries ``cand`` (tokens), the last mandatory;
    ``counts[j]`` items fit ``cand[j]`` first; a bucket (cand[i], cand[j]] costs cand[j] * its items. O(K * C^2)."""
    C = cand.shape[0]
    prefix = np.zeros(C + 1, np.int64)
    for j in range(C):
        prefix[j + 1] = prefix[j] + counts[j]
    INF = np.int64(1) << np.int64(62)
    K = min(num_buckets, C)
    # best[k, j]: least slots covering items up to cand[j] with k buckets, the last ending at j.
    best = np.full((K + 1, C), INF, np.int64)
    back = np.full((K + 1, C), -1, np.int64)
    for j in range(C):
        best[1, j] = cand[j] * prefix[j + 1]
    for k in range(2, K + 1):
        for j in range(k - 1, C):
            for i in range(k - 2, j):
                if best[k - 1, i] < INF:
                    v = best[k - 1, i] + cand[j] * (prefix[j + 1] - prefix[i + 1])
                    if v < best[k, j]:
                        best[k, j] = v
                        back[k, j] = i
    k_best = 1
    for k in range(1, K + 1):
        if best[k, C - 1] < best[k_best, C - 1]:
            k_best = k
    out = np.empty(k_best, np.int64)
    j = C - 1
    for k in range(k_best, 0, -1):
        out[k - 1] = cand[j]
        j = back[k, j]
    return out, best[k_best, C - 1]


def bucket_boundaries(
    lengths, num_buckets: int, *, tile: int = 128, max_len: int | None = None, overflow: str = "split"
) -> np.ndarray:
    """At most ``num_buckets`` ascending int64 boundaries (tokens, multiples of ``tile``) minimising the padded slots
    of documents of ``lengths`` (each padded to the smallest boundary >= its length), exactly. The last is
    ``max_len`` (default: the longest document rounded up to ``tile``); longer documents: ``overflow`` (``split``
    into max_len pieces, ``truncate``, ``drop`` or ``error``)."""
    num_buckets = check_int(num_buckets, "num_buckets", minimum=1, maximum=MAX_BUCKETS)
    tile = check_int(tile, "tile", minimum=1, maximum=MAX_CTX)
    check_choice(overflow, "overflow", OVERFLOW_POLICIES)
    lengths = as_lengths(lengths)
    if lengths.size == 0:
        raise ValueError("lengths is empty: no documents to bucket")
    if max_len is None:
        max_len = max(tile, -(-int(lengths.max()) // tile) * tile)
    else:
        max_len = check_int(max_len, "max_len", minimum=1, maximum=MAX_CTX)
        if max_len % tile:
            raise ValueError(f"max_len={max_len} is not a multiple of tile={tile}")
    _, _, items, _, _ = cut_pieces(lengths, max_len, overflow)
    need = -(-items // tile)  # tiles each item needs
    need = need[need > 0]
    occupied = np.unique(need)
    top = max_len // tile
    cand_tiles = occupied if occupied.size and occupied[-1] == top else np.append(occupied, top)
    counts = np.bincount(np.searchsorted(cand_tiles, need), minlength=cand_tiles.size)
    boundaries, _ = optimal_boundaries(cand_tiles.astype(np.int64) * tile, counts, num_buckets)
    return boundaries


def bucket_batch_sizes(
    boundaries, *, batch_size: int | None = None, token_budget: int | None = None, multiple_of: int = 1
) -> np.ndarray:
    """Rows per batch for each of the ``boundaries`` (tokens): ``batch_size`` for all, or ``floor(token_budget /
    boundary)`` rounded down to a multiple of ``multiple_of`` (the device count). ValueError unless exactly one of
    the two is given, or for a budget too small for ``multiple_of`` rows of the largest bucket."""
    b = as_lengths(boundaries, "boundaries")
    multiple_of = check_int(multiple_of, "multiple_of", minimum=1, maximum=MAX_BATCH)
    if (batch_size is None) == (token_budget is None):
        raise ValueError("give exactly one of batch_size and token_budget")
    if batch_size is not None:
        batch_size = check_int(batch_size, "batch_size", minimum=1, maximum=MAX_BATCH)
        if batch_size % multiple_of:
            raise ValueError(f"batch_size={batch_size} is not a multiple of multiple_of={multiple_of}")
        return np.full(b.shape[0], batch_size, dtype=np.int64)
    token_budget = check_int(token_budget, "token_budget", minimum=1, maximum=MAX_TOKEN_BUDGET)
    sizes = (token_budget // np.maximum(b, 1)) // multiple_of * multiple_of
    if sizes.size and sizes.min() < 1:
        worst = int(b[np.argmin(sizes)])
        raise ValueError(f"token_budget={token_budget} fits fewer than {multiple_of} rows of length {worst}")
    return sizes


def check_buckets(boundaries, batch_sizes) -> tuple[np.ndarray, np.ndarray]:
    """Bucket boundaries (tokens: positive, increasing, at most :data:`MAX_BUCKETS` of at most :data:`MAX_CTX`) and
    rows per batch (one int, or one per bucket, in [1, :data:`MAX_BATCH`]) as int64 arrays; ValueError naming the bad
    value."""
    b = as_lengths(np.asarray(boundaries).reshape(-1), "boundaries")
    if b.size == 0 or b.min() < 1 or np.any(np.diff(b) <= 0):
        raise ValueError(
            f"boundaries must be positive, non-empty and increasing (ascending), got {short_repr(b.tolist())}"
        )
    if b.size > MAX_BUCKETS or b.max() > MAX_CTX:
        raise ValueError(
            f"boundaries: at most {MAX_BUCKETS:,} buckets of at most {MAX_CTX:,} tokens "
            f"(datatools' limits), got {short_repr(b.tolist())}"
        )
    if np.isscalar(batch_sizes):
        batch_sizes = [check_int(batch_sizes, "batch_size", minimum=1, maximum=MAX_BATCH)] * b.size
    sizes = as_lengths(np.asarray(batch_sizes).reshape(-1), "batch_sizes")
    if sizes.shape != b.shape or sizes.min() < 1 or sizes.max() > MAX_BATCH:
        raise ValueError(
            f"{sizes.size} batch sizes for {b.size} buckets: one size in [1, {MAX_BATCH:,}] per bucket is needed, "
            f"got {short_repr(sizes.tolist())}"
        )
    return b, sizes


@dataclass(frozen=True)
class BucketPlan:
    """Batches of documents (or pieces), one bucket shape per batch: batch ``i`` holds items
    ``doc/start/length[batch_splits[i]:batch_splits[i+1]]``, padded to ``(batch_sizes[k], boundaries[k])``,
    ``k = batch_bucket[i]``."""

    boundaries: np.ndarray
    batch_sizes: np.ndarray
    batch_splits: np.ndarray
    batch_bucket: np.ndarray
    doc: np.ndarray
    start: np.ndarray
    length: np.ndarray
    dropped_tokens: int
    dropped_items: int

    @property
    def num_batches(self) -> int:
        return int(self.batch_bucket.shape[0])

    def batch(self, i: int) -> np.ndarray:
        """Document indices of batch ``i``."""
        return self.doc[self.batch_splits[i] : self.batch_splits[i + 1]]

    @property
    def padded_slots(self) -> int:
        """Token slots computed: every batch is a full (batch size, boundary) shape."""
        return int((self.batch_sizes[self.batch_bucket] * self.boundaries[self.batch_bucket]).sum())

    @property
    def efficiency(self) -> float:
        """Real tokens / padded slots."""
        slots = self.padded_slots
        return int(self.length.sum()) / slots if slots else 0.0

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """The distinct (rows, ctx) batch shapes used."""
        used = np.unique(self.batch_bucket)
        return [(int(self.batch_sizes[k]), int(self.boundaries[k])) for k in used]


def bucket_batches(
    lengths, boundaries, batch_sizes, *, overflow: str = "split", drop_remainder: bool = False
) -> BucketPlan:
    """Every document of ``lengths`` (zero-length ones left out) in exactly one batch of its bucket
    (``boundaries``, tokens; ``batch_sizes`` per bucket or an int), batches grouped by bucket. Documents longer than
    the last boundary: ``overflow`` as in :func:`bucket_boundaries` (dropped tokens counted). ``drop_remainder``
    leaves out each bucket's partial batch (counted in ``dropped_tokens``) instead of padding it."""
    lengths = as_lengths(lengths)
    b, sizes = check_buckets(boundaries, batch_sizes)
    check_choice(overflow, "overflow", OVERFLOW_POLICIES)
    doc, start, length, dropped, _ = cut_pieces(lengths, int(b[-1]), overflow)
    bucket_of = np.searchsorted(b, length, side="left").astype(np.int64)
    order, splits, batch_bucket = fill_order_batches(bucket_of, sizes, drop_remainder=drop_remainder, by_bucket=True)
    kept = np.zeros(length.shape[0], np.bool_)
    kept[order] = True
    dropped += int(length[~kept].sum())
    return BucketPlan(
        boundaries=b,
        batch_sizes=sizes,
        batch_splits=splits,
        batch_bucket=batch_bucket,
        doc=doc[order],
        start=start[order],
        length=length[order],
        dropped_tokens=dropped,
        dropped_items=int((~kept).sum()),
    )


def fill_order_batches(
    bucket_of, batch_sizes, *, drop_remainder: bool = False, by_bucket: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batches of items in the order a stream fills them: item i joins bucket ``bucket_of[i]``, a batch is emitted
    when its ``batch_sizes[k]``-th item arrives, then each bucket's partial batch in bucket order (or none with
    ``drop_remainder``); ``by_bucket``: the same batches bucket by bucket. Returns ``(items, batch_splits,
    batch_bucket)``: batch b holds ``items[batch_splits[b]:batch_splits[b + 1]]``, of bucket ``batch_bucket[b]``."""
    bucket_of = np.asarray(bucket_of, np.int64).reshape(-1)
    sizes = as_lengths(batch_sizes, "batch_sizes")
    k = sizes.shape[0]
    if bucket_of.size and (bucket_of.min() < 0 or bucket_of.max() >= k):
        raise ValueError(f"bucket_of must lie in [0, {k}); got {int(bucket_of.min())}..{int(bucket_of.max())}")
    if sizes.size and sizes.min() < 1:
        raise ValueError(f"batch_sizes must be >= 1; got {sizes.tolist()}")
    order = np.argsort(bucket_of.astype(np.uint16) if k <= 1 << 16 else bucket_of, kind="stable")
    counts = np.bincount(bucket_of, minlength=k)
    starts = np.concatenate(([0], np.cumsum(counts)))
    full = counts // sizes
    rest = np.zeros_like(counts) if drop_remainder else counts % sizes
    per_bucket = full + (rest > 0)  # batches of each bucket: its full ones, then its partial one
    bucket = np.repeat(np.arange(k, dtype=np.int64), per_bucket)
    within = np.arange(bucket.shape[0], dtype=np.int64) - np.repeat(np.cumsum(per_bucket) - per_bucket, per_bucket)
    first = starts[bucket] + within * sizes[bucket]  # each batch's first item, as a rank in `order`
    length = np.where(within < full[bucket], sizes[bucket], rest[bucket])
    if not by_bucket:  # a full batch is emitted when its last item arrives; the partial ones after all, by bucket
        last = np.where(within < full[bucket], order[first + length - 1], bucket_of.shape[0] + bucket)
        emit = np.argsort(last, kind="stable")
        bucket, first, length = bucket[emit], first[emit], length[emit]
    splits = np.concatenate(([0], np.cumsum(length))).astype(np.int64)
    take = np.repeat(first - splits[:-1], length) + np.arange(int(splits[-1]), dtype=np.int64)
    return order[take].astype(np.int64), splits, bucket


def padding_efficiency(lengths, *, max_len: int, batch_size: int, tile: int = 1) -> dict:
    """``efficiency``, ``shapes`` and ``dropped_tokens`` of two baselines on documents truncated to max_len:
    ``pad_to_max`` and ``pad_to_batch_max`` (batches of ``batch_size`` padded to their longest, rounded to ``tile``)."""
    lengths = as_lengths(lengths)
    max_len = check_int(max_len, "max_len", minimum=1, maximum=MAX_CTX)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    tile = check_int(tile, "tile", minimum=1, maximum=MAX_CTX)
    if lengths.size == 0:
        raise ValueError("lengths is empty")
    kept = np.minimum(lengths, max_len)
    real = int(kept.sum())
    dropped = int(lengths.sum()) - real
    pad = np.zeros((-kept.size) % batch_size, dtype=np.int64)
    batches = np.concatenate([kept, pad]).reshape(-1, batch_size)
    widths = np.minimum(-(-np.maximum(batches.max(axis=1), 1) // tile) * tile, max(max_len, tile))
    rows = np.full(batches.shape[0], batch_size)
    return {
        "pad_to_max": {"efficiency": real / (kept.size * max_len), "shapes": 1, "dropped_tokens": dropped},
        "pad_to_batch_max": {
            "efficiency": real / int((rows * widths).sum()),
            "shapes": int(np.unique(widths).size),
            "dropped_tokens": dropped,
        },
    }
