"""``pretokenize --overwrite`` replaces only the store it recognises: the keys its manifest lists and its own staging
keys (issue 36, item 2). A bucket root or a prefix holding anything else is refused with every object kept; the
staging never goes to another bucket; locally a store directory holding a user's file is refused, the file kept.
Before, an overwrite at a bucket root deleted every object of the bucket and staged in ``<bucket>.partial``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from datatools.cli import main
from datatools.io import storage
from datatools.io.formats.store import TokenStore, write_store
from datatools.jobs.pretokenize import pretokenize
from object_storage import object_bytes


@pytest.fixture
def docs_file(tmp_path, texts):
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:5]))
    return path


def _small_store(where) -> None:
    lengths = np.array([3, 4], np.int64)
    write_store(
        where,
        [(np.arange(7, dtype=np.uint16), lengths)],
        num_tokens=7,
        num_documents=2,
        dtype=np.uint16,
        manifest={"vocab_size": 1000},
    )


def _overwrite(docs_file, out, tokenizer_file, capsys) -> tuple[int, str]:
    status = main(["pretokenize", str(docs_file), out, "--tokenizer", str(tokenizer_file), "--overwrite"])
    return status, capsys.readouterr().err


def test_overwrite_at_a_bucket_root_with_other_objects_is_refused(s3_bucket, docs_file, tokenizer_file, capsys):
    _small_store(s3_bucket)  # a store at the bucket root
    storage.location(f"{s3_bucket}/unrelated/data.txt").write_text("someone else's")
    storage.location(f"{s3_bucket}/README").write_text("the bucket's notes")
    before = object_bytes(s3_bucket)
    status, err = _overwrite(docs_file, s3_bucket, tokenizer_file, capsys)
    assert status == 2, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("datatools: error: s3://") and "nothing was touched" in line, line
    assert "unrelated/data.txt" in line or "README" in line, line
    assert object_bytes(s3_bucket) == before  # every object kept, byte for byte
    fs, name = storage.location(s3_bucket).filesystem()
    assert f"{name}.partial" not in {b.rstrip("/") for b in fs.ls("", refresh=True)}  # no other bucket used


def test_overwrite_of_a_store_holding_a_foreign_object_is_refused(s3_bucket, docs_file, tokenizer_file, capsys):
    out = f"{s3_bucket}/store"
    pretokenize(docs_file, out, tokenizer_file, progress=False)
    storage.location(f"{out}/notes.txt").write_text("mine")  # a user's object inside the store's prefix
    docs_file.with_name("b.jsonl").write_text(json.dumps({"text": "another job"}) + "\n")
    before = object_bytes(s3_bucket)
    status, err = _overwrite(docs_file.with_name("b.jsonl"), out, tokenizer_file, capsys)
    assert status == 2 and "notes.txt" in err and "nothing was touched" in err, err
    assert object_bytes(s3_bucket) == before


def test_overwrite_of_a_store_replaces_only_its_keys(s3_bucket, docs_file, tokenizer_file, texts):
    out = f"{s3_bucket}/store"
    pretokenize(docs_file, out, tokenizer_file, progress=False)
    storage.location(f"{s3_bucket}/store-notes/keep.txt").write_text("a sibling prefix sharing the name's start")
    storage.location(f"{s3_bucket}/other.txt").write_text("beside it")
    other = docs_file.with_name("b.jsonl")
    other.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[5:8]))
    pretokenize(other, out, tokenizer_file, overwrite=True, progress=False)
    assert len(TokenStore(out)) == 3
    assert storage.location(f"{s3_bucket}/store-notes/keep.txt").read_bytes().startswith(b"a sibling")
    assert storage.location(f"{s3_bucket}/other.txt").read_bytes() == b"beside it"
    assert set(object_bytes(out)) == {"manifest.json"} | {
        f"{name}/{k}"
        for name, recs in json.loads(storage.location(f"{out}/manifest.json").read_bytes())["chunks"].items()
        if name != "checksum"
        for k in recs
    }


def test_local_overwrite_keeps_a_users_file_in_a_store_directory(tmp_path, docs_file, tokenizer_file, capsys):
    out = tmp_path / "store"
    pretokenize(docs_file, out, tokenizer_file, progress=False)
    (out / "notes.txt").write_text("mine")
    other = docs_file.with_name("b.jsonl")
    other.write_text(json.dumps({"text": "another job"}) + "\n")
    status, err = _overwrite(other, str(out), tokenizer_file, capsys)
    assert status == 2 and "notes.txt" in err and "nothing was touched" in err, err
    assert (out / "notes.txt").read_text() == "mine" and len(TokenStore(out)) == 5


def test_local_overwrite_keeps_files_beside_a_copied_manifest(tmp_path, docs_file, tokenizer_file, capsys):
    src = tmp_path / "store"
    pretokenize(docs_file, src, tokenizer_file, progress=False)
    fake = tmp_path / "mine"
    (fake / "offsets").mkdir(parents=True)
    (fake / "manifest.json").write_bytes((src / "manifest.json").read_bytes())
    (fake / "thesis.tex").write_text("years of work")
    status, err = _overwrite(docs_file, str(fake), tokenizer_file, capsys)
    assert status == 2 and "thesis.tex" in err, err
    assert (fake / "thesis.tex").read_text() == "years of work"


def test_a_store_at_a_bucket_root_is_written_and_replaced_in_that_bucket(s3_bucket, docs_file, tokenizer_file, texts):
    """The staging of a bucket root is ``BUCKET/.partial`` (no other bucket), gone after the commit."""
    pretokenize(docs_file, s3_bucket, tokenizer_file, progress=False)
    assert len(TokenStore(s3_bucket)) == 5
    other = docs_file.with_name("b.jsonl")
    other.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[5:8]))
    pretokenize(other, s3_bucket, tokenizer_file, overwrite=True, progress=False)
    assert len(TokenStore(s3_bucket)) == 3
    assert not [k for k in object_bytes(s3_bucket) if k.startswith(".partial")]
