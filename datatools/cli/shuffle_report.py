"""``datatools shuffle-report``: groups per batch and reads per batch, for no / full / block shuffle; with
``--config`` and ``--packed-batches``, what a batch holds after the config's packing under each order (the mix
distance that ranks the orders as a trained model's evaluation loss does: ``docs/shuffle-quality.md``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from datatools.base.checks import MAX_REPORT_RECORDS
from datatools.base.progress import doing
from datatools.base.tables import fitted_table
from datatools.cli.common import F, emit_json, json_option, result_console

if TYPE_CHECKING:
    from rich.console import Console

    from datatools.analysis.shuffle_quality import PackedOrderStats, ShuffleReport

LABELS = {
    "none": "no shuffle (storage order)",
    "full": "full Feistel shuffle",
    "block": "block shuffle",
    "lanes": "block shuffle in lanes",
}


def _records(name: str, text: str, **kwargs: Any) -> Callable[[F], F]:
    """An option counting records (1 to MAX_REPORT_RECORDS)."""
    return click.option(name, type=click.IntRange(1, MAX_REPORT_RECORDS), help=text, **kwargs)


@click.command("shuffle-report")
@_records("--n", "Records in the dataset (the report materializes orders of n records). Default: --store's.")
@_records("--io-block-size", "Records per io block (one contiguous read).", required=True)
@_records("--window-blocks", "io blocks per shuffle window (the reader's buffer).", required=True)
@_records("--group-size", "Consecutive records per stored group (material, source).", required=True)
@_records("--batch-size", "Records per batch.", required=True)
@click.option(
    "--lanes",
    type=click.IntRange(1, 1 << 16),
    default=256,
    show_default=True,
    help="Lanes of the lanes order (a pipeline's batch_size x packing.lane_period).",
)
@_records("--lane-window", "Records per lane window (a pipeline's packing.window).", default=1024, show_default=True)
@click.option("--seed", type=click.IntRange(0, (1 << 64) - 1), default=0, show_default=True)
@click.option(
    "--store",
    type=click.Path(path_type=str),
    default=None,
    help="A token store: its documents are the records (--n), and its write order (pretokenize --shuffle-seed) "
    "is said and counted.",
)
@click.option(
    "--write-seed",
    type=click.IntRange(0, (1 << 64) - 1),
    default=None,
    help="Count the orders over a store written with pretokenize --shuffle-seed this seed (default: --store's).",
)
@click.option("--epoch", type=click.IntRange(0, (1 << 62)), default=0, show_default=True)
@click.option(
    "--config",
    "pipeline",
    type=click.Path(path_type=str),
    default=None,
    help="A pipeline config (a file or a shipped name): the report says which row is the order it reads in.",
)
@click.option(
    "--packed-batches",
    type=click.IntRange(1, 1 << 20),
    default=None,
    help="With --config: also build the config's streaming packing under each order over its source's lengths "
    "(no token read) and count this many global batches after packing: documents and groups per batch, and the "
    "distance of each batch's group mix (shares of its tokens) from the corpus's, by total variation (the figure "
    "that ranked the shuffle study's orders as their evaluation losses did) and KL. Groups are counted in the input's "
    "order with --store (the config's store) or --write-seed for a store written with pretokenize --shuffle-seed.",
)
@json_option("the figures")
def shuffle_report_command(
    json_out: str | None, store: str | None, pipeline: str | None, packed_batches: int | None, **options: Any
) -> None:
    """Distinct groups per batch against a full shuffle's expectation, displacement, and I/O cost."""
    applies = None if pipeline is None else config_row(pipeline)  # a bad config: one line before the work
    if packed_batches is not None and pipeline is None:
        raise click.UsageError("--packed-batches counts a pipeline's batches: give --config")
    written = _write_order(store, options)
    if options["n"] is None:
        raise click.UsageError("give --n (records) or --store")
    doing(f"measuring the shuffles of {options['n']:,} records")
    from datatools.analysis.shuffle_quality import shuffle_report  # numba: once the arguments are parsed

    report = shuffle_report(**options)
    if packed_batches is not None and pipeline is not None:  # (--packed-batches without --config: refused above)
        report = dataclasses.replace(report, packed=packed_figures(pipeline, report, packed_batches))
    console = result_console(stderr=json_out == "-")
    title = (
        f"n={report.n:,} records in groups of {report.group_size}, batch {report.batch_size}; block shuffle: "
        f"io_block_size {report.io_block_size}, window_blocks {report.window_blocks}"
    )
    columns = (
        "order",
        "groups/batch",
        "of full shuffle",
        "mean displacement (records)",
        "contiguous runs/batch",
        f"block reads/batch (cache {report.window_blocks} blocks)",
    )
    expected = report.expected_groups_per_batch
    rows = [
        [
            LABELS[name],
            f"{s.groups_per_batch:.1f}",
            f"{s.groups_per_batch / expected:.1%}",
            f"{s.mean_displacement:,.0f} ({s.mean_displacement_fraction:.1%} of n)",
            f"{s.runs_per_batch:.1f}",
            f"{s.block_reads_per_batch:.1f}",
        ]
        for name, s in report.orders.items()
    ]
    # on a narrow console (base/tables.py): the runs first, then the displacement; groups and reads stay
    table, _ = fitted_table(title, columns, rows, console.width, drop_first=columns[4:2:-1])
    console.print(table)
    console.print(f"expected groups per batch under a full shuffle: {expected:.1f}")
    console.print(f"store write order: {written} (groups are consecutive records of the input)")
    console.print(
        f"block shuffle in lanes: {report.lanes} lanes of {report.lane_window}-record windows (streaming packing's "
        f"read order); its block reads are counted with the cache a lane reader holds, "
        f"{report.lane_cache_blocks:,} blocks (every lane's window and the next block)"
    )
    if report.packed is not None and pipeline is not None:  # packed: counted for --config
        packed_table(console, pipeline, report.packed)
    if applies is not None:
        console.print(f"{pipeline}: {applies}")
    else:
        console.print("which row is your pipeline's: --config PATH says")
    emit_json(json_out, report)


def _write_order(store: str | None, options: dict[str, Any]) -> str:
    """The store's write order in words; from its manifest, ``options``' ``n`` (its documents) and ``write_seed``
    where the user gave none."""
    if store is None:
        seed = options["write_seed"]
        return "input order" if seed is None else f"shuffled at write time (seed {seed})"
    from datatools.io.formats.store import read_manifest
    from datatools.jobs.write_order import describe_write_order, write_seed

    manifest = read_manifest(store)  # a ValueError naming it: one line, exit 2
    if options["n"] is None:
        options["n"] = int(manifest["num_documents"])
    if options["write_seed"] is None:
        options["write_seed"] = write_seed(manifest)
    return describe_write_order(manifest)


def config_row(path: str) -> str:
    """Which row of the report is the read order of the pipeline config at ``path``, and why, in words: planned
    packing or ``shuffle.kind: full`` read as a full shuffle; ``none`` in storage order; ``block`` in lanes where
    streaming packing deals one source's blocks to lanes (``packing.read_order: lanes``), else by window."""
    from datatools.pipeline import load_config
    from datatools.pipeline.schedules import schedule_mode

    cfg = load_config(path)
    mode, kind = schedule_mode(cfg), cfg.shuffle.kind
    if mode == "planned":
        key, why = "full", "planned packing's rows mix documents from everywhere"
    elif kind == "block" and mode == "lanes":
        key, why = "lanes", "shuffle.kind block, streaming packing with read_order lanes"
    else:
        key, why = kind, f"shuffle.kind {kind}" + (", read in window order" if kind == "block" else "")
    line = f"the row '{LABELS[key]}' is its read order ({why})"
    if kind == "block":  # the table's block rows are for the options given: say the config's own sizes
        sh = cfg.shuffle
        line += f"; its own sizes: --io-block-size {sh.io_block_size} --window-blocks {sh.window_blocks}"
    return line


def packed_figures(path: str, report: ShuffleReport, batches: int) -> dict[str, PackedOrderStats]:
    """:func:`~datatools.pipeline.packed_mix.packed_mix` of the config at ``path`` with the report's block sizes,
    group size and write seed."""
    from datatools.pipeline import load_config
    from datatools.pipeline.packed_mix import packed_mix

    doing(f"packing {batches:,} batches of {path} under each order")
    return packed_mix(
        load_config(path),
        group_size=report.group_size,
        batches=batches,
        io_block_size=report.io_block_size,
        window_blocks=report.window_blocks,
        write_seed=report.write_seed,
    )


def packed_table(console: Console, path: str, packed: dict[str, PackedOrderStats]) -> None:
    """The after-packing table: one row per order, the lowest mix distance first named."""
    rows = [
        [
            LABELS[name],
            f"{s.documents_per_batch:.2f}",
            f"{s.groups_per_batch:.2f}",
            f"{s.mix_distance:.4f}",
            f"{s.mix_kl:.4f}",
        ]
        for name, s in packed.items()
    ]
    first = next(iter(packed.values()))
    title = f"after packing: {first.batches:,} global batches of {path} (its ctx, batch, packing window and seed)"
    columns = ("order", "documents/batch", "groups/batch", "mix distance (TV, 0..1)", "mix KL (nats)")
    table, _ = fitted_table(title, columns, rows, console.width, drop_first=(columns[4], columns[1]))
    console.print(table)
    best = min(packed, key=lambda k: packed[k].mix_distance)
    console.print(
        f"mix distance: how far a batch's groups (shares of its tokens) are from the corpus's, by total variation; "
        f"lower mixes better (the shuffle study's evaluation losses ranked its orders the same way). Lowest: "
        f"{LABELS[best]}"
    )
