"""Progress of the long-running jobs, on stderr: a rich bar on a terminal, a plain line every few seconds elsewhere.

A bar counts what moves: documents, tokens and bytes with their rates and an ETA (by bytes
when the total is known, else by shards), not only shards (a job of 3 shards sat at 0/3 for
minutes). Off a terminal (a log file, a pipe, CI) no live display is drawn; instead one plain
line is printed every :data:`PLAIN_INTERVAL_S` seconds while the job runs, so a log shows
it is alive and how far it is. A job shorter than the interval prints nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeRemainingColumn
from rich.text import Text

PLAIN_INTERVAL_S = 5.0  # seconds between plain lines when stderr is not a terminal


def _rate(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.1f}{unit}"
    return f"{x:.0f}"


def _bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _eta(done: float, total: float | None, elapsed: float) -> str:
    if not total or done <= 0 or elapsed <= 0:
        return "ETA -"
    return f"ETA {_clock(max(total - done, 0) * elapsed / done)}"


@contextmanager
def _plain_lines(console: Console, line: Callable[[], str], interval_s: float) -> Iterator[None]:
    """Print ``line()`` on ``console`` every ``interval_s`` seconds, from a daemon thread, until the block ends."""
    stop = threading.Event()

    def tick():
        while not stop.wait(interval_s):
            console.print(line(), markup=False, highlight=False, soft_wrap=True)

    thread = threading.Thread(target=tick, name="datatools-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class JobBar:
    """What a job has done so far: shards, documents, tokens and bytes (see :func:`job_progress`)."""

    def __init__(
        self,
        progress: Progress | None,
        task,
        *,
        total_shards: int = 0,
        done_shards: int = 0,
        total_bytes: int | None = None,
        done_bytes: int = 0,
    ):
        self._progress, self._task = progress, task
        self.docs = self.tokens = 0
        self.shards, self.total_shards = done_shards, total_shards
        self.nbytes, self.total_bytes = done_bytes, total_bytes
        self._start_shards, self._start_bytes = done_shards, done_bytes
        self.t0 = time.perf_counter()
        self._lock = threading.Lock()

    def advance(self, docs: int, tokens: int, shards: int = 1, nbytes: int = 0) -> None:
        """Count ``docs`` documents of ``tokens`` tokens, ``shards`` shards and ``nbytes`` input bytes done."""
        with self._lock:
            self.docs += docs
            self.tokens += tokens
            self.shards += shards
            self.nbytes += nbytes
        if self._progress is not None:
            by_bytes = self.total_bytes is not None
            self._progress.update(self._task, advance=nbytes if by_bytes else shards, status=self.status(eta=False))

    def status(self, eta: bool = True) -> str:
        """One line: shards, documents, tokens, bytes, their rates and (``eta``) the time left."""
        elapsed = max(time.perf_counter() - self.t0, 1e-9)
        parts = [
            f"{self.shards}/{self.total_shards} shards",
            f"{self.docs:,} documents ({_rate(self.docs / elapsed)}/s)",
            f"{_rate(self.tokens)} tokens ({_rate(self.tokens / elapsed)}/s)",
        ]
        if self.total_bytes is not None:
            parts.append(
                f"{_bytes(self.nbytes)} of {_bytes(self.total_bytes)} "
                f"({_bytes((self.nbytes - self._start_bytes) / elapsed)}/s)"
            )
        if eta:
            if self.total_bytes is not None:
                parts.append(_eta(self.nbytes - self._start_bytes, self.total_bytes - self._start_bytes, elapsed))
            else:
                parts.append(_eta(self.shards - self._start_shards, self.total_shards - self._start_shards, elapsed))
            parts.append(f"elapsed {_clock(elapsed)}")
        return ", ".join(parts)


@contextmanager
def job_progress(
    total_shards: int,
    *,
    done: int = 0,
    enabled: bool = True,
    description: str = "tokenizing",
    total_bytes: int | None = None,
    done_bytes: int = 0,
    interval_s: float = PLAIN_INTERVAL_S,
    console: Console | None = None,
):
    """Progress of a job over shards; yields a :class:`JobBar` to ``advance(docs, tokens, shards, nbytes)``.

    Args:
      total_shards: shards of the whole job; ``done``: those already done (a resumed job).
      enabled: False: count, show nothing.
      total_bytes: input bytes of the job (then the bar and the ETA go by bytes); ``done_bytes``: already done.
      interval_s: seconds between plain lines off a terminal.
      console: where to draw (default: a rich console on stderr).
    """
    console = Console(stderr=True) if console is None else console
    if not enabled:
        yield JobBar(
            None, None, total_shards=total_shards, done_shards=done, total_bytes=total_bytes, done_bytes=done_bytes
        )
        return
    if not console.is_terminal:  # no live display in logs and pipes: a plain line every interval_s
        bar = JobBar(
            None, None, total_shards=total_shards, done_shards=done, total_bytes=total_bytes, done_bytes=done_bytes
        )
        with _plain_lines(console, lambda: f"{description}: {bar.status()}", interval_s):
            yield bar
        return
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[status]}"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
    with progress:
        by_bytes = total_bytes is not None
        task = progress.add_task(
            description,
            total=total_bytes if by_bytes else total_shards,
            completed=done_bytes if by_bytes else done,
            status="",
        )
        bar = JobBar(
            progress, task, total_shards=total_shards, done_shards=done, total_bytes=total_bytes, done_bytes=done_bytes
        )
        progress.update(task, status=bar.status(eta=False))
        yield bar


class _CountRate(ProgressColumn):
    """``done/total unit`` and the rate since the bar started."""

    def __init__(self, unit: str):
        super().__init__()
        self.unit = unit

    def render(self, task) -> Text:
        elapsed = max(task.elapsed or 0.0, 1e-9)
        if self.unit == "bytes":
            return Text(f"{_bytes(task.completed)} of {_bytes(task.total or 0)} ({_bytes(task.completed / elapsed)}/s)")
        unit = f" {self.unit}" if self.unit else ""
        return Text(f"{int(task.completed):,}/{int(task.total or 0):,}{unit} ({_rate(task.completed / elapsed)}/s)")


@contextmanager
def count_progress(console: Console, total: int, what: str, *, unit: str = "", interval_s: float = PLAIN_INTERVAL_S):
    """Progress of ``total`` steps (``unit="bytes"``: bytes) on ``console``, with the rate and the ETA; yields
    ``advance(n=1)``. A transient bar on a terminal, a plain line every ``interval_s`` seconds elsewhere."""
    if not console.is_terminal:
        state = {"done": 0}
        t0 = time.perf_counter()

        def line() -> str:
            elapsed = time.perf_counter() - t0
            done = state["done"]
            if unit == "bytes":
                counts = f"{_bytes(done)} of {_bytes(total)} ({_bytes(done / max(elapsed, 1e-9))}/s)"
            else:
                counts = f"{done:,}/{total:,}{' ' + unit if unit else ''} ({_rate(done / max(elapsed, 1e-9))}/s)"
            return f"{what}: {counts}, {_eta(done, total, elapsed)}, elapsed {_clock(elapsed)}"

        def advance(n: int = 1, *_, **__) -> None:
            state["done"] += n

        with _plain_lines(console, line, interval_s):
            yield advance
        return
    with Progress(
        TextColumn(f"[bold]{what}"),
        BarColumn(),
        _CountRate(unit),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task(what, total=total)

        def advance(n: int = 1, *_, **__) -> None:
            progress.advance(task, n)

        yield advance
