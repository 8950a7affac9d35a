"""Tile-aligned contexts: lengths the accelerator's kernels run without padding (tiles of 128 on TPU MXUs and most GPU
kernels, 256 for some TPU attention blocks: 4600 tokens are padded to 4608 inside the kernel anyway).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from datatools.base.checks import DEFAULT_ALGORITHM, MAX_CTX, as_lengths, check_id, check_int
from datatools.kernels.packing import check_token_ids, pack_lengths


def tile_align(n, tile: int):
    """The smallest multiple of ``tile`` that is >= n (int or integer array; tokens)."""
    tile = check_int(tile, "tile", minimum=1)
    if isinstance(n, (int, np.integer)) and not isinstance(n, bool):
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        return int(-(-int(n) // tile) * tile)
    arr = as_lengths(n, "n")
    return -(-arr // tile) * tile


def choose_context(
    lengths, *, tile: int, max_ctx: int, min_ctx: int | None = None, algorithm: str = DEFAULT_ALGORITHM
) -> list[dict]:
    """The tile-aligned contexts in [min_ctx, max_ctx] for this length distribution, best first (highest packed
    efficiency, then the smaller ctx): dicts of ``ctx``, ``tiles``, the useful-token fraction packed
    (``packed_efficiency``, ``packed_rows``; ``algorithm``) and padded (``padded_efficiency``: one document a row,
    long ones split), and ``relative_activation_memory`` / ``relative_attention_memory`` (ctx, ctx^2 against the
    largest candidate)."""
    tile = check_int(tile, "tile", minimum=1, maximum=MAX_CTX)
    max_ctx = check_int(max_ctx, "max_ctx", minimum=1, maximum=MAX_CTX)
    min_ctx = tile if min_ctx is None else check_int(min_ctx, "min_ctx", minimum=1)
    lengths = as_lengths(lengths)
    lengths = lengths[lengths > 0]
    if lengths.size == 0:
        raise ValueError("lengths has no non-empty documents")
    top = max_ctx // tile * tile
    candidates = np.arange(tile_align(min_ctx, tile), top + 1, tile)
    if candidates.size == 0:
        raise ValueError(f"no multiple of tile={tile} lies in [min_ctx={min_ctx}, max_ctx={max_ctx}]")
    total = int(lengths.sum())
    ranked = []
    for ctx in candidates.tolist():
        plan = pack_lengths(lengths, ctx, algorithm=algorithm)
        padded_rows = int((-(-lengths // ctx)).sum())
        ranked.append(
            {
                "ctx": ctx,
                "tiles": ctx // tile,
                "packed_efficiency": plan.efficiency,
                "packed_rows": plan.num_rows,
                "padded_efficiency": total / (padded_rows * ctx),
                "relative_activation_memory": ctx / top,
                "relative_attention_memory": (ctx / top) ** 2,
            }
        )
    ranked.sort(key=lambda r: (-round(r["packed_efficiency"], 6), r["ctx"]))
    return ranked


def fit_resolution(
    length_fn: Callable[[int], int], max_ctx: int, *, tile: int, low: int = 1, high: int | None = None
) -> tuple[int, int]:
    """The largest resolution P whose sequence (``length_fn(P)``, non-decreasing, as a patch-based tokenizer's) fits a
    tile-aligned context <= max_ctx: ``(P, tile_align(length_fn(P), tile))``, by binary search (``lambda p: 108 + 20
    * p * p``, max_ctx 4608, tile 256: (15, 4608)). ValueError when not even ``length_fn(low)`` fits, or when every
    resolution does."""
    max_ctx = check_int(max_ctx, "max_ctx", minimum=1)
    tile = check_int(tile, "tile", minimum=1)
    low = check_int(low, "low")

    def fits(p: int) -> bool:
        return tile_align(check_int(length_fn(p), "length_fn(P)", minimum=0), tile) <= max_ctx

    if not fits(low):
        raise ValueError(f"length_fn({low}) = {length_fn(low)} does not fit max_ctx={max_ctx} (tile {tile})")
    lo = low
    if high is None:
        step = 1
        while fits(lo + step):
            lo += step
            step *= 2
            if step > 1 << 40:
                raise ValueError("length_fn does not grow: every resolution fits")
        hi = lo + step  # does not fit
    else:
        hi = check_int(high, "high") + 1
        if fits(hi - 1):
            return hi - 1, tile_align(int(length_fn(hi - 1)), tile)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, tile_align(int(length_fn(lo)), tile)


def chunk(
    tokens, ctx: int, *, tile: int, stride: int | None = None, bos: int | None = None, eos: int | None = None
) -> list[np.ndarray]:
    """One document (with ``bos`` / ``eos`` around it) cut into 1-D windows of at most ``ctx`` tokens (a multiple of
    tile; all but the last exactly ``ctx``; views where possible, of the document's dtype or wider to fit bos/eos).
    ``stride=None``: consecutive windows, together the document exactly; ``stride < ctx``: overlapping windows every
    ``stride`` tokens, the last ending at the end. Token ids must be integers in [0, 2**31 - 1]: float or bool
    tokens are a TypeError, a bad id a ValueError naming it."""
    ctx = check_int(ctx, "ctx", minimum=1)
    tile = check_int(tile, "tile", minimum=1)
    if ctx % tile:
        raise ValueError(
            f"ctx={ctx} is not a multiple of tile={tile}; use tile_align(ctx, tile) = {tile_align(ctx, tile)}"
        )
    stride = ctx if stride is None else check_int(stride, "stride", minimum=1)
    if stride > ctx:
        raise ValueError(f"stride={stride} > ctx={ctx} would skip tokens")
    bos = None if bos is None else check_id(bos, "bos")
    eos = None if eos is None else check_id(eos, "eos")
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"tokens must be integer token ids, got dtype {arr.dtype}")
    check_token_ids(arr)
    special = [i for i in (bos, eos) if i is not None]
    if special:
        dtype = np.promote_types(arr.dtype, np.min_scalar_type(max(special)))
        head, tail = ([] if i is None else [i] for i in (bos, eos))
        arr = np.concatenate([np.array(head, dtype), arr, np.array(tail, dtype)])
    n = arr.shape[0]
    if n == 0:
        return []
    if stride == ctx:
        starts: range | list[int] = range(0, n, ctx)
    else:  # overlapping windows, then one that ends exactly at the end
        starts = [*range(0, max(n - ctx, 0), stride), max(n - ctx, 0)]
    return [arr[s : s + ctx] for s in starts]
