"""The ``datatools`` command line (click).

Every subcommand reports bad input as one line on stderr and exit status 2, never a
traceback: library code raises ``ValueError``/``TypeError``/``OSError`` and
:func:`main` turns them, and click's usage errors, into ``datatools: error: ...``.
Subcommands live in ``datatools/cli_*.py`` modules that add themselves to :data:`cli`.
"""

from __future__ import annotations

import sys

import click

import datatools
from datatools.io.paths import display, printable


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(datatools.__version__, "--version", prog_name="datatools", message="%(prog)s %(version)s")
def cli() -> None:
    """datatools: no compute wasted on padding, near-random shuffling at near-sequential I/O."""


def make_console(stderr: bool = False):
    """A rich console; wide enough for the report tables when the output is not a terminal."""
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=160)
    return console


def emit_json(json_out: str | None, payload) -> None:
    """Write ``payload`` as JSON to the file ``json_out`` (atomically), or to stdout when it is ``-``."""
    if not json_out:
        return
    import json

    from datatools.io.atomic import atomic_write_text

    text = json.dumps(payload, indent=2, default=list)
    if json_out == "-":
        click.echo(text)
    else:
        atomic_write_text(json_out, text + "\n")


def tokenizer_options(command):
    """The options that say how text is tokenized: ``--tokenizer-settings``, ``--bos``, ``--eos``."""
    for which, where in (("eos", "after"), ("bos", "before")):
        command = click.option(f"--{which}", is_flag=False, flag_value="auto", default=None, metavar="[TOKEN]",
                               help=f"Put this token (name or id) {where} every document; alone (or 'auto'): "
                                    f"the tokenizer's usual {which.upper()} token.")(command)
    return click.option("--tokenizer-settings", type=click.Choice(("off", "keep")), default="off", show_default=True,
                        help="off: the tokenizer file's truncation and padding are switched off and its template "
                             "adds no special tokens; keep: apply the file as it is.")(command)


def _register_subcommands() -> None:
    # Importing a subcommand module adds its command to ``cli``.
    from datatools import cli_analyze, cli_pipeline, cli_pretokenize, cli_shuffle, cli_train  # noqa: F401


def _error(message: str) -> None:
    """One line on stderr, printable whatever bytes a file name held."""
    line = " ".join(printable(message).split("\n"))
    print(f"datatools: error: {line}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    _register_subcommands()
    try:
        result = cli.main(args=argv, prog_name="datatools", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        print("datatools: aborted", file=sys.stderr)
        return 130
    except click.ClickException as exc:
        _error(exc.format_message())
        return 2
    except OSError as exc:
        where = f"{display(exc.filename)}: " if exc.filename else ""
        _error(f"{where}{exc.strerror or exc}")
        return 2
    except (ValueError, TypeError) as exc:
        _error(str(exc))
        return 2
    return result if isinstance(result, int) else 0


if __name__ == "__main__":  # run as a script: use the importable module so subcommands register on it
    from datatools.cli import main as _main

    sys.exit(_main())
