"""Reads that verify what they read (issue 36, item 3): every stored object a reader touches is checked against
the manifest the first time a process reads it (its size on open, one listing; locally each shard's index and the
crc32c each inner chunk ends with against shard_index.bin, or without it every byte against the recorded xxh3
digest; in a bucket, where inner chunks are fetched by range, against shard_index.bin as they are decoded).
A chunk swapped with another, taken from another store or rewritten through tensorstore is refused naming it,
never read as data. Before, only the crc32c inside each chunk was checked, which such a chunk passes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import datatools.io.formats.store as store_mod
from conftest import store_document
from datatools.cli import main
from datatools.io import storage
from datatools.io.formats.store import TokenStore, read_manifest, write_store, zarr_spec
from datatools.io.formats.store_verify import verify_store
from datatools.io.sources.documents import StoreDocuments

SHARD = 64  # tokens per stored object under the small_chunks fixture (shards of 4 inner chunks of 16)


@pytest.fixture()
def small_chunks(monkeypatch):
    monkeypatch.setattr(store_mod, "TOKEN_CHUNK", SHARD)
    monkeypatch.setattr(store_mod, "READ_CHUNK", 16)
    monkeypatch.setattr(store_mod, "OFFSET_CHUNK", 16)


def _store(path, values, *, random: bool = False, flat=None) -> list:
    """A store of one 32-token document per half shard: shard k holds ``values[k]`` everywhere (constant shards
    compress to the same size, so a swap is invisible to sizes) or, with ``random``, random ids."""
    rng = np.random.default_rng(int(sum(values)))
    if flat is not None:
        pass
    elif random:  # each inner chunk (16 tokens) of its own entropy: its compressed size, hence the index, varies
        flat = np.concatenate([rng.integers(0, 1 << int(rng.integers(1, 10)), 16) for _ in range(4 * len(values))])
        flat = flat.astype(np.uint16)
    else:
        flat = np.repeat(np.asarray(values, np.uint16), SHARD)
    lengths = np.full(2 * len(values), SHARD // 2, np.int64)
    write_store(
        path,
        [(flat, lengths)],
        num_tokens=flat.size,
        num_documents=lengths.size,
        dtype=np.uint16,
        manifest={"vocab_size": 1000},
    )
    return flat


def _swap(store, a: str, b: str) -> None:
    pa, pb = storage.location(store).join("tokens", a), storage.location(store).join("tokens", b)
    da, db = pa.read_bytes(), pb.read_bytes()
    pa.write_bytes(db)
    pb.write_bytes(da)


def _refused(store, k: int) -> None:
    """Every way of reading shard k refuses it, naming it; no read returns its (wrong) tokens."""
    pattern = rf"chunk tokens/c/{k} is corrupt .*repair: datatools pretokenize"
    with pytest.raises(ValueError, match=pattern):
        TokenStore(store).read(k * SHARD, k * SHARD + 5)
    with pytest.raises(ValueError, match=pattern):
        store_document(TokenStore(store), 2 * k + 1)
    docs = StoreDocuments(TokenStore(store))
    with pytest.raises(ValueError, match=pattern):
        docs.read_pieces(np.array([2 * k]), np.array([0]), np.array([SHARD // 2]))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.integers(1, 999), min_size=2, max_size=5, unique=True), data=st.data())
def test_two_swapped_chunks_of_the_same_size_are_refused(tmp_path_factory, small_chunks, values, data):
    path = tmp_path_factory.mktemp("swap") / "s"
    flat = _store(path, values)
    i, j = data.draw(st.lists(st.integers(0, len(values) - 1), min_size=2, max_size=2, unique=True))
    _swap(path, f"c/{i}", f"c/{j}")
    assert (path / "tokens" / "c" / f"{i}").stat().st_size == (path / "tokens" / "c" / f"{j}").stat().st_size
    _refused(path, i)
    _refused(path, j)
    store = TokenStore(path)  # the other shards still read, as they are
    for k in set(range(len(values))) - {i, j}:
        np.testing.assert_array_equal(store.read(k * SHARD, (k + 1) * SHARD), flat[k * SHARD : (k + 1) * SHARD])


def test_a_chunk_of_another_store_is_refused(tmp_path, small_chunks):
    _store(tmp_path / "a", [3, 4, 5])
    _store(tmp_path / "b", [3, 9, 5])  # the same layout and sizes, another content
    shutil.copyfile(tmp_path / "b" / "tokens" / "c" / "1", tmp_path / "a" / "tokens" / "c" / "1")
    _refused(tmp_path / "a", 1)


def test_a_chunk_rewritten_through_tensorstore_is_refused(tmp_path, small_chunks):
    _store(tmp_path / "a", [3, 4, 5])
    arr = ts.open(zarr_spec(tmp_path / "a" / "tokens"), open=True).result()
    arr[SHARD : 2 * SHARD].write(np.full(SHARD, 8, np.uint16)).result()  # valid chunk, crc32c and all
    _refused(tmp_path / "a", 1)


def test_a_chunk_of_another_size_is_refused_on_open(tmp_path, small_chunks):
    _store(tmp_path / "a", [3, 4, 5], random=True)
    sizes = {k: (tmp_path / "a" / "tokens" / "c" / f"{k}").stat().st_size for k in range(3)}
    i, j = next((i, j) for i in range(3) for j in range(i + 1, 3) if sizes[i] != sizes[j])
    _swap(tmp_path / "a", f"c/{i}", f"c/{j}")
    with pytest.raises(ValueError, match=rf"chunk tokens/c/{i} is corrupt \(\d+ bytes, the manifest records \d+"):
        TokenStore(tmp_path / "a")


def test_the_offsets_are_checked_too(tmp_path, small_chunks):
    _store(tmp_path / "a", [3, 4, 5])
    _store(tmp_path / "b", [3, 4, 5])
    # another store's offsets chunk of the same size: same values here, so the digests agree (nothing is wrong)
    shutil.copyfile(tmp_path / "b" / "offsets" / "c" / "0", tmp_path / "a" / "offsets" / "c" / "0")
    assert TokenStore(tmp_path / "a").lengths().tolist() == [SHARD // 2] * 6
    arr = ts.open(zarr_spec(tmp_path / "a" / "offsets"), open=True).result()
    off = arr.read().result()
    off[1], off[2] = 30, 62  # still increasing, ending where it should: only the digest tells
    arr[:].write(off).result()
    with pytest.raises(ValueError, match=r"chunk offsets/c/0 is corrupt"):
        TokenStore(tmp_path / "a").lengths()


def test_the_manifest_records_fast_digests(tmp_path, small_chunks):
    _store(tmp_path / "a", [3, 4, 5])
    m = read_manifest(tmp_path / "a")
    d = m["digests"]
    assert d["algorithm"] == "xxh3_64" and set(d["tokens"]) == set(m["chunks"]["tokens"])
    assert set(d["tokens_index"]) == {"c/0", "c/1", "c/2"}  # sharded tokens: each shard's index too


def test_pipeline_refuses_a_swapped_chunk_with_exit_2_naming_it(tmp_path, small_chunks, capsys):
    _store(tmp_path / "a", [3, 4, 5, 6])
    _swap(tmp_path / "a", "c/1", "c/2")
    config = tmp_path / "c.yaml"
    config.write_text(
        json.dumps(
            {
                "source": {"path": str(tmp_path / "a")},
                "packing": {"ctx": 64, "mode": "streaming"},
                "batch_size": 4,
                "shuffle": {"kind": "none"},
            }
        )
    )
    assert main(["pipeline", str(config), "--steps", "2", "--workers", "0"]) == 2
    err = capsys.readouterr().err.strip()
    errors = [line for line in err.splitlines() if line.startswith("datatools: error:")]
    assert len(errors) == 1 and err.endswith(errors[0]) and "Traceback" not in err, err
    assert f"{tmp_path / 'a'}: chunk tokens/c/1 is corrupt" in errors[0], err


def test_a_swapped_shard_in_a_bucket_is_refused(s3_bucket, small_chunks):
    """In a bucket a reader fetches inner chunks by range: the shard's index (read once per shard, a few bytes)
    is what it checks; another shard's index lists other inner chunk sizes."""
    url = f"{s3_bucket}/s"
    rng = np.random.default_rng(5)
    inner = [rng.integers(0, 1 << b, 16).astype(np.uint16) for b in (1, 4, 8, 10)]  # 4 sizes once compressed
    order = [[0, 1, 2, 3], [1, 0, 2, 3], [3, 2, 1, 0]]  # shards of the same inner chunks: the same size
    flat = _store(url, [1, 2, 3], flat=np.concatenate([inner[k] for o in order for k in o]))
    store = TokenStore(url)
    np.testing.assert_array_equal(store.read(0, 3 * SHARD), flat)
    sizes = [len(storage.location(f"{url}/tokens/c/{k}").read_bytes()) for k in range(3)]
    assert len(set(sizes)) == 1  # invisible to sizes
    i, j = 0, 1
    _swap(url, f"c/{i}", f"c/{j}")
    docs = StoreDocuments(TokenStore(url))  # opens: the sizes are right
    with pytest.raises(ValueError, match=rf"chunk tokens/c/{i} is corrupt \(inner chunk 0 is not the one"):
        docs.read_pieces(np.array([2 * i]), np.array([0]), np.array([8]))


@pytest.mark.parametrize("bucket", ["s3_bucket", "gcs_bucket"])
def test_swapped_shards_of_one_layout_in_a_bucket_are_refused(bucket, request, small_chunks):
    """Shards of constant tokens have the same inner chunk sizes, so the same index: a swap is invisible to sizes
    and to each shard's index digest (what a reader in a bucket checked before). ``shard_index.bin`` records each
    inner chunk's crc32c too, so every way of reading either shard refuses it; the others read as they are."""
    url = f"{request.getfixturevalue(bucket)}/s"
    flat = _store(url, [3, 4, 5])
    assert TokenStore(url).ranged_reads
    heads = [storage.location(f"{url}/tokens/c/{k}").read_bytes()[: 4 * 16] for k in range(3)]
    assert heads[0] == heads[1]  # the same index
    _swap(url, "c/0", "c/1")
    _refused(url, 0)
    _refused(url, 1)
    np.testing.assert_array_equal(TokenStore(url).read(2 * SHARD, 3 * SHARD), flat[2 * SHARD :])


def test_a_missing_or_foreign_shard_index_in_a_bucket_is_refused_naming_it(s3_bucket, small_chunks):
    url = f"{s3_bucket}/s"
    _store(url, [3, 4, 5])
    _store(f"{s3_bucket}/t", [6, 7, 8])
    storage.location(f"{url}/shard_index.bin").write_bytes(
        storage.location(f"{s3_bucket}/t/shard_index.bin").read_bytes()
    )
    with pytest.raises(ValueError, match=r"/s: shard_index.bin is corrupt \(its bytes differ from the manifest"):
        TokenStore(url).read(0, 5)
    storage.location(f"{url}/shard_index.bin").remove()
    with pytest.raises(ValueError, match=r"/s: shard_index.bin is missing; the store is incomplete"):
        StoreDocuments(TokenStore(url)).read_pieces(np.array([0]), np.array([0]), np.array([4]))


def test_verify_refuses_a_shard_index_that_disagrees_with_the_shards(tmp_path, small_chunks):
    """Shards rewritten and re-recorded, the old ``shard_index.bin`` kept with its record: every recorded digest
    agrees, only the index disagrees with the shards (a reader in a bucket would fetch the wrong bytes)."""
    _store(tmp_path / "a", [3, 4, 5], random=True)
    arr = ts.open(zarr_spec(tmp_path / "a" / "tokens"), open=True).result()
    arr[SHARD : 2 * SHARD].write(np.arange(SHARD, dtype=np.uint16)).result()
    path = Path(tmp_path / "a" / "manifest.json")
    m = json.loads(path.read_text())
    m["chunks"], m["digests"], _ = store_mod.record_chunks(tmp_path / "a")
    path.write_text(json.dumps(m))
    with pytest.raises(ValueError, match=r"shard_index.bin is corrupt \(it disagrees with tokens/c/1"):
        verify_store(tmp_path / "a")


def test_an_intact_store_reads_every_object_checked_once(tmp_path, small_chunks):
    flat = _store(tmp_path / "a", [3, 4, 5])
    store = TokenStore(tmp_path / "a")
    for _ in range(2):
        np.testing.assert_array_equal(store.read(0, flat.size), flat)
    assert store._checked >= {"tokens/c/0", "tokens/c/1", "tokens/c/2"}  # noqa: SLF001  (the per-process record)


def test_a_store_before_the_digests_is_refused_naming_the_job_that_rewrites_it(tmp_path, small_chunks):
    """A store an older datatools wrote before the xxh3 digests is no longer read (issue 56): one line naming the
    pretokenize job with --overwrite."""
    _store(tmp_path / "a", [3, 4, 5])
    path = Path(tmp_path / "a" / "manifest.json")
    m = json.loads(path.read_text())
    del m["digests"], m["shard_index"]  # a store from before the digests had no shard_index.bin either
    path.write_text(json.dumps(m))
    with pytest.raises(
        ValueError,
        match=r"written before its chunks' xxh3_64 digests, from an older datatools.*"
        r"rewrite it: datatools pretokenize .*--overwrite",
    ):
        TokenStore(tmp_path / "a")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(at=st.integers(0, 10**6), bit=st.integers(0, 7))
def test_a_local_shard_with_any_byte_flipped_is_refused_naming_it(tmp_path_factory, small_chunks, at, bit):
    """Locally a shard is checked by its index and the crc32c each inner chunk ends with (shard_index.bin, a few
    bytes a chunk), and tensorstore checks each chunk it decodes against that crc32c: a flipped bit anywhere in
    the shard, index, data or crc, is refused naming the shard, never read as tokens."""
    path = tmp_path_factory.mktemp("flip") / "s"
    flat = _store(path, [3, 4, 5], random=True)
    shard = path / "tokens" / "c" / "1"
    data = bytearray(shard.read_bytes())
    data[at % len(data)] ^= 1 << bit
    shard.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"chunk tokens/c/1 is (corrupt|unreadable) .*repair: datatools pretokenize"):
        TokenStore(path).read(SHARD, 2 * SHARD)
    np.testing.assert_array_equal(TokenStore(path).read(0, SHARD), flat[:SHARD])
