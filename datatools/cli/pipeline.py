"""``datatools pipeline CONFIG``: build the configured Grain pipeline, run it, report its speed and efficiency."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click
from rich.table import Table

if TYPE_CHECKING:
    from datatools.pipeline.run import PipelineRunReport
    from datatools.pipeline.stalls import LoaderReport

from datatools.base.checks import MAX_WORKERS
from datatools.base.progress import count_progress
from datatools.cli.common import emit_json, json_option, make_console, overrides_option


@click.command("pipeline")
@click.argument("config")
@click.option(
    "--source",
    default=None,
    help="Replace the config's source by this input (any format); --set source.column=... and the other "
    "source.* keys apply to it.",
)
@overrides_option
@click.option("--steps", type=click.IntRange(1, 1 << 40), required=True, help="Batches to run.")
@click.option(
    "--workers",
    type=click.IntRange(0, MAX_WORKERS),
    default=None,
    help=f"Override the config's prefetch worker processes (at most {MAX_WORKERS}).",
)
@json_option("the figures")
@click.option(
    "--step-time",
    "step_s",
    type=click.FloatRange(0, 3600),
    default=0.0,
    show_default=True,
    help="Simulate a training step of this many seconds after each batch: does the loader keep up with it?",
)
def pipeline_command(
    config: str,
    source: str | None,
    overrides: tuple[str, ...],
    steps: int,
    workers: int | None,
    json_out: str | None,
    step_s: float,
) -> None:
    """Run the pipeline of CONFIG for --steps batches: batches/s, tokens/s, efficiency, shapes.

    CONFIG is a YAML file, or the name of a config shipped with datatools (pretrain_block_8192,
    finetune_packed_1024, bucketed, ...; configs/README.md describes them).
    """
    from datatools.pipeline import load_config  # Grain, JAX: imported once the arguments are parsed
    from datatools.pipeline.config import in_file
    from datatools.pipeline.named_configs import check_demo_data
    from datatools.pipeline.run import run_pipeline

    cfg = load_config(config, source=source, overrides=overrides)
    check_demo_data(config, [s.path for s in cfg.sources] if cfg.sources else [cfg.one_source.path])
    if workers is not None:
        cfg = cfg.replace(workers=workers)
    console, err = make_console(stderr=json_out == "-"), make_console(stderr=True)
    try:
        report = run_pipeline(
            cfg,
            steps,
            progress=lambda total: count_progress(err, total, "batches"),
            warn=lambda line: err.print(line, markup=False, highlight=False),
            step_s=step_s,
        )
    except ValueError as exc:
        if str(exc).startswith("config: "):  # a key the build refused: name the file, as load_config does
            raise in_file(config, exc) from None
        raise
    table = Table(title=f"{config}: {report.config.mode} pipeline on {cfg.source_label}", title_justify="left")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in [*_summary_rows(report), *_device_rows(report), *_loader_rows(report.loader)]:
        table.add_row(name, value)
    console.print(table)
    if report.loader is not None and report.loader.requests:
        console.print(
            "fetched: the stored chunks read (whole inner chunks, read-ahead included) in bytes of the store's tokens; "
            "delivered: the tokens handed to batches, at the same width. Above 1x: chunks read past the documents a "
            "batch used (block edges, other hosts' rows), or read ahead and not used yet."
        )
    emit_json(json_out, report)


def _summary_rows(report: PipelineRunReport) -> list[tuple[str, str]]:
    """The run's measures: documents and batches, build and first-batch time, throughput, efficiency, shapes,
    format and workers."""
    return [
        ("documents", f"{report.documents:,}"),
        ("batches", f"{report.batches:,}"),
        ("build (plan, open source)", f"{report.build_s:.2f} s"),
        ("first batch", f"{report.startup_s:.2f} s"),
        ("batches/s", f"{report.batches_per_s:,.1f}"),
        ("tokens/s (slots)", f"{report.tokens_per_s:,.0f}"),
        ("real tokens/s", f"{report.real_tokens_per_s:,.0f}"),
        ("efficiency (batches run)", f"{report.efficiency:.2%}"),
        ("efficiency (whole plan)", "-" if report.plan_efficiency is None else f"{report.plan_efficiency:.2%}"),
        ("distinct shapes", ", ".join(f"{r}x{t}" for r, t in report.shapes)),
        ("format", report.format),
        ("workers", str(report.config.workers)),
    ]


def _loader_rows(loader: LoaderReport | None) -> list[tuple[str, str]]:
    """The loader's measures, where it kept them: the time each step waited (over one step), and with reads from
    storage, the bytes fetched per byte delivered, the reads per batch and their latency."""
    rows = []
    if loader is not None and loader.steps > 1:
        rows.append(
            (
                "step waited (p50 / p99 / max)",
                f"{loader.wait_p50_ms:.1f} / {loader.wait_p99_ms:.1f} / {loader.wait_max_ms:.1f} ms",
            )
        )
        rows.append(
            (f"steps waited > {loader.threshold_ms:.0f} ms", f"{loader.steps_waited:,} of {loader.steps - 1:,}")
        )
    if loader is not None and loader.requests:
        rows.append(
            (
                "fetched / delivered",
                f"{loader.bytes_fetched / 1e6:,.1f} / {loader.bytes_delivered / 1e6:,.1f} MB "
                f"({loader.fetched_per_delivered:.2f}x)",
            )
        )
        rows.append(("reads per batch", f"{loader.requests_per_step:,.1f}"))
        rows.append(
            (
                "read latency (p50 / p99)",
                f"{loader.request_latency_p50_ms:.1f} / {loader.request_latency_p99_ms:.1f} ms",
            )
        )
    return rows


def _device_rows(report: PipelineRunReport) -> list[tuple[str, str]]:
    """With the config's devices: the busiest device over the mean per batch, in attention tiles and in real tokens
    (mean / p90 / max over the batches run)."""
    import numpy as np

    rows = []
    for what, values in (("attention tiles", report.device_tiles), ("real tokens", report.device_tokens)):
        if report.devices and values:
            rows.append(
                (
                    f"busiest/mean of {report.devices} devices, {what} (mean / p90 / max of {len(values):,} batches)",
                    " / ".join(f"{x:.3f}" for x in (np.mean(values), np.percentile(values, 90), np.max(values))),
                )
            )
    return rows
