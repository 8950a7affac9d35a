"""A plan directory carries a digest of its header and one of each array, checked when it is opened: an edited value
of ``doc.npy``, a lowered ``length``, ``align: 0`` in the header are refused by ``pipeline`` with exit 2 naming the
file (issue 36, item 4; before, each changed the training data with exit 0). A killed ``pack`` leaves a staging
directory that the next ``pack`` of the same output removes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from datatools.cli import main
from datatools.io.formats.plan_file import PlanFile


@pytest.fixture
def packed(tmp_path):
    """A store of 400 documents, its plan at ctx 256, and a pipeline config that reads through the plan."""
    from conftest import random_docs, write_test_store

    store = write_test_store(tmp_path / "store", random_docs(400, seed=11, max_len=600))
    assert main(["pack", str(store), str(tmp_path / "plan"), "--ctx", "256"]) == 0
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"source: {{path: {store}}}\npacking: {{plan: {tmp_path / 'plan'}}}\nbatch_size: 2\nshuffle: {{kind: none}}\n"
    )
    return tmp_path / "plan", cfg


def _edit(path: Path, index: int, change) -> None:
    arr = np.load(path, mmap_mode="r+")
    arr[index] = change(arr[index])
    arr.flush()
    del arr


def _refused(cfg, name: str, capsys) -> str:
    status = main(["pipeline", str(cfg), "--steps", "2", "--workers", "0"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("datatools: error: ") and err.count("\n") == 1 and name in err, err
    return err


def test_an_intact_plan_is_read(packed, capsys):
    plan, cfg = packed
    assert main(["pipeline", str(cfg), "--steps", "2", "--workers", "0"]) == 0
    header = json.loads((plan / "plan.json").read_text())
    assert set(header["digests"]) == {"row_starts.npy", "doc.npy", "start.npy", "length.npy", "lengths.npy"}


def test_an_edited_doc_value_is_refused(packed, capsys):
    plan, cfg = packed
    doc = np.load(plan / "doc.npy")
    other = int(doc[1])  # another valid document: a duplicated one, a lost one
    _edit(plan / "doc.npy", 0, lambda v: other)
    _refused(cfg, "doc.npy", capsys)
    with pytest.raises(ValueError, match="doc.npy"):
        PlanFile(plan)


def test_a_lowered_length_is_refused(packed, capsys):
    plan, cfg = packed
    i = int(np.argmax(np.load(plan / "length.npy")))
    _edit(plan / "length.npy", i, lambda v: v - 10)
    _refused(cfg, "length.npy", capsys)


def test_align_0_in_the_header_is_refused(packed, capsys):
    plan, cfg = packed
    head = plan / "plan.json"
    header = json.loads(head.read_text())
    header["align"] = 0
    head.write_text(json.dumps(header, indent=2))
    err = _refused(cfg, "plan.json", capsys)
    assert "datatools pack" in err  # the line names the command that re-makes it


def test_a_killed_pack_leaves_staging_that_the_next_pack_removes(tmp_path, capsys):
    lengths = np.random.default_rng(0).integers(1, 3000, 20_000_000).astype(np.uint16)
    (tmp_path / "lens").mkdir()
    np.save(tmp_path / "lens" / "lengths.npy", lengths)
    out = tmp_path / "plan"
    args = [sys.executable, "-m", "datatools", "pack", str(tmp_path / "lens"), str(out), "--ctx", "4096"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".plan.*.tmp")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = list(tmp_path.glob(".plan.*.tmp"))
    assert left and not out.exists(), "the kill did not land while the plan was being staged"
    (tmp_path / "mine.tmp").write_text("a user's file")  # not pack's: kept
    assert main(["pack", str(tmp_path / "lens"), str(out), "--ctx", "4096"]) == 0
    assert not list(tmp_path.glob(".plan.*.tmp")) and (tmp_path / "mine.tmp").exists()
    assert PlanFile(out).num_rows > 0
