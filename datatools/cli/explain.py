"""``datatools explain CONFIG``: what was in global batch N (row by row), where document D was seen, an exposure
ledger: all from the config's schedule and the documents' lengths, no token read, no run replayed."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from datatools.cli.common import emit_json, json_option, overrides_option, result_console

if TYPE_CHECKING:
    from datatools.pipeline.explain import DocumentReport, Explainer, LedgerReport, StepReport

PIECES_SHOWN = 4  # pieces printed per row in the table (--json holds all)


def _steps(value: str | None) -> range | None:
    """``--steps A:B`` (or ``A``) as the range of global batches it names; None when not given."""
    if value is None:
        return None
    a, sep, b = value.partition(":")
    try:
        first, end = int(a), int(b) if sep else int(a) + 1
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected A:B (global batches A to B - 1)") from None
    if not 0 <= first < end:
        raise click.BadParameter(f"{value!r}: expected 0 <= A < B")
    return range(first, end)


def _history(path: str | None) -> list[Any] | None:
    """A mixture's weight history from a saved pipeline state (JSON: ``get_state()`` of the pipeline)."""
    if path is None:
        return None
    from datatools.io.storage import location

    try:
        state = json.loads(location(path).read_bytes())
        history: list[Any] = state["pipeline"]["mixture_weights"]  # checked where it is restored
        return history
    except (ValueError, KeyError, TypeError):
        raise ValueError(
            f"{path}: not a saved pipeline state with a mixture's weights (JSON: pipeline.mixture_weights)"
        ) from None


@click.command("explain")
@click.argument("config")
@overrides_option
@click.option("--step", type=click.IntRange(0, 1 << 62), default=None, help="Global batch to explain (0-based).")
@click.option("--steps", "steps_range", default=None, metavar="A:B", help="Global batches A to B - 1, each explained.")
@click.option("--document", type=click.IntRange(0, 1 << 62), default=None, help="Where this document was seen.")
@click.option("--source", default=None, help="The mixture source of --document (name or index).")
@click.option(
    "--epochs", type=click.IntRange(1, 1 << 20), default=1, show_default=True, help="Epochs --document searches."
)
@click.option("--ledger", type=click.Path(dir_okay=False), default=None, help="Write an exposure ledger (.npz) here.")
@click.option("--upto", type=click.IntRange(0, 1 << 62), default=None, help="The ledger counts steps [0, UPTO).")
@click.option(
    "--hosts",
    multiple=True,
    metavar="COUNT[@STEP]",
    help="Hosts of the run from STEP on (repeatable: an elastic restore on another host count); default the "
    "config's shard.count.",
)
@click.option(
    "--devices",
    type=click.IntRange(1, 1 << 16),
    default=None,
    help="Devices per host (default: the config's devices over its hosts, else 1).",
)
@click.option(
    "--state",
    type=click.Path(dir_okay=False),
    default=None,
    help="A pipeline state saved after a restore into other mixture weights (JSON): its weight history.",
)
@json_option()
def explain_command(
    config: str,
    overrides: tuple[str, ...],
    step: int | None,
    steps_range: str | None,
    document: int | None,
    source: str | None,
    epochs: int,
    ledger: str | None,
    upto: int | None,
    hosts: tuple[str, ...],
    devices: int | None,
    state: str | None,
    json_out: str | None,
) -> None:
    """Explain CONFIG's run without replaying it: --step N (or --steps A:B): each row of global batch N, its
    source, document, token range of each piece, host and device, real tokens and attention tiles; --document D:
    the steps and rows where D was seen; --ledger OUT --upto N: every document's and source's visits up to step N.
    """
    from datatools.pipeline import load_config
    from datatools.pipeline.config import ShardConfig
    from datatools.pipeline.explain import Explainer, StepsReport, parse_hosts

    asked = [step is not None or steps_range is not None, document is not None, ledger is not None]
    if sum(asked) != 1:
        raise click.UsageError("give one of --step/--steps, --document, --ledger")
    if ledger is not None and upto is None:
        raise click.UsageError("--ledger needs --upto N (the steps counted)")
    span = _steps(steps_range) if steps_range is not None else None
    cfg = load_config(config, overrides=overrides)
    if devices is None:  # the config's devices (a balanced run) cut each host's rows as the run did
        hosts_now = cfg.shard.count if isinstance(cfg.shard, ShardConfig) else 1
        devices = max(1, cfg.devices // hosts_now) if cfg.devices else 1
    e = Explainer(cfg, history=_history(state), hosts=parse_hosts(hosts) or None, devices=devices)
    console = result_console(stderr=json_out == "-")
    if ledger is not None:
        assert upto is not None  # refused above: --ledger needs --upto
        emit_json(json_out, _print_ledger(console, e, ledger, upto))
    elif document is not None:
        emit_json(json_out, _print_document(console, e, document, source, epochs))
    else:  # --step N or --steps A:B (one of them: checked above)
        steps = span if span is not None else [step] if step is not None else []
        reports = [e.step(s) for s in steps]  # all computed before any is printed
        for r in reports:
            _print_step(console, r)
        emit_json(json_out, reports[0] if span is None else StepsReport(reports))


def _print_ledger(console: Console, e: Explainer, ledger: str, upto: int) -> LedgerReport:
    """``--ledger OUT --upto N``: every document's visits up to step N written to OUT, and a table of each
    source's documents, tokens and visits printed; returns the report (for ``--json``)."""
    report = e.ledger(ledger, upto)
    console.print(f"{ledger}: visits in steps [0, {report.steps:,})", highlight=False)
    table = Table()
    for col in ("source", "documents", "tokens", "visits", "never seen", "most visits of one"):
        table.add_column(col, justify="left" if col == "source" else "right")
    for k, name in enumerate(report.sources):
        table.add_row(
            name,
            f"{report.documents[k]:,}",
            f"{report.tokens[k]:,}",
            f"{report.visits[k]:,}",
            f"{report.unseen[k]:,}",
            f"{report.most_visits[k]:,}",
        )
    console.print(table)
    return report


def _print_document(console: Console, e: Explainer, document: int, source: str | None, epochs: int) -> DocumentReport:
    """``--document D``: a table of the steps, rows and hosts where document D was seen in ``epochs`` epochs;
    returns what was found (for ``--json``)."""
    found = e.document(document, source=source, epochs=epochs)
    console.print(
        f"{found.source} document {found.document:,} ({found.length:,} tokens): "
        f"{len(found.sightings):,} pieces in {epochs} epoch(s)",
        highlight=False,
    )
    table = Table()
    for col in ("step", "epoch", "row", "host", "tokens"):
        table.add_column(col, justify="right")
    for x in found.sightings:
        table.add_row(f"{x.step:,}", str(x.epoch), str(x.row), str(x.host), f"{x.start:,}-{x.start + x.length:,}")
    console.print(table)
    return found


def _print_step(console: Console, r: StepReport) -> None:
    """One global batch's report ``r`` printed: a line for the batch, then a table of its rows (host, device, real
    tokens, attention tiles and the first :data:`PIECES_SHOWN` pieces)."""
    work = "" if r.attention_tiles is None else f", {r.attention_tiles:,} of {r.causal_tiles:,} tiles of {r.block}"
    console.print(
        f"step {r.step:,} (epoch {r.epoch}, batch {r.batch:,}): {len(r.rows)} rows of {r.row_length:,}, "
        f"{r.tokens:,} real tokens{work}; {r.hosts} host(s) x {r.devices} device(s)",
        highlight=False,
    )
    table = Table()
    for col in ("row", "host", "device", "tokens", "tiles", "pieces: source/document (tokens from:to)"):
        table.add_column(col, justify="left" if col.startswith("pieces") else "right")
    for row in r.rows:
        pieces = [
            f"{r.sources[s]}/{d} ({a}:{a + n})"
            for s, d, a, n in list(zip(row.source, row.document, row.start, row.length))[:PIECES_SHOWN]
        ]
        more = len(row.source) - PIECES_SHOWN
        tiles = "-" if row.attention_tiles is None else str(row.attention_tiles)
        table.add_row(
            str(row.row),
            str(row.host),
            str(row.device),
            f"{row.tokens:,}",
            tiles,
            escape(" ".join(pieces) + (f" +{more}" if more > 0 else "")),
        )
    console.print(table)
