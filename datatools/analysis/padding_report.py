"""The one renderer of a :class:`~datatools.analysis.padding_result.PaddingReport`: every view as rich tables on the
terminal, and a PNG plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from datatools.analysis.attention_tiles import AttentionTiles
from datatools.analysis.curriculum import FLOPS_PER_PAIR, MARKS, CurriculumSavings
from datatools.analysis.device_balance import DeviceBalance
from datatools.analysis.loss_distortion import LossDistortion
from datatools.analysis.maxtext_simulation import MaxTextReport
from datatools.analysis.padding_result import PaddingReport
from datatools.analysis.write_config import config_text, maxtext_keys
from datatools.base.tables import fitted_table
from datatools.io import storage
from datatools.kernels.packing.algorithms import TABLE

LABELS = {"pad": "pad to ctx (truncate)", "bucket": "optimal buckets", **{a.name: a.label for a in TABLE}}

STRATEGY_COLUMNS = (
    "strategy",
    "rows",
    "efficiency",
    "dropped tokens",
    "truncated",
    "split",
    "docs/row",
    "max docs/row",
    "speed-up bound",
    "attn dense/doc",
)
# left out first on a narrow console (base/tables.py): rows, efficiency and the speed-up bound stay longest
DROP_FIRST = ("attn dense/doc", "max docs/row", "docs/row", "truncated", "split", "dropped tokens", "speed-up bound")


def _bar(fraction: float, width: int = 40) -> str:
    full = fraction * width
    return "█" * int(full) + ("▌" if full - int(full) >= 0.5 else "")


def render(report: PaddingReport, console: Console, *, source: str, config: dict[str, Any] | None = None) -> None:
    """Print the distribution, the histogram, the strategies per ctx, the recommendation and every view the report
    holds (attention tiles, MaxText, loss distortion, curriculum). ``config``: the pipeline config of the
    recommendation (:func:`~datatools.analysis.write_config.pipeline_config`), printed as ``--write-config`` writes
    it, with its trainer's settings (Levanter's for ``format: levanter``, else MaxText's packer's); None: the
    recommendation's packing section and MaxText's settings."""
    L = report.lengths
    console.print(
        f"[bold]{source}[/]: {report.num_sequences:,} documents, {report.num_tokens:,} tokens"
        + (f" ({report.empty:,} empty)" if report.empty else "")
        + (f"; write order: {report.input['write_order']}" if report.input and "write_order" in report.input else "")
    )
    console.print(
        f"length (tokens): min {L.min:,}  p50 {L.p50:,.0f}  mean {L.mean:,.1f}  "
        f"p90 {L.p90:,.0f}  p99 {L.p99:,.0f}  max {L.max:,}"
    )
    if report.contexts_note:
        console.print(report.contexts_note, markup=False, highlight=False)
    render_histogram(report, console)
    for ctx in report.contexts:
        render_strategies(report, ctx, console)
    rec = report.recommendation
    bound = "-" if rec.speedup_bound is None else f"{rec.speedup_bound:.2f}x"
    console.print(
        f"[bold green]Recommendation:[/] {rec.strategy} at ctx {rec.ctx:,}: "
        f"{rec.efficiency:.1%} of the compute on real tokens, "
        f"speed-up bound {bound} over padding. {rec.reason}."
    )
    if config is None:
        console.print("[bold]datatools pipeline config:[/]")
        console.print(rec.datatools_config, markup=False, highlight=False)
    else:  # the text --write-config writes, as it is (lines never wrapped)
        console.print(f"[bold]datatools pipeline config[/] for {config['format']} (what --write-config writes):")
        needs = maxtext_keys(config, report.maxtext.settings if report.maxtext is not None else None)
        console.print(config_text(config, needs).rstrip("\n"), markup=False, highlight=False, soft_wrap=True)
    if rec.max_segments_reason and (config is None or "max_segments" in config["packing"]):
        console.print(f"why {rec.max_segments_reason}", markup=False, highlight=False)
    render_trainer_settings(report, config, console)
    if report.attention_tiles:
        render_attention_tiles(report.attention_tiles, console)
    if report.maxtext:
        render_maxtext(report.maxtext, console)
    if report.loss_distortion is not None:
        render_loss_distortion(report.loss_distortion, console)
    if report.curriculum is not None:
        render_curriculum_savings(report.curriculum, console)
    if report.devices is not None:
        render_device_balance(report.devices, console)


def render_histogram(report: PaddingReport, console: Console) -> None:
    """The length histogram: documents per length range, with a bar."""
    hist = Table(title="length histogram", title_justify="left", box=None, padding=(0, 1))
    hist.add_column("tokens", justify="right")
    hist.add_column("documents", justify="right")
    hist.add_column("")
    edges, counts = report.histogram.edges, report.histogram.counts
    top = max(max(counts), 1)
    for lo, hi, c in zip(edges[:-1], edges[1:], counts):
        if c:
            hist.add_row(f"{lo:,}-{hi - 1:,}", f"{c:,}", _bar(c / top))
    console.print(hist)


def render_strategies(report: PaddingReport, ctx: int, console: Console) -> None:
    """The table of every strategy at ``ctx``: rows, efficiency (the best in bold), losses, documents per row, the
    speed-up bound and the attention saving."""
    rows = report.at(ctx)
    best = max(r.efficiency for r in rows)
    cells = []
    for r in rows:
        eff = f"{r.efficiency:.2%}"
        cells.append(
            [
                LABELS[r.name] + (f" {r.boundaries}" if r.name == "bucket" else ""),
                f"{r.rows:,}",
                f"[bold]{eff}[/]" if r.efficiency == best else eff,
                f"{r.dropped_tokens:,}",
                f"{r.truncated_fraction:.1%}",
                f"{r.split_fraction:.1%}",
                f"{r.docs_per_row:.2f}",
                f"{r.max_docs_per_row:,}",
                "-" if r.speedup_bound is None else f"{r.speedup_bound:.2f}x",
                "-" if not r.attention_saving else f"{r.attention_saving:.1f}x",
            ]
        )
    table, _ = fitted_table(f"ctx {ctx:,}", STRATEGY_COLUMNS, cells, console.width, drop_first=DROP_FIRST)
    console.print(table)


def render_trainer_settings(report: PaddingReport, config: dict[str, Any] | None, console: Console) -> None:
    """The settings of the trainer ``config`` is for: Levanter's (it trains on the pipeline's rows, so its sequence
    length and batch are the config's), else the closest settings of MaxText's own packer."""
    if config is not None and config["format"] == "levanter":
        console.print(
            "[bold]Levanter's settings[/] (its Trainer takes this pipeline's rows through "
            "datatools.integrations.levanter.data_config; Levanter's own packer is not used):"
        )
        settings = {"max_seq_len": config["packing"]["ctx"], "train_batch_size": config["batch_size"]}
    else:
        console.print(
            "[bold]MaxText's own packer, closest settings[/] (max_segments_per_seq works with first_fit only):"
        )
        settings = report.recommendation.maxtext
    console.print("\n".join(f"{k}: {v}" for k, v in settings.items()), markup=False, highlight=False)


def render_attention_tiles(view: AttentionTiles, console: Console) -> None:
    """Per ctx and tile size: the tiles a block-sparse kernel visits against causal flash's, and the best pair."""
    table = Table(
        title=f"attention tiles ({LABELS.get(view.packing, view.packing)} rows): block-sparse against causal flash",
        title_justify="left",
    )
    for col in ("ctx", "tile", "non-empty tiles (expected)", "causal tiles", "ideal ratio"):
        table.add_column(col, justify="right")
    for e in view.entries:
        ratio = "-" if e.ideal_ratio is None else f"{e.ideal_ratio:.1f}x"
        table.add_row(
            f"{e.ctx:,}",
            str(e.block),
            f"{e.non_empty_tiles:,.0f}",
            f"{e.causal_tiles:,}",
            f"[bold]{ratio}[/]" if e == view.best else ratio,
        )
    console.print(table)
    if view.note:
        console.print(view.note, markup=False, highlight=False)


def render_maxtext(mt: MaxTextReport, console: Console) -> None:
    """The configured MaxText pipeline: what it wastes today, and what to set."""
    today, advice = mt.today, mt.advice
    console.print(f"[bold]MaxText today[/] ({mt.config}): {today.pipeline}")
    fails = f"; [red]{today.fails:,} documents stop its packer[/]" if today.fails else ""
    console.print(
        f"  ctx {today.ctx:,}, {today.bins} bins (per-host batch): {today.rows:,} rows, "
        f"[bold]{today.padding:.1%} padding[/], {today.dropped_tokens:,} tokens dropped, "
        f"up to {today.max_docs_per_row or '-'} documents per row{fails}"
    )
    own = ", ".join(f"{k}: {v}" for k, v in advice.maxtext_settings.items())
    console.print(f"  set in MaxText: {own} -> {1 - advice.maxtext_efficiency:.1%} padding")
    console.print(
        f"  or feed it from datatools (datatools.integrations.maxtext): {1 - advice.datatools_efficiency:.1%} padding"
    )
    for note in advice.notes:
        console.print(f"  - {note}", markup=False, highlight=False)


def render_loss_distortion(view: LossDistortion, console: Console) -> None:
    """The two views as one rich table: what share of documents a naive mean over- or under-weights."""
    title = (
        f"loss weight distortion at ctx {view.ctx:,} ({view.algorithm}, batches of "
        f"{view.batch_size} rows): documents' weight relative to the unpacked objective"
        + (
            ""
            if view.selection == "all"
            else f"; on {view.documents_analyzed:,} of {view.documents_total:,} documents ({view.selection})"
        )
    )
    columns = ("averaging (vs unpacked)", "documents", "> 2x", "< 0.5x", "p1", "p10", "p50", "p90", "p99", "max")
    rows = []
    for d in (view.row_mean, view.batch_mean):
        label = {"row_mean": "per-row mean", "batch_mean": "per-batch mean"}[d.averaging]
        rows.append(
            [
                f"{label} (vs loss_weighting: {d.reference})",
                f"{d.documents:,}",
                f"{d.over_2x:.1%}",
                f"{d.under_half:.1%}",
                *(f"{v:.2f}" for v in d.quantiles.values()),
                f"{d.max:.2f}",
            ]
        )
    # on a narrow console the outer quantiles go first, then the documents (base/tables.py)
    table, _ = fitted_table(title, columns, rows, console.width, drop_first=("p1", "p99", "p10", "p90", "documents"))
    console.print(table)
    console.print(
        "loss_weighting: token or document (with the step dividing by the global weight sum) keeps "
        "every document at 1x; see docs/loss-weighting.md",
        markup=False,
        highlight=False,
    )


def render_device_balance(view: DeviceBalance, console: Console) -> None:
    """The busiest device's attention work over the mean per device count, drawn and balanced, and the note."""
    table = Table(
        title=f"attention work per device: busiest / mean in-document tiles of {view.block} (ctx {view.ctx:,}, "
        f"global batch {view.batch_size}, {view.batches} batches; mean, p90)",
        title_justify="left",
    )
    for col in ("devices (rows each)", "as drawn", "balanced (devices: N)", "best any order gives"):
        table.add_column(col, justify="left" if col.startswith("devices") else "right")
    for e in view.entries:
        table.add_row(
            f"{e.devices} ({e.rows_per_device})",
            f"{e.drawn_mean:.2f} (p90 {e.drawn_p90:.2f})",
            f"{e.balanced_mean:.2f} (p90 {e.balanced_p90:.2f})",
            f"{e.bound_mean:.2f}",
        )
    console.print(table)
    console.print(view.note, markup=False, highlight=False)


def render_curriculum_savings(view: CurriculumSavings, console: Console) -> None:
    """The comparison as two rich tables: attention work and padding, then each schedule's work over the epoch."""
    lengths = ", ".join(f"{n:,}" for n in view.lengths)
    table = Table(
        title=f"length curriculum [{lengths}] ({view.tokens_per_batch:,} tokens a batch) against fixed ctx "
        f"{view.ctx:,}, one epoch, tile {view.block}: attention FLOPs per layer and d_model (12 x pairs)",
        title_justify="left",
    )
    for col in ("packing", "attention computed", "attention FLOPs", "vs curriculum", "padding"):
        table.add_column(col, justify="left" if col in ("packing", "attention computed") else "right")
    cur = view.curriculum_causal_pairs
    for name, what, pairs, padding in (
        (f"fixed ctx {view.ctx:,}", "every causal tile (splash, cuDNN, flash)", view.fixed_causal_pairs, None),
        (f"fixed ctx {view.ctx:,}", "in-document tiles (block-sparse)", view.fixed_document_tile_pairs, None),
        (f"fixed ctx {view.ctx:,}", "in-document pairs (ideal)", view.fixed_pairs, view.fixed_padding),
        ("curriculum", "every causal tile of every row", cur, None),
        ("curriculum", "in-document pairs (ideal)", view.curriculum_pairs, view.curriculum_padding),
    ):
        table.add_row(
            name,
            what,
            f"{FLOPS_PER_PAIR * pairs:.3g}",
            f"{pairs / max(cur, 1):.2f}x",
            "" if padding is None else f"{padding:.2%}",
        )
    console.print(table)
    marks = Table(title="share of the epoch's attention FLOPs done by each point of the epoch", title_justify="left")
    marks.add_column("schedule")
    for m in MARKS:
        marks.add_column(f"{m:.0%} of steps", justify="right")
    for s in view.schedules:
        marks.add_row(s.schedule, *(f"{v:.1%}" for v in s.done_at.values()))
    marks.add_row(f"fixed ctx {view.ctx:,}", *(f"{m:.1%}" for m in MARKS))
    console.print(marks)


def efficiency_groups(report: PaddingReport) -> list[tuple[str, dict[int, float]]]:
    """The plot's groups of bars: each strategy's efficiency (real tokens / slots) by ctx, then, with a MaxText
    config, "MaxText today" (its pipeline as configured, at its max_target_length) and MaxText as advised."""
    names = list(dict.fromkeys(r.name for r in report.strategies))
    groups = [
        (LABELS[n], {ctx: next(r.efficiency for r in report.at(ctx) if r.name == n) for ctx in report.contexts})
        for n in names
    ]
    mt = report.maxtext
    if mt is not None:
        groups.append(("MaxText today (as configured)", {mt.today.ctx: mt.today.efficiency}))
        groups.append(("MaxText as advised (packing settings)", {mt.today.ctx: mt.advice.maxtext_efficiency}))
    return groups


def plot(report: PaddingReport, path: str | Path, *, source: str) -> str | Path:
    """A PNG: the length histogram (log x, with each ctx marked) beside each strategy's efficiency per ctx (and
    MaxText's, :func:`efficiency_groups`)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1, 1.3]})
    edges = np.asarray(report.histogram.edges, float)
    counts = np.asarray(report.histogram.counts, float)
    left = np.maximum(edges[:-1], 0.8)
    ax1.bar(left, counts, width=np.diff(edges), align="edge", color="#4c72b0", edgecolor="white")
    ax1.set_xscale("log")
    ax1.set_xlabel("document length (tokens)")
    ax1.set_ylabel("documents")
    ax1.set_title(f"{report.num_sequences:,} documents, p50 {report.lengths.p50:,.0f}, p99 {report.lengths.p99:,.0f}")
    for j, ctx in enumerate(report.contexts):
        ax1.axvline(ctx, color="#c44e52", linestyle="--", linewidth=1)
        ax1.text(ctx, ax1.get_ylim()[1] * (0.97 - 0.07 * j), f" ctx {ctx}", color="#c44e52", fontsize=8, va="top")
    groups = efficiency_groups(report)
    contexts = report.contexts
    width = 0.8 / max(len(contexts), 1)
    x = np.arange(len(groups))
    for j, ctx in enumerate(contexts):
        at = [(i, eff[ctx]) for i, (_, eff) in enumerate(groups) if ctx in eff]
        ax2.bar([x[i] + j * width for i, _ in at], [e * 100 for _, e in at], width=width, label=f"ctx {ctx}")
    ax2.set_xticks(x + width * (len(contexts) - 1) / 2)
    ax2.set_xticklabels([label.replace(" (", "\n(") for label, _ in groups], rotation=30, ha="right", fontsize=8)
    ax2.set_ylabel("efficiency: real tokens / slots (%)")
    ax2.set_ylim(0, 105)
    ax2.legend(fontsize=8)
    rec = report.recommendation
    ax2.set_title(f"recommended: {rec.strategy} at ctx {rec.ctx} ({rec.efficiency:.1%})")
    fig.suptitle(f"datatools analyze-padding: {source}", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    storage.location(path).write_bytes(buf.getvalue())  # atomic: a local rename, or one PUT to s3:// / gs://
    return storage.location(path).path
