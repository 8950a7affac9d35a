"""What the subcommands share: consoles, JSON output, the input and tokenizer options."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from rich.console import Console

    from datatools.base.reports import Report
    from datatools.io.sources.inputs import InputOptions

F = TypeVar("F", bound=Callable[..., Any])  # a click command's callback (or the command)


class PathAccessError(click.BadParameter):
    """A path option's file is there but refused for its permissions: the environment, exit status 1."""

    exit_code = 1


class AccessCheckedPath(click.Path):
    """``click.Path`` whose refusal of an existing path for its permissions is a :class:`PathAccessError`."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as exc:
            if self._denied(value):
                raise PathAccessError(exc.message, ctx=ctx, param=param) from None
            raise

    def _denied(self, value: Any) -> bool:  # what the user gave (os.stat refuses what is no path)
        """Whether ``value`` is there, of an accepted kind, and refused only for its permissions."""
        import os
        import stat

        try:
            mode = os.stat(value).st_mode
        except (OSError, TypeError, ValueError):
            return False
        if (not self.file_okay and stat.S_ISREG(mode)) or (not self.dir_okay and stat.S_ISDIR(mode)):
            return False
        return any(
            want and not os.access(value, flag)
            for want, flag in ((self.readable, os.R_OK), (self.writable, os.W_OK), (self.executable, os.X_OK))
        )


def access_checked(command: click.Command) -> click.Command:
    """``command`` with every ``click.Path`` parameter type made an :class:`AccessCheckedPath` (once)."""
    for param in command.params:
        if isinstance(param.type, click.Path) and not isinstance(param.type, AccessCheckedPath):
            checked = AccessCheckedPath.__new__(AccessCheckedPath)
            checked.__dict__.update(vars(param.type))  # the same settings
            param.type = checked
    return command


def make_console(stderr: bool = False) -> Console:
    """A rich console; wide enough for the report tables when the output is not a terminal."""
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=160)
    return console


def result_console(stderr: bool = False) -> Console:
    """:func:`make_console` for a command's result, the live progress line cleared first (no interleaving)."""
    from datatools.base.progress import doing

    doing(None)
    return make_console(stderr=stderr)


def emit_json(json_out: str | None, payload: Report) -> None:
    """Write ``payload.to_json()`` to the file or ``s3://`` / ``gs://`` URL ``json_out`` (atomically), or stdout
    for ``-``."""
    if not json_out:
        return
    from datatools.io.storage import location

    text = payload.to_json()
    if json_out == "-":
        click.echo(text)
    else:
        location(json_out).write_text(text + "\n")


def json_option(what: str = "the report", then: str = " (then the table goes to stderr)") -> Callable[[F], F]:
    """``--json FILE``: ``what`` as JSON to FILE, or to stdout with ``-`` (:func:`emit_json`)."""
    return click.option(
        "--json",
        "json_out",
        type=click.Path(dir_okay=False, allow_dash=True),
        default=None,
        help=f"Write {what} as JSON to FILE, or '-' for stdout{then}.",
    )


def overrides_option(command: F) -> F:
    """``--set KEY=VALUE`` (repeatable): config overrides, checked like the file."""
    return click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override any config key (repeatable; dotted keys reach into sections, values are YAML), "
        "e.g. --set packing.ctx=2048 --set shuffle.kind=none. Checked like the file.",
    )(command)


def tokenizer_options(command: F) -> F:
    """The options that say how text is tokenized: ``--tokenizer-settings``, ``--bos``, ``--eos``."""
    for which, where in (("eos", "after"), ("bos", "before")):
        command = click.option(
            f"--{which}",
            is_flag=False,
            flag_value="auto",
            default=None,
            metavar="[TOKEN]",
            help=f"Put this token (name or id) {where} every document; alone (or 'auto'): "
            f"the tokenizer's usual {which.upper()} token.",
        )(command)
    return click.option(
        "--tokenizer-settings",
        type=click.Choice(("off", "keep")),
        default="off",
        show_default=True,
        help="off: the tokenizer file's truncation and padding are switched off and its template "
        "adds no special tokens; keep: apply the file as it is.",
    )(command)


INPUT_OPTION_NAMES = ("column", "tokenizer", "tokenizer_settings", "bos", "eos", "eos_id", "bin_dtype")


def read_options(options: dict[str, Any]) -> InputOptions:
    """The :func:`input_options` of a command's ``options``, taken out of it, as the ``InputOptions`` that
    ``open_input`` takes (checked there)."""
    from datatools.io.sources.inputs import InputOptions  # here, not at the top: `--help` imports no numpy

    return InputOptions(**{name: options.pop(name) for name in INPUT_OPTION_NAMES})


def input_options(command: F) -> F:
    """How an input is read (analyze-padding, pack): ``--column``, ``--tokenizer`` with :func:`tokenizer_options`,
    ``--eos-id`` and ``--bin-dtype`` (:func:`read_options` makes them the ``InputOptions`` of ``open_input``)."""
    from datatools.base.checks import BIN_DTYPES, MAX_TOKEN_ID  # here, not at the top: `--help` imports no numpy

    command = click.option(
        "--bin-dtype",
        type=click.Choice(BIN_DTYPES),
        default="uint16",
        show_default=True,
        help="Token dtype of a .bin file.",
    )(command)
    command = click.option(
        "--eos-id",
        type=click.IntRange(0, MAX_TOKEN_ID),
        default=None,
        help="Document separator of a flat .bin/.npy token file.",
    )(command)
    command = tokenizer_options(command)
    command = click.option(
        "--tokenizer",
        type=click.Path(),
        default=None,
        help="For a text column: a Hugging Face tokenizers JSON file or a SentencePiece model (.model, as MaxText's "
        "tokenizer_path).",
    )(command)
    return click.option(
        "--column", default=None, help="Token (list of ints) or text column; detected when unambiguous."
    )(command)
