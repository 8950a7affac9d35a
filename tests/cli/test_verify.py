"""`datatools verify`, and the commands that read a store refusing a damaged one (issue 21, defect 2)."""

from __future__ import annotations

import json

import pytest

from conftest import random_docs, without_progress, write_test_store
from datatools.cli import main


@pytest.fixture()
def store(tmp_path):
    return write_test_store(tmp_path / "store", random_docs(1500, seed=3, mean_log=7.5, max_len=3000), vocab_size=1000)


def one_line(capsys) -> str:
    """The one error line a command printed, its progress lines left out (under load a command's start runs past
    0.25 s and prints one first)."""
    err = without_progress(capsys.readouterr().err)
    assert err.startswith("datatools: error:") and err.count("\n") == 1, err
    return err


def test_verify_a_whole_store(store, capsys):
    assert main(["verify", str(store), "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["documents"] == 1500 and report["checksums"] and report["chunks"]["tokens"] >= 3
    assert report["max_token"] < report["vocab_size"] == 1000
    assert main(["verify", str(store)]) == 0
    assert "whole" in capsys.readouterr().out


@pytest.mark.parametrize("chunk", ["tokens/c/1", "offsets/c/0"])
def test_verify_names_the_damaged_chunk(store, capsys, chunk):
    f = store / chunk
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 1
    f.write_bytes(bytes(data))
    assert main(["verify", str(store)]) == 2
    err = one_line(capsys)
    assert f"{store}: chunk {chunk} is corrupt" in err


def test_verify_refuses_what_is_not_a_store(tmp_path, capsys):
    assert main(["verify", str(tmp_path)]) == 2
    assert "not a datatools token store" in one_line(capsys)


@pytest.mark.parametrize("chunk", ["tokens/c/0", "offsets/c/0"])
def test_a_deleted_chunk_is_refused_by_every_reader(store, tmp_path, capsys, chunk):
    (store / chunk).unlink()
    assert main(["analyze-padding", str(store), "--ctx", "1024"]) == 2
    assert f"{store}: chunk {chunk} is missing" in one_line(capsys)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"source: {{path: {store}}}\npacking: {{ctx: 512}}\nbatch_size: 4\n")
    assert main(["pipeline", str(cfg), "--steps", "3", "--workers", "0"]) == 2
    assert f"{store}: chunk {chunk} is missing" in one_line(capsys)
    assert main(["verify", str(store)]) == 2
    assert f"chunk {chunk} is missing" in one_line(capsys)


def test_analyze_padding_refuses_a_manifest_that_disagrees(store, capsys):
    m = json.loads((store / "manifest.json").read_text())
    m["num_documents"] += 5
    (store / "manifest.json").write_text(json.dumps(m))
    assert main(["analyze-padding", str(store), "--ctx", "1024"]) == 2
    assert "offsets/ disagrees with the manifest" in one_line(capsys)
