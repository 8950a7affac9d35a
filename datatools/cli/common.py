"""What the subcommands share: consoles, JSON output, the tokenizer options."""

from __future__ import annotations

import click


def make_console(stderr: bool = False):
    """A rich console; wide enough for the report tables when the output is not a terminal."""
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=160)
    return console


def emit_json(json_out: str | None, payload) -> None:
    """Write ``payload`` as JSON to the file or ``s3://`` / ``gs://`` URL ``json_out`` (atomically), or to stdout
    when it is ``-``."""
    if not json_out:
        return
    import json

    from datatools.io.storage import write_text

    text = json.dumps(payload, indent=2, default=list)
    if json_out == "-":
        click.echo(text)
    else:
        write_text(json_out, text + "\n")


def tokenizer_options(command):
    """The options that say how text is tokenized: ``--tokenizer-settings``, ``--bos``, ``--eos``."""
    for which, where in (("eos", "after"), ("bos", "before")):
        command = click.option(f"--{which}", is_flag=False, flag_value="auto", default=None, metavar="[TOKEN]",
                               help=f"Put this token (name or id) {where} every document; alone (or 'auto'): "
                                    f"the tokenizer's usual {which.upper()} token.")(command)
    return click.option("--tokenizer-settings", type=click.Choice(("off", "keep")), default="off", show_default=True,
                        help="off: the tokenizer file's truncation and padding are switched off and its template "
                             "adds no special tokens; keep: apply the file as it is.")(command)
