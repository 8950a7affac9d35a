"""Which ``block`` x ``block`` tiles of a packed row's attention matrix hold work, for a segment-aware kernel: query t
attends to key s <= t of its piece; a tile is empty (no such pair; over 90% with documents of a few hundred tokens at
ctx 8192), full (every pair) or partial. O(ctx) per row.
"""

from __future__ import annotations

import numba
import numpy as np

from datatools.base.checks import check_int

EMPTY, PARTIAL, FULL = 0, 1, 2


@numba.njit(cache=True)
def _row_blocks(seg, block, out):
    """Fill ``out[nb, nb]`` (int8) with EMPTY / PARTIAL / FULL for one row's segment ids."""
    t = seg.shape[0]
    nb = t // block
    start = np.empty(t, np.int64)
    for q in range(t):
        start[q] = q if q == 0 or seg[q] != seg[q - 1] else start[q - 1]
    for i in range(nb):
        all_real = True
        latest_start = 0
        q = i * block
        while q < (i + 1) * block:  # one run of one segment at a time
            s = seg[q]
            r = q
            while r + 1 < (i + 1) * block and seg[r + 1] == s:
                r += 1
            if s == 0:
                all_real = False
            else:
                latest_start = max(latest_start, start[q])
                for j in range(start[q] // block, r // block + 1):
                    out[i, j] = PARTIAL
            q = r + 1
        if all_real:
            for j in range(i):  # strictly below the diagonal, inside the piece every query of block i is in
                if out[i, j] != EMPTY and latest_start <= j * block:
                    out[i, j] = FULL


@numba.njit(cache=True)
def _row_tiles(row_splits, length, block, align, out):
    """``out[r] = (pairs, tiles)`` of row r: in-document causal pairs, and tiles holding them (a piece spanning n
    blocks covers n(n+1)/2; pieces meeting in a block share its diagonal tile). Pieces start at multiples of
    ``align``."""
    for r in range(row_splits.shape[0] - 1):
        at = 0
        last = -1  # the last block a piece of this row reached
        pairs = np.int64(0)
        tiles = np.int64(0)
        for j in range(row_splits[r], row_splits[r + 1]):
            s = np.int64(length[j])
            if s <= 0:
                continue
            at = (at + align - 1) // align * align
            pairs += s * (s + 1) // 2
            b0 = at // block
            b1 = (at + s - 1) // block
            n = b1 - b0 + 1
            tiles += n * (n + 1) // 2
            if b0 == last:
                tiles -= 1  # the diagonal tile of the block both pieces touch, counted once
            last = b1
            at += s
        out[r, 0] = pairs
        out[r, 1] = tiles


def row_tiles(row_splits, length, block: int, *, align: int = 1) -> np.ndarray:
    """int64 (rows, 2): per packed row, the causal query-key pairs inside its documents (what a segment-aware kernel
    computes) and the ``block`` x ``block`` tiles holding them (what a block-sparse kernel visits), counted from the
    piece lengths alone (row r holds pieces ``row_splits[r]:row_splits[r + 1]`` of ``length`` tokens, back to back,
    each starting at a multiple of ``align``); equal to :func:`block_structure`'s non-empty tiles of the row."""
    block = check_int(block, "block", minimum=1)
    align = check_int(align, "align", minimum=1)
    splits = np.ascontiguousarray(row_splits, dtype=np.int64)
    out = np.zeros((max(0, splits.shape[0] - 1), 2), np.int64)
    _row_tiles(splits, np.ascontiguousarray(length, dtype=np.int64), block, align, out)
    return out


def block_structure(segment_ids, block: int) -> np.ndarray:
    """int8 (rows, ctx // block, ctx // block): EMPTY (0), PARTIAL (1) or FULL (2) for each (query, key) tile of
    ``segment_ids`` (rows, ctx; 0 at padding); ``block`` (tokens) must divide ctx."""
    seg = np.asarray(segment_ids)
    if seg.ndim != 2 or seg.dtype.kind not in "iu":
        raise ValueError(f"segment_ids must be a (rows, ctx) integer array, got {seg.dtype} {seg.shape}")
    block = check_int(block, "block", minimum=1, maximum=max(1, seg.shape[1]))
    if seg.shape[1] % block:
        raise ValueError(f"block={block} must divide ctx={seg.shape[1]}")
    nb = seg.shape[1] // block
    out = np.zeros((seg.shape[0], nb, nb), np.int8)
    for r in range(seg.shape[0]):
        _row_blocks(np.ascontiguousarray(seg[r], dtype=np.int32), block, out[r])
    return out


def bucket_width(most: int, *, minimum: int = 16, step: int = 256) -> int:
    """A padded list length for ``most`` entries: a power of two up to ``step`` (at least ``minimum``), a multiple
    of ``step`` above it (a few compiled programs, not one per batch)."""
    most = max(1, int(most))
    return max(int(minimum), 1 << (most - 1).bit_length()) if most <= step else -(-most // step) * step


def block_pairs(segment_ids, block: int, *, kinds: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The non-empty tiles of every row as a padded list (a gather-based kernel's form): int32 (rows, P), P the most
    in any row by :func:`bucket_width`: ``block_q``, ``block_k`` (tile coordinates), ``block_valid`` (0 for padding
    entries, at tile (0, 0)). ``kinds``: :func:`block_structure`'s result, when the caller has it."""
    kinds = block_structure(segment_ids, block) if kinds is None else kinds
    rows, nb, _ = kinds.shape
    counts = (kinds != EMPTY).reshape(rows, -1).sum(axis=1)
    width = bucket_width(int(counts.max(initial=0)))
    q = np.zeros((rows, width), np.int32)
    k = np.zeros((rows, width), np.int32)
    valid = np.zeros((rows, width), np.int32)
    for r in range(rows):
        qi, ki = np.nonzero(kinds[r])
        n = qi.shape[0]
        q[r, :n], k[r, :n], valid[r, :n] = qi, ki, 1
    return {"block_q": q, "block_k": k, "block_valid": valid}


TILE_KEYS = ("tile_row", "tile_q", "tile_k", "tile_full", "tile_by_k", "tile_count")


def tile_list(segment_ids, block: int, *, kinds: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The batch's non-empty tiles as one list, the scalar-prefetch operands of a Pallas block-sparse kernel: int32
    (P,) ``tile_row``, ``tile_q``, ``tile_k`` (sorted by row, query block, key block), ``tile_full`` (1: no mask
    needed), ``tile_by_k`` (the order by row, key block, query block: the dk/dv pass) and ``tile_count`` (1,): real
    entries, P their :func:`bucket_width`; padding entries repeat the last tile, ``tile_by_k`` maps them to
    themselves."""
    kinds = block_structure(segment_ids, block) if kinds is None else kinds
    row, q, k = (x.astype(np.int32) for x in np.nonzero(kinds))  # C order: sorted by (row, q, k)
    full = (kinds[row, q, k] == FULL).astype(np.int32)
    n = row.shape[0]
    width = bucket_width(n)
    out = {}
    for name, values in (("tile_row", row), ("tile_q", q), ("tile_k", k), ("tile_full", full)):
        arr = np.zeros(width, np.int32)
        arr[:n] = values
        if n:
            arr[n:] = values[-1]
        out[name] = arr
    by_k = np.arange(width, dtype=np.int32)
    by_k[:n] = np.lexsort((q, k, row))
    out["tile_by_k"] = by_k
    out["tile_count"] = np.array([n], np.int32)
    return out


def device_tile_lists(
    segment_ids, block: int, devices: int, *, kinds: np.ndarray | None = None, width: int | None = None
) -> dict[str, np.ndarray]:
    """One :func:`tile_list` per device for a batch sharded over ``devices`` in contiguous slices of rows (what
    ``jax.shard_map`` over the batch axis gives each device): int32 (devices, P) ``tile_row`` (the row within the
    device's slice), ``tile_q``, ``tile_k``, ``tile_full``, ``tile_by_k`` and (devices, 1) ``tile_count``, P the
    :func:`bucket_width` of the longest device list (one static shape: the shorter lists padded, their padding
    entries repeating their last tile). Padding share: 1 - tile_count.sum() / (devices * P); balanced batches
    (:mod:`datatools.kernels.balance`) keep it small. ``width``: P itself (at least the longest list), one shape
    for several batches."""
    kinds = block_structure(segment_ids, block) if kinds is None else kinds
    devices = check_int(devices, "devices", minimum=1)
    rows = kinds.shape[0]
    if rows % devices:
        raise ValueError(f"a batch of {rows} rows does not divide over {devices} devices")
    per = rows // devices
    lists = [tile_list(None, block, kinds=kinds[d * per : (d + 1) * per]) for d in range(devices)]
    most = max(int(x["tile_count"][0]) for x in lists)
    if width is None:
        width = bucket_width(most)
    elif width < most:
        raise ValueError(f"width={width} is shorter than a device's {most} tiles")
    out = {}
    for key in TILE_KEYS[:-1]:
        arr = np.zeros((devices, width), np.int32)
        for d, x in enumerate(lists):
            n = x[key].shape[0]
            arr[d, :n] = x[key]
            if key == "tile_by_k":
                arr[d, n:] = np.arange(n, width, dtype=np.int32)  # padding entries map to themselves
            elif n:
                arr[d, n:] = x[key][n - 1]
        out[key] = arr
    out["tile_count"] = np.stack([x["tile_count"] for x in lists]).astype(np.int32)
    return out
