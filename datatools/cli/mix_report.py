"""``datatools mix-report CONFIG``: each batch's share of tokens and documents per source, against the weights."""

from __future__ import annotations

import click
from rich.table import Table

from datatools.base.progress import count_progress
from datatools.cli.common import emit_json, json_option, make_console, overrides_option, result_console


@click.command("mix-report")
@click.argument("config")
@overrides_option
@click.option(
    "--batches",
    type=click.IntRange(1, 1 << 24),
    default=1000,
    show_default=True,
    help="Global batches to look at, from the first (fewer when the data ends).",
)
@click.option(
    "--group-size",
    type=click.IntRange(1, 1 << 40),
    default=None,
    help="Consecutive documents per stored group in each source (material, book): groups per batch.",
)
@json_option()
def mix_report_command(
    config: str, overrides: tuple[str, ...], batches: int, group_size: int | None, json_out: str | None
) -> None:
    """How closely the batches of CONFIG hold its mixture's weights: per source, the mean and the worst batch share
    of tokens and of documents, and groups per batch. No token is read: the batches are the pipeline's own,
    computed from the sources' lengths.
    """
    from datatools.pipeline import load_config
    from datatools.pipeline.mix_report import mix_report

    cfg = load_config(config, overrides=overrides)
    err = make_console(stderr=True)
    report = mix_report(
        cfg,
        batches=batches,
        group_size=group_size,
        name=str(config),
        progress=lambda total: count_progress(err, total, "batches"),
    )
    console = result_console(stderr=json_out == "-")
    table = Table(
        title=(
            f"{config}: {report.batches:,} batches ({report.mode}, epoch: {report.epoch}); weights are "
            f"shares of {report.share}"
        ),
        title_justify="left",
    )
    for col in (
        "source",
        "weight",
        "tokens/batch: mean",
        "worst (|dev|)",
        "documents/batch: mean",
        "worst (|dev|)",
        *(["groups/batch"] if group_size else []),
    ):
        table.add_column(col, justify="left" if col == "source" else "right")
    for s in report.sources:
        table.add_row(
            s.name,
            f"{s.weight:.1%}",
            f"{s.token_share_mean:.1%}",
            f"{s.token_share_worst:.1%} ({s.token_share_worst_deviation:.1%})",
            f"{s.document_share_mean:.1%}",
            f"{s.document_share_worst:.1%} ({s.document_share_worst_deviation:.1%})",
            *([f"{s.groups_per_batch:.1f}"] if group_size else []),
        )
    console.print(table)
    if group_size:
        console.print(
            f"distinct groups of {group_size} documents per batch, all sources: mean "
            f"{report.groups_per_batch:.1f}, fewest {report.groups_per_batch_min}"
        )
    emit_json(json_out, report)
