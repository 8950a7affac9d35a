"""An optional package that is not installed: exit status 1 and one line naming what needs it and the command that
installs it (``install_command`` of its extra), never "internal error ... please report it" (issue 58)."""

from __future__ import annotations

import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datatools.base.install import EXTRA_OF_MODULE, import_error_message, install_command
from datatools.cli import main
from datatools.io.formats import array_record_files


def run(args, capsys) -> tuple[int, str]:
    status = main([str(a) for a in args])
    return status, capsys.readouterr().err


def assert_one_line_naming(err: str, extra: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("datatools: error: ") and install_command(extra) in lines[0], err
    assert "internal error" not in err and "please report" not in err


def test_every_optional_module_names_an_extra_pyproject_has():
    import tomllib
    from pathlib import Path

    extras = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert set(EXTRA_OF_MODULE.values()) <= set(extras)
    assert "sentencepiece>=0.2" in extras["maxtext"] and "array_record>=0.8" in extras["maxtext"]
    assert "maxtext" in extras["dev"][0]  # dev brings MaxText's inputs


def test_a_sentencepiece_tokenizer_without_sentencepiece(tmp_path, capsys, monkeypatch):
    pq.write_table(pa.table({"text": ["a few words", "more words here"]}), tmp_path / "t.parquet")
    (tmp_path / "tok.model").write_bytes(b"\x00 a SentencePiece model")
    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # as if it were not installed
    status, err = run(["analyze-padding", tmp_path / "t.parquet", "--tokenizer", tmp_path / "tok.model"], capsys)
    assert status == 1
    assert_one_line_naming(err, "maxtext")
    assert "tok.model" in err and "sentencepiece" in err


def test_arrayrecord_files_without_array_record(tmp_path, capsys, monkeypatch):
    array_record_files.write(tmp_path / "d.array_record", [{"inputs": [1, 2, 3]}, {"inputs": [4, 5]}])
    for name in ("array_record", "array_record.python", "array_record.python.array_record_module"):
        monkeypatch.setitem(sys.modules, name, None)
    status, err = run(["analyze-padding", tmp_path / "d.array_record", "--ctx", 16], capsys)
    assert status == 1
    assert_one_line_naming(err, "maxtext")
    assert "ArrayRecord" in err


@pytest.mark.parametrize(("module", "url"), [("s3fs", "s3://bucket/d.parquet"), ("gcsfs", "gs://bucket/d.parquet")])
def test_a_bucket_without_the_cloud_extra(capsys, monkeypatch, module, url):
    monkeypatch.setitem(sys.modules, module, None)
    status, err = run(["analyze-padding", url, "--ctx", 16], capsys)
    assert status == 1  # the environment, not the input
    assert_one_line_naming(err, "cloud")
    assert url in err


def test_an_import_error_from_anywhere_is_named_by_its_module():
    """A missing module that reached the command line without a message of its own: its extra's command; a base
    requirement: what reinstalls datatools; one line either way."""
    for module, extra in EXTRA_OF_MODULE.items():
        line = import_error_message(ModuleNotFoundError(f"No module named '{module}'", name=f"{module}.sub"))
        assert line == f"{module} is not installed: {install_command(extra)}"
    line = import_error_message(ModuleNotFoundError("No module named 'google_crc32c'", name="google_crc32c"))
    assert line.startswith("google_crc32c is not installed, and datatools needs it: pip install ")
    assert "\n" not in import_error_message(ImportError("cannot import name 'x'\n from 'y'"))
