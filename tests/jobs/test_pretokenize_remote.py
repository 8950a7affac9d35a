"""Pre-tokenizing from and to object storage (the S3 server and the GCS emulator on loopback).

The store a job writes to a bucket is byte-identical to the one it writes to a local directory from the same
inputs; a SIGKILL anywhere (between shards, in the middle of the commit) and a rerun give the identical store; a
prefix holding objects that are not datatools' own is refused, untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from datatools.cli import main
from datatools.io import storage
from datatools.io.formats.store import TokenStore
from datatools.jobs.pretokenize import pretokenize
from object_storage import object_bytes


@pytest.fixture()
def remote_inputs(request, texts, tmp_path):
    """Four JSON Lines files (four shards) uploaded under ``BUCKET/in`` of the bucket fixture named by the test."""
    bucket = request.getfixturevalue(request.param)
    for i in range(4):
        lines = "".join(json.dumps({"text": t, "id": i}) + "\n" for t in texts[i * 10 : (i + 1) * 10])
        storage.location(f"{bucket}/in/part-{i}.jsonl").write_text(lines)
    return bucket


@pytest.mark.parametrize("remote_inputs", ["s3_bucket", "gcs_bucket"], indirect=True)
def test_store_in_a_bucket_is_byte_identical_to_the_local_one(remote_inputs, tmp_path, tokenizer_file):
    bucket = remote_inputs
    local = tmp_path / "local"
    pretokenize(f"{bucket}/in", local, tokenizer_file, progress=False)
    result = pretokenize(f"{bucket}/in", f"{bucket}/out/store", tokenizer_file, progress=False)
    assert result.status == "written" and result.shards == 4
    remote = object_bytes(f"{bucket}/out/store")
    assert remote == object_bytes(local)
    assert not storage.location(f"{bucket}/out/store.partial").list()  # the staging area is gone
    store = TokenStore(f"{bucket}/out/store")
    assert len(store) == 40 and store.num_tokens == TokenStore(local).num_tokens
    again = pretokenize(f"{bucket}/in", f"{bucket}/out/store", tokenizer_file, progress=False)
    assert again.status == "already complete"
    assert main(["verify", f"{bucket}/out/store"]) == 0  # every chunk's size and sha256 read back from the bucket


def _cli(args, extra_env=None):
    env = {**os.environ, **(extra_env or {})}
    return subprocess.run(
        [sys.executable, "-m", "datatools", *args], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.mark.parametrize(
    "point",
    [
        pytest.param("after-shard-1", marks=pytest.mark.slow),
        "committing-0",
        pytest.param("committing-2", marks=pytest.mark.slow),
    ],
)
def test_sigkill_then_rerun_gives_the_identical_store_in_s3(s3_bucket, tmp_path, texts, tokenizer_file, point):
    for i in range(4):
        lines = "".join(json.dumps({"text": t}) + "\n" for t in texts[i * 10 : (i + 1) * 10])
        storage.location(f"{s3_bucket}/in/part-{i}.jsonl").write_text(lines)
    reference = tmp_path / "reference"
    pretokenize(f"{s3_bucket}/in", reference, tokenizer_file, progress=False)
    out = f"{s3_bucket}/store"
    args = ["pretokenize", f"{s3_bucket}/in", out, "--tokenizer", str(tokenizer_file)]
    killed = _cli(args, {"DATATOOLS_FAULT": point})
    assert killed.returncode == -9, killed.stderr
    assert not storage.location(f"{out}/manifest.json").exists()  # no reader opens a half-written store
    with pytest.raises(ValueError, match="not a datatools token store"):
        TokenStore(out)
    resumed = _cli(args)
    assert resumed.returncode == 0, resumed.stderr
    assert object_bytes(out) == object_bytes(reference)
    assert not storage.location(f"{out}.partial").list()


def test_overwrite_in_a_bucket_replaces_only_a_store(s3_bucket, tmp_path, texts, tokenizer_file):
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:5]))
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[5:9]))
    out = f"{s3_bucket}/store"
    pretokenize(tmp_path / "a.jsonl", out, tokenizer_file, progress=False)
    with pytest.raises(ValueError, match="already exists"):
        pretokenize(tmp_path / "b.jsonl", out, tokenizer_file, progress=False)
    assert len(TokenStore(out)) == 5
    pretokenize(tmp_path / "b.jsonl", out, tokenizer_file, overwrite=True, progress=False)
    assert len(TokenStore(out)) == 4
    foreign = f"{s3_bucket}/precious"
    storage.location(f"{foreign}/notes.txt").write_text("mine")
    status = _cli(
        ["pretokenize", str(tmp_path / "a.jsonl"), foreign, "--tokenizer", str(tokenizer_file), "--overwrite"]
    )
    assert status.returncode == 2
    assert status.stderr.strip().splitlines()[-1].startswith("datatools: error: s3://")
    assert "not a datatools token store" in status.stderr
    assert storage.location(foreign).list() == [f"{foreign}/notes.txt"]
    assert storage.location(f"{foreign}/notes.txt").read_bytes() == b"mine"
