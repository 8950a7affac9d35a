"""A rerun of the same pretokenize job on a damaged store repairs it (issue 36, item 1): the store it finds is
checked (the listing and every key's size against the manifest's records, then every key's sha256, as
``datatools verify`` does: issue 57) and rebuilt when anything is missing or wrong, byte-identical to the intact
one. Before, the rerun said "already complete" and exited 0 whatever the damage."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from datatools.cli import main
from datatools.io import storage
from object_storage import object_bytes


def _delete(store, key):
    storage.location(store).join(key).remove()


def _truncate(store, key):
    data = storage.location(store).join(key).read_bytes()
    storage.location(store).join(key).write_bytes(data[: len(data) // 2])


def _empty(store, key):
    storage.location(store).join(key).write_bytes(b"")


def _flip(store, key):
    data = bytearray(storage.location(store).join(key).read_bytes())
    data[len(data) // 2] ^= 0xFF
    storage.location(store).join(key).write_bytes(bytes(data))


def _edit_manifest(store, _key):
    path = storage.location(store).join("manifest.json")
    manifest = json.loads(path.read_bytes())
    manifest["num_documents"] -= 1
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


DAMAGE = {  # name -> (what it does, the key, whether the sizes stay the same: only the sha256 tell)
    "tokens chunk deleted": (_delete, "tokens/c/0", False),
    "tokens chunk truncated": (_truncate, "tokens/c/0", False),
    "tokens chunk emptied": (_empty, "tokens/c/0", False),
    "offsets chunk deleted": (_delete, "offsets/c/0", False),
    "offsets metadata deleted": (_delete, "offsets/zarr.json", False),
    "tokens metadata truncated": (_truncate, "tokens/zarr.json", False),
    "manifest disagrees with the arrays": (_edit_manifest, None, False),
    "byte flipped in a tokens chunk": (_flip, "tokens/c/0", True),
}


@pytest.fixture
def job(tmp_path, texts, tokenizer_file):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:12]))
    return ["pretokenize", str(path)], ["--tokenizer", str(tokenizer_file)]


def _run(job, out, *extra) -> tuple[int, str]:
    head, tail = job
    status = main([*head, str(out), *tail, *extra])
    return status


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_the_rerun_repairs_a_damaged_local_store(job, tmp_path, damage, capsys):
    out = tmp_path / "store"
    assert _run(job, out) == 0
    intact = object_bytes(out)
    harm, key, _ = DAMAGE[damage]
    harm(out, key)
    capsys.readouterr()
    assert _run(job, out) == 0  # the same sizes or not: a plain rerun reads every sha256 (issue 57)
    err = capsys.readouterr().err
    assert "repaired" in err and "damaged" in err, err
    assert object_bytes(out) == intact
    assert not Path(f"{out}.partial").exists() and not Path(f"{out}.old").exists()


@pytest.mark.parametrize("damage", ["tokens chunk deleted", "tokens chunk truncated", "byte flipped in a tokens chunk"])
def test_the_rerun_repairs_a_damaged_store_in_s3(job, s3_bucket, tmp_path, damage, capsys):
    out = f"{s3_bucket}/store"
    reference = tmp_path / "reference"
    assert _run(job, reference) == 0
    assert _run(job, out) == 0
    harm, key, _ = DAMAGE[damage]
    harm(out, key)
    capsys.readouterr()
    assert _run(job, out) == 0
    assert "repaired" in capsys.readouterr().err
    assert object_bytes(out) == object_bytes(reference)


def test_overwrite_rebuilds_a_damaged_store_of_the_same_job(job, tmp_path, capsys):
    out = tmp_path / "store"
    assert _run(job, out) == 0
    intact = object_bytes(out)
    os.remove(out / "tokens" / "c" / "0")
    assert _run(job, out, "--overwrite") == 0
    assert object_bytes(out) == intact
    _flip(out, "tokens/c/0")  # the same sizes: --overwrite reads every sha256 of a store of its own job
    assert _run(job, out, "--overwrite") == 0
    assert object_bytes(out) == intact


@pytest.mark.parametrize("where", ["local", "s3"])
def test_overwrite_replaces_a_store_whose_manifest_is_corrupt(job, tmp_path, where, request, capsys):
    """The eighth damage: the manifest itself. Nothing proves the job, so the rerun refuses it (naming the
    manifest) and ``--overwrite`` (the command the refusal names) replaces it: only a store's files are there."""
    out = tmp_path / "store" if where == "local" else f"{request.getfixturevalue('s3_bucket')}/store"
    reference = tmp_path / "reference"
    assert _run(job, reference) == 0
    assert _run(job, out) == 0
    storage.location(out).join("manifest.json").write_bytes(b'{"format": "datatools-token-store", "vers')
    capsys.readouterr()
    assert _run(job, out) == 2
    err = capsys.readouterr().err
    assert "manifest.json does not read" in err and "pass --overwrite to rebuild it" in err, err
    assert _run(job, out, "--overwrite") == 0
    assert object_bytes(out) == object_bytes(reference)
