"""Progress bars (rich, on stderr) for the long-running jobs."""

from __future__ import annotations

import time
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeRemainingColumn
from rich.text import Text


def _rate(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.1f}{unit}"
    return f"{x:.0f}"


class _Rates(ProgressColumn):
    """documents/s and tokens/s since the bar started."""

    def render(self, task) -> Text:
        elapsed = max(time.perf_counter() - task.fields["t0"], 1e-9)
        return Text(f"{_rate(task.fields['docs'] / elapsed)} docs/s  {_rate(task.fields['tokens'] / elapsed)} tokens/s")


class JobBar:
    def __init__(self, progress: Progress | None, task):
        self._progress, self._task = progress, task
        self.docs = self.tokens = 0

    def advance(self, docs: int, tokens: int, shards: int = 1) -> None:
        self.docs += docs
        self.tokens += tokens
        if self._progress is not None:
            self._progress.update(self._task, advance=shards, docs=self.docs, tokens=self.tokens)


@contextmanager
def job_progress(total_shards: int, *, done: int = 0, enabled: bool = True, description: str = "tokenizing"):
    """A bar over shards with documents/s, tokens/s and the ETA; yields a :class:`JobBar`."""
    console = Console(stderr=True)
    if not enabled or not console.is_terminal:  # no live display in logs and pipes
        yield JobBar(None, None)
        return
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("shards"),
                        _Rates(), TimeRemainingColumn(), console=console, transient=True)
    with progress:
        task = progress.add_task(description, total=total_shards, completed=done, docs=0, tokens=0,
                                 t0=time.perf_counter())
        yield JobBar(progress, task)


@contextmanager
def count_progress(console: Console, total: int, what: str):
    """A transient bar of ``total`` steps on ``console`` (terminals only); yields ``advance()``."""
    if not console.is_terminal:
        yield lambda *a, **k: None
        return
    from rich.progress import TimeElapsedColumn

    with Progress(TextColumn(f"[bold]{what}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task(what, total=total)
        yield lambda *a, **k: progress.advance(task)
