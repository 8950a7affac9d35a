"""``datatools pack DATA OUT --ctx N``: an index-only packed plan on disk, planned in bounded memory.

DATA is any input ``open_input`` reads, a directory holding ``lengths.npy`` alone, or a plan directory (re-packed
from its lengths: another ctx or algorithm, no token read). OUT is a plan directory
(:mod:`datatools.io.plan_file`), which pipelines read with ``packing: {plan: OUT}``.
"""

from __future__ import annotations

import time

import click

from datatools.cli.common import emit_json, make_console, tokenizer_options
from datatools.io.numpy_files import BIN_DTYPES
from datatools.kernels.pack import ALGORITHMS
from datatools.base.checks import MAX_CTX, MAX_TOKEN_ID, OVERFLOW_POLICIES


def _lengths(data, err, **input_options):
    """(lengths, what they are): memory-mapped from a plan or a lengths-only directory, else read from the input."""
    from datatools.io.numpy_files import lengths_only, lengths_only_file
    from datatools.io.plan_file import PlanFile, is_plan

    if is_plan(data):
        return PlanFile(data).lengths(), "plan"
    if lengths_only_file(data) is not None:
        return lengths_only(data), "lengths"
    from datatools.io.inputs import open_input, read_lengths
    from datatools.base.progress import count_progress

    inp = open_input(data, **input_options)
    if inp.encoder is not None:
        err.print(inp.encoder.summary(), markup=False, highlight=False, soft_wrap=True)
    with count_progress(err, inp.nbytes, "reading lengths", unit="bytes") as advance:
        seen = [0]

        def read(done: int, nbytes: int) -> None:
            advance(nbytes - seen[0])
            seen[0] = nbytes

        return read_lengths(inp, progress=read), inp.kind


@click.command("pack")
@click.argument("data", type=click.Path())
@click.argument("out", type=click.Path())
@click.option("--ctx", type=click.IntRange(1, MAX_CTX), required=True, help="Row length (tokens).")
@click.option("--algorithm", type=click.Choice(ALGORITHMS), default="best_fit_decreasing", show_default=True)
@click.option("--max-segments", type=click.IntRange(1, MAX_CTX), default=None, help="Cap on documents per row.")
@click.option("--align", type=click.IntRange(1, MAX_CTX), default=1, show_default=True,
              help="Every document starts at a multiple of this (tokens); must divide --ctx.")
@click.option("--overflow", type=click.Choice(OVERFLOW_POLICIES), default="split", show_default=True,
              help="Documents longer than ctx: split (nothing lost), truncate, drop, error.")
@click.option("--group-docs", type=click.IntRange(1, None), default=None,
              help="Documents planned at once (memory: about 80 bytes each); default 50,000,000.")
@click.option("--overwrite", is_flag=True, help="Replace OUT when it is an existing plan.")
@click.option("--column", default=None, help="Token (list of ints) or text column; detected when unambiguous.")
@click.option("--tokenizer", type=click.Path(), default=None, help="tokenizers JSON file, for a text column.")
@tokenizer_options
@click.option("--eos-id", type=click.IntRange(0, MAX_TOKEN_ID), default=None,
              help="Document separator of a flat .bin/.npy token file.")
@click.option("--bin-dtype", type=click.Choice(BIN_DTYPES), default="uint16", show_default=True,
              help="Token dtype of a .bin file.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write the plan's header (num_rows, lower_bound_rows, efficiency, ...) as JSON to FILE, or '-'.")
def pack_command(data, out, ctx, algorithm, max_segments, align, overflow, group_docs, overwrite, column, tokenizer,
                 tokenizer_settings, bos, eos, eos_id, bin_dtype, json_out):
    """Plan DATA into the packed plan directory OUT (rows of --ctx tokens; index only, no token copied)."""
    from datatools.io.paths import display
    from datatools.io.plan_file import GROUP_DOCS, write_plan
    from datatools.base.progress import count_progress

    if ctx % align:
        raise click.BadParameter(f"--align {align} must divide --ctx {ctx}", param_hint="--align")
    err = make_console(stderr=True)
    t0 = time.perf_counter()
    lengths, kind = _lengths(data, err, column=column, tokenizer=tokenizer, tokenizer_settings=tokenizer_settings,
                             bos=bos, eos=eos, eos_id=eos_id, bin_dtype=bin_dtype)
    if lengths.shape[0] == 0:
        raise ValueError(f"{display(data)}: no documents")
    read_s = time.perf_counter() - t0
    with count_progress(err, int(lengths.shape[0]), "packing documents") as advance:
        header = write_plan(out, lengths, ctx, algorithm=algorithm, max_segments=max_segments, align=align,
                            overflow=overflow, group_docs=group_docs or GROUP_DOCS, source=display(data),
                            overwrite=overwrite, progress=advance)
    report = {k: v for k, v in header.items() if k not in ("format", "version")}
    report.update(plan=display(out), input_kind=kind, read_seconds=read_s,
                  pack_seconds=time.perf_counter() - t0 - read_s)
    over = header["num_rows"] / header["lower_bound_rows"] - 1 if header["lower_bound_rows"] else 0.0
    console = make_console(stderr=json_out == "-")
    console.print(f"{display(out)}: {header['num_rows']:,} rows of {ctx} tokens ({header['num_pieces']:,} pieces of "
                  f"{header['data']['documents']:,} documents), efficiency {header['efficiency']:.4%}, "
                  f"{over:.4%} above the lower bound of {header['lower_bound_rows']:,} rows; "
                  f"{report['pack_seconds']:.1f} s", markup=False, highlight=False, soft_wrap=True)
    emit_json(json_out, report)
