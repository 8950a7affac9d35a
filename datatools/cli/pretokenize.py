"""``datatools pretokenize``: text files in, a token store out (local process pool or Ray Data)."""

from __future__ import annotations

from typing import Any

import click

from datatools.base.checks import ENGINES, MAX_CTX
from datatools.base.progress import doing
from datatools.cli.common import make_console, tokenizer_options


@click.command("pretokenize")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str))
@click.argument("output", type=click.Path(path_type=str))
@click.option(
    "--tokenizer",
    required=True,
    type=click.Path(path_type=str),
    help="Hugging Face tokenizers JSON file, or a SentencePiece .model.",
)
@click.option(
    "--column",
    default="text",
    show_default=True,
    help="Text column (Parquet, Arrow, JSONL, HF datasets) or ArrayRecord feature.",
)
@tokenizer_options
@click.option(
    "--ctx",
    type=click.IntRange(1, MAX_CTX),
    default=None,
    help="Split documents longer than this into windows of ctx tokens.",
)
@click.option(
    "--tile", type=click.IntRange(1, MAX_CTX), default=None, help="ctx must be a multiple of this tile (128, 256)."
)
@click.option(
    "--shuffle-seed",
    type=click.IntRange(0, (1 << 64) - 1),
    default=None,
    help="Write the documents of all INPUTS in this seed's random order (across files and shards; the manifest "
    "records it). Default: the input order.",
)
@click.option(
    "--workers", type=click.IntRange(1, 1024), default=1, show_default=True, help="Tokenizer processes / Ray tasks."
)
@click.option("--engine", type=click.Choice(ENGINES), default="local", show_default=True)
@click.option("--ray-address", default=None, help="Ray cluster address (default: start a local Ray).")
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace an existing token store made by a different job (only a "
    "token store, recognized by its manifest, or an empty directory; anything else is refused).",
)
@click.option(
    "--check",
    is_flag=True,
    hidden=True,
    help="Kept for scripts: a rerun always checks this job's store at OUTPUT as `datatools verify` does "
    "(every chunk's sha256, shard_index.bin) before calling it complete, and repairs a damaged one.",
)
def pretokenize_command(inputs: tuple[str, ...], engine: str, **options: Any) -> None:
    """Tokenize INPUTS into the token store OUTPUT: every input analyze-padding takes (Parquet, JSONL, Arrow,
    HF save_to_disk dirs, ArrayRecord files, directories, a glob or comma list of files), and .txt files.

    Resumable: run the same command again after an interruption and it finishes
    where it stopped. OUTPUT appears only when complete.
    """
    from datatools.jobs.pretokenize import pretokenize, require_engine  # once the arguments are parsed

    require_engine(engine)  # like `train` without jax: the install line, exit 1, before anything is created
    result = pretokenize(list(inputs), engine=engine, **options)
    doing(None)  # the live line ends before the result: on a narrow terminal they shared a line, then it was erased
    err = make_console(stderr=True)
    for key in ("duplicates", "cleaned", "repaired", "indexed"):  # the tokenizer line came first (the job)
        if key in result.extra:
            err.print(result.extra[key], markup=False, highlight=False, soft_wrap=True)
    err.print(
        f"{result.output}: {result.status}: {result.documents:,} documents, {result.tokens:,} tokens "
        f"from {result.shards} shards ({result.shards_resumed} resumed"
        + (f", {result.documents_resumed:,} documents of unfinished shards resumed" if result.documents_resumed else "")
        + f") in {result.seconds:.1f} s",
        soft_wrap=True,
    )
