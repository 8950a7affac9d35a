"""``datatools verify STORE``: read every byte of a token store and say whether it is whole.

Exit 0 with a short summary when every chunk is present with its recorded size and
sha256, the offsets are in order and every token id is below the vocabulary size;
exit 2 with one line naming the store and the first bad chunk otherwise.
"""

from __future__ import annotations

import click
from rich.table import Table

from datatools.cli.common import emit_json, make_console
from datatools.io.store_verify import verify_store


@click.command("verify")
@click.argument("store", type=click.Path(path_type=str))
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False, allow_dash=True),
    default=None,
    help="Write the summary as JSON to FILE, or '-' for stdout (then the table goes to stderr).",
)
def verify_command(store, json_out):
    """Check every chunk of the token store STORE against its manifest (sizes, sha256), the offsets
    (0 first, never decreasing, num_tokens last) and the token range (below vocab_size)."""
    err = make_console(stderr=True)
    with _progress(err) as advance:
        report = verify_store(store, progress=advance)
    console = make_console(stderr=json_out == "-")
    table = Table(title=f"{report.path}: whole (store version {report.version})", title_justify="left")
    table.add_column("check")
    table.add_column("result", justify="right")
    if report.checksums:
        table.add_row(
            "chunks: present, size, sha256",
            ", ".join(f"{name} {n:,}" for name, n in report.chunks.items()) + f" ({report.stored_bytes / 1e6:,.1f} MB)",
        )
    table.add_row("documents (offsets in order, last = tokens)", f"{report.documents:,}")
    vocab = f"< {report.vocab_size:,}" if report.vocab_size else "not checked"
    top = "none" if report.max_token is None else f"{report.max_token:,}"
    table.add_row(f"tokens ({report.dtype}, ids {vocab})", f"{report.tokens:,} (largest id {top})")
    table.add_row("seconds", f"{report.seconds:.2f}")
    console.print(table)
    for note in report.notes:
        console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    emit_json(json_out, report)


class _progress:
    """A transient bar (terminals only) fed by verify_store's ``progress(done, total)``; nothing off a terminal."""

    def __init__(self, console):
        self.console = console
        self.progress = None
        self.task = None
        self.total = None

    def __enter__(self):
        if self.console.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(
                TextColumn("[bold]verifying"),
                BarColumn(),
                TextColumn("{task.percentage:>3.0f}%"),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self.progress.__enter__()
        return self.advance

    def advance(self, done: int, total: int) -> None:
        if self.progress is None:
            return
        if self.task is None or total != self.total:  # a new phase: checksums (bytes), then tokens
            if self.task is not None:
                self.progress.remove_task(self.task)
            self.task = self.progress.add_task("verify", total=max(total, 1))
            self.total = total
        self.progress.update(self.task, completed=done)

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.__exit__(*exc)
        return False
