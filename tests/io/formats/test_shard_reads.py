"""Ranged reads of a sharded store's inner chunks by ``shard_index.bin`` (issue 31): every shard's index read once,
then one ranged GET per run of adjacent inner chunks, each chunk checked against the crc32c the index records."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import datatools.io.formats.store as store_mod
from datatools.io import storage
from datatools.io.formats import shard_reads
from datatools.io.formats.store import TokenStore, array_kvstore, write_store

SHARD, INNER = 64, 16


@pytest.fixture()
def small_shards(monkeypatch):
    monkeypatch.setattr(store_mod, "TOKEN_CHUNK", SHARD)
    monkeypatch.setattr(store_mod, "READ_CHUNK", INNER)


def _write(path, flat: np.ndarray) -> None:
    lengths = np.full(flat.size // 8, 8, np.int64)
    lengths[-1] += flat.size - lengths.sum()
    write_store(
        path, [(flat, lengths)], num_tokens=flat.size, num_documents=lengths.size, dtype=flat.dtype, manifest={}
    )


def _failed(exc, key):
    return exc


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), size=st.integers(INNER + 1, 9 * SHARD + 5), wide=st.booleans(), via_kvstore=st.booleans())
def test_any_range_reads_the_tokens_it_holds(tmp_path_factory, small_shards, data, size, wide, via_kvstore):
    """Sharded stores of any size; inner chunks of random entropy (so of varying compressed sizes, at varying
    places in their shards), uint16 or uint32 tokens, any [begin, end), into a new array or a given one: the tokens
    written, one ranged read per shard, fetched as on disk (``os.pread``) or as from a bucket (tensorstore's
    kvstore, here its file driver)."""
    rng = np.random.default_rng(size)
    dtype = np.uint32 if wide else np.uint16
    bits = rng.integers(1, 17 if wide else 16, -(-size // INNER))
    flat = np.concatenate([rng.integers(0, 1 << int(b), INNER) for b in bits])[:size].astype(dtype)
    path = tmp_path_factory.mktemp("ranged") / "s"
    _write(path, flat)
    store = TokenStore(path)
    per_shard = store.object_tokens // INNER  # a store smaller than a shard has one shard of fewer inner chunks
    data_bytes = storage.location(path / "shard_index.bin").read_bytes()
    table = shard_reads.index_table(data_bytes, -(-size // store.object_tokens), per_shard)
    begin = data.draw(st.integers(0, size - 1))
    end = data.draw(st.integers(begin + 1, size))
    out = np.full(end - begin, 7, store.dtype) if data.draw(st.booleans()) else None
    array = shard_reads.ShardedArray(array_kvstore(path / "tokens"), table, INNER, store.dtype, ValueError, _failed)
    got = array.read(begin, end, out=out)
    np.testing.assert_array_equal(got.result(), flat[begin:end])
    if out is not None:
        assert got.result() is out
    assert got.done()
    assert len(got._parts) == (end - 1) // store.object_tokens - begin // store.object_tokens + 1  # noqa: SLF001 -- one ranged GET a shard


def test_runs_split_at_chunks_not_stored_and_these_read_as_zero():
    missing = int(shard_reads.MISSING)
    entries = np.array([[100, 10, 1], [110, 20, 2], [missing, missing, 0], [130, 5, 3], [200, 5, 4]], np.uint64)
    assert shard_reads.byte_runs(entries) == [(0, 2, 100), (3, 1, 130), (4, 1, 200)]


def test_a_chunk_that_fails_its_crc32c_or_does_not_decompress_is_refused():
    import google_crc32c
    import pyarrow as pa

    raw = np.arange(INNER, dtype=np.uint16)
    frame = pa.Codec("zstd").compress(raw.tobytes(), asbytes=True)
    crc = google_crc32c.value(frame)
    chunk = frame + crc.to_bytes(4, "little")
    np.testing.assert_array_equal(shard_reads.decode(chunk, crc, INNER, np.dtype(np.uint16)), raw)
    with pytest.raises(ValueError, match="is not the one the shard index records"):
        shard_reads.decode(chunk, crc ^ 1, INNER, np.dtype(np.uint16))
    flipped = bytes([chunk[0] ^ 0xFF]) + chunk[1:]
    with pytest.raises(ValueError, match="fails its crc32c"):
        shard_reads.decode(flipped, crc, INNER, np.dtype(np.uint16))
    with pytest.raises(ValueError, match="decompresses to|does not decompress"):
        shard_reads.decode(chunk, crc, 2 * INNER, np.dtype(np.uint16))


def test_the_index_object_is_every_shards_own_index_in_order(tmp_path, small_shards):
    flat = np.random.default_rng(0).integers(0, 5000, 5 * SHARD).astype(np.uint16)
    _write(tmp_path / "s", flat)
    data = (tmp_path / "s" / "shard_index.bin").read_bytes()
    assert len(data) == 5 * (SHARD // INNER) * shard_reads.ENTRY_BYTES
    for k in range(5):
        shard = (tmp_path / "s" / "tokens" / "c" / str(k)).read_bytes()
        size = SHARD // INNER * shard_reads.ENTRY_BYTES
        assert data[k * size : (k + 1) * size] == shard_reads.entries_of(shard, SHARD // INNER)
    assert store_mod.read_manifest(tmp_path / "s")["shard_index"]["bytes"] == len(data)
    assert not TokenStore(tmp_path / "s").ranged_reads  # locally whole objects are read (no requests to save)
