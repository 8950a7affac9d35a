"""The command-line skeleton: --help, --version, one-line errors with status 2."""

import subprocess
import sys

import pytest

import datatools
from datatools.cli import main


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"datatools {datatools.__version__}"


def test_help_lists_commands(capsys):
    assert main(["--help"]) == 0
    assert "Usage" in capsys.readouterr().out


def test_unknown_command_is_one_line_exit_2(capsys):
    assert main(["no-such-command"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("datatools: error:") and err.count("\n") == 1


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "datatools", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and "datatools" in out.stdout


@pytest.mark.parametrize("command", ["analyze-padding", "pack"])
def test_the_tokenizer_help_names_sentencepiece(command, capsys):
    """Issue 58: --tokenizer takes a SentencePiece model too (MaxText's tokenizer_path); its help said JSON only."""
    assert main([command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "a Hugging Face tokenizers JSON file or a SentencePiece model (.model" in text
