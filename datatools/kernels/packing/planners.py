"""The packers (numba): which row each piece goes to, or only how many rows, in the same loop.

Every kernel takes piece sizes in units (``align`` tokens; ``capacity`` units a row) and returns ``(rows, most
pieces in one row)``, writing each piece's row into ``row_of`` (one int32 a piece; with no cap ``most`` is then 0)
or, given an empty one, only counting. ``runs[j]`` pieces of ``sizes[j]`` units come in a row (the decreasing
packers' sizes, largest first, from a histogram): placed in bulk, in exactly the rows one at a time would give;
``runs`` None (:data:`NO_RUNS`): one piece a size. ``window`` > 0: at most this many open rows, all closed when a
piece fits none (0: unbounded, ``max_rows`` provisioned). ``max_segments`` > 0 caps a row's pieces.
"""

from __future__ import annotations

import numba
import numpy as np

from datatools.kernels.packing.pieces import decreasing_runs
from datatools.kernels.packing.trees import (
    max_tree_first,
    max_tree_open,
    max_tree_set,
    presence_clear,
    presence_next,
    presence_set,
    serpentine_next,
    stack_push,
)

NO_RUNS = None  # one piece per size: numba compiles this case on its own, without the run bookkeeping
NO_ROWS = np.zeros(0, np.int32)
NO_PIECES = np.zeros(0, np.int64)


@numba.njit(cache=True, nogil=True, inline="always")
def run_length(runs, j):
    """Pieces of the ``j``-th size: ``runs[j]``, or 1 without runs."""
    if runs is None:
        return 1
    return runs[j]


@numba.njit(cache=True, nogil=True, inline="always")
def take_run(m, room, s, max_segments, segs, r, track, most):
    """How many of ``m`` equal pieces of ``s`` units row ``r`` takes (``room`` units free; the cap), and the most
    pieces in one row so far; counted into ``segs[r]`` when ``track``."""
    k = 1  # an open row has room for one more piece under the cap
    if m > 1:
        k = min(m, room // s)
        if max_segments > 0:
            k = min(k, max_segments - segs[r])
    if track:
        segs[r] += k
        most = max(most, segs[r])
    return k, most


@numba.njit(cache=True, nogil=True, inline="always")
def write_rows(row_of, at, k, row):
    """Pieces ``at .. at + k - 1`` go to ``row``."""
    for q in range(at, at + k):
        row_of[q] = row


@numba.njit(cache=True, nogil=True)
def next_fit(sizes, capacity, max_segments, row_of):
    """Next fit: one open row, a new one when the piece does not fit it (or the cap is reached). O(n)."""
    state = next_fit_state()
    next_fit_resume(sizes, capacity, max_segments, state, row_of)
    return state[0], state[3]


@numba.njit(cache=True, nogil=True)
def next_fit_state():
    """A fresh next fit: [rows, free units of the open row (-1: none), its pieces, most pieces in a row, at]."""
    state = np.zeros(5, np.int64)
    state[1] = -1
    return state


@numba.njit(cache=True, nogil=True)
def next_fit_resume(sizes, capacity, max_segments, state, row_of):
    """Place ``sizes`` after the pieces of earlier calls (as :func:`first_fit_resume`); rows ``state[0]``."""
    record = row_of.shape[0] > 0
    rows = state[0]
    free = state[1]
    segs = state[2]
    most = state[3]
    at = state[4]
    for k in range(sizes.shape[0]):
        s = sizes[k]
        if free < s or (max_segments > 0 and segs >= max_segments):
            rows += 1
            free = capacity
            segs = 0
        if record:
            row_of[at + k] = rows - 1
        free -= s
        segs += 1
        most = max(most, segs)
    state[0] = rows
    state[1] = free
    state[2] = segs
    state[3] = most
    state[4] = at + sizes.shape[0]


@numba.njit(cache=True, nogil=True)
def first_fit(sizes, runs, capacity, max_segments, window, max_rows, row_of):
    """First fit: the lowest-numbered open row with room, found by descending a max segment tree over the rows'
    free capacity (a closed row holds -1), O(log rows) a placement."""
    tree, segs, state = first_fit_state(capacity, window, max_rows)
    first_fit_resume(sizes, runs, capacity, max_segments, window, tree, segs, state, row_of)
    return state[0] + state[1], state[2]


@numba.njit(cache=True, nogil=True)
def first_fit_state(capacity, window, max_rows):
    """A fresh first fit: (max tree over the rows' free units, pieces per row, [base, opened, most, at])."""
    slots = window if window > 0 else max(max_rows, 1)
    size = 1
    while size < slots:
        size *= 2
    tree = np.empty(2 * size, np.int32)
    segs = np.empty(size, np.int32)
    max_tree_open(tree, segs, size, slots, capacity)
    return tree, segs, np.zeros(4, np.int64)


@numba.njit(cache=True, nogil=True)
def first_fit_resume(sizes, runs, capacity, max_segments, window, tree, segs, state, row_of):
    """Place ``sizes`` into the first fit ``(tree, segs, state)`` left by :func:`first_fit_state` or an earlier
    call (pieces given in several calls land where one call would put them). Rows so far: ``state[0] +
    state[1]``; most pieces: ``state[2]``."""
    size = segs.shape[0]
    slots = window if window > 0 else size
    record = row_of.shape[0] > 0
    track = max_segments > 0 or not record  # pieces per row: for the cap, or for a count's fullest row
    base = state[0]  # rows closed by earlier windows
    opened = state[1]
    most = state[2]
    at = state[3]
    for j in range(sizes.shape[0]):
        s = sizes[j]
        m = run_length(runs, j)
        while m > 0:
            if window > 0 and tree[1] < s:  # every open row lacks room: close them all
                base += opened
                opened = 0
                max_tree_open(tree, segs, size, slots, capacity)
            node = max_tree_first(tree, size, s)
            b = node - size
            if b >= opened:
                opened = b + 1
            k, most = take_run(m, tree[node], s, max_segments, segs, b, track, most)
            v = tree[node] - k * s
            if max_segments > 0 and segs[b] >= max_segments:
                v = -1
            max_tree_set(tree, node, v)
            if record:
                write_rows(row_of, at, k, base + b)
            at += k
            m -= k
    state[0] = base
    state[1] = opened
    state[2] = most
    state[3] = at


@numba.njit(cache=True, nogil=True, inline="always")  # its callers hold its code: no kernel of its own to compile
def best_fit(sizes, runs, capacity, max_segments, window, max_rows, free0, segs0, row_of):
    """Best fit: the open row with the least free capacity that still fits, from one LIFO stack of rows per free
    capacity and a presence tree over capacities (O(log capacity)). Rows ``0 .. len(free0) - 1`` exist already with
    ``free0`` free units and ``segs0`` pieces (unbounded only)."""
    first = free0.shape[0]
    tree, head, below, segs, free, state = best_fit_state(capacity, window, first + max_rows)
    size = tree.shape[0] // 2
    most = 0
    for r in range(first):
        segs[r] = segs0[r]
        most = max(most, segs[r])
        f = free0[r]
        if max_segments > 0 and segs[r] >= max_segments:
            f = 0
        if f > 0:
            stack_push(tree, size, head, below, r, f)
    state[1] = first
    state[2] = most
    best_fit_resume(sizes, runs, capacity, max_segments, window, tree, head, below, segs, free, state, row_of)
    return state[0] + state[1], state[2]


@numba.njit(cache=True, nogil=True)
def best_fit_state(capacity, window, max_rows):
    """A fresh best fit with no row: (presence tree over capacities, stack heads, stack links, pieces per row,
    free units per row (a window only), [base, opened, most, at]); ``max_rows`` rows provisioned (no window)."""
    slots = window if window > 0 else max_rows
    size = 1
    while size < capacity + 1:
        size *= 2
    tree = np.zeros(2 * size, np.uint8)
    head = np.full(capacity + 1, -1, np.int32)
    below = np.empty(max(slots, 1), np.int32)
    segs = np.zeros(max(slots, 1), np.int32)
    free = np.zeros(window if window > 0 else 1, np.int32)
    return tree, head, below, segs, free, np.zeros(4, np.int64)


@numba.njit(cache=True, nogil=True)
def best_fit_resume(sizes, runs, capacity, max_segments, window, tree, head, below, segs, free, state, row_of):
    """Place ``sizes`` into the best fit left by :func:`best_fit_state` or an earlier call, as
    :func:`first_fit_resume`."""
    size = tree.shape[0] // 2
    record = row_of.shape[0] > 0
    track = max_segments > 0 or not record  # pieces per row: for the cap, or for a count's fullest row
    base = state[0]  # rows closed by earlier windows
    opened = state[1]
    most = state[2]
    at = state[3]
    for j in range(sizes.shape[0]):
        s = sizes[j]
        m = run_length(runs, j)
        while m > 0:
            c = presence_next(tree, size, s)
            if c < 0:
                if window > 0 and opened == window:  # every open row lacks room: close them all
                    base += opened
                    for b in range(opened):
                        f = free[b]
                        if f > 0 and head[f] >= 0:
                            head[f] = -1
                            presence_clear(tree, size, f)
                    opened = 0
                r = opened
                opened += 1
                segs[r] = 0
                c = capacity
            else:  # take row r off stack c
                r = head[c]
                head[c] = below[r]
                if head[c] < 0:
                    presence_clear(tree, size, c)
            k, most = take_run(m, c, s, max_segments, segs, r, track, most)
            f = c - k * s
            if max_segments > 0 and segs[r] >= max_segments:
                f = 0
            if window > 0:
                free[r] = f
            if f > 0:
                below[r] = head[f]
                if head[f] < 0:
                    presence_set(tree, size, f)
                head[f] = r
            if record:
                write_rows(row_of, at, k, base + r)
            at += k
            m -= k
    state[0] = base
    state[1] = opened
    state[2] = most
    state[3] = at


@numba.njit(cache=True, nogil=True)
def deal_capped(sizes, runs, capacity, max_segments, rows, row_of):
    """Deal pieces (``sizes`` decreasing) to ``rows`` rows in serpentine order, so every row gets large and small
    pieces; a piece that does not fit its row is missed (row -1). Returns (free units per row, pieces per row,
    histogram of the missed pieces' sizes)."""
    free = np.full(rows, capacity, np.int32)
    segs = np.zeros(rows, np.int32)
    missed = np.zeros(capacity + 1, np.int64)
    record = row_of.shape[0] > 0
    r = 0
    step = 1
    at = 0
    for j in range(sizes.shape[0]):
        s = sizes[j]
        m = run_length(runs, j)
        for _ in range(m):
            if s <= free[r] and segs[r] < max_segments:
                free[r] -= s
                segs[r] += 1
                if record:
                    row_of[at] = r
            else:
                missed[s] += 1
                if record:
                    row_of[at] = -1
            at += 1
            r, step = serpentine_next(r, step, rows)
    return free, segs, missed


@numba.njit(cache=True, nogil=True)
def worth_dealing(rows, units, pieces, capacity, max_segments):
    """Whether ``rows`` of a plain decreasing fit are over 1% above the bound max(units / capacity, pieces / cap):
    then :func:`capped_decreasing` is worth its time."""
    if pieces <= max_segments:
        return False
    bound = max(-(-units // capacity), -(-pieces // max_segments))
    return rows * 100 > bound * 101


@numba.njit(cache=True, nogil=True)
def capped_decreasing(sizes, runs, capacity, max_segments, pieces, units, row_of):
    """Placement of ``pieces`` pieces of ``units`` units (``sizes`` decreasing) under a binding cap on pieces per
    row, as the kernels: dealt to max(units / capacity, pieces / cap) rows (:func:`deal_capped`), the misses then
    best-fit. Decreasing fit under a cap leaves the small pieces a few to a nearly empty row (cap 4, mean 230
    tokens, ctx 1024: 25% padding against a 12% bound); the packers keep whichever needs fewer rows."""
    rows = max(-(-units // capacity), -(-pieces // max_segments), 1)
    free, segs, missed = deal_capped(sizes, runs, capacity, max_segments, rows, row_of)
    msizes, mruns = decreasing_runs(missed)
    nmissed = missed.sum()
    placed = np.empty(nmissed if row_of.shape[0] else 0, np.int32)
    rows, most = best_fit(msizes, mruns, capacity, max_segments, np.int64(0), nmissed, free, segs, placed)
    if row_of.shape[0] and nmissed:  # the missed pieces, in order, to the rows best fit gave them
        k = 0
        for i in range(row_of.shape[0]):
            if row_of[i] < 0:
                row_of[i] = placed[k]
                k += 1
    return rows, most


def concat_split_state(ctx: int) -> np.ndarray:
    """A fresh :func:`concat_split`: [pieces, rows, end of the last row's tokens (ctx: no row open), its pieces,
    most pieces in a row, documents cut]."""
    state = np.zeros(6, np.int64)
    state[2] = ctx
    return state


@numba.njit(cache=True, nogil=True)
def concat_split(lengths, ctx, align, max_segments, state, doc, start, length, splits, fill):
    """Concatenate documents (tokens) in order and cut every ctx tokens, after those of earlier calls (``state``
    from :func:`concat_split_state`); pieces start at multiples of ``align``, a row holds at most ``max_segments``.
    Run with fill=False to count, then with fill=True, a fresh state and arrays of the counted sizes."""
    k = state[0]
    rows = state[1]
    pos = state[2]
    segs = state[3]
    most = state[4]
    cut = state[5]
    for i in range(lengths.shape[0]):
        total = lengths[i]
        done = 0
        pieces = 0
        while done < total:
            aligned = ((pos + align - 1) // align) * align
            if aligned >= ctx or (max_segments > 0 and segs >= max_segments):
                if fill:
                    splits[rows] = k
                rows += 1
                aligned = 0
                segs = 0
            take = min(total - done, ctx - aligned)
            if fill:
                doc[k] = i
                start[k] = done
                length[k] = take
            k += 1
            segs += 1
            most = max(most, segs)
            pieces += 1
            done += take
            pos = aligned + take
        if pieces > 1:
            cut += 1
    if fill:
        splits[rows] = k
    state[0] = k
    state[1] = rows
    state[2] = pos
    state[3] = segs
    state[4] = most
    state[5] = cut
