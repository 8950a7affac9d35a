"""Numba's start-up, paid in a thread while the process waits on I/O.

The first numba kernel a process calls costs 0.4-1.1 s on a 2-core machine (numba builds its type
registries and LLVM before the first kernel can load from the cache); every later kernel loads in
milliseconds. A pipeline's process reaches its first kernel only after I/O: the parent opens the source
(from a bucket at +100 ms a request: the manifest, the arrays, their listings, the offsets, ~2 s), a Grain
worker receives its pipeline and issues its first reads. :func:`warm_in_background` starts numba in a
daemon thread at that moment, so the I/O and numba's start-up overlap (numba's compiler lock makes a kernel
called meanwhile wait for the warm-up, never load twice).
"""

from __future__ import annotations

import threading

import numpy as np

_lock = threading.Lock()
_started = False


def warm_in_background() -> None:
    """Start loading numba's kernels in a daemon thread, once per process (a no-op after the first call)."""
    global _started
    with _lock:
        if _started:
            return
        _started = True
    threading.Thread(target=_warm, name="datatools-numba-warm", daemon=True).start()


def _warm() -> None:
    """Call the packing kernel on three documents: numba's start-up and the packing kernels' cache loads."""
    from datatools.kernels.packing import pack_lengths

    try:
        pack_lengths(np.array([3, 2, 5], np.int64), 8)
    except Exception:  # noqa: BLE001 -- a warm-up only: the real call raises what is wrong, where it is made
        pass
