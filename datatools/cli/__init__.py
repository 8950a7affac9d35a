"""The ``datatools`` command line (click): one module per subcommand, imported only when it runs (``--help`` imports
no numba, Grain or JAX).

Every error is one line on stderr (``datatools: error: ...``), never a traceback; the status follows the exception's
type (:func:`datatools.base.errors.exit_status`): **2** bad input or usage (a missing file too); **1** the environment
or the run (permissions, disk full, out of memory, an optional package not installed, a diverged run, an unexpected
or native error); **130** Ctrl-C.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import warnings
from typing import Any, NoReturn

import click

from datatools import __version__
from datatools.base.errors import (
    EXIT_BAD_INPUT,
    EXIT_ENVIRONMENT,
    EXIT_INTERRUPTED,
    DeviceOutOfMemory,
    RunFailed,
    UnsupportedVersion,
    exit_status,
)
from datatools.cli.common import PathAccessError, access_checked

# name -> (module, attribute, one-line help shown by --help without importing the module)
SUBCOMMANDS = {
    "analyze-padding": (
        "datatools.cli.analyze_padding",
        "analyze_padding_command",
        "Length distribution, the padding waste of every strategy, and a recommendation.",
    ),
    "pretokenize": (
        "datatools.cli.pretokenize",
        "pretokenize_command",
        "Tokenize text files into a token store (resumable; local pool or Ray).",
    ),
    "pack": (
        "datatools.cli.pack",
        "pack_command",
        "Plan any input into an index-only packed plan on disk (bounded memory; pipelines read it lazily).",
    ),
    "pipeline": ("datatools.cli.pipeline", "pipeline_command", "Run a configured Grain pipeline for N batches."),
    "explain": (
        "datatools.cli.explain",
        "explain_command",
        "What was in global batch N, where document D was seen, an exposure ledger (from the schedule alone).",
    ),
    "mix-report": (
        "datatools.cli.mix_report",
        "mix_report_command",
        "Per batch, each source's share of tokens and documents against a mixture's weights.",
    ),
    "shuffle-report": (
        "datatools.cli.shuffle_report",
        "shuffle_report_command",
        "How much a shuffle mixes, and what it costs in reads.",
    ),
    "train": ("datatools.cli.train", "train_command", "Train the configured model on its pipeline (jax extra)."),
    "warm": (
        "datatools.cli.warm",
        "warm_command",
        "Compile the numba kernels ahead, once after an install (the first command does it otherwise).",
    ),
    "verify": (
        "datatools.cli.verify",
        "verify_command",
        "Read every chunk of a token store: sizes, checksums, offsets, token range.",
    ),
}
EXTRA_OF = {"train": "jax"}  # subcommand -> the optional module it needs (base/install.py: EXTRA_OF_MODULE)


class Interrupted(BaseException):
    """Ctrl-C while a subcommand ran, carried past click (which prints an empty line for a KeyboardInterrupt)."""


class LazyGroup(click.Group):
    """A group whose subcommands are imported when one is run (or its own --help is asked for)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in SUBCOMMANDS:
            return None
        module, attr, short = SUBCOMMANDS[name]
        need = EXTRA_OF.get(name)
        if need and importlib.util.find_spec(need) is None:
            return _missing_extra(name, short, need)
        return _released(access_checked(getattr(importlib.import_module(module), attr)))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUBCOMMANDS[name][2]) for name in self.list_commands(ctx)])


def _released(command: click.Command) -> click.Command:
    """``command`` whose callback first releases the held live line (:func:`~datatools.base.progress.release`):
    its arguments are parsed, so a usage error printed nothing before its one line (once per command)."""
    callback = command.callback
    if callback is None or getattr(callback, "_releases", False):
        return command

    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        from datatools.base.progress import release

        release()
        return callback(*args, **kwargs)

    run._releases = True  # type: ignore[attr-defined]
    command.callback = run
    return command


def _missing_extra(name: str, short: str, module: str) -> click.Command:
    """A stand-in that answers any use, --help included, with one line naming the extra to install (exit 1)."""

    def fail(**_: object) -> NoReturn:
        from datatools.base.install import missing

        raise missing(module, f"'datatools {name}'")

    return click.Command(
        name,
        callback=fail,
        help=short,
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        params=[click.Argument(["args"], nargs=-1, required=False)],
    )


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="datatools", message="%(prog)s %(version)s")
def cli() -> None:
    """datatools: no compute wasted on padding, near-random shuffling at near-sequential I/O."""


def _error(message: str, kind: str = "error") -> None:
    """One printable line on stderr: an error, or a library warning."""
    from datatools.io.storage.paths import printable

    line = " ".join(printable(str(message)).split())
    if len(line) > 2000:
        line = line[:1997] + "..."
    if kind == "warning":  # while the command runs: above its live line, never on it
        from datatools.base.progress import say

        say(f"datatools: {kind}: {line}")
    else:
        print(f"datatools: {kind}: {line}", file=sys.stderr)


def _message(exc: Exception) -> str:
    """The one line that says what went wrong, chosen by the exception's type."""
    if isinstance(exc, OSError):
        from datatools.io.storage.paths import display

        where = f"{display(exc.filename)}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc}"
    if isinstance(exc, MemoryError) and not isinstance(exc, DeviceOutOfMemory):
        return "out of memory (a smaller --ctx, --window or input would fit)"
    if isinstance(exc, RecursionError):
        return "input nested too deeply"
    if isinstance(exc, ImportError):  # an optional package not installed (MissingPackage), or a broken install
        from datatools.base.install import import_error_message

        return import_error_message(exc)
    if isinstance(exc, (ValueError, TypeError, OverflowError, RunFailed, UnsupportedVersion, DeviceOutOfMemory)):
        return str(exc)
    return f"internal error ({type(exc).__name__}): {exc} (please report it)"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status (see the module docstring)."""
    with warnings.catch_warnings():
        warnings.showwarning = lambda message, *_, **__: _error(message, "warning")  # one line, like an error
        # datatools' own warnings (a link not followed, a slow access pattern) are part of the answer: shown even
        # under -W ignore / PYTHONWARNINGS=ignore; other packages' warnings keep the filters the user set
        warnings.filterwarnings("default", category=UserWarning, module=r"datatools(\.|$)")
        status = _main(argv)
    if status == EXIT_INTERRUPTED and argv is None:  # the process's own command line: leave at once
        _exit_now(status)
    return status


def _exit_now(status: int) -> None:
    """End the process after a Ctrl-C once output is flushed and the exit hooks ran, skipping the interpreter's
    teardown (its garbage collection took 3.5 s with JAX and Grain loaded)."""
    import atexit
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    atexit._run_exitfuncs()
    os._exit(status)


def _subcommand(argv: list[str] | None) -> str | None:
    """The subcommand named on the command line (its first word that is not an option), if it is one."""
    args = [str(a) for a in (sys.argv[1:] if argv is None else argv)]
    if "--help" in args or "-h" in args:  # help is printed at once: no live line
        return None
    words = [a for a in args if not a.startswith("-")]
    return words[0] if words and words[0] in SUBCOMMANDS else None


def _main(argv: list[str] | None) -> int:
    try:
        name = _subcommand(argv)
        if name is None:  # --help, --version, a usage error: nothing to wait for
            result = cli.main(args=argv, prog_name="datatools", standalone_mode=False)
        else:  # a live line from the first second: what the subcommand is doing (base/progress.py)
            from datatools.base import interrupts
            from datatools.base.progress import activity

            interrupts.install()  # a Ctrl-C is never lost, even when a library swallows its KeyboardInterrupt
            with activity(f"datatools {name}", held=True):  # shown once the arguments are parsed
                result = cli.main(args=argv, prog_name="datatools", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt, Interrupted):
        print("datatools: aborted (Ctrl-C)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except click.ClickException as exc:
        _error(exc.format_message())
        return EXIT_ENVIRONMENT if isinstance(exc, PathAccessError) else EXIT_BAD_INPUT
    except Exception as exc:  # noqa: BLE001 (one line, never a traceback; the status by type: base/errors.py)
        _error(_message(exc))
        return exit_status(exc)
    except (SystemExit, GeneratorExit):
        raise
    except BaseException as exc:  # noqa: BLE001 (native code: a Rust panic is pyo3's PanicException, no Exception)
        _error(f"internal error in native code ({type(exc).__name__}): {exc} (please report it)")
        return EXIT_ENVIRONMENT
    return result if isinstance(result, int) else 0
