"""Memory for new arrays, used again once nobody holds it (CPython's reference count says when).

A fresh 16 MiB batch costs 1.5-3x its fill to fault in (issue 31), and so does a copy out of a Grain worker's
shared memory. The pool keeps the arrays of a shape alive at once, up to :data:`KEPT_BYTES` per process.
"""

from __future__ import annotations

import mmap
import sys
import threading

import numpy as np
import numpy.typing as npt

KEPT_BYTES = 512 << 20  # bytes of arrays the pool keeps per process

_lock = threading.Lock()
_kept: dict[tuple[tuple[int, ...], str], list[np.ndarray]] = {}
_held_bytes = 0


def empty(shape: tuple[int, ...], dtype: npt.DTypeLike) -> np.ndarray:
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


def filled_gradually(shape: tuple[int, ...], dtype: npt.DTypeLike) -> np.ndarray:
    """An uninitialized C-contiguous array in small (4 KiB) pages, for a large cache that fills over minutes: numpy
    asks for huge pages above 4 MiB, and each first touch of a 2 MiB huge page zeroes it whole (a 191 MB read slab
    took 0.04-0.47 s to fault in with huge pages, 0.12 s without, on a 2-core VM). Private anonymous memory (shared,
    the default of ``mmap``, faults through shmem: 0.15-0.22 s of system time against 0.11-0.16 s for a 160 MB slab),
    freed with the array."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        return np.empty(shape, dtype)
    buffer = mmap.mmap(-1, count * dtype.itemsize, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return np.frombuffer(buffer, dtype, count).reshape(shape)
