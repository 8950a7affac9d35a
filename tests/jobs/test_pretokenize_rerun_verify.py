"""A plain rerun of the same pretokenize job never says "already complete" of a store ``datatools verify`` refuses
(issue 57, the first hole): it checks what verify checks and repairs every damage verify can name, on multi-shard
stores, ``shard_index.bin`` included. Before, the rerun compared only the sizes of ``tokens/`` and ``offsets/``:
a flipped byte inside an inner chunk, two inner chunks or two shards of the same size swapped, and any damage to
``shard_index.bin`` were "already complete", exit 0."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path

import google_crc32c
import numpy as np
import pytest

import datatools.io.formats.store as store_mod
from datatools.cli import main
from datatools.io import storage
from datatools.io.formats import shard_reads
from datatools.io.formats.store_verify import verify_store
from object_storage import object_bytes

SHARD, INNER = 1024, 64  # tokens per shard and per inner chunk: the test's job writes a store of many shards


@pytest.fixture
def small_shards(monkeypatch):
    monkeypatch.setattr(store_mod, "TOKEN_CHUNK", SHARD)
    monkeypatch.setattr(store_mod, "READ_CHUNK", INNER)


@pytest.fixture
def job(tmp_path, texts, tokenizer_file, small_shards):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:10]))
    return ["pretokenize", str(path)], ["--tokenizer", str(tokenizer_file)]


def _run(job, out, *extra) -> int:
    head, tail = job
    return main([*head, str(out), *tail, *extra])


def _key(store, key: str) -> storage.Location:
    return storage.location(store).join(key)


def _shards(store) -> list[str]:
    return sorted((k for k in object_bytes(store) if k.startswith("tokens/c/")), key=lambda k: int(k.split("/")[-1]))


def _entries(shard: bytes) -> np.ndarray:
    per = SHARD // INNER
    return np.frombuffer(shard[: per * shard_reads.INDEX_ENTRY_BYTES], "<u8").reshape(per, 2)


def flip_in_inner_chunk(store) -> None:
    """One byte flipped in the middle of an inner chunk of the second shard (the shard's size unchanged)."""
    key = _shards(store)[1]
    data = bytearray(_key(store, key).read_bytes())
    offset, nbytes = (int(x) for x in _entries(bytes(data))[3])
    data[offset + nbytes // 2] ^= 0x01
    _key(store, key).write_bytes(bytes(data))


def swap_inner_chunks(store) -> None:
    """Two inner chunks of the same stored size swapped in place within one shard (its index untouched: each
    chunk's own crc32c still holds, a reader decodes them in the wrong order)."""
    for key in _shards(store):
        data = bytearray(_key(store, key).read_bytes())
        by_size = defaultdict(list)
        for j, (offset, nbytes) in enumerate(_entries(bytes(data)).tolist()):
            by_size[nbytes].append((offset, j))
        for nbytes, places in by_size.items():
            for (a, _), (b, _) in zip(places, places[1:]):
                if data[a : a + nbytes] != data[b : b + nbytes]:
                    data[a : a + nbytes], data[b : b + nbytes] = data[b : b + nbytes], data[a : a + nbytes]
                    _key(store, key).write_bytes(bytes(data))
                    return
    raise AssertionError("no two different inner chunks of the same size in one shard: the test needs a pair")


def swap_index_entries(store) -> None:
    """Two inner chunks' entries swapped in a shard's own index (its crc32c recomputed): a valid shard, the
    same size, its chunks in the wrong order."""
    key = _shards(store)[0]
    data = bytearray(_key(store, key).read_bytes())
    entries = _entries(bytes(data)).copy()
    entries[[1, 2]] = entries[[2, 1]]
    head = entries.tobytes()
    data[: len(head)] = head
    data[len(head) : len(head) + 4] = google_crc32c.value(head).to_bytes(4, "little")
    _key(store, key).write_bytes(bytes(data))


def swap_shards(store) -> None:
    """Two different shards of the same size swapped."""
    by_size = defaultdict(list)
    for key in _shards(store):
        by_size[len(_key(store, key).read_bytes())].append(key)
    for keys in by_size.values():
        for a, b in zip(keys, keys[1:]):
            da, db = _key(store, a).read_bytes(), _key(store, b).read_bytes()
            if da != db:
                _key(store, a).write_bytes(db)
                _key(store, b).write_bytes(da)
                return
    raise AssertionError("no two different shards of the same size: the test needs a pair")


def index_truncated(store) -> None:
    data = _key(store, shard_reads.INDEX_KEY).read_bytes()
    _key(store, shard_reads.INDEX_KEY).write_bytes(data[: len(data) // 2])


def index_deleted(store) -> None:
    _key(store, shard_reads.INDEX_KEY).remove()


def index_edited(store) -> None:
    data = bytearray(_key(store, shard_reads.INDEX_KEY).read_bytes())
    data[len(data) // 3] ^= 0x10
    _key(store, shard_reads.INDEX_KEY).write_bytes(bytes(data))


def index_rows_swapped(store) -> None:
    """Two shards' rows of ``shard_index.bin`` swapped: the same size."""
    data = bytearray(_key(store, shard_reads.INDEX_KEY).read_bytes())
    row = (SHARD // INNER) * shard_reads.ENTRY_BYTES
    data[:row], data[row : 2 * row] = data[row : 2 * row], data[:row]
    _key(store, shard_reads.INDEX_KEY).write_bytes(bytes(data))


DAMAGE = {
    "byte flipped in an inner chunk": flip_in_inner_chunk,
    "inner chunks of the same size swapped": swap_inner_chunks,
    "inner chunks swapped in a shard's index": swap_index_entries,
    "shards of the same size swapped": swap_shards,
    "shard_index.bin truncated": index_truncated,
    "shard_index.bin deleted": index_deleted,
    "shard_index.bin edited": index_edited,
    "shard_index.bin rows swapped": index_rows_swapped,
}


def _check_repaired(job, out, intact, capsys) -> str:
    with pytest.raises(ValueError):  # what the test did is damage verify names
        verify_store(out)
    capsys.readouterr()
    assert _run(job, out) == 0  # a plain rerun: no --check, no --overwrite
    err = capsys.readouterr().err
    assert "already complete" not in err, err
    assert "damaged" in err and "repaired" in err, err
    assert object_bytes(out) == intact
    verify_store(out)
    assert _run(job, out) == 0  # and now it is whole
    assert "already complete" in capsys.readouterr().err
    return err


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_plain_rerun_repairs_what_verify_refuses(job, tmp_path, damage, capsys):
    out = tmp_path / "store"
    assert _run(job, out) == 0
    assert len(_shards(out)) >= 8  # a multi-shard store
    intact = object_bytes(out)
    DAMAGE[damage](out)
    err = _check_repaired(job, out, intact, capsys)
    if damage.startswith("shard_index.bin"):  # every chunk as recorded: no token rewritten
        assert "shard_index.bin rewritten from the chunks" in err and "rebuilt" not in err, err
    else:
        assert "rebuilt by this run" in err, err
    assert not Path(f"{out}.partial").exists() and not Path(f"{out}.old").exists()


@pytest.mark.parametrize("damage", ["shards of the same size swapped", "shard_index.bin deleted"])
def test_a_plain_rerun_repairs_what_verify_refuses_in_s3(job, s3_bucket, tmp_path, damage, capsys):
    reference = tmp_path / "reference"
    assert _run(job, reference) == 0
    out = f"{s3_bucket}/store"
    assert _run(job, out) == 0
    intact = object_bytes(out)
    assert intact == object_bytes(reference)
    DAMAGE[damage](out)
    _check_repaired(job, out, intact, capsys)


def test_random_damage_is_never_complete(job, tmp_path, capsys):
    """A few random single-byte edits anywhere in the store's chunks and index: never "already complete"."""
    out = tmp_path / "store"
    assert _run(job, out) == 0
    intact = object_bytes(out)
    rng = random.Random(57)
    keys = [k for k in intact if k != "manifest.json"]
    for key in rng.sample(keys, 3):
        data = bytearray(intact[key])
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        _key(out, key).write_bytes(bytes(data))
        capsys.readouterr()
        assert _run(job, out) == 0
        err = capsys.readouterr().err
        assert "already complete" not in err and "repaired" in err, (key, err)
        assert object_bytes(out) == intact
