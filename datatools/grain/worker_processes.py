"""Grain's worker processes, started so that a script that cannot host them fails at once, and an exit is quiet.

``mp_prefetch`` spawns workers that re-import the main script: one that iterates a pipeline outside
``if __name__ == "__main__":`` kills every worker as it starts, and the parent then blocked for ever writing a
pickled pipeline over 64 KiB into a pipe (a 22-minute hang); :class:`WorkerStartError` names the line first.
Ctrl-C is the parent's alone (:class:`_WorkerIterator`). At exit an ``atexit`` hook closes iterators still holding
workers before the modules go, and elements are handed over in the caller's own memory (left to garbage
collection, Grain's cleanup printed about ten tracebacks).
"""

from __future__ import annotations

import ast
import atexit
import gc
import inspect
import os
import queue
import re
import signal
import stat
import sys
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as futures_wait
from types import FrameType
from typing import Any, TypeVar

import numpy as np

import grain
from datatools.base import array_pool, interrupts

T = TypeVar("T")
State = dict[str, Any]  # a Grain iterator's state (its own keys)


class WorkerStartError(RuntimeError):
    """Worker processes cannot be started from where the pipeline is iterated."""


class WorkerDiedError(RuntimeError):
    """A worker process died while the pipeline ran (Grain found it dead)."""


def _is_main_test(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1


def unguarded_main_line() -> tuple[str, int] | None:
    """``(script, line)`` when the current call comes from an unguarded top-level statement of the main script,
    which ``spawn`` runs again in every worker; else None (interactive, ``-c``, ``-m``, guarded, a thread, or an
    unreadable source)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not os.path.isfile(path):
        return None
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None and (name == "__main__" or name.endswith(".__main__")):
        return None  # ``python -m package``: spawn does not run a package's __main__ again
    frame = inspect.currentframe()
    while frame is not None and not (frame.f_globals is vars(main) and frame.f_code.co_name == "<module>"):
        frame = frame.f_back
    if frame is None:
        return None
    line = frame.f_lineno
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        last = node.end_lineno or node.lineno
        if isinstance(node, ast.If) and _is_main_test(node.test) and node.lineno <= line <= last:
            return None
    return path, line


def check_workers_can_start(workers: int) -> None:
    """Raise :class:`WorkerStartError` when ``workers`` spawned processes would re-run the calling statement."""
    where = unguarded_main_line()
    if where is None:
        return
    path, line = where
    raise WorkerStartError(
        f"{path}, line {line}: workers={workers} start Grain worker processes, and each re-imports this script "
        f"(multiprocessing 'spawn'); this statement at the script's top level would run again in every worker "
        f'process, which would die. Put the script\'s code under `if __name__ == "__main__":` '
        f"(or set workers: 0)"
    )


_LIVE: weakref.WeakSet[_WorkerIterator] = weakref.WeakSet()
_HOOKED = threading.Lock()
_hooked = False


def _close_live_iterators() -> None:
    """atexit: close every iterator that still holds workers, while the modules Grain's cleanup needs exist."""
    for it in list(_LIVE):
        try:
            it.close()
        except Exception:  # noqa: BLE001 -- exiting; a failed close must not hide the program's own status
            pass
    gc.collect()  # the iterators let go of, and their shared-memory elements, freed before the modules go


def _register(it: _WorkerIterator) -> None:
    """Close ``it`` at exit if still open (the atexit hook installed on the first call)."""
    global _hooked
    with _HOOKED:
        if not _hooked:
            atexit.register(_close_live_iterators)
            _hooked = True
        _LIVE.add(it)


def _own_memory(element: object) -> object:
    """The element with its arrays copied out of the workers' shared memory (``np.ndarray`` subclasses; kept
    until exit they were freed after Grain's modules, with a traceback each), into :mod:`datatools.base.array_pool`
    memory (fresh pages cost 3-4x the copy to fault in)."""
    if isinstance(element, dict):
        return {k: _own_memory(v) for k, v in element.items()}
    if type(element) is list:
        return [_own_memory(v) for v in element]
    if type(element) is tuple:
        return tuple(_own_memory(v) for v in element)
    if isinstance(element, np.ndarray) and type(element) is not np.ndarray:
        return array_pool.copy(element)
    return element


def _leave_on_sigint(*_worker: object) -> None:
    """Grain's ``worker_init_fn``: from now on a Ctrl-C ends the worker quietly (SystemExit), so the parent's close
    finds it gone instead of waiting up to 25 s for it."""
    signal.signal(signal.SIGINT, _exit_quietly)


def _exit_quietly(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(1)  # not 0: Grain takes a worker that ended with 0 for a live one and waits on it for ever


def _child_pids() -> set[int]:
    """This process's child processes (Linux: /proc, at once after a fork; elsewhere multiprocessing's own)."""
    try:
        pids: set[int] = set()
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                pids.update(int(p) for p in f.read().split())
        return pids
    except OSError:
        import multiprocessing

        return {p.pid for p in multiprocessing.active_children() if p.pid is not None}


def _workers_started(before: set[int]) -> set[int]:
    """Child processes started since ``before``, multiprocessing's resource tracker aside."""
    out: set[int] = set()
    for pid in _child_pids() - before:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"resource_tracker" in f.read():
                    continue
        except OSError:
            pass
        out.add(pid)
    return out


def _running(pid: int) -> bool:
    """Whether process ``pid`` is there and not a zombie (Linux /proc; elsewhere: there)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True


def _stop_starting(pids: set[int], grace_s: float = 0.5) -> None:
    """Closed before the first element (Ctrl-C): workers still running after ``grace_s`` (still importing, deaf to
    Grain's stop) are killed, and the pipe the parent may still be writing their pipeline into is drained."""
    until = time.monotonic() + grace_s
    while any(_running(p) for p in pids) and time.monotonic() < until:
        time.sleep(0.01)
    for pid in pids:
        if _running(pid):
            pipe = _spawn_pipe(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            if pipe is not None:
                threading.Thread(target=_drain, args=(pipe,), name="datatools-spawn-drain", daemon=True).start()


def _spawn_pipe(pid: int) -> int | None:
    """Our own descriptor of the pipe spawn writes worker ``pid``'s pickled pipeline into (Linux; None elsewhere,
    or once that write is done). Spawn keeps the read end open in the parent, so for a killed worker the write
    past 64 KiB blocked for ever (a Ctrl-C while workers started took 5.6 s); drained, it ends."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            found = re.search(rb"pipe_handle=(\d+)", f.read())
        if found is None:
            return None
        fd = int(found[1])  # the same number in both processes (spawn passes the descriptor as it is)
        pipe = os.stat(f"/proc/{pid}/fd/{fd}").st_ino  # the worker's read end: the pipe itself
        mine = os.dup(fd)
    except OSError:
        return None
    st = os.fstat(mine)
    if stat.S_ISFIFO(st.st_mode) and st.st_ino == pipe:
        return mine
    os.close(mine)  # the write was done and the number reused: not that pipe
    return None


def _drain(fd: int) -> None:
    """Read ``fd`` until its writer closes it (the spawn's write has returned), then close it."""
    try:
        while os.read(fd, 1 << 16):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def _wait(future: Future[T]) -> T:
    """``future.result()``, waking every 50 ms so that a Ctrl-C is raised here (not at the next batch)."""
    while True:
        try:
            return future.result(timeout=0.05)
        except FutureTimeout:
            interrupts.check()


_Call = tuple[Future[Any], Callable[..., Any], tuple[object, ...]]  # a call for the driver: future, function, arguments


class _Driver:
    """One daemon thread that runs the calls given to :meth:`submit`, in order (a daemon: a call stuck in Grain
    never holds up the interpreter's exit)."""

    def __init__(self) -> None:
        # (future, function, arguments) per call; None: stop
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="datatools-grain", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            future, fn, args = call
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # noqa: BLE001 -- handed to the waiting thread
                    future.set_exception(exc)
            # nothing stays referenced from this thread: Grain's iterators freed here at exit printed "leaked
            # semaphore objects"
            del call, future, fn, args

    def submit(self, fn: Callable[..., T], *args: object) -> Future[T]:
        """The future of ``fn(*args)``, run on the driver's thread after the calls given before."""
        future: Future[T] = Future()
        self._calls.put((future, fn, args))
        return future

    def stop(self) -> None:
        """End the thread after the calls given so far and wait for it (not from itself)."""
        self._calls.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join()


class _WorkerIterator(grain.DatasetIterator):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    """Grain's iterator driven from a thread of its own, so the calling thread stays interruptible, and whose
    workers never see a Ctrl-C (a worker that got the terminal's SIGINT printed a traceback mid-import): the
    parent ignores SIGINT while the workers are forked (a spawned process inherits that), and a started worker
    leaves quietly on a Ctrl-C (:func:`_leave_on_sigint`)."""

    def __init__(self, dataset: grain.IterDataset, workers: int) -> None:
        self._driver, self._closed = _Driver(), False
        super().__init__(self._driver.submit(dataset.__iter__).result())
        self._workers, self._started = workers, False
        self._starting: set[int] = set()  # workers started, no element yet: still importing, deaf to a stop
        # the next element and the state after it, being fetched by the driver
        self._ahead: Future[tuple[object, State]] | None = None
        self._state: State | None = None  # the state after the last element returned
        _register(self)

    def _call(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` run on the driver's thread, waited for interruptibly (:func:`_wait`)."""
        return _wait(self._driver.submit(fn, *args))

    def _first(self) -> object:
        """The first element, Grain's workers started with SIGINT ignored (see the class docstring)."""
        if threading.current_thread() is not threading.main_thread():
            return self._call(next, self._parent)
        before = _child_pids()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            pending = self._driver.submit(next, self._parent)
            while not pending.done() and len(_workers_started(before)) < self._workers:
                time.sleep(0.002)  # until every worker runs (or the first element came, or Grain failed)
        finally:
            signal.signal(signal.SIGINT, previous)
            self._starting = _workers_started(before)
        interrupts.check()  # a Ctrl-C just before the window, whose KeyboardInterrupt a library swallowed
        element = _wait(pending)
        self._starting = set()
        return element

    def _fetch(self) -> tuple[object, State]:
        """The next element in the caller's memory and the state after it (on the driver's thread)."""
        element = next(self._parent)
        return _own_memory(element), self._parent.get_state()

    def __next__(self) -> object:
        """The element the driver fetched and copied out while the caller's step ran (~2 ms for a 128 x 8192 batch,
        no longer on the caller's thread); then the next one is asked for."""
        try:
            if not self._started:
                self._started = True
                element = _own_memory(self._first())
                self._state = self._call(self._parent.get_state)
            else:
                ahead = self._ahead if self._ahead is not None else self._driver.submit(self._fetch)
                self._ahead = ahead  # kept if it failed: the next call raises the same error
                element, self._state = _wait(ahead)
            self._ahead = self._driver.submit(self._fetch)
            return element
        except RuntimeError as exc:
            if "terminated unexpectedly" not in str(exc):  # Grain's message for a worker found dead
                raise
            raise WorkerDiedError(
                f"a Grain worker process died ({str(exc).splitlines()[0]}); exit code -9 is usually the system "
                f"out of memory (fewer workers or a smaller batch); a script that iterates a pipeline must do it "
                f'under `if __name__ == "__main__":`'
            ) from exc

    def get_state(self) -> State | None:
        """The state after the last element returned (not after the one fetched ahead)."""
        return self._state if self._started else self._call(self._parent.get_state)

    def _drop_ahead(self) -> None:
        """Wait for the element fetched ahead and forget it (its error too)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            try:
                _wait(ahead)
            except Exception:  # noqa: BLE001 -- an element nobody will ask for
                pass

    def set_state(self, state: State) -> None:
        self._drop_ahead()
        self._call(self._parent.set_state, state)
        if self._started:
            self._state = self._call(self._parent.get_state)

    def close(self) -> None:
        """Stop the workers, then let go of the iterators below while Grain's modules exist (freed later, they print
        a traceback). A second close does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._starting:  # only after a Ctrl-C before the first element (never at exit: module globals go)
            _stop_starting(self._starting)
            self._starting = set()
        ahead, self._ahead = self._ahead, None
        if ahead is not None:  # the workers are not stopped under a fetch in progress (its result is nobody's; it
            futures_wait([ahead])  # ends with the element or the error of a worker that died: reads are bounded)
        super().close()
        self._parents = ()
        self._driver.stop()


class WorkerProcessesIterDataset(grain.IterDataset):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    """The parent read ahead in ``workers`` Grain processes (``mp_prefetch``), with the checks of the module
    docstring; elements and states unchanged."""

    def __init__(self, parent: grain.IterDataset, workers: int) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1; got {workers!r}")
        options = grain.MultiprocessingOptions(num_workers=workers)
        super().__init__(parent.mp_prefetch(options, worker_init_fn=_leave_on_sigint))
        self.workers = workers

    def __iter__(self) -> _WorkerIterator:
        check_workers_can_start(self.workers)
        return _WorkerIterator(self._parent, self.workers)

    def __str__(self) -> str:
        return f"WorkerProcessesIterDataset(workers={self.workers})"


WORKERS_PER_CPU = 4  # more workers than this per CPU mostly wait, and each costs a start and its memory


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_cap(workers: int) -> tuple[int, str | None]:
    """The workers to start for ``workers`` asked (at most :data:`WORKERS_PER_CPU` per CPU this process may run
    on: beyond that they only compete; 2 steps of a streaming pipeline, ctx 2048, batch 8, from a local store, took
    5.4 s with none, 9.7 s with 2, 28 s with 8, 123 s with 16, 215 s with 32 and 579 s with 64 on 2 shared cores),
    and the line that says why when fewer (the batches are the same with any worker count)."""
    cpus = _cpus()
    cap = WORKERS_PER_CPU * cpus
    if workers <= cap:
        return workers, None
    return cap, (
        f"workers={workers} on {cpus} CPUs: capped at {cap} ({WORKERS_PER_CPU} per CPU); each worker process takes "
        f"seconds of CPU to start, so more only compete (measured on 2 cores, 2 steps: 28 s with 8 workers, "
        f"123 s with 16, 215 s with 32); the batches are the same with any worker count"
    )


def prefetch_in_processes(ds: grain.IterDataset, workers: int) -> grain.IterDataset:
    """``ds`` read ahead in ``workers`` processes (see the module docstring); ``workers=0``: ``ds`` itself.
    More than :data:`WORKERS_PER_CPU` per CPU are capped there with a warning saying why (:func:`worker_cap`)."""
    if workers == 0:
        return ds
    workers, why = worker_cap(workers)
    if why is not None:
        import warnings

        warnings.warn(why, stacklevel=3)
    return WorkerProcessesIterDataset(ds, workers)
