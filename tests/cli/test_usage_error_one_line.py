"""A usage error is one line on stderr (issue 57): the live line (``datatools CMD: starting (elapsed ...)``) is
held until the command's arguments are parsed, so a flag out of range prints no "starting" line before its error,
however long the subcommand's import took."""

from __future__ import annotations

import time

import pytest

import datatools.base.progress as progress
import datatools.cli as cli_mod
from datatools.cli import main


@pytest.fixture
def slow_import(monkeypatch):
    """Every live line due at once, and a subcommand that takes 0.4 s to import (four ticks of the live line)."""
    monkeypatch.setattr(progress, "FIRST_LINE_S", 0.0)
    get_command = cli_mod.LazyGroup.get_command

    def slow(self, ctx, name):
        time.sleep(0.4)
        return get_command(self, ctx, name)

    monkeypatch.setattr(cli_mod.LazyGroup, "get_command", slow)


@pytest.mark.parametrize(
    "argv",
    [
        ["pretokenize", "in.jsonl", "out", "--tokenizer", "tok.json", "--workers", "0"],
        ["verify", "--no-such-flag", "store"],
    ],
)
def test_a_usage_error_is_one_line(slow_import, argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("datatools: error: ") and "starting" not in err, err


def test_the_live_line_still_shows_once_the_command_runs(slow_import, tmp_path, capsys, monkeypatch):
    """The control: the same slow start with valid arguments shows the live line (the hold is released)."""
    import datatools.cli.verify as verify_cli

    def slow_verify(*args, **kwargs):
        time.sleep(0.4)
        raise ValueError("stopped by the test")

    monkeypatch.setattr(verify_cli, "verify_store", slow_verify, raising=False)
    assert main(["verify", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert "datatools verify: starting" in err or "datatools verify: " in err.splitlines()[0], err
