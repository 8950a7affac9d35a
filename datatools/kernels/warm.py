"""Numba's start-up (0.4-1.1 s for a process's first kernel on 2 cores; later ones load from the cache in ms), paid in
a thread while the process waits on I/O (opening a source from a bucket: ~2 s). Numba's compiler lock makes a kernel
called meanwhile wait for the warm-up, never load twice.

On a cold cache (a fresh install) numba compiles each kernel a first batch runs, under the GIL, one at a time (~7 s
of a first batch on 2 cores): :func:`compile_first_batch_beside` starts a process that compiles the kernels the first
batch reaches last while the pipeline compiles its schedule's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import numpy as np

_lock = threading.Lock()
_started = False
# the process beside a cold pipeline: run_first_batch_kernels(dtype, format) (`-c`: its package imports this module)
CHILD = "import sys, json, numpy; from datatools.kernels.warm import run_first_batch_kernels as f; "
CHILD += "f(numpy.dtype(sys.argv[1]), json.loads(sys.argv[2]))"


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


def run_first_batch_kernels(dtype: np.dtype, batch_format: dict[str, str]) -> None:
    """The kernels a pipeline's first batch reaches last, in that order: a batch's rows gathered from a store
    reader's slab of ``dtype`` tokens (materialize's checks and fill, called as :meth:`StoreDocuments.pack_rows`
    calls it, on a hand-made plan: no packing kernel first), its format (``batch_format``: positions, piece
    numbers), then a window's plan (its first kernels compiled by the pipeline by then, loaded here from the cache;
    its assembly)."""
    from datatools.base import array_pool
    from datatools.kernels.batch_layouts import to_format
    from datatools.kernels.packing import PackPlan, materialize, pack_lengths
    from datatools.kernels.packing.materialize import new_batch

    rows, ctx, extent = 4, 64, 256
    lengths = np.full(rows, 48, np.int64)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    slab = array_pool.filled_gradually((1, extent), dtype)  # a reader's slab: (slots, extent tokens), one held
    doc, start, length = np.arange(rows, dtype=np.int64), np.zeros(rows, np.int64), lengths.astype(np.int32)
    plan = PackPlan(ctx, 1, rows, np.arange(rows + 1, dtype=np.int64), doc, start, length, 0, 0, "best_fit")
    out = new_batch(rows, ctx)
    extents = (np.zeros(1, np.int64), extent)  # extent 0 in slot 0
    materialize(plan, slab.reshape(-1), offsets, np.arange(rows), pad_id=0, out=dict(out), extents=extents)
    options = dict(batch_format)
    to_format(out, options.pop("format", "datatools"), **options)
    pack_lengths(lengths, ctx)


def compile_first_batch_beside(dtype: np.dtype, batch_format: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start a process that compiles the kernels a pipeline's first batch reaches last
    (:func:`run_first_batch_kernels`, for a store of ``dtype`` tokens and batches of ``batch_format``: ``format`` and
    the batch options) into numba's cache, while this process compiles its schedule's: on a cold cache (a fresh
    install) numba compiles under the GIL, one kernel at a time (~7 s of a first batch on 2 cores). A kernel this
    process reaches once the other has cached it is loaded (numba reads its cache index at each compile); one it
    reaches first it compiles itself. Not waited for: it ends on its own (~3 s of CPU), its output discarded."""
    argv = [sys.executable, "-c", CHILD, np.dtype(dtype).name, json.dumps(batch_format)]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
