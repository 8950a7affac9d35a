"""Documents cut into the pieces every packer works on (tokens), and the orders and histograms of their sizes."""

from __future__ import annotations

import numba
import numpy as np

from datatools.base.checks import MAX_CTX, OVERFLOW_POLICIES, as_lengths, check_int

OVERFLOW_CODE = {name: code for code, name in enumerate(OVERFLOW_POLICIES)}


@numba.njit(cache=True, nogil=True)
def _cut_pieces(lengths, ctx, overflow_code):
    """(doc, start, length, dropped_tokens, empty_documents) of pieces of at most ctx tokens; overflow_code: 0
    split, 1 truncate, 2 drop (3 error is checked before)."""
    n = lengths.shape[0]
    count = 0
    for i in range(n):
        L = lengths[i]
        if L == 0:
            continue
        if L <= ctx:
            count += 1
        elif overflow_code == 0:
            count += (L + ctx - 1) // ctx
        elif overflow_code == 1:
            count += 1
    doc = np.empty(count, np.int64)
    start = np.empty(count, np.int64)
    length = np.empty(count, np.int32)
    dropped = 0
    empty = 0
    k = 0
    for i in range(n):
        L = lengths[i]
        if L == 0:
            empty += 1
            continue
        if L <= ctx:
            doc[k] = i
            start[k] = 0
            length[k] = L
            k += 1
        elif overflow_code == 0:
            s = 0
            while s < L:
                doc[k] = i
                start[k] = s
                length[k] = min(ctx, L - s)
                k += 1
                s += ctx
        elif overflow_code == 1:
            doc[k] = i
            start[k] = 0
            length[k] = ctx
            dropped += L - ctx
            k += 1
        else:
            dropped += L
    return doc, start, length, dropped, empty


def cut_pieces(lengths: np.ndarray, ctx: int, overflow: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """(doc int64, start int64, length int32, dropped_tokens, empty_documents): the pieces of ``lengths`` (validated
    int64 tokens per document; an empty one gives none) under the overflow policy at ``ctx`` tokens."""
    if overflow == "error" and lengths.size:
        too_long = np.flatnonzero(lengths > ctx)
        if too_long.size:
            i = int(too_long[0])
            raise ValueError(f"document {i} has length {int(lengths[i])} > {ctx} (overflow='error')")
    doc, start, length, dropped, empty = _cut_pieces(lengths, ctx, OVERFLOW_CODE.get(overflow, 0))
    return doc, start, length, int(dropped), int(empty)


def piece_sizes(lengths, ctx: int) -> np.ndarray:
    """int32 sizes (tokens) of the pieces that splitting every document at ``ctx`` gives, in input order."""
    return _split_sizes(as_lengths(lengths), check_int(ctx, "ctx", minimum=1, maximum=MAX_CTX))


def piece_histogram(lengths, ctx: int) -> np.ndarray:
    """int64 (ctx + 1,): ``counts[c]`` pieces of c tokens that splitting every document at ``ctx`` gives (index 0:
    none), :func:`~datatools.kernels.packing.counting.count_rows`' ``histogram``."""
    return split_histogram(as_lengths(lengths), check_int(ctx, "ctx", minimum=1, maximum=MAX_CTX))


@numba.njit(cache=True, nogil=True)
def _split_sizes(lengths, ctx):
    count = 0
    for i in range(lengths.shape[0]):
        count += (lengths[i] + ctx - 1) // ctx
    out = np.empty(count, np.int32)
    k = 0
    for i in range(lengths.shape[0]):
        rest = lengths[i]
        while rest > 0:
            take = min(rest, ctx)
            out[k] = take
            k += 1
            rest -= take
    return out


@numba.njit(cache=True, nogil=True)
def split_histogram(lengths, ctx):
    """:func:`piece_histogram` without the checks (the kernel, callable from other kernels)."""
    counts = np.zeros(ctx + 1, np.int64)
    for i in range(lengths.shape[0]):
        n = lengths[i]
        counts[ctx] += n // ctx
        counts[n % ctx] += 1
    counts[0] = 0
    return counts


@numba.njit(cache=True, nogil=True)
def decreasing_order(units, capacity):
    """Stable counting sort of piece indices by size, largest first. O(n + capacity)."""
    counts = np.zeros(capacity + 2, np.int64)
    for i in range(units.shape[0]):
        counts[capacity - units[i] + 1] += 1
    for c in range(1, capacity + 2):
        counts[c] += counts[c - 1]
    order = np.empty(units.shape[0], np.int32)
    for i in range(units.shape[0]):
        key = capacity - units[i]
        order[counts[key]] = i
        counts[key] += 1
    return order


@numba.njit(cache=True, nogil=True)
def decreasing_runs(counts):
    """(sizes int32, runs int64): the sizes in a size histogram (not 0), largest first, and their counts."""
    k = 0
    for c in range(1, counts.shape[0]):
        if counts[c] > 0:
            k += 1
    sizes = np.empty(k, np.int32)
    runs = np.empty(k, np.int64)
    j = 0
    for c in range(counts.shape[0] - 1, 0, -1):
        if counts[c] > 0:
            sizes[j] = c
            runs[j] = counts[c]
            j += 1
    return sizes, runs
