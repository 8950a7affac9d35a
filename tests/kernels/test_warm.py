"""Numba's start-up in a thread while a process waits on I/O (datatools.kernels.warm)."""

from __future__ import annotations

import threading

from datatools.kernels import warm


def test_numba_is_warmed_once_per_process_in_a_thread_of_its_own(monkeypatch):
    calls: list[str] = []
    done = threading.Event()

    def record() -> None:
        calls.append(threading.current_thread().name)
        done.set()

    monkeypatch.setattr(warm, "_started", False)
    monkeypatch.setattr(warm, "_warm", record)
    warm.warm_in_background()
    warm.warm_in_background()  # the second call (a second pipeline, a second dataset unpickled) starts nothing
    assert done.wait(10)
    assert calls == ["datatools-numba-warm"]  # once, and not in the caller's thread


def test_the_warm_up_loads_the_packing_kernels():
    """Run in this thread (as the warm-up thread runs it): afterwards the packing kernels are loaded, so the
    pipeline's first plan finds them ready."""
    import datatools.kernels.packing.planners as planners

    warm._warm()
    assert planners.best_fit_resume.signatures  # the best-fit packer (the default algorithm): loaded for int64 lengths
