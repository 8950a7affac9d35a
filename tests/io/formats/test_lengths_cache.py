"""The lengths cache (datatools/io/formats/lengths_cache.py) and the one read of a table's column (issue 58): a second
run reads no column for its lengths; the first run decodes each shard once (its pass for the lengths keeps what it
decoded); a changed file, another column or another tokenizer never reuses stale lengths; a fresh file, an
unreadable entry or an unwritable folder only cost the read."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datatools.io import InputOptions, open_documents, open_input, read_lengths
from datatools.io.formats import lengths_cache
from datatools.io.sources import table_format as table_format_module
from datatools.pipeline import build

OLD_NS = (time.time_ns() - 3600 * 10**9,) * 2  # an hour ago (an mtime: setting it sets the ctime to now)


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    """This test's own lengths cache folder, taking files changed up to the moment they are read (not 2 s
    before: a test's files are fresh; test_a_fresh_file_is_not_cached restores the 2 s)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("DATATOOLS_CACHE_DIR", str(folder))
    monkeypatch.setattr(lengths_cache, "SETTLED_NS", 0)
    return folder / "lengths"


@pytest.fixture()
def column_reads(monkeypatch):
    """Counts the reads of a table column (one per shard read), in any thread."""
    calls: list[str] = []
    real = table_format_module.column_batches

    def counted(shard, column, text):
        calls.append(shard.describe())
        return real(shard, column, text)

    monkeypatch.setattr(table_format_module, "column_batches", counted)
    return calls


def docs_of(n: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(2, 1000, int(k)).tolist() for k in rng.integers(1, 300, n)]


def write_parquet(path, docs, row_group: int = 16, **extra):
    pq.write_table(pa.table({"tokens": pa.array(docs, pa.list_(pa.int32())), **extra}), path, row_group_size=row_group)
    return path


def test_a_second_run_reads_no_column_for_its_lengths(tmp_path, cache, column_reads):
    docs = docs_of(100, 0)
    path = write_parquet(tmp_path / "a.parquet", docs)  # 7 row groups
    first = read_lengths(open_input(path))
    assert len(column_reads) == 7 and len(list(cache.glob("*.npz"))) == 1
    column_reads.clear()
    again = read_lengths(open_input(path))
    assert column_reads == []
    np.testing.assert_array_equal(again, first)
    np.testing.assert_array_equal(again, [len(d) for d in docs])
    source = open_documents(open_input(path))  # the lengths from the cache, the documents read on demand
    assert column_reads == []
    assert source[57].tolist() == docs[57] and source[99].tolist() == docs[99]


def test_a_planned_pipeline_reads_each_row_group_once(tmp_path, cache, column_reads):
    """The pass for the lengths keeps what it decoded: the documents' reads decode nothing again (before: 2 reads
    of every row group)."""
    docs = docs_of(200, 1)
    path = write_parquet(tmp_path / "a.parquet", docs)
    cfg = {
        "source": {"path": str(path)},
        "shuffle": {"kind": "full"},
        "packing": {"mode": "planned", "ctx": 256},
        "batch_size": 4,
        "drop_remainder": False,
        "seed": 0,
    }
    real = sum(int(np.count_nonzero(b["segment_ids"])) for b in build(cfg))
    assert real == sum(len(d) for d in docs)
    assert sorted(column_reads) == sorted(set(column_reads)) and len(column_reads) == 13


def test_a_changed_file_never_reuses_its_lengths(tmp_path, cache, column_reads):
    """Rewritten in place to the same bytes count and given back its mtime: only its ctime differs, and that is
    enough (JSON Lines: ``[1,2,3,4]`` and ``[12,34,5]`` are both 9 bytes)."""
    path = tmp_path / "a.jsonl"
    path.write_text('{"tokens": [1,2,3,4]}\n' * 3)
    os.utime(path, ns=OLD_NS)
    time.sleep(0.01)  # the ctime's tick past
    assert read_lengths(open_input(path)).tolist() == [4, 4, 4]
    assert read_lengths(open_input(path)).tolist() == [4, 4, 4] and len(column_reads) == 1  # from the cache
    time.sleep(0.01)  # past the ctime's tick
    with open(path, "r+") as f:  # the same file (inode), the same size
        f.write('{"tokens": [12,34,5]}\n')
    os.utime(path, ns=OLD_NS)
    assert read_lengths(open_input(path)).tolist() == [3, 4, 4]
    assert len(column_reads) == 2


def test_another_column_or_tokenizer_never_reuses_the_lengths(tmp_path, cache, tokenizer_file, texts):
    docs = docs_of(20, 2)
    path = write_parquet(tmp_path / "a.parquet", docs, input_ids=pa.array([d[:3] for d in docs], pa.list_(pa.int32())))
    tokens, input_ids = InputOptions(column="tokens"), InputOptions(column="input_ids")
    assert read_lengths(open_input(path, tokens)).tolist() == [len(d) for d in docs]
    assert read_lengths(open_input(path, input_ids)).tolist() == [min(3, len(d)) for d in docs]
    assert read_lengths(open_input(path, tokens)).tolist() == [len(d) for d in docs]  # its own entry
    text = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": texts[:5]}), text)
    plain = read_lengths(open_input(text, InputOptions(tokenizer=tokenizer_file)))
    with_eos = read_lengths(open_input(text, InputOptions(tokenizer=tokenizer_file, eos="auto")))
    np.testing.assert_array_equal(with_eos, plain + 1)
    np.testing.assert_array_equal(read_lengths(open_input(text, InputOptions(tokenizer=tokenizer_file))), plain)
    assert len(list(cache.glob("*.npz"))) == 4


def test_a_fresh_file_is_not_cached(tmp_path, cache, monkeypatch):
    """Changed within the last 2 s (its ctime: setting an old mtime changes it): a write in the same timestamp tick
    could go unseen, so no entry is written."""
    monkeypatch.setattr(lengths_cache, "SETTLED_NS", 2 * 10**9)
    path = write_parquet(tmp_path / "a.parquet", docs_of(20, 3))
    os.utime(path, ns=OLD_NS)
    read_lengths(open_input(path))
    assert not cache.exists()


def test_a_bad_entry_or_an_unwritable_folder_only_costs_the_read(tmp_path, cache, monkeypatch):
    docs = docs_of(30, 4)
    path = write_parquet(tmp_path / "a.parquet", docs)
    read_lengths(open_input(path))
    (entry,) = cache.glob("*.npz")
    entry.write_bytes(entry.read_bytes()[:100])  # cut short
    assert read_lengths(open_input(path)).tolist() == [len(d) for d in docs]
    assert [p.name for p in cache.iterdir()] == [entry.name]  # written again, whole, no temporary file left
    np.testing.assert_array_equal(np.load(entry)["lengths"], [len(d) for d in docs])
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    monkeypatch.setenv("DATATOOLS_CACHE_DIR", str(blocked))
    assert read_lengths(open_input(path)).tolist() == [len(d) for d in docs]
    monkeypatch.setenv("DATATOOLS_CACHE_DIR", "off")
    assert lengths_cache.cache_folder() is None


def test_the_cache_keeps_its_bytes_budget_least_recently_used_first(tmp_path, cache, monkeypatch):
    paths = [write_parquet(tmp_path / f"{i}.parquet", docs_of(50, i)) for i in range(3)]
    read_lengths(open_input(paths[0]))
    (first,) = cache.glob("*.npz")
    monkeypatch.setenv("DATATOOLS_LENGTHS_CACHE_BYTES", str(int(first.stat().st_size * 2.5)))
    read_lengths(open_input(paths[1]))
    os.utime(first, ns=OLD_NS)  # used long ago
    read_lengths(open_input(paths[2]))
    assert len(list(cache.glob("*.npz"))) == 2 and not first.exists()


def test_the_key_names_what_the_lengths_depend_on(tmp_path):
    path = write_parquet(tmp_path / "a.parquet", docs_of(5, 5))
    inp = open_input(path)
    c = lengths_cache.TableLengthsCache(inp.shards, "tokens", {"file": "x", "sha256": "ab"}, tmp_path)
    key = json.loads(c._key(str(path), lengths_cache.file_identity(str(path))))
    assert {"bytes", "mtime_ns", "ctime_ns", "inode", "device", "file", "shards", "column", "tokenizer"} <= set(key)
    assert key["tokenizer"] == {"sha256": "ab"}  # the tokenizer file's name is not part of it: its digest is


def test_a_file_changed_while_it_is_read_gets_no_entry(tmp_path, cache, monkeypatch):
    path = write_parquet(tmp_path / "a.parquet", docs_of(40, 6))
    real = table_format_module.column_batches

    def changing(shard, column, text):
        time.sleep(0.01)
        os.utime(path)  # touched during the read: its mtime and ctime move
        return real(shard, column, text)

    monkeypatch.setattr(table_format_module, "column_batches", changing)
    read_lengths(open_input(path))
    assert not cache.exists()
