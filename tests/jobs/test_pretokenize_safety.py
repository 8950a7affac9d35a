"""The pre-tokenize job destroys nothing it does not own and says only what is true (issue 21: 1, 5, 7)."""

from __future__ import annotations

import json
import re
import sys

import pytest

from datatools.cli import main
from datatools.io.formats.store import TokenStore


@pytest.fixture()
def small_input(tmp_path, texts):
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:6]))
    return d


def run(args, capsys) -> tuple[int, str]:
    status = main(args)
    return status, capsys.readouterr().err


def one_line(err: str) -> str:
    """The one error line, last on stderr (progress lines, printed every few seconds off a terminal, may precede
    it); never a traceback."""
    lines = err.splitlines()
    assert lines and lines[-1].startswith("datatools: error:") and "Traceback" not in err, err
    assert sum(line.startswith("datatools: error:") for line in lines) == 1, err
    return lines[-1] + "\n"


def snapshot(path):
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_overwrite_refuses_a_plain_directory_and_touches_nothing(tmp_path, small_input, tokenizer_file, capsys):
    out = tmp_path / "out"
    (out / "precious").mkdir(parents=True)
    (out / "precious" / "file.txt").write_text("years of work")
    before = snapshot(tmp_path)
    args = ["pretokenize", str(small_input), str(out), "--tokenizer", str(tokenizer_file)]
    for extra in ([], ["--overwrite"]):
        status, err = run([*args, *extra], capsys)
        assert status == 2
        assert "not a datatools token store" in one_line(err) and str(out) in err
        assert snapshot(tmp_path) == before  # nothing written beside it either (no out.partial, no out.old)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out"]


def test_overwrite_refuses_a_regular_file_before_any_work(tmp_path, small_input, tokenizer_file, capsys):
    out = tmp_path / "out"
    out.write_text("not a store")
    status, err = run(
        ["pretokenize", str(small_input), str(out), "--tokenizer", str(tokenizer_file), "--overwrite"], capsys
    )
    assert status == 2 and "a file without a token store manifest" in one_line(err)
    assert out.read_text() == "not a store"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out"]


@pytest.mark.parametrize("leftover", ["out.partial", "out.old"])
def test_a_user_directory_where_the_job_stages_is_never_removed(
    tmp_path, small_input, tokenizer_file, capsys, leftover
):
    (tmp_path / leftover).mkdir()
    (tmp_path / leftover / "notes.txt").write_text("mine")
    status, err = run(
        ["pretokenize", str(small_input), str(tmp_path / "out"), "--tokenizer", str(tokenizer_file), "--overwrite"],
        capsys,
    )
    assert status == 2 and leftover in one_line(err) and "nothing was touched" in err
    assert (tmp_path / leftover / "notes.txt").read_text() == "mine"
    assert not (tmp_path / "out").exists()


def test_overwrite_replaces_a_token_store(tmp_path, small_input, tokenizer_file, texts, capsys):
    out = tmp_path / "out"
    args = ["pretokenize", str(small_input), str(out), "--tokenizer", str(tokenizer_file)]
    assert run(args, capsys)[0] == 0
    other = tmp_path / "other"
    other.mkdir()
    (other / "b.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[10:13]))
    status, err = run(["pretokenize", str(other), str(out), "--tokenizer", str(tokenizer_file)], capsys)
    assert status == 2 and "already exists (a different job); pass --overwrite" in err
    status, err = run(["pretokenize", str(other), str(out), "--tokenizer", str(tokenizer_file), "--overwrite"], capsys)
    assert status == 0, err
    assert len(TokenStore(out)) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "other", "out"]


def test_a_fresh_run_claims_no_leftovers(tmp_path, small_input, tokenizer_file, capsys):
    status, err = run(
        ["pretokenize", str(small_input), str(tmp_path / "out"), "--tokenizer", str(tokenizer_file)], capsys
    )
    assert status == 0 and "removed" not in err and "interrupted" not in err, err
    assert "written" in err


def test_engine_ray_without_ray_gives_the_install_line_and_creates_nothing(
    tmp_path, small_input, tokenizer_file, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    out = tmp_path / "out"
    status, err = run(
        ["pretokenize", str(small_input), str(out), "--tokenizer", str(tokenizer_file), "--engine", "ray"], capsys
    )
    assert status == 1  # as `train` without jax: the environment, not the input
    from datatools.base.install import install_command

    assert install_command("ray") in one_line(err) and "internal error" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]
    from datatools.jobs.pretokenize import pretokenize

    with pytest.raises(ModuleNotFoundError, match=re.escape(install_command("ray"))):  # a command that works
        pretokenize(small_input, out, tokenizer_file, engine="ray", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_disk_full_on_a_real_small_disk_exits_1_naming_the_output(tmp_path, tokenizer_file, capsys, small_tmpfs):
    from conftest import stdlib_texts

    d = tmp_path / "big"
    d.mkdir()
    texts = stdlib_texts(90)  # ~2.4 MB of text: its shards (~1.6 MiB) fit in 2 MiB, shards and store do not
    for i in range(4):
        (d / f"{i}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[i::4]))
    out = small_tmpfs / "out"
    status, err = run(["pretokenize", str(d), str(out), "--tokenizer", str(tokenizer_file)], capsys)
    assert status == 1  # the environment, as the README says
    assert "No space left on device" in one_line(err) and str(out) in err, err
    assert "RESOURCE_EXHAUSTED" not in err and "tensorstore_spec" not in err
    assert not out.exists()  # nothing half-written is committed


def test_disk_full_while_the_store_is_written_exits_1(tmp_path, small_input, tokenizer_file, capsys, monkeypatch):
    """Simulated where no tmpfs can be mounted: tensorstore's own RESOURCE_EXHAUSTED error at the commit."""
    import datatools.io.formats.store as store_mod

    real = store_mod._create

    def full(path, dtype, length, chunk, *inner):  # inner: the v3 store's inner (read) chunk of tokens
        arr = real(path, dtype, length, chunk, *inner)
        if path.name == "offsets":
            raise ValueError(
                f'RESOURCE_EXHAUSTED: Error writing local file "{path}/c/0": Failed to write 9 bytes '
                f"to file 4: No space left on device [os_error_code='28'] [tensorstore_spec='{{}}']"
            )
        return arr

    monkeypatch.setattr(store_mod, "_create", full)
    out = tmp_path / "out"
    status, err = run(["pretokenize", str(small_input), str(out), "--tokenizer", str(tokenizer_file)], capsys)
    assert status == 1 and "No space left on device" in one_line(err) and "out.partial" in err, err
    assert "RESOURCE_EXHAUSTED" not in err and not out.exists()


def test_a_staging_whose_job_file_cannot_be_read_is_kept(tmp_path, small_input, tokenizer_file, capsys, monkeypatch):
    """An interrupted run's staging whose ``job.json`` this user may not read is not taken for another job's (and
    removed): exit 1 naming the file, the staging as it was."""
    from pathlib import Path

    staging = tmp_path / "out.partial"
    (staging / "shards").mkdir(parents=True)
    (staging / "job.json").write_text(json.dumps({"job": "an earlier run", "shards": 1}) + "\n")
    before = snapshot(staging)
    read_text = Path.read_text

    def denied(self, *args, **kwargs):
        if self.name == "job.json":
            raise PermissionError(13, "Permission denied", str(self))
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", denied)
    out = tmp_path / "out"
    status, err = run(["pretokenize", str(small_input), str(out), "--tokenizer", str(tokenizer_file)], capsys)
    assert status == 1 and "job.json" in one_line(err) and "Permission denied" in err, err
    monkeypatch.undo()
    assert snapshot(staging) == before and not out.exists()
