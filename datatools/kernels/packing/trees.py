"""The search trees the packers find a row with, as flat arrays (root at 1, leaf ``i`` at ``size + i``, ``size`` a
power of two): a max segment tree over rows' free capacity (units; a closed row holds -1) for O(log rows) first
fit, and a presence tree over free-capacity values (leaf ``c`` is 1 while some row has ``c`` free) for O(log ctx)
best fit, its rows on one LIFO stack per capacity (``head[c]``, ``below[r]``).

The best-fit helpers (the presence tree, the stacks) and the dealing's step are inlined into the packers by numba
(``inline="always"``), not compiled as kernels of their own: a few lines each, they cost ~0.1 s of CPU apiece to
compile on a cold cache (one per argument types: ``presence_clear`` twice), ~0.6 s before a first streaming batch
(best fit is the default packer), and LLVM inlined them anyway. The max tree's stay kernels: first fit, off that
path, has two signatures (with and without runs), each of which would compile them again.
"""

from __future__ import annotations

import numba


@numba.njit(cache=True, nogil=True)
def max_tree_first(tree, size, s):
    """Leaf node of the leftmost row whose free capacity is >= s (the root must be >= s)."""
    node = 1
    while node < size:
        node = 2 * node
        if tree[node] < s:
            node += 1
    return node


@numba.njit(cache=True, nogil=True)
def max_tree_set(tree, node, v):
    """Set a leaf's free capacity and restore the max of its ancestors."""
    tree[node] = v
    node >>= 1
    while node >= 1:
        m = max(tree[2 * node], tree[2 * node + 1])
        if tree[node] == m:
            break
        tree[node] = m
        node >>= 1


@numba.njit(cache=True, nogil=True)
def max_tree_open(tree, segs, size, slots, capacity):
    """Make leaves ``0 .. slots - 1`` empty rows (``capacity`` free, no piece), the others absent (-1); rebuild."""
    for b in range(size):
        tree[size + b] = capacity if b < slots else -1
        segs[b] = 0
    for node in range(size - 1, 0, -1):
        tree[node] = max(tree[2 * node], tree[2 * node + 1])


@numba.njit(cache=True, nogil=True, inline="always")
def presence_set(tree, size, c):
    """Mark capacity ``c`` present."""
    node = size + c
    while node >= 1 and tree[node] == 0:
        tree[node] = 1
        node >>= 1


@numba.njit(cache=True, nogil=True, inline="always")
def presence_clear(tree, size, c):
    """Mark capacity ``c`` absent (its stack is empty)."""
    node = size + c
    tree[node] = 0
    node >>= 1
    while node >= 1:
        v = tree[2 * node] | tree[2 * node + 1]
        if tree[node] == v:
            break
        tree[node] = v
        node >>= 1


@numba.njit(cache=True, nogil=True, inline="always")
def presence_next(tree, size, c):
    """Smallest present leaf index >= c, or -1."""
    node = size + c
    if tree[node]:
        return c
    while node > 1:
        if (node & 1) == 0 and tree[node + 1]:
            node += 1
            while node < size:
                node = 2 * node
                if tree[node] == 0:
                    node += 1
            return node - size
        node >>= 1
    return -1


@numba.njit(cache=True, nogil=True, inline="always")
def stack_push(tree, size, head, below, r, f):
    """Put row ``r`` on the stack of rows with ``f`` free units (f > 0), marking ``f`` present. The cold path: the
    best-fit loop keeps an inline copy, which measured faster."""
    below[r] = head[f]
    if head[f] < 0:
        presence_set(tree, size, f)
    head[f] = r


@numba.njit(cache=True, nogil=True, inline="always")
def serpentine_next(r, step, rows):
    """The row after ``r`` when dealing to ``rows`` rows in serpentine order (0 .. R-1, R-1 .. 0, 0 ..)."""
    r += step
    if r == rows:
        return rows - 1, -1
    if r < 0:
        return 0, 1
    return r, step
