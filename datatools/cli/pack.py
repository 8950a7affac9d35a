"""``datatools pack DATA OUT --ctx N``: an index-only packed plan directory (:mod:`datatools.io.formats.plan_file`),
planned in bounded memory, which pipelines read with ``packing: {plan: OUT}``."""

from __future__ import annotations

from typing import Any

import click

from datatools.base.checks import DEFAULT_ALGORITHM, MAX_CTX, OVERFLOW_POLICIES, PACK_ALGORITHMS
from datatools.cli.common import emit_json, input_options, json_option, make_console, read_options, result_console


@click.command("pack")
@click.argument("data", type=click.Path())
@click.argument("out", type=click.Path())
@click.option("--ctx", type=click.IntRange(1, MAX_CTX), required=True, help="Row length (tokens).")
@click.option("--algorithm", type=click.Choice(PACK_ALGORITHMS), default=DEFAULT_ALGORITHM, show_default=True)
@click.option("--max-segments", type=click.IntRange(1, MAX_CTX), default=None, help="Cap on documents per row.")
@click.option(
    "--align",
    type=click.IntRange(1, MAX_CTX),
    default=1,
    show_default=True,
    help="Every document starts at a multiple of this (tokens); must divide --ctx.",
)
@click.option(
    "--overflow",
    type=click.Choice(OVERFLOW_POLICIES),
    default="split",
    show_default=True,
    help="Documents longer than ctx: split (nothing lost), truncate, drop, error.",
)
@click.option(
    "--group-docs",
    type=click.IntRange(1, None),
    default=None,
    help="Documents planned at once (memory: about 80 bytes each); default 50,000,000.",
)
@click.option("--overwrite", is_flag=True, help="Replace OUT when it is an existing plan.")
@input_options
@json_option("the plan's header (num_rows, lower_bound_rows, efficiency, ...)", then="")
def pack_command(data: str, out: str, ctx: int, align: int, json_out: str | None, **options: Any) -> None:
    """Plan DATA into the packed plan directory OUT (rows of --ctx tokens; index only, no token copied)."""
    from datatools.io.storage.paths import display
    from datatools.jobs.pack_plan import pack_plan
    from datatools.kernels.packing import PackOptions

    if ctx % align:
        raise click.BadParameter(f"--align {align} must divide --ctx {ctx}", param_hint="--align")
    packing = PackOptions(ctx, options.pop("algorithm"), options.pop("max_segments"), align, options.pop("overflow"))
    reading = read_options(options)
    report = pack_plan(data, out, packing, console=make_console(stderr=True), input_options=reading, **options)
    console = result_console(stderr=json_out == "-")
    console.print(
        f"{display(out)}: {report.num_rows:,} rows of {ctx} tokens ({report.num_pieces:,} pieces of "
        f"{report.data['documents']:,} documents), efficiency {report.efficiency:.4%}, "
        f"{report.over_lower_bound:.4%} above the lower bound of {report.lower_bound_rows:,} rows; "
        f"{report.pack_seconds:.1f} s",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    emit_json(json_out, report)
