"""Numba's start-up (0.4-1.1 s for a process's first kernel on 2 cores; later ones load from the cache in ms), paid in
a thread while the process waits on I/O (opening a source from a bucket: ~2 s). Numba's compiler lock makes a kernel
called meanwhile wait for the warm-up, never load twice.
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
