"""Progress on stderr: a rich display on a terminal, plain lines elsewhere (once work has lasted
:data:`FIRST_LINE_S`, then every :data:`PLAIN_INTERVAL_S`). :func:`activity`, fed by :func:`doing`, is one live line
saying the step under way; the bars (:func:`job_progress`, :func:`count_progress`) count work with rates and an ETA
(:func:`eta_seconds`) and pause the activity line while they run.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TaskID, TextColumn
from rich.table import Column
from rich.text import Text

from datatools.base import interrupts

if TYPE_CHECKING:
    from rich.spinner import Spinner

# what a function with a progress bar takes: ``progress(total)`` gives a context manager of ``advance()``
StepsProgress = Callable[[int], AbstractContextManager[Callable[..., object]]]

PLAIN_INTERVAL_S = 5.0  # seconds between plain lines when stderr is not a terminal
FIRST_LINE_S = 0.25  # seconds a step or a bar runs before its first line (terminal or not): quick work prints nothing
PLAIN_LINE = re.compile(r"(?!datatools: ).*\belapsed \d+:\d\d:\d\d\)?")  # this module's plain lines (for callers'
# checks of what a command said: an error is the one line that is not progress)


def _rate(x: float, unit: str = "", space: str = "") -> str:
    for prefix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.1f}{space}{prefix}{unit}"
    return f"{x:.0f}{space}{unit}"


def _bytes(n: float) -> str:
    return _rate(n, "B", " ")


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def eta_seconds(done: float, total: float | None, elapsed: float, still: float = 0.0) -> float | None:
    """Seconds left at the rate of all the work so far (``done`` of ``total`` units in ``elapsed`` seconds), never
    below ``still`` (seconds since the count last moved: a bar once said "ETA 1 s" for 40 s), at least 1 s while
    work is left; None when nothing is done yet."""
    if not total or done <= 0 or elapsed <= 0:
        return None
    left = max(total - done, 0)
    if left == 0:
        return 0.0
    return max(left * elapsed / done, still, 1.0)


def _eta(done: float, total: float | None, elapsed: float, still: float = 0.0) -> str:
    seconds = eta_seconds(done, total, elapsed, still)
    return "ETA -" if seconds is None else f"ETA {_clock(seconds)}"


class _EtaColumn(ProgressColumn):
    """The time left of a rich task by :func:`eta_seconds` (rich's own column showed "1 s" for 40 s)."""

    def __init__(self) -> None:
        super().__init__()
        self._moved: dict[TaskID, tuple[float, float]] = {}  # task id -> (completed, when it last changed)

    def render(self, task: Task) -> Text:
        now = time.perf_counter()
        last = self._moved.get(task.id)
        if last is None or last[0] != task.completed:
            last = self._moved[task.id] = (task.completed, now)
        return Text(_eta(task.completed, task.total, task.elapsed or 0.0, now - last[1]), style="progress.remaining")


@contextmanager
def _every(first_s: float, interval_s: float, call: Callable[[], None], name: str) -> Iterator[None]:
    """``call()`` from a daemon thread once the block has run ``first_s`` seconds, then every ``interval_s``
    seconds, until the block ends."""
    stop = threading.Event()

    def tick() -> None:
        wait = first_s
        while not stop.wait(wait):
            call()
            wait = interval_s

    thread = threading.Thread(target=tick, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _plain_lines(console: Console, line: Callable[[], str], interval_s: float) -> AbstractContextManager[None]:
    """Print ``line()`` on ``console`` after ``min(FIRST_LINE_S, interval_s)`` seconds, then every ``interval_s``."""

    def say() -> None:
        console.print(line(), markup=False, highlight=False, soft_wrap=True)

    return _every(min(FIRST_LINE_S, interval_s), interval_s, say, "datatools-progress")


class JobBar:
    """What a job has done so far: shards, documents, tokens and bytes (see :func:`job_progress`)."""

    def __init__(self, total_shards: int, done_shards: int, total_bytes: int | None, done_bytes: int):
        self._progress: Progress | None = None
        self._task: Any = None
        self.docs = self.tokens = 0
        self.shards, self.total_shards = done_shards, total_shards
        self.nbytes, self.total_bytes = done_bytes, total_bytes
        self._start_shards, self._start_bytes = done_shards, done_bytes
        self.t0 = self.moved = time.perf_counter()  # start, last advance
        self._lock = threading.Lock()

    def advance(self, docs: int, tokens: int, shards: int = 1, nbytes: int = 0) -> None:
        """Count ``docs`` documents of ``tokens`` tokens, ``shards`` shards and ``nbytes`` input bytes done."""
        with self._lock:
            self.docs += docs
            self.tokens += tokens
            self.shards += shards
            self.nbytes += nbytes
            self.moved = time.perf_counter()
        if self._progress is not None:
            by_bytes = self.total_bytes is not None
            self._progress.update(self._task, advance=nbytes if by_bytes else shards, status=self.status(eta=False))

    def status(self, eta: bool = True) -> str:
        """One line: shards, documents, tokens, bytes, their rates and (``eta``) the time left."""
        now = time.perf_counter()
        elapsed, still = max(now - self.t0, 1e-9), now - self.moved
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
                done, total = self.nbytes - self._start_bytes, self.total_bytes - self._start_bytes
            else:
                done, total = self.shards - self._start_shards, self.total_shards - self._start_shards
            parts.append(_eta(done, total, elapsed, still))
            parts.append(f"elapsed {_clock(elapsed)}")
        return ", ".join(parts)


class _Activity:
    """The one live line of a running command (see :func:`activity`): what it is doing, for how long."""

    def __init__(self, console: Console, label: str, interval_s: float, held: bool = False):
        self.console, self.label, self.interval_s = console, label, interval_s
        self.held = held  # nothing shown until :func:`release`: a usage error stays the one line it is
        self.what: str | None = "starting"
        self.t0 = self.since = self.printed_at = time.perf_counter()
        self.step = 0  # one more at each doing(): a step's first plain line is printed once
        self.printed_step = -1
        self.paused = 0
        self.live: Any = None  # a rich Live while the line is drawn on a terminal
        self.lock = threading.RLock()

    def line(self) -> str:
        return f"{self.label}: {self.what} (elapsed {_clock(time.perf_counter() - self.t0)})"

    def __rich__(self) -> Spinner:
        from rich.spinner import Spinner

        if not hasattr(self, "_spinner"):
            self._spinner = Spinner("dots", style="progress.spinner")
        self._spinner.update(text=Text(self.line(), no_wrap=True, overflow="ellipsis"))
        return self._spinner

    def set(self, what: str | None) -> None:
        with self.lock:
            self.what, self.since = what, time.perf_counter()
            self.step += 1
            if what is None:
                self._stop_live()

    def _stop_live(self) -> None:
        if self.live is not None:
            live, self.live = self.live, None
            live.stop()

    def tick(self) -> None:
        """Called a few times a second: start the live line, or print a plain line, when due."""
        with self.lock:
            if self.paused or self.held or self.what is None:
                return
            now = time.perf_counter()
            if self.console.is_terminal:
                if self.live is None and now - self.t0 >= FIRST_LINE_S:
                    from rich.live import Live

                    self.live = Live(self, console=self.console, refresh_per_second=8, transient=True)
                    self.live.start()
                return
            first = self.printed_step != self.step and now - self.since >= FIRST_LINE_S
            if first or now - self.printed_at >= self.interval_s:
                self.console.print(self.line(), markup=False, highlight=False, soft_wrap=True)
                self.printed_step, self.printed_at = self.step, now


_ACTIVE: _Activity | None = None


@contextmanager
def activity(
    label: str, *, console: Console | None = None, interval_s: float = PLAIN_INTERVAL_S, held: bool = False
) -> Iterator[None]:
    """One live line on ``console`` (default stderr) while the block runs: ``label: what (elapsed h:mm:ss)``,
    ``what`` the latest :func:`doing`: a spinner on a terminal, else a plain line when a step has lasted
    :data:`FIRST_LINE_S` and every ``interval_s`` seconds. Nested calls keep the outer one. ``held``: nothing is
    shown until :func:`release` (the command line parsed: a usage error is one line, no "starting" before it);
    the elapsed time counts from the start either way."""
    global _ACTIVE
    if _ACTIVE is not None:
        yield
        return
    act = _Activity(Console(stderr=True) if console is None else console, label, interval_s, held)
    _ACTIVE = act
    try:
        with _every(0.1, 0.1, act.tick, "datatools-activity"):
            yield
    finally:
        with act.lock:
            act._stop_live()
        _ACTIVE = None


def doing(what: str | None) -> None:
    """Say what the running command is doing now, in a few words (``listing s3://bucket/data``); None: nothing to
    show (before printing a result). Nothing happens outside an :func:`activity`."""
    interrupts.check()  # a Ctrl-C whose KeyboardInterrupt was not raised where it came (base/interrupts.py)
    act = _ACTIVE
    if act is not None:
        act.set(what)


def say(line: str) -> None:
    """Print ``line`` (a finding to keep, not progress) on stderr, above the running command's live line: printed
    through that line's console, so the two never share a terminal line."""
    act = _ACTIVE
    if act is None:
        Console(stderr=True).print(line, markup=False, highlight=False, soft_wrap=True)
        return
    with act.lock:
        act.console.print(line, markup=False, highlight=False, soft_wrap=True)  # a Live on it redraws below


def release() -> None:
    """Let a held :func:`activity` show its line (the command's arguments are parsed: it runs)."""
    act = _ACTIVE
    if act is not None:
        with act.lock:
            act.held = False
            if act.step == 0 and time.perf_counter() - act.t0 >= FIRST_LINE_S:  # a slow start: shown now
                act.since = act.t0
                act.tick()


@contextmanager
def paused() -> Iterator[None]:
    """The activity line stands aside while the block runs (a bar of its own is shown instead)."""
    act = _ACTIVE
    if act is None:
        yield
        return
    with act.lock:
        act.paused += 1
        act._stop_live()
    try:
        yield
    finally:
        with act.lock:
            act.paused -= 1
            act.since = act.printed_at = time.perf_counter()


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
) -> Iterator[JobBar]:
    """Progress of a job over ``total_shards`` (``done`` of them already); yields a :class:`JobBar`. With
    ``total_bytes`` (``done_bytes`` done) the bar and the ETA go by bytes; ``enabled`` False shows nothing."""
    console = Console(stderr=True) if console is None else console
    bar = JobBar(total_shards, done, total_bytes, done_bytes)
    with paused():
        if not enabled:
            yield bar
        elif not console.is_terminal:  # no live display in logs and pipes: a plain line every interval_s
            with _plain_lines(console, lambda: f"{description}: {bar.status()}", interval_s):
                yield bar
        else:
            # the ETA before the counts: on a narrow terminal (80 columns) the counts are cut, not the time left
            columns = (TextColumn("[bold]{task.description}"), BarColumn(bar_width=20), _EtaColumn())
            status = TextColumn(
                "{task.fields[status]}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")
            )
            with Progress(*columns, status, console=console, transient=True, expand=True) as progress:
                by_bytes = total_bytes is not None
                total, completed = (total_bytes, done_bytes) if by_bytes else (total_shards, done)
                bar._progress = progress
                bar._task = progress.add_task(description, total=total, completed=completed, status="")
                progress.update(bar._task, status=bar.status(eta=False))
                yield bar


def _counts(done: float, total: float, unit: str, elapsed: float) -> str:
    """``done/total unit`` (``unit="bytes"``: ``1.2 MB of 3.4 MB``) and the rate over ``elapsed`` seconds."""
    rate = done / max(elapsed, 1e-9)
    if unit == "bytes":
        return f"{_bytes(done)} of {_bytes(total)} ({_bytes(rate)}/s)"
    return f"{int(done):,}/{int(total):,}{' ' + unit if unit else ''} ({_rate(rate)}/s)"


class _CountRate(ProgressColumn):
    """``done/total unit`` and the rate since the bar started."""

    def __init__(self, unit: str):
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        return Text(_counts(task.completed, task.total or 0, self.unit, task.elapsed or 0.0))


@contextmanager
def count_progress(
    console: Console, total: int, what: str, *, unit: str = "", interval_s: float = PLAIN_INTERVAL_S
) -> Iterator[Callable[..., None]]:
    """Progress of ``total`` steps (``unit="bytes"``: bytes) on ``console``, with the rate and the ETA; yields
    ``advance(n=1)``. A transient bar on a terminal, a plain line every ``interval_s`` seconds elsewhere."""
    with paused():
        if not console.is_terminal:
            t0 = time.perf_counter()
            state = {"done": 0, "moved": t0}

            def line() -> str:
                now = time.perf_counter()
                elapsed, done = now - t0, state["done"]
                counts = _counts(done, total, unit, elapsed)
                return (
                    f"{what}: {counts}, {_eta(done, total, elapsed, now - state['moved'])}, elapsed {_clock(elapsed)}"
                )

            def advance(n: int = 1, *_: object, **__: object) -> None:
                state["done"] += n
                state["moved"] = time.perf_counter()

            with _plain_lines(console, line, interval_s):
                yield advance
            return
        columns = (TextColumn(f"[bold]{what}"), BarColumn(), _CountRate(unit), _EtaColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task(what, total=total)
            yield lambda n=1, *_, **__: progress.advance(task, n)
