"""Crafted inputs of issue 36 in bounded time and memory, each a CLI run in a child process with its peak RSS
measured (tests/fuzz/bounded.py): a manifest that is a link to /dev/urandom, a metadata file over the cap, one
huge Parquet cell, one huge JSON line through pretokenize."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from bounded import run_measured  # noqa: E402

GiB = 1 << 30


@pytest.fixture
def store(tmp_path):
    from conftest import random_docs, write_test_store

    return write_test_store(tmp_path / "store", random_docs(50, seed=3, max_len=300))


@pytest.mark.parametrize("command", ["verify", "analyze-padding"])
def test_a_manifest_linked_to_dev_urandom_fails_fast(store, command):
    manifest = Path(store) / "manifest.json"
    manifest.unlink()
    os.symlink("/dev/urandom", manifest)
    run = run_measured([command, store], seconds=120)
    assert run.status == 2, (run.status, run.err[-500:])
    line = run.one_error_line()
    assert line and str(store) in line, run.err[-500:]  # verify: the manifest; analyze-padding: no input there
    assert command != "verify" or "manifest.json" in line, line
    assert run.seconds < 60 and run.peak_rss < GiB, (run.seconds, run.peak_rss)


def test_a_huge_metadata_file_is_refused_unread(tmp_path):
    """A capped read stops at the cap: a sparse 8 GiB "manifest" costs 64 MiB of reading, not 8 GiB."""
    from datatools.io import storage

    big = tmp_path / "manifest.json"
    with open(big, "wb") as f:
        f.truncate(8 * GiB)
    with pytest.raises(ValueError, match="larger than 67,108,864 bytes"):
        storage.location(big).read_bytes(max_bytes=storage.MAX_METADATA_BYTES)
    assert storage.location(big).read_bytes(5) == b"\0" * 5
    (tmp_path / "small.json").write_text("{}")
    assert storage.location(tmp_path / "small.json").read_bytes(max_bytes=2) == b"{}"
    with pytest.raises(ValueError, match="a device"):
        storage.location("/dev/zero").read_bytes()


def test_a_huge_manifest_is_refused_by_verify_in_bounded_memory(store):
    manifest = Path(store) / "manifest.json"
    with open(manifest, "r+b") as f:
        f.truncate(8 * GiB)  # sparse: 8 GiB of zeros after the JSON
    run = run_measured(["verify", store], seconds=120)
    assert run.status == 2 and run.one_error_line() and "manifest.json" in run.err, run.err[-500:]
    assert run.seconds < 60 and run.peak_rss < GiB, (run.seconds, run.peak_rss)


def test_a_plan_header_linked_to_dev_urandom_fails_fast(tmp_path, store):
    from datatools.cli import main

    assert main(["pack", str(store), str(tmp_path / "plan"), "--ctx", "256"]) == 0
    head = tmp_path / "plan" / "plan.json"
    head.unlink()
    os.symlink("/dev/urandom", head)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"source: {{path: {store}}}\npacking: {{plan: {tmp_path / 'plan'}}}\nbatch_size: 1\n")
    run = run_measured(["pipeline", cfg, "--steps", "1", "--workers", "0"], seconds=120)
    assert run.status == 2, (run.status, run.err[-500:])
    line = run.one_error_line()
    assert line and head.name in line, run.err[-500:]
    assert run.seconds < 60 and run.peak_rss < GiB, (run.seconds, run.peak_rss)


def _one_long_text(chars: int, seed: int = 0) -> str:
    """Words of 1-9 letters and spaces, ``chars`` characters, no newline: one document."""
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"etaoinshrdlucmfwyp", np.uint8)
    out = rng.choice(letters, size=chars)
    out[rng.random(chars) < 0.18] = ord(" ")
    return out.tobytes().decode()


@pytest.mark.slow
def test_pretokenize_of_one_50_mb_line_is_bounded(tmp_path, tokenizer_file):
    text = _one_long_text(50 << 20)
    (tmp_path / "one.jsonl").write_text(json.dumps({"text": text}) + "\n")
    run = run_measured(
        ["pretokenize", tmp_path / "one.jsonl", tmp_path / "store", "--tokenizer", tokenizer_file], seconds=600
    )
    assert run.status == 0, run.err[-1000:]
    assert run.peak_rss < GiB, run.peak_rss
    from datatools.io import TokenStore

    lengths = TokenStore(tmp_path / "store").lengths()
    assert len(lengths) == 1 and lengths[0] > 1_000_000


@pytest.mark.parametrize("command", [pytest.param("analyze-padding", marks=pytest.mark.slow), "pretokenize"])
def test_one_300_mb_parquet_cell_is_bounded(tmp_path, tokenizer_file, command):
    import pyarrow as pa
    import pyarrow.parquet as pq

    cell = "ab " * (100 << 20)  # 300 MB of text, a few KB compressed
    pq.write_table(pa.table({"text": [cell, "a short one"]}), tmp_path / "cell.parquet", compression="zstd")
    del cell
    assert (tmp_path / "cell.parquet").stat().st_size < 1 << 20
    args = [tmp_path / "cell.parquet"] + ([tmp_path / "store"] if command == "pretokenize" else [])
    run = run_measured([command, *args, "--tokenizer", tokenizer_file], seconds=600)
    assert run.status == 2, run.err[-1000:]  # refused from the footer: 300 MB of text in 2 rows, nothing decoded
    line = run.one_error_line()
    assert line and "cell.parquet" in line and "split such documents" in line, run.err[-1000:]
    assert run.seconds < 60 and run.peak_rss < GiB, (run.seconds, run.peak_rss)
