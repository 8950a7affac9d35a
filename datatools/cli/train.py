"""``datatools train CONFIG``: train the configured model on the configured pipeline; loss, tokens/s, MFU per step."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING

import click
from rich.table import Table

from datatools.base.checks import ATTENTIONS
from datatools.base.progress import count_progress, doing
from datatools.cli.common import emit_json, json_option, make_console

if TYPE_CHECKING:
    from datatools.pipeline.stalls import LoaderReport
    from datatools.train.loop import LengthRate, StepRecord, TrainSummary


@click.command("train")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--steps", type=click.IntRange(1, 1 << 40), default=None, help="Override train.steps.")
@click.option("--source", default=None, help="Override the config's source path.")
@click.option(
    "--attention",
    type=click.Choice(ATTENTIONS),
    default=None,
    help="Override model.attention: dense (masked ctx x ctx), blocksparse (only the tiles packing leaves "
    "non-empty), fused, splash and pallas_blocksparse (TPU), pallas_gpu and cudnn (GPU). The Pallas "
    "kernels run interpreted off their device: exact but slow, for correctness checks only.",
)
@click.option(
    "--grad-accum-steps",
    type=click.IntRange(1, 1 << 16),
    default=None,
    help="Override train.grad_accum_steps: pipeline batches per optimizer step, the loss divided by the "
    "weight sum of all of them.",
)
@json_option("the summary and per-step records", then="")
def train_command(
    config: str,
    steps: int | None,
    source: str | None,
    attention: str | None,
    grad_accum_steps: int | None,
    json_out: str | None,
) -> None:
    """Train the CONFIG's model on its pipeline: loss, tokens/s, efficiency and MFU per step."""
    import jax

    from datatools.pipeline.named_configs import check_demo_data
    from datatools.train.device_errors import device_errors  # JAX: imported once the arguments are parsed
    from datatools.train.loop import load_train_config, train

    cfg = load_train_config(config, steps=steps, source=source, attention=attention, grad_accum_steps=grad_accum_steps)
    pipe = cfg.pipeline
    check_demo_data(config, [s.path for s in pipe.sources] if pipe.sources else [pipe.one_source.path])
    console = make_console(stderr=json_out == "-")
    err = make_console(stderr=True)
    console.print(
        f"model: {cfg.model.num_params():,} parameters ({cfg.model.n_layers} layers, d_model "
        f"{cfg.model.d_model}); pipeline: {cfg.pipeline.source_label}"
    )
    several = jax.local_device_count() > 1  # rows split over devices: each step's busiest device over the mean
    doing("building the pipeline, compiling the first step")
    with device_errors(), ExitStack() as bars:  # XLA out of memory -> DeviceOutOfMemory (exit 1, one line)
        advance: list[Callable[..., None]] = []  # the bar, from the first (compiled) step on

        def on_step(rec: StepRecord) -> None:
            if rec.step == 1 or rec.step % cfg.train.log_every == 0:
                console.print(_step_line(rec, several))
            if not advance:
                advance.append(bars.enter_context(count_progress(err, cfg.train.steps, "training steps")))
            advance[0]()

        result = train(
            cfg, on_step=on_step, on_loader_stall=lambda line: err.print(line, markup=False, highlight=False)
        )
    doing(None)
    s, loader = result.summary, result.summary.loader
    console.print(_summary_table(config, s, loader, several))
    if len(s.per_length) > 1 or s.compile_budget is not None:
        console.print(per_length_table(s.per_length))
    emit_json(json_out, result)


def _step_line(rec: StepRecord, several: bool) -> str:
    """One step's line: loss, shape, rates, efficiency, MFU and HFU; on several devices the busiest one's attention
    work (and listed tiles) over the mean."""
    from datatools.kernels.balance import busiest_over_mean

    tiles = busiest_over_mean(rec.device_tiles, len(rec.device_tiles)) if rec.device_tiles else None
    return (
        f"step {rec.step:>5}  loss {rec.loss:.4f}  {rec.rows}x{rec.shape[1]}  "
        f"tokens/s {rec.tokens_per_s:>10,.0f}  useful/s {rec.useful_tokens_per_s:>10,.0f}  "
        f"efficiency {rec.efficiency:6.1%}  MFU {rec.mfu:6.2%}  HFU {rec.hfu:6.2%}"
        + (f"  busiest/mean device: attention {rec.device_attention:.3f}" if several else "")
        + (f", tiles {tiles:.3f}" if tiles is not None else "")
        + ("  (includes compilation)" if rec.compiled else "")
    )


def _summary_table(config: str, s: TrainSummary, loader: LoaderReport, several: bool) -> Table:
    """The run's summary: final loss, rates, MFU / HFU, compilations, shapes, device balance, waits."""
    table = Table(title=f"{config}: {s.steps} steps (rates exclude the first, compiling, step)", title_justify="left")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in [
        ("final loss", f"{s.final_loss:.4f}"),
        ("tokens/s", f"{s.tokens_per_s:,.0f}"),
        ("useful tokens/s", f"{s.useful_tokens_per_s:,.0f}"),
        ("efficiency", f"{s.efficiency:.2%}"),
        ("MFU (useful FLOPs)", f"{s.mfu:.2%} of {s.peak_flops / 1e12:,.2f} TFLOP/s ({s.peak_source})"),
        (f"HFU (FLOPs executed, {s.attention} attention)", f"{s.hfu:.2%}"),
        (
            "compilations",
            str(s.compilations) + ("" if s.compile_budget is None else f" (one per length: {s.compile_budget})"),
        ),
        ("shapes", ", ".join(f"{r}x{t}" for r, t in s.shapes)),
        *(
            [(f"busiest/mean device of {len(s.devices)}: attention work", f"{s.device_attention:.3f}")]
            if several
            else []
        ),
        *([("busiest/mean device: listed tiles", f"{s.device_tiles:.3f}")] if not math.isnan(s.device_tiles) else []),
        ("first step (compile)", f"{s.first_step_s:.2f} s"),
        (
            "step waited for data (p50 / p99 / max)",
            f"{loader.wait_p50_ms:.1f} / {loader.wait_p99_ms:.1f} / {loader.wait_max_ms:.1f} ms",
        ),
        (f"steps waited > {loader.threshold_ms:.0f} ms", str(loader.steps_waited)),
    ]:
        table.add_row(name, value)
    return table


def per_length_table(rows: list[LengthRate]) -> Table:
    """Steps, time, attention FLOPs and MFU per row length (a curriculum's or the buckets')."""
    table = Table(title="per length (the first step of each compiles: out of its rate and MFU)", title_justify="left")
    for name in ("length", "steps", "compile s", "tokens/s", "attention GFLOP (in-document)", "executed", "MFU"):
        table.add_column(name, justify="right")
    for d in rows:
        table.add_row(
            str(d.length),
            str(d.steps),
            f"{d.compile_s:.2f}",
            f"{d.tokens_per_s:,.0f}",
            f"{d.attention_flops / 1e9:,.2f}",
            f"{d.attention_flops_executed / 1e9:,.2f}",
            f"{d.mfu:.2%}",
        )
    return table
