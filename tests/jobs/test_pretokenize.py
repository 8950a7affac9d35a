"""The pre-tokenize job and the token store: round trip, crash/resume, engines, errors."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import store_document, store_documents, without_progress
from datatools.cli import main
from datatools.io.formats.store import TokenStore
from datatools.io.sources.documents import StoreDocuments
from datatools.jobs.pretokenize import pretokenize


def tree_digest(path: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under path (byte identity of two stores)."""
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


@pytest.fixture()
def jsonl_dir(tmp_path, texts):
    d = tmp_path / "in"
    d.mkdir()
    for i in range(4):  # 4 files -> 4 shards
        with open(d / f"part-{i}.jsonl", "w") as f:
            for t in texts[i * 10 : (i + 1) * 10]:
                f.write(json.dumps({"text": t, "id": i}) + "\n")
    return d


def decode_all(store, tokenizer_file):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_file))
    return [tok.decode(store_document(store, i).tolist(), skip_special_tokens=False) for i in range(len(store))]


def test_round_trip_every_input_format(tmp_path, texts, tokenizer_file):
    import datasets

    docs = texts[:12]
    (tmp_path / "txt").mkdir()
    for i, t in enumerate(docs):
        (tmp_path / "txt" / f"{i:02d}.txt").write_text(t)
    pq.write_table(pa.table({"text": docs}), tmp_path / "docs.parquet", row_group_size=5)
    with open(tmp_path / "docs.jsonl", "w") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in docs)
    datasets.Dataset.from_dict({"text": docs}).save_to_disk(str(tmp_path / "hf"))
    for name in ("txt", "docs.parquet", "docs.jsonl", "hf"):
        out = tmp_path / f"store-{name}"
        result = pretokenize(tmp_path / name, out, tokenizer_file, progress=False)
        store = TokenStore(out)
        assert result.documents == len(store) == len(docs)
        assert decode_all(store, tokenizer_file) == docs, name
        lengths = store.lengths()
        assert lengths.sum() == store.num_tokens and store.dtype == np.uint16
        flat, off = store_documents(store, 3, 7)
        np.testing.assert_array_equal(flat[off[1] : off[2]], store_document(store, 4))
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["vocab_size"] == 1000 and manifest["num_documents"] == len(docs)


def test_store_is_readable_with_tensorstore_alone(tmp_path, jsonl_dir, tokenizer_file):
    import tensorstore as ts

    out = tmp_path / "s"
    pretokenize(jsonl_dir, out, tokenizer_file, progress=False)
    tokens = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(out / "tokens")}}).result()
    offsets = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(out / "offsets")}}).result()
    off = offsets.read().result()
    store = TokenStore(out)
    np.testing.assert_array_equal(tokens[off[5] : off[6]].read().result(), store_document(store, 5))


def test_bos_eos_and_tile_aligned_chunks(tmp_path, jsonl_dir, tokenizer_file, texts):
    plain = tmp_path / "plain"
    pretokenize(jsonl_dir, plain, tokenizer_file, progress=False)
    out = tmp_path / "chunked"
    pretokenize(jsonl_dir, out, tokenizer_file, bos=True, eos=True, ctx=512, tile=128, progress=False)
    a, b = TokenStore(plain), TokenStore(out)
    assert b.lengths().max() <= 512
    # nothing lost: concatenating the chunked store gives <s> doc </s> for every document
    flat_b, _ = store_documents(b, 0, len(b))
    expected = np.concatenate([np.concatenate(([0], store_document(a, i), [1])) for i in range(len(a))])
    np.testing.assert_array_equal(flat_b, expected)


def test_two_workers_give_the_store_of_one(tmp_path, jsonl_dir, tokenizer_file):
    one = tmp_path / "one"
    pretokenize(jsonl_dir, one, tokenizer_file, progress=False)
    two = tmp_path / "two"
    pretokenize(jsonl_dir, two, tokenizer_file, workers=2, progress=False)
    assert tree_digest(one) == tree_digest(two)


@pytest.mark.slow  # starts a Ray runtime (15-25 s on 2 cores); make test-cluster runs it with the two-node cluster's
def test_ray_gives_the_store_of_one_worker(tmp_path, jsonl_dir, tokenizer_file):
    one = tmp_path / "one"
    pretokenize(jsonl_dir, one, tokenizer_file, progress=False)
    ray_out = tmp_path / "ray"
    pretokenize(jsonl_dir, ray_out, tokenizer_file, workers=2, engine="ray", progress=False)
    assert tree_digest(one) == tree_digest(ray_out)


def _run_cli(args, env_extra=None):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "datatools", *args], capture_output=True, text=True, env=env)


# after-shard-2 is after-shard-0 further on (make test-all runs it)
@pytest.mark.parametrize(
    "point", ["after-shard-0", pytest.param("after-shard-2", marks=pytest.mark.slow), "before-rename"]
)
def test_sigkill_then_resume_gives_identical_store(tmp_path, jsonl_dir, tokenizer_file, point):
    reference = tmp_path / "reference"
    pretokenize(jsonl_dir, reference, tokenizer_file, progress=False)
    out = tmp_path / "out"
    args = ["pretokenize", str(jsonl_dir), str(out), "--tokenizer", str(tokenizer_file)]
    killed = _run_cli(args, {"DATATOOLS_FAULT": point})
    assert killed.returncode == -9, killed.stderr
    assert not out.exists()  # a reader never sees a half-written store
    assert (tmp_path / "out.partial").exists()
    resumed = _run_cli(args)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed" in resumed.stderr
    assert tree_digest(out) == tree_digest(reference)
    assert not (tmp_path / "out.partial").exists()
    again = _run_cli(args)
    assert again.returncode == 0 and "already complete" in again.stderr


def test_kill_after_the_final_rename_and_during_an_overwrite_swap(tmp_path, jsonl_dir, tokenizer_file, texts):
    reference = tmp_path / "reference"
    pretokenize(jsonl_dir, reference, tokenizer_file, progress=False)
    out = tmp_path / "out"
    args = ["pretokenize", str(jsonl_dir), str(out), "--tokenizer", str(tokenizer_file)]
    # killed after the store was renamed into place, before the staging directory was removed
    assert _run_cli(args, {"DATATOOLS_FAULT": "after-rename"}).returncode == -9
    assert tree_digest(out) == tree_digest(reference) and (tmp_path / "out.partial").exists()
    rerun = _run_cli(args)
    assert rerun.returncode == 0 and "already complete" in rerun.stderr, rerun.stderr
    assert "removed out.partial left by an interrupted run" in rerun.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out")) == ["out"]
    # killed in the middle of an --overwrite swap: the old store moved aside, the new one not yet in place
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:3]))
    swap = ["pretokenize", str(other), str(out), "--tokenizer", str(tokenizer_file), "--overwrite"]
    assert _run_cli(swap, {"DATATOOLS_FAULT": "during-swap"}).returncode == -9
    assert not out.exists() and (tmp_path / "out.old").exists()
    rerun = _run_cli(swap)
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out")) == ["out"]
    assert TokenStore(out).num_tokens > 0 and len(TokenStore(out)) == 3
    again = _run_cli(swap)
    assert again.returncode == 0 and "already complete" in again.stderr


def one_line_error(args, capsys, status: int = 2, *, started: bool = False) -> str:
    """The one line of a failed run; ``started``: it failed while tokenizing, after the tokenizer line."""
    assert main(args) == status
    err = without_progress(capsys.readouterr().err)  # progress lines (a run over a quarter second) may precede it
    if started:
        first, err = err.split("\n", 1)
        assert first.startswith("tokenizer "), first
    assert err.startswith("datatools: error:") and err.count("\n") == 1, err
    return err


def test_errors(tmp_path, jsonl_dir, tokenizer_file, capsys):
    tok = ["--tokenizer", str(tokenizer_file)]
    assert "no such file" in one_line_error(["pretokenize", str(tmp_path / "nope"), str(tmp_path / "o"), *tok], capsys)
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 this is not parquet")
    assert "cannot read Parquet" in one_line_error(
        ["pretokenize", str(tmp_path / "bad.parquet"), str(tmp_path / "o"), *tok], capsys
    )
    err = one_line_error(["pretokenize", str(jsonl_dir), str(tmp_path / "o"), *tok, "--column", "body"], capsys)
    assert "no column 'body'" in err and "text" in err
    (tmp_path / "tok.json").write_text("{not json")
    assert "not a valid tokenizers JSON" in one_line_error(
        ["pretokenize", str(jsonl_dir), str(tmp_path / "o"), "--tokenizer", str(tmp_path / "tok.json")], capsys
    )
    (tmp_path / "existing").mkdir()
    assert "already exists" in one_line_error(["pretokenize", str(jsonl_dir), str(tmp_path / "existing"), *tok], capsys)
    assert main(["pretokenize", str(jsonl_dir), str(tmp_path / "existing"), *tok, "--overwrite"]) == 0
    assert len(TokenStore(tmp_path / "existing")) == 40
    capsys.readouterr()
    (tmp_path / "weird.csv").write_text("a,b\n")
    assert "unknown format" in one_line_error(
        ["pretokenize", str(tmp_path / "weird.csv"), str(tmp_path / "o"), *tok], capsys
    )
    assert "multiple of" in one_line_error(
        ["pretokenize", str(jsonl_dir), str(tmp_path / "o"), *tok, "--ctx", "100", "--tile", "64"], capsys
    )
    assert not (tmp_path / "o").exists()


def test_full_disk_commits_nothing(tmp_path, jsonl_dir, tokenizer_file, capsys, monkeypatch):
    import datatools.jobs.pretokenize as job

    calls = {"n": 0}
    real = job._write_shard

    def fill_up(path, tokens, lengths):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device")
        real(path, tokens, lengths)

    monkeypatch.setattr(job, "_write_shard", fill_up)
    out = tmp_path / "o"
    err = one_line_error(
        ["pretokenize", str(jsonl_dir), str(out), "--tokenizer", str(tokenizer_file)], capsys, status=1, started=True
    )  # the environment, not the input
    assert "No space left on device" in err and "o.partial" in err  # names the file it could not write
    assert not out.exists()
    assert len(list((tmp_path / "o.partial" / "shards").glob("*.npz"))) == 2  # complete shards only
    monkeypatch.setattr(job, "_write_shard", real)
    assert main(["pretokenize", str(jsonl_dir), str(out), "--tokenizer", str(tokenizer_file)]) == 0
    assert len(TokenStore(out)) == 40


def test_token_store_is_a_grain_source(tmp_path, jsonl_dir, tokenizer_file):
    import grain

    out = tmp_path / "s"
    pretokenize(jsonl_dir, out, tokenizer_file, progress=False)
    store = StoreDocuments(TokenStore(out))
    ds = grain.MapDataset.source(store).map(len)
    assert list(ds) == store.lengths().tolist()
    with pytest.raises(IndexError):
        store[len(store)]


def test_the_same_input_twice_is_read_once_and_said(tmp_path, jsonl_dir, tokenizer_file, capsys):
    out = tmp_path / "s"
    args = [
        "pretokenize",
        str(jsonl_dir),
        str(jsonl_dir / "part-1.jsonl"),
        str(jsonl_dir / ".." / "in"),
        str(out),
        "--tokenizer",
        str(tokenizer_file),
    ]
    assert main(args) == 0
    assert "input file(s) given more than once, read once" in capsys.readouterr().err
    assert len(TokenStore(out)) == 40


def test_a_store_written_before_its_shard_index_gets_it_from_a_rerun_with_overwrite(
    tmp_path, jsonl_dir, tokenizer_file, monkeypatch
):
    """A sharded store from before ``shard_index.bin``: a plain rerun of its job says how to add it and changes
    nothing; with ``--overwrite`` the index is added without tokenizing again, and the store is byte-identical to
    a fresh run of the job."""
    import datatools.io.formats.store as store_mod

    monkeypatch.setattr(store_mod, "READ_CHUNK", 16)  # small inner chunks: a small store is sharded
    reference = tmp_path / "reference"
    pretokenize(jsonl_dir, reference, tokenizer_file, progress=False)
    assert (reference / "shard_index.bin").is_file()
    old = tmp_path / "old"
    pretokenize(jsonl_dir, old, tokenizer_file, progress=False)
    (old / "shard_index.bin").unlink()
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["shard_index"]
    (old / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    before = tree_digest(old)
    plain = pretokenize(jsonl_dir, old, tokenizer_file, progress=False)
    assert plain.status == "already complete" and "run again with --overwrite to add it" in plain.extra["indexed"]
    assert tree_digest(old) == before
    added = pretokenize(jsonl_dir, old, tokenizer_file, progress=False, overwrite=True)
    assert added.status == "already complete" and "shard_index.bin added" in added.extra["indexed"]
    assert tree_digest(old) == tree_digest(reference)


def test_the_tokenizer_line_comes_first(tmp_path, jsonl_dir, tokenizer_file, capsys, monkeypatch):
    """Issue 58: the line naming the tokenizer (file, sha256, what was switched off) printed after the run; it is
    said before the first shard is written now, and once."""
    import datatools.jobs.pretokenize as job

    real, said_by_first_shard = job._write_shard, []

    def write(*args, **kwargs):
        if not said_by_first_shard:
            said_by_first_shard.append(capsys.readouterr().err)
        return real(*args, **kwargs)

    monkeypatch.setattr(job, "_write_shard", write)
    assert main(["pretokenize", str(jsonl_dir), str(tmp_path / "out"), "--tokenizer", str(tokenizer_file)]) == 0
    err = said_by_first_shard[0] + capsys.readouterr().err
    line = f"tokenizer {tokenizer_file} (sha256 "
    assert line in said_by_first_shard[0] and err.count(line) == 1, err
