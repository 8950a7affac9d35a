"""A Levanter cache as an input: found by its layout, read in place, its ledger checked.

The caches here are written in Levanter's layout WITHOUT Levanter (marin-levanter 0.2.227's
``levanter.store.jagged_array``: zarr v3 arrays of shape [2**54], chunks of 128 Mi elements
sharded into 256 Ki, blosc-zstd; ``offsets[0]`` holds the row count; a ``shard_ledger.json``
beside them). ``clients/levanter`` checks the same against caches Levanter builds itself.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorstore as ts
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import random_docs, store_document, without_progress
from datatools.cli import main
from datatools.io.formats.levanter_cache import LevanterCache, is_levanter_cache
from datatools.io.sources.inputs import open_documents, open_input, read_lengths
from datatools.pipeline import build

INNER, OUTER = 256 * 1024, 256 * 1024 * 512  # levanter.store.jagged_array DEFAULT_CHUNK_SIZE / _WRITE_


def _levanter_array(path, dtype) -> ts.TensorStore:
    """An array as ``jagged_array._ts_open_sync`` creates it."""
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(path)},
        "metadata": {
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [OUTER]}},
            "codecs": [
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": [INNER],
                        "codecs": [{"name": "blosc", "configuration": {"cname": "zstd", "clevel": 1}}],
                    },
                }
            ],
        },
    }
    return ts.open(spec, create=True, dtype=np.dtype(dtype).name, shape=[2**54]).result()


def write_jagged(path, docs, dtype=np.int64) -> int:
    """``path/input_ids/{offsets,data}`` holding ``docs`` as ``JaggedArrayStore.extend`` leaves them; tokens."""
    lengths = np.array([len(d) for d in docs], np.int64)
    flat = np.concatenate([np.asarray(d, dtype) for d in docs]) if docs else np.zeros(0, dtype)
    offsets = np.concatenate(([len(docs)], np.cumsum(lengths)))  # offsets[0] is the row count
    data = _levanter_array(path / "input_ids" / "data", dtype)
    if flat.size:
        data[: flat.size].write(flat).result()
    _levanter_array(path / "input_ids" / "offsets", np.int64)[: offsets.size].write(offsets).result()
    return int(flat.size)


def write_ledger(path, rows: int, tokens: int, *, finished=True, shards=None, layout="consolidated") -> None:
    shards = shards or {"00000_data.jsonl": rows}
    ledger = {
        "total_num_rows": rows,
        "shard_rows": shards,
        "is_finished": finished,
        "finished_shards": list(shards) if finished else [],
        "field_counts": {"input_ids": tokens},
        "field_counts_by_shard": {},
        "layout": layout,
        "metadata": {"preprocessor_metadata": {}},
    }
    (path / "shard_ledger.json").write_text(json.dumps(ledger))


def write_cache(path, docs, dtype=np.int64, *, finished=True):
    path.mkdir(parents=True, exist_ok=True)
    write_ledger(path, len(docs), write_jagged(path, docs, dtype), finished=finished)
    return path


def write_sharded_cache(path, docs, cut: int):
    """A ``sharded`` ledger over two shard directories (``consolidate_shard_cache_ledgers``)."""
    path.mkdir(parents=True)
    tokens = sum(write_jagged(path / name, part) for name, part in (("a", docs[:cut]), ("b", docs[cut:])))
    write_ledger(path, len(docs), tokens, shards={"a": cut, "b": len(docs) - cut}, layout="sharded")
    return path


# ids from 1: a shard file of only token 0 is one Levanter never stores, which the reader refuses as missing
docs_strategy = st.lists(st.lists(st.integers(1, 2**31 - 1), min_size=0, max_size=40), min_size=1, max_size=30)


@settings(max_examples=25, deadline=None)
@given(
    docs=docs_strategy,
    dtype=st.sampled_from([np.int64, np.int32, np.uint32]),
    sharded=st.booleans(),
    cut=st.integers(0, 30),
)
def test_cache_reads_back_every_document(tmp_path_factory, docs, dtype, sharded, cut):
    docs = [np.asarray(d, np.int64) for d in docs]
    root = tmp_path_factory.mktemp("cache") / "train"
    if sharded:
        write_sharded_cache(root, [d.astype(dtype) for d in docs], min(cut, len(docs)))
    else:
        write_cache(root, [d.astype(dtype) for d in docs], dtype)
    assert is_levanter_cache(root)
    inp = open_input(root)
    assert inp.kind == "levanter"
    np.testing.assert_array_equal(read_lengths(inp), [len(d) for d in docs])
    source = open_documents(inp)
    assert len(source) == len(docs)
    for i, d in enumerate(docs):
        np.testing.assert_array_equal(source[i], d)
    # pieces across document (and shard) boundaries in one call
    lengths = np.array([len(d) for d in docs])
    doc = np.arange(len(docs))[::-1]
    got = source.read_pieces(doc, lengths[doc] // 2, lengths[doc] - lengths[doc] // 2)
    want = np.concatenate([d[len(d) // 2 :] for d in docs[::-1]] + [np.zeros(0, np.int64)])
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int32


def test_analyze_padding_counts_a_cache(tmp_path, capsys):
    docs = random_docs(400, seed=3, max_len=2000)
    cache = write_cache(tmp_path / "cache", docs)
    assert main(["analyze-padding", str(cache), "--ctx", "1024", "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["input"]["kind"] == "levanter"
    assert report["num_sequences"] == len(docs)
    assert report["num_tokens"] == sum(len(d) for d in docs)


def test_pipeline_reads_a_cache(tmp_path):
    """``source.path: CACHE`` packs every token of the cache exactly once per epoch."""
    docs = random_docs(300, seed=4, max_len=500)
    cache = write_cache(tmp_path / "cache", docs)
    cfg = {
        "source": {"path": str(cache)},
        "packing": {"mode": "planned", "ctx": 512},
        "batch_size": 4,
        "shuffle": {"kind": "block", "io_block_size": 8, "window_blocks": 4},
        "drop_remainder": False,
        "format": "datatools",
    }
    got = [t for b in build(cfg) for t in b["tokens"][b["segment_ids"] > 0].tolist()]
    assert sorted(got) == sorted(np.concatenate(docs).tolist())


def test_unfinished_cache_is_an_error_naming_it(tmp_path, capsys):
    cache = write_cache(tmp_path / "cache", random_docs(10, seed=5), finished=False)
    with pytest.raises(
        ValueError,
        match=r"shard_ledger.json: the Levanter cache is not finished \(is_finished is "
        r"false",
    ):
        open_input(cache)
    assert main(["analyze-padding", str(cache)]) == 2
    err = without_progress(capsys.readouterr().err).strip().splitlines()  # progress lines may come first
    assert len(err) == 1 and err[0].startswith("datatools: error: ") and "not finished" in err[0]


@pytest.mark.parametrize("missing", ["data", "offsets"])
def test_missing_array_is_an_error_naming_it(tmp_path, missing):
    import shutil

    cache = write_cache(tmp_path / "cache", random_docs(10, seed=6))
    shutil.rmtree(cache / "input_ids" / missing)
    with pytest.raises(ValueError, match=rf"input_ids/{missing}/ is missing .*the Levanter cache is incomplete"):
        open_input(cache)


def test_offsets_that_disagree_with_the_ledger_are_refused(tmp_path):
    docs = random_docs(10, seed=7)
    cache = write_cache(tmp_path / "cache", docs)
    write_ledger(cache, len(docs) + 1, sum(len(d) for d in docs))  # a row count the offsets do not have
    with pytest.raises(ValueError, match=r"offsets\[0\] is 10, the ledger says 11 rows"):
        LevanterCache(cache)
    write_ledger(cache, len(docs), 5)
    with pytest.raises(ValueError, match=r"the ledger counts 5 input_ids tokens"):
        LevanterCache(cache)


def test_token_ids_beyond_int32_are_refused(tmp_path):
    cache = write_cache(tmp_path / "cache", [np.array([1, 2**40], np.int64), np.array([3], np.int64)])
    source = open_documents(open_input(cache))  # tokens are read (and checked) a chunk at a time, on demand
    with pytest.raises(ValueError, match=r"input_ids/data: token id 1099511627776 is negative or does not fit"):
        source[0]


def test_missing_data_shard_is_refused_not_read_as_zeros(tmp_path):
    cache = write_cache(tmp_path / "cache", random_docs(20, seed=8))
    for f in (cache / "input_ids" / "data" / "c").rglob("*"):
        if f.is_file():
            f.unlink()
    with pytest.raises(ValueError, match=r"input_ids/data: chunk c/0 is missing; the Levanter cache is incomplete"):
        open_input(cache)


def test_cache_pickles_without_its_handles(tmp_path):
    import pickle

    docs = random_docs(20, seed=9)
    source = open_documents(open_input(write_cache(tmp_path / "cache", docs)))
    again = pickle.loads(pickle.dumps(source))
    np.testing.assert_array_equal(again[5], docs[5])


def test_a_cache_in_object_storage_reads_as_the_local_one(tmp_path, storage_root, capsys):
    """Marin keeps its caches in buckets: the same cache read from local disk, the S3 server and the GCS emulator
    gives the same documents, counts and analysis. (Levanter's sharded arrays read their shard index with a suffix
    range, 'bytes=-N': the tests' GCS emulator serves it, as real GCS does: tests/gcs_emulator.py.)"""
    docs = random_docs(120, seed=9, max_len=700)
    where = storage_root.upload(write_cache(tmp_path / "cache", docs), "cache")
    assert is_levanter_cache(where)
    cache = LevanterCache(where)
    assert len(cache) == len(docs) and cache.num_tokens == sum(len(d) for d in docs)
    for i in (0, 57, 119):
        np.testing.assert_array_equal(store_document(cache, i), docs[i])
    assert main(["analyze-padding", where, "--ctx", "1024", "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["input"]["kind"] == "levanter" and report["num_sequences"] == len(docs)


def test_a_server_without_suffix_ranges_is_named_not_reported_as_corruption(tmp_path, monkeypatch, capsys):
    """Issue 58: gcp-storage-emulator as it ships answers a suffix range ('bytes=-N', with which tensorstore reads
    a sharded array's index at its end) with the whole object, and the cache was reported "corrupt" (exit 2). Now
    one line says the server lacks them, naming the array, exit 1 (the environment)."""
    import sys

    from object_storage import Root, Server, free_port, gcs_environment, new_bucket

    port = free_port()
    argv = [sys.executable, "-m", "gcp_storage_emulator", "start", "-H", "127.0.0.1", "--port", str(port)]
    server = Server("gcp-storage-emulator-as-shipped", [*argv, "--in-memory", "-q"], port, tmp_path)
    try:
        gcs_environment(monkeypatch, server.url)
        where = Root("gs", new_bucket("gs")).upload(write_cache(tmp_path / "cache", random_docs(20, seed=3)), "cache")
        assert main(["analyze-padding", where, "--ctx", "1024"]) == 1
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "corrupt" not in err, err
        assert "the object server does not serve suffix-range requests (Range: bytes=-" in err, err
        assert err.startswith(f"datatools: error: {where}/input_ids/"), err
    finally:
        server.stop()


def test_a_cache_in_a_bucket_gives_its_first_batch_with_no_s3_client_imported(tmp_path, slow_s3):
    """fsspec's first request in S3 costs ~1.2 s on 2 cores (importing s3fs, aiobotocore and botocore, and the
    client's set-up: most of the cache's open at +100 ms). With the environment's keys, the probes (a token store's
    manifest, then the ledger), the data array's listing and the reads all go through tensorstore: a fresh process
    takes the first batch of a pipeline over the cache with none of them imported (all three with the probes and the
    listing made through fsspec). A token store's open lists its arrays with sizes, which tensorstore's listing
    does not give: it still imports s3fs."""
    from object_storage import Root, first_batch_imports

    url = Root("s3", slow_s3.url).upload(write_cache(tmp_path / "cache", random_docs(60, seed=3)), "cache")
    assert first_batch_imports(url) == []


def test_opening_a_cache_in_a_bucket_asks_no_objects_size(tmp_path, slow_s3):
    """In a bucket every request is a round trip before the first batch: the Levanter cache's probe is the read of
    its ledger itself, and the miss of the token store's probe before it is not checked for a missing bucket (the
    table format, last, would name one). Counted at the proxy: no HEAD while the cache opens (three before)."""
    from datatools.io import storage
    from datatools.io.sources.inputs import open_input
    from object_storage import Root

    url = Root("s3", slow_s3.url).upload(write_cache(tmp_path / "cache", random_docs(40, seed=2)), "cache")
    storage.location(url).filesystem()[0].invalidate_cache()  # s3fs kept what the upload listed
    slow_s3.proxy.reset_stats()
    assert open_input(url).format == "levanter"
    assert slow_s3.proxy.stats().count("HEAD") == 0, slow_s3.proxy.stats().methods
