"""Messages that must tell the truth: what they name exists, and a clean run prints no warning."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from datatools.cli import main


def test_ambiguous_column_names_options_that_exist(tmp_path, capsys):
    """A table with two candidate columns: the pipeline has no --column, so the message must not send users there."""
    table = pa.table({"text": ["a b", "c"], "input_ids": [[1, 2], [3]]})
    pq.write_table(table, tmp_path / "t.parquet")
    config = tmp_path / "p.yaml"
    config.write_text("source: {path: x}\npacking: {ctx: 16}\nbatch_size: 2\nworkers: 0\n")
    status = main(["pipeline", str(config), "--source", str(tmp_path / "t.parquet"), "--steps", "1"])
    err = capsys.readouterr().err
    assert status == 2
    assert "ambiguous column" in err and "source.column" in err
    assert "pass --column" not in err


def test_base_install_import_prints_no_jax_profiler_warning():
    """Without jax (a base install), importing the pipeline must print nothing (Grain logs a warning)."""
    code = "import sys; sys.modules['jax'] = None\nimport datatools.pipeline\nimport datatools.grain\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""


def test_pretokenize_stops_its_live_line_before_printing_the_result(tmp_path, monkeypatch, texts, tokenizer_file):
    """Issue 58 (rerun): on an 80-column terminal pretokenize's result (``STORE: written: N documents ...``) was
    printed while its live line (``writing the token store: shard 12 of 12 (elapsed ...)``, wrapped onto two lines)
    was still drawn: the result began on the spinner's line and its next redraw erased the rest. The command now
    ends the live line first, as analyze-padding, pipeline and train do."""
    import json

    import datatools.cli.pretokenize as pretokenize_cli
    from datatools.base import progress
    from datatools.cli import main

    shown: list[str | None] = []  # what the live line said when each result line was printed
    real = pretokenize_cli.make_console

    def spying_console(**kwargs):
        console = real(**kwargs)
        original = console.print

        def print_(*args, **kw):
            act = progress._ACTIVE
            shown.append(None if act is None else act.what)
            return original(*args, **kw)

        console.print = print_
        return console

    monkeypatch.setattr(pretokenize_cli, "make_console", spying_console)
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:50]))
    assert main(["pretokenize", str(docs), str(tmp_path / "store"), "--tokenizer", str(tokenizer_file)]) == 0
    assert shown and all(what is None for what in shown), shown
