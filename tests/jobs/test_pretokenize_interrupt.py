"""Ctrl-C during ``pretokenize --workers 2`` (issue 35): the command stops within 2 s with exit status 130 and one
line, no worker traceback, no worker left running; a rerun resumes within the shards the interrupted run had
started (their committed pieces are not tokenized again) and the store is byte-identical to an uninterrupted run."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from datatools.jobs.pretokenize import PIECE_TOKENS, pretokenize


def tree_digest(path: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``path`` (two stores byte-identical)."""
    files = sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def write_input(folder: Path, texts: list[str], files: int = 2, chars_per_file: int = 5_000_000) -> int:
    """``files`` JSON Lines files (one shard each) of documents of about 2,000 characters cut from ``texts``:
    each shard is several pieces of :data:`PIECE_TOKENS` tokens. Returns the number of documents."""
    folder.mkdir()
    source = "".join(texts)
    docs = 0
    at = 0
    for i in range(files):
        with open(folder / f"part-{i}.jsonl", "w") as f:
            written = 0
            while written < chars_per_file:
                size = 1500 + (at * 7919) % 1000
                doc = source[at % len(source) : at % len(source) + size]
                at += size
                f.write(json.dumps({"text": doc}) + "\n")
                written += len(doc)
                docs += 1
    return docs


def test_ctrl_c_stops_the_workers_within_2_s_and_a_rerun_resumes_within_a_shard(tmp_path, texts, tokenizer_file):
    inputs = tmp_path / "in"
    total_docs = write_input(inputs, texts)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "datatools", "pretokenize", str(inputs), str(out)]
    command += ["--tokenizer", str(tokenizer_file), "--workers", "2"]
    # its own session: the signal goes to the whole process group, workers included, as a terminal's Ctrl-C does
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    shards = tmp_path / "out.partial" / "shards"
    deadline = time.monotonic() + 120
    while not list(shards.glob("*.piece-*.npz")):  # wait until a piece of a shard is committed
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no piece committed in 120 s"
        time.sleep(0.05)
    whole = [p for p in shards.iterdir() if re.fullmatch(r"\d{6}\.npz", p.name)]
    assert not whole, "a whole shard finished before the interrupt: input too small"
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    assert proc.returncode == 130, err
    assert took < 2.0, f"stopped {took:.1f} s after Ctrl-C"
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    lines = err.splitlines()
    assert lines[-1] == "datatools: aborted (Ctrl-C)", lines
    progress = ("tokenizing: ", "datatools pretokenize: ")  # the bar's and the live line's plain lines
    assert all(line.startswith(progress) for line in lines[:-1]), lines  # only progress lines before it
    time.sleep(0.2)
    try:  # the workers are gone too: nothing is left in the process group
        os.killpg(proc.pid, 0)
        raise AssertionError("a process of the interrupted command is still running")
    except ProcessLookupError:
        pass
    assert not out.exists()

    rerun = subprocess.run(command, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    found = re.search(r"([\d,]+) documents of unfinished shards resumed", rerun.stderr)
    assert found, rerun.stderr
    resumed = int(found.group(1).replace(",", ""))
    assert 0 < resumed < total_docs  # within a shard: committed pieces were not tokenized again
    reference = tmp_path / "reference"
    result = pretokenize(inputs, reference, tokenizer_file, workers=1, progress=False)
    assert result.documents == total_docs and result.tokens > 2 * PIECE_TOKENS
    assert tree_digest(out) == tree_digest(reference)
