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
