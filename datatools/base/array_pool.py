"""Memory for new arrays, used again once nobody holds it.

A pipeline makes a batch of the same shape every step and hands it on; a fresh 16 MiB batch (128 x 8192 x 4
outputs x 4 bytes) costs more to fault in page by page than to fill (1.5-3x the fill, issue 31: local reads),
and so does the copy of a batch out of a Grain worker's shared memory. :func:`empty` gives an array whose memory
goes back to work once only the pool refers to it. CPython's reference count says when: the caller's array, any
view of it, any buffer taken from it (a ``memoryview``, an array a library made without copying) all hold a
reference to it, so memory anybody still holds is never written. The pool grows to the arrays of a shape alive
at once (Grain's read-ahead buffer holds 16 batches), up to :data:`KEPT_BYTES` per process; beyond that an array
is new memory, freed as usual.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

KEPT_BYTES = 512 << 20  # bytes of arrays the pool keeps per process

_lock = threading.Lock()
_kept: dict[tuple[tuple[int, ...], str], list[np.ndarray]] = {}
_held_bytes = 0


def empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialized C-contiguous array of ``shape`` and ``dtype``: memory of an earlier one that nobody holds
    any more where there is some, else new memory (kept for later while the pool holds under
    :data:`KEPT_BYTES`)."""
    global _held_bytes
    key = (tuple(int(n) for n in shape), np.dtype(dtype).str)
    with _lock:
        kept = _kept.setdefault(key, [])
        for a in kept:
            if sys.getrefcount(a) <= 3:  # the list, ``a`` and this call: nobody else
                return a
        fresh = np.empty(key[0], key[1])
        if _held_bytes + fresh.nbytes <= KEPT_BYTES:
            kept.append(fresh)
            _held_bytes += fresh.nbytes
        return fresh


def copy(array: np.ndarray) -> np.ndarray:
    """``array`` copied into memory from the pool (a plain, C-contiguous ``np.ndarray``)."""
    out = empty(array.shape, array.dtype)
    np.copyto(out, array)
    return out
