"""``datatools analyze-padding PATH``: how much compute goes to padding, and what to change."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

from datatools.base.checks import DEFAULT_CTX_CAP, MAX_BATCH, MAX_BUCKETS, MAX_CTX, MAX_WINDOW, TRAINERS
from datatools.cli.common import emit_json, input_options, json_option, make_console, read_options, result_console

if TYPE_CHECKING:
    from datatools.analysis.padding_result import PaddingReport
    from datatools.io.sources.inputs import InputOptions


@click.command("analyze-padding")
@click.argument("path", type=click.Path(), required=False)
@input_options
@click.option(
    "--ctx",
    "contexts",
    type=click.IntRange(1, MAX_CTX),
    multiple=True,
    help="Context length to evaluate (repeatable). Default: p90, p99, the power of two at or above p99 "
    f"and twice it, each rounded up to a multiple of --tile and capped at {DEFAULT_CTX_CAP:,} (equal "
    "ones merged); the report says which were chosen and why.",
)
@click.option(
    "--tile", type=click.IntRange(1, MAX_CTX), default=128, show_default=True, help="Accelerator tile (tokens)."
)
@click.option(
    "--buckets",
    type=click.IntRange(1, MAX_BUCKETS),
    default=4,
    show_default=True,
    help="Buckets for the bucket strategy.",
)
@click.option("--max-segments", type=click.IntRange(1, MAX_CTX), default=None, help="Cap on documents per packed row.")
@click.option(
    "--window",
    type=click.IntRange(1, MAX_WINDOW),
    default=None,
    help="Open rows of the streaming first/best fit (Grain's num_packing_bins). Default: 256, or "
    "MaxText's per-host batch with --maxtext-config.",
)
@click.option(
    "--maxtext-config",
    type=click.Path(dir_okay=False),
    default=None,
    help="A MaxText config (YAML): also report what that pipeline wastes today and what to set.",
)
@click.option(
    "--maxtext-set",
    "maxtext_set",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a MaxText key (repeatable), as MaxText's command line does; also devices_per_host "
    "(default 1) and process_count.",
)
@click.option(
    "--batch-size",
    "loss_batch_size",
    type=click.IntRange(1, MAX_BATCH),
    default=32,
    show_default=True,
    help="Rows per batch of the loss-weight distortion view (a per-batch mean's batch, or micro-batch).",
)
@click.option(
    "--curriculum",
    "curriculum",
    default=None,
    metavar="L1,L2,...",
    help="A length curriculum's lengths (tokens, multiples of --tile), e.g. 1024,2048,4096,8192: also count its "
    "attention FLOPs and padding against fixed-ctx packing at the longest, per schedule (docs/curriculum.md).",
)
@click.option(
    "--tokens-per-batch",
    type=click.IntRange(1, MAX_BATCH),
    default=None,
    help="--curriculum: token slots of every batch (a multiple of every length). Default: 8 rows of the longest.",
)
@click.option(
    "--devices",
    "devices",
    type=click.IntRange(1, MAX_BATCH),
    multiple=True,
    help="Accelerators a global batch is split over (repeatable, e.g. --devices 16 --devices 64): the busiest "
    "device's attention work over the mean at the recommended ctx, as drawn and with devices: N in the pipeline "
    "config (each must divide --global-batch).",
)
@click.option(
    "--global-batch",
    type=click.IntRange(1, MAX_BATCH),
    default=128,
    show_default=True,
    help="--devices: rows of a global batch (all hosts).",
)
@json_option(then=" (then nothing else goes to stdout)")
@click.option(
    "--write-config",
    "write_config",
    type=str,
    default=None,
    help="Write the recommendation as a complete pipeline config (source, packing, the trainer's format and "
    "global batch) that `datatools pipeline FILE` runs as written, one epoch delivering every document and token "
    "counted (the config the report prints): a file or an s3:// / gs:// URL (not replaced unless --overwrite).",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="--write-config: replace the file (or object) if it exists.",
)
@click.option(
    "--trainer",
    type=click.Choice(TRAINERS),
    default=None,
    help="The trainer of --write-config (its batch format). Default: maxtext with --maxtext-config, else datatools.",
)
@click.option(
    "--plot",
    "plot_out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write a PNG: the length histogram beside each strategy's efficiency.",
)
def analyze_padding_command(
    path: str | None,
    curriculum: str | None,
    json_out: str | None,
    write_config: str | None,
    overwrite: bool,
    trainer: str | None,
    plot_out: str | None,
    **options: Any,
) -> None:
    """Length distribution of PATH, the padding waste of every strategy, and a recommendation.

    Without PATH, --maxtext-config names the data: its grain_train_files (a glob or comma list of ArrayRecord
    or other files), train_data_columns and tokenizer_path (a SentencePiece model or tokenizer.json)."""
    if path is None and options["maxtext_config"] is None:
        raise click.UsageError("name the data as PATH, or give --maxtext-config whose grain_train_files names it")
    lengths = _lengths_list(curriculum, options["tile"])
    if write_config is not None:
        _check_config_target(write_config, overwrite)
    from datatools.analysis.padding_input import AnalysisOptions, analyze_input  # numba: once the arguments are parsed
    from datatools.analysis.padding_report import plot, render
    from datatools.io.storage.paths import display

    reading = read_options(options)
    asked = AnalysisOptions(curriculum=lengths, **options)
    report = analyze_input(path, asked, reading, console=make_console(stderr=True))
    config = _pipeline_config(report, trainer, path, reading)
    console = result_console(stderr=json_out == "-")
    render(report, console, source=report.source or display(path or ""), config=config)
    if plot_out:
        plot(report, plot_out, source=report.source or display(path or ""))
        console.print(f"plot written to {plot_out}")
    if write_config:
        from datatools.analysis.write_config import maxtext_keys, write_pipeline_config

        needs = maxtext_keys(config, report.maxtext.settings if report.maxtext is not None else None)
        write_pipeline_config(write_config, config, needs)  # the text printed above
        console.print(
            f"pipeline config for {config['format']} written to {write_config} "
            f"(run it: datatools pipeline {write_config})"
        )
        if needs:
            console.print(f"MaxText needs {needs}: its attention keeps the packed documents apart only then")
    emit_json(json_out, report)


def _lengths_list(text: str | None, tile: int) -> tuple[int, ...]:
    """``--curriculum 1024,2048`` as lengths, refused as the pipeline's ``curriculum.lengths`` refuses them (1 to
    MAX_BUCKETS lengths, increasing, multiples of the tile); a bad list is a usage error naming it."""
    if text is None:
        return ()
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a comma list of lengths (tokens)", param_hint="--curriculum"
        ) from None
    if not 1 <= len(values) <= MAX_BUCKETS:
        raise click.BadParameter(f"{text!r}: give 1 to {MAX_BUCKETS:,} lengths (tokens)", param_hint="--curriculum")
    if min(values) < 1 or max(values) > MAX_CTX:
        raise click.BadParameter(f"{text!r}: lengths must be 1 to {MAX_CTX:,} tokens", param_hint="--curriculum")
    if any(b <= a for a, b in zip(values, values[1:])):
        raise click.BadParameter(f"{text!r}: lengths must be increasing", param_hint="--curriculum")
    bad = [n for n in values if n % tile]
    if bad:
        raise click.BadParameter(
            f"{text!r}: lengths must be multiples of --tile {tile}; {bad[0]} is not", param_hint="--curriculum"
        )
    return values


def _check_config_target(out: str, overwrite: bool) -> None:
    """Before any work: ``--write-config OUT`` names a file or object that may be written (not one that exists,
    without ``--overwrite``; not a directory)."""
    from datatools.io import storage

    if out == "":
        raise click.BadParameter("the path is empty ('')", param_hint="--write-config")
    if storage.location(out).is_dir():
        raise click.BadParameter(f"{out}: is a directory", param_hint="--write-config")
    if not overwrite and storage.location(out).exists():
        raise click.BadParameter(f"{out}: already exists; pass --overwrite to replace it", param_hint="--write-config")


def _pipeline_config(
    report: PaddingReport, trainer: str | None, path: str | None, reading: InputOptions
) -> dict[str, Any]:
    """The recommendation as a pipeline config the trainer's integration accepts (the report prints it,
    ``--write-config`` writes it); with a MaxText config, the settings the report read from it. ``reading``: the
    column and tokenizer given (else those the analysis found)."""
    settings = report.maxtext.settings if report.maxtext is not None else None
    inp = report.input or {}
    tok = inp.get("tokenizer") or {}
    from datatools.analysis.write_config import ConfigSource, pipeline_config

    source = ConfigSource(
        str(path) if path is not None else str(report.source),
        column=reading.column or inp.get("column"),
        tokenizer=(reading.tokenizer and os.fspath(reading.tokenizer)) or tok.get("file"),
        tokenizer_settings=tok.get("settings"),  # what the analysis tokenized with: BOS / EOS from --bos / --eos
        bos=(tok.get("bos") or {}).get("token"),  # or from the MaxText config's add_bos / add_eos
        eos=(tok.get("eos") or {}).get("token"),
    )
    trainer = trainer or ("maxtext" if settings is not None else "datatools")
    return pipeline_config(report, source=source, trainer=trainer, maxtext_settings=settings)
