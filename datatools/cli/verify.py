"""``datatools verify STORE``: read every byte of a token store; exit 0 with a summary when it is whole, else exit 2
with one line naming the store and the first bad chunk."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from datatools.base.progress import count_progress
from datatools.cli.common import emit_json, json_option, make_console, result_console


@click.command("verify")
@click.argument("store", type=click.Path(path_type=str))
@json_option("the summary")
def verify_command(store: str, json_out: str | None) -> None:
    """Check every chunk of the token store STORE against its manifest (sizes, sha256), the offsets
    (0 first, never decreasing, num_tokens last) and the token range (below vocab_size)."""
    err = make_console(stderr=True)
    with _progress(err) as advance:
        from datatools.io.formats.store_verify import verify_store  # tensorstore: once the arguments are parsed

        report = verify_store(store, progress=advance)
    console = result_console(stderr=json_out == "-")
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


PHASES = (("checking chunks (sha256)", "bytes"), ("checking tokens", "tokens"))


@contextmanager
def _progress(console: Console) -> Iterator[Callable[[int, int], None]]:
    """verify_store's ``progress(done, total)`` as one :func:`~datatools.base.progress.count_progress` bar per
    phase: the chunks' bytes checked, then the tokens decoded."""
    phases = iter(PHASES)
    state: dict[str, Any] = {"step": None, "total": None, "done": 0}
    with ExitStack() as stack:

        def advance(done: int, total: int) -> None:
            if state["step"] is None or total != state["total"] or done < state["done"]:  # a new phase
                stack.close()
                what, unit = next(phases, PHASES[-1])
                step = stack.enter_context(count_progress(console, max(total, 1), what, unit=unit))
                state.update(step=step, total=total, done=0)
            state["step"](done - state["done"])
            state["done"] = done

        yield advance
