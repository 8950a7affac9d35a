"""Native code that fails with a ``BaseException`` (a Rust panic surfacing as ``pyo3_runtime.PanicException``) is
one line on stderr and a status, never a traceback nor the panic's own report (issue 36, item 6)."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest

from datatools.cli import SUBCOMMANDS, main


@pytest.fixture(scope="module")
def panicking_tokenizer(tmp_path_factory):
    """A tokenizer whose pre-tokenizer regex backtracks past Oniguruma's retry limit on ``a...ac``: the Rust
    ``tokenizers`` crate unwraps the search error and panics."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("(a+)+b"), "isolated")
    root = tmp_path_factory.mktemp("panic")
    tok.save(str(root / "tok.json"))
    (root / "docs.jsonl").write_text("".join(json.dumps({"text": "a" * 30 + "c"}) + "\n" for _ in range(3)))
    return root


def _datatools(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "datatools", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize("command", ["analyze-padding", "pretokenize"])
def test_a_panicking_tokenizer_is_one_line(panicking_tokenizer, tmp_path, command):
    root = panicking_tokenizer
    args = [root / "docs.jsonl", "--tokenizer", root / "tok.json"]
    if command == "pretokenize":
        args = [root / "docs.jsonl", tmp_path / "store", "--tokenizer", root / "tok.json"]
    out = _datatools(command, *args)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "panicked" not in out.stderr, out.stderr[-2000:]
    lines = out.stderr.splitlines()
    assert lines[-1].startswith("datatools: error: ") and sum("error" in line for line in lines) == 1, lines
    assert "tok.json" in lines[-1] and "retry-limit" in lines[-1], lines[-1]
    assert not (tmp_path / "store").exists()


def test_a_pipeline_with_a_panicking_tokenizer_is_one_line(panicking_tokenizer, tmp_path):
    root = panicking_tokenizer
    config = tmp_path / "c.yaml"
    config.write_text(
        f"source: {{path: {root / 'docs.jsonl'}, tokenizer: {root / 'tok.json'}}}\npacking: {{ctx: 64}}\n"
        "batch_size: 1\nshuffle: {kind: none}\n"
    )
    out = _datatools("pipeline", config, "--steps", "1", "--workers", "0")
    assert out.returncode in (1, 2), out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "panicked" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.splitlines()[-1].startswith("datatools: error: "), out.stderr[-2000:]


class NativeFailure(BaseException):
    """What pyo3 raises for a Rust panic: a BaseException that is not an Exception."""


def test_any_base_exception_is_one_line_exit_1(monkeypatch, capsys):
    import click

    @click.command("explode")
    def explode():
        raise NativeFailure("called `Option::unwrap()` on a `None` value\nmore detail")

    module = types.ModuleType("datatools_test_explode")
    module.explode = explode  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datatools_test_explode", module)
    monkeypatch.setitem(SUBCOMMANDS, "explode", ("datatools_test_explode", "explode", "test"))
    assert main(["explode"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("datatools: error: ") and "NativeFailure" in err, err


def test_ctrl_c_stays_130(monkeypatch, capsys):
    import click

    @click.command("interrupt")
    def interrupt():
        raise KeyboardInterrupt

    module = types.ModuleType("datatools_test_interrupt")
    module.interrupt = interrupt  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datatools_test_interrupt", module)
    monkeypatch.setitem(SUBCOMMANDS, "interrupt", ("datatools_test_interrupt", "interrupt", "test"))
    assert main(["interrupt"]) == 130
    assert "aborted" in capsys.readouterr().err
