"""Document sources read on demand: every format gives the documents it holds, in bounded memory."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import random_docs, write_test_store
from datatools.io import ArrayDocuments, ChunkedDocuments, DocumentSource, open_documents, open_input
from datatools.io.formats import discover
from datatools.pipeline import build

DOCS = random_docs(400, seed=21, max_len=900)
TRUTH = ArrayDocuments.from_list(DOCS)


def write_formats(tmp_path) -> dict:
    table = pa.table({"input_ids": pa.array([d.tolist() for d in DOCS], pa.list_(pa.int32()))})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=37)
    with pa.OSFile(str(tmp_path / "f.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        for batch in table.to_batches(max_chunksize=29):
            w.write_batch(batch)
    with pa.OSFile(str(tmp_path / "s.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        for batch in table.to_batches(max_chunksize=53):
            w.write_batch(batch)
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"input_ids": d.tolist()}) + "\n" for d in DOCS))
    import datasets

    datasets.Dataset.from_dict({"input_ids": [d.tolist() for d in DOCS]}).save_to_disk(
        str(tmp_path / "hf"), max_shard_size="100KB"
    )
    (tmp_path / "np").mkdir()
    np.save(tmp_path / "np" / "tokens.npy", TRUTH.tokens.astype(np.uint16))
    np.save(tmp_path / "np" / "offsets.npy", TRUTH.offsets)
    return {
        "parquet": tmp_path / "t.parquet",
        "arrow file": tmp_path / "f.arrow",
        "arrow stream": tmp_path / "s.arrow",
        "jsonl": tmp_path / "t.jsonl",
        "hf": tmp_path / "hf",
        "numpy": tmp_path / "np",
        "store": write_test_store(tmp_path / "store", DOCS),
    }


@pytest.fixture(scope="module")
def formats(tmp_path_factory):
    old = discover.PART_BYTES
    discover.PART_BYTES = 30000  # several Arrow / JSON Lines shards
    try:
        yield write_formats(tmp_path_factory.mktemp("formats"))
    finally:
        discover.PART_BYTES = old


@pytest.fixture(scope="module")
def sources(formats):
    old = discover.PART_BYTES
    discover.PART_BYTES = 30000
    try:
        return {name: open_documents(open_input(path)) for name, path in formats.items()}
    finally:
        discover.PART_BYTES = old


def test_every_format_is_a_document_source(sources):
    for name, src in sources.items():
        assert isinstance(src, DocumentSource), name
        np.testing.assert_array_equal(src.lengths(), TRUTH.lengths(), err_msg=name)
    for name in ("parquet", "arrow file", "arrow stream", "jsonl", "hf"):
        assert isinstance(sources[name], ChunkedDocuments) and sources[name].shard_docs.size > 1, name


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_read_pieces_equal_the_documents(sources, data):
    n = len(DOCS)
    k = data.draw(st.integers(0, 40))
    doc = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=k, max_size=k)), np.int64)
    lengths = TRUTH.lengths()[doc]
    start = np.array([data.draw(st.integers(0, int(x))) for x in lengths], np.int64)
    length = np.array([data.draw(st.integers(0, int(x - s))) for x, s in zip(lengths, start)], np.int64)
    want = TRUTH.read_pieces(doc, start, length)
    name = data.draw(st.sampled_from(sorted(sources)))
    np.testing.assert_array_equal(sources[name].read_pieces(doc, start, length), want, err_msg=name)


def test_bounded_cache_and_pickling(sources):
    src = pickle.loads(pickle.dumps(sources["parquet"]))
    src.cache_bytes = 1  # a slab of the largest shard
    for i in range(len(DOCS)):
        np.testing.assert_array_equal(src[i], DOCS[i])
    shard_tokens = np.add.reduceat(src.lengths(), src.first_doc[:-1])
    held = src._slab.begin >= 0
    assert src._slab.capacity == shard_tokens.max() and 1 <= held.sum()
    assert shard_tokens[held].sum() <= src._slab.capacity
    assert src.shard_reads == src.shard_docs.size  # storage order: each shard once
    mapped = sources["numpy"]
    assert not mapped.in_memory and len(pickle.dumps(mapped)) < 20000  # pickled as its mapping, not its tokens
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(mapped))[7], DOCS[7])


@pytest.mark.parametrize(  # ~7 s of CPU each: make test runs the streaming block shuffle (a bucket's), test-all both
    "mode",
    [
        pytest.param({"packing": {"ctx": 512}, "shuffle": {"kind": "full"}}, marks=pytest.mark.slow),
        {
            "packing": {"ctx": 512, "mode": "streaming", "window": 64},
            "shuffle": {"kind": "block", "io_block_size": 8, "window_blocks": 8},
        },
    ],
)
def test_pipelines_over_tables_equal_the_store(formats, mode):
    cfg = {"batch_size": 4, "seed": 3, **mode}
    want = list(build({**cfg, "source": {"path": str(formats["store"])}}))
    for name in ("parquet", "jsonl", "hf"):
        it = iter(build({**cfg, "workers": 2 if name == "parquet" else 0, "source": {"path": str(formats[name])}}))
        got = list(it)
        assert len(got) == len(want) > 5, name
        for a, b in zip(want, got):
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"{name} {key}")


def test_a_local_store_is_not_read_ahead(tmp_path):
    """Reading ahead (and the warm start) pay only where a read is a round trip: a store on local disk is read when
    a batch is asked for (local reads were 1.5-3x slower to the first batch with them)."""
    from datatools.io.formats.store import TokenStore
    from datatools.io.sources.documents import StoreDocuments

    docs = StoreDocuments(TokenStore(write_test_store(tmp_path / "s", random_docs(50, mean_log=3.0, max_len=40))))
    assert docs.reads_ahead is False


def test_a_local_store_the_budget_holds_is_read_in_whole_objects(formats):
    """Locally the reader's extent is LOCAL_EXTENT_TOKENS rounded to whole inner chunks (at least one, at most a
    stored object) when the read budget holds the whole store; by default a whole 2^20-token shard (each local
    tensorstore read costs ~0.2 ms of CPU beside decoding: 2^18-token extents made 1 host 1.13-1.17x slower). A store
    larger than the budget is read in inner chunks."""
    from unittest import mock

    from datatools.io.formats.store import TokenStore
    from datatools.io.sources import documents

    store = TokenStore(str(formats["store"]))
    inner = store.read_granularity
    for objects, local, want in [
        (64 * inner, 8 * inner, 8 * inner),
        (64 * inner, inner // 2, inner),
        (4 * inner, 8 * inner, 4 * inner),
        (64 * inner, 8 * inner + 1, 8 * inner),
    ]:
        with (
            mock.patch.object(TokenStore, "object_tokens", property(lambda self, n=objects: n)),
            mock.patch.object(documents, "LOCAL_EXTENT_TOKENS", local),
        ):
            reader = documents.StorePieceReader(store)
            assert reader.slots > 0 and reader.extent == want, (objects, local)
            # a store larger than the read budget: inner chunks (coarse extents each hold other lanes' io blocks: 1
            # host's 256 lanes over a 1B-token store re-read ~8x, 6.2 batches/s and 282 ms of CPU a batch; 37.6, 34)
            small = documents.StorePieceReader(store, cache_bytes=store.num_tokens * store.dtype.itemsize - 1)
            assert small.slots > 0 and small.extent == inner, (objects, local)
    with mock.patch.object(TokenStore, "object_tokens", property(lambda self: 1 << 20)):
        reader = documents.StorePieceReader(store)  # the default: one read a stored object
        assert reader.slots > 0 and reader.extent == 1 << 20


@settings(max_examples=25, deadline=None)
@given(
    extent=st.sampled_from([64, 256, 1000, 1 << 20]),
    slots=st.integers(1, 6),
    ctx=st.sampled_from([128, 512, 2048]),
    seed=st.integers(0, 2**16),
)
def test_rows_filled_from_the_slab_equal_rows_from_the_documents(formats, extent, slots, ctx, seed):
    """A store's rows are filled straight from its reader's slab of extents (one copy): equal to rows built from
    the flat tokens, for pieces crossing extents, and with a slab too small to hold a batch (read in parts, or a
    row too large for one read gathered piece by piece): the slab never grows past its budget."""
    from unittest import mock

    from datatools import pack_lengths
    from datatools.io.formats.store import TokenStore
    from datatools.io.sources.documents import StoreDocuments

    store = TokenStore(str(formats["store"]))
    with (
        mock.patch.object(TokenStore, "object_tokens", property(lambda self: extent)),
        mock.patch("datatools.io.sources.documents.LOCAL_EXTENT_TOKENS", 1 << 40),  # the extent: a whole object
    ):
        src = StoreDocuments(store, cache_bytes=slots * extent * store.dtype.itemsize)
        plan = pack_lengths(TRUTH.lengths(), ctx, algorithm="first_fit", overflow="split")
        rng = np.random.default_rng(seed)
        for _ in range(3):
            rows = rng.choice(plan.num_rows, size=min(plan.num_rows, int(rng.integers(1, 9))), replace=False)
            got, want = src.pack_rows(plan, rows), TRUTH.pack_rows(plan, rows)
            for key in want:
                np.testing.assert_array_equal(got[key], want[key], err_msg=key)
        assert src.reader.extent == extent
        assert src.reader.held_bytes <= slots * extent * store.dtype.itemsize  # the budget: a hard cap
        assert src.reader._slab.nbytes == src.reader.held_bytes  # allocated once, never grown


def test_reads_in_flight_when_a_read_is_done_in_parts_are_not_lost(formats):
    """Read-ahead of half a tiny slab, then a read of every document at once (far more extents than the slab
    holds: done in parts, pieces cut at extents): every piece equals the documents, those read ahead too, and the
    slab is the budget's size throughout."""
    from unittest import mock

    from datatools.io.formats.store import TokenStore
    from datatools.io.sources import documents

    store = TokenStore(str(formats["store"]))
    lengths = TRUTH.lengths()
    docs = np.arange(lengths.size)
    budget = 8 * 64 * store.dtype.itemsize
    with (
        mock.patch.object(TokenStore, "object_tokens", property(lambda self: 64)),
        mock.patch.object(documents, "LOCAL_EXTENT_TOKENS", 1 << 40),  # the extent: a whole object, 64 tokens
    ):
        for seed in range(10):
            reader = documents.StorePieceReader(store, cache_bytes=budget)
            ahead = np.random.default_rng(seed).permutation(docs)[:40]
            reader.prefetch(ahead, np.zeros_like(ahead), lengths[ahead])
            zeros = np.zeros_like(docs)
            np.testing.assert_array_equal(
                reader.read_pieces(docs, zeros, lengths), TRUTH.read_pieces(docs, zeros, lengths)
            )
            np.testing.assert_array_equal(
                reader.read_pieces(ahead, zeros[:40], lengths[ahead]),
                TRUTH.read_pieces(ahead, zeros[:40], lengths[ahead]),
            )
            assert reader._slab.nbytes == reader.held_bytes == budget
            assert 0 < reader.peak_ahead_bytes <= budget // 2  # near batches' pieces: half the budget


@settings(max_examples=30, deadline=None)
@given(
    cache_shards=st.sampled_from([0, 1, 2, 3, 20]),
    ctx=st.sampled_from([128, 512, 2048]),
    seed=st.integers(0, 2**16),
)
def test_table_rows_filled_from_the_shard_slab_equal_rows_from_the_documents(formats, cache_shards, ctx, seed):
    """A table's rows are filled from its slab of decoded shards by one kernel pass: equal to rows built from the
    flat tokens, with a slab that holds every shard, a few (first in, first out), or only the largest one (a batch
    needing more shards than it holds at once is gathered a shard at a time); the slab never grows past its
    budget (at least the largest shard)."""
    from datatools import pack_lengths

    parquet = pickle.loads(pickle.dumps(open_documents(open_input(formats["parquet"]))))  # a fresh slab
    shard_tokens = np.add.reduceat(parquet.lengths(), parquet.first_doc[:-1])
    parquet.cache_bytes = 4 * int(np.sort(shard_tokens)[::-1][: max(1, cache_shards)].sum()) if cache_shards else 1
    plan = pack_lengths(TRUTH.lengths(), ctx, algorithm="best_fit_decreasing", overflow="split")
    rng = np.random.default_rng(seed)
    for _ in range(4):
        rows = rng.choice(plan.num_rows, size=min(plan.num_rows, int(rng.integers(1, 12))), replace=False)
        got, want = parquet.pack_rows(plan, rows), TRUTH.pack_rows(plan, rows)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
        held = parquet._slab.begin >= 0
        assert 1 <= held.sum() and shard_tokens[held].sum() <= parquet._slab.capacity
        assert parquet._slab.capacity == max(shard_tokens.max(), min(shard_tokens.sum(), parquet.cache_bytes // 4))


def test_a_table_batch_is_filled_straight_from_the_decoded_shards(tmp_path, monkeypatch):
    """A planned epoch over a Parquet file (full shuffle: every batch touches many row groups): each row group is
    decoded and copied into the slab once (by the pass for the lengths), and every batch is filled by one kernel
    pass reading that slab itself: no batch's pieces are gathered into a buffer first, none per row group (before:
    a gather per row group a batch touched, then the fill: 0.34 of 1.28 CPU s an epoch of 40M tokens)."""
    from datatools.io.sources import documents

    docs = random_docs(600, seed=5, max_len=700)
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"tokens": pa.array([d.tolist() for d in docs], pa.list_(pa.int32()))}), path, 40)
    puts: list[int] = []
    fills: list[bool] = []  # per batch: whether its tokens were read from the slab's own array
    real_put, real_located = documents.ShardSlab.put, documents.materialize_located

    def put(slab, k, tokens):
        puts.append(k)
        return real_put(slab, k, tokens)

    def located(plan, locate, rows=None, **kw):
        def seen(doc, start, length):
            tokens, begin = locate(doc, start, length)
            fills.append(isinstance(locate.__self__, ChunkedDocuments) and tokens is locate.__self__._slab.tokens)
            return tokens, begin

        return real_located(plan, seen, rows, **kw)

    def no_gather(*args):
        raise AssertionError("a batch's pieces were gathered before the fill")

    monkeypatch.setattr(documents.ShardSlab, "put", put)
    monkeypatch.setattr(documents, "materialize_located", located)
    monkeypatch.setattr(documents, "gather_at", no_gather)
    cfg = {"source": {"path": str(path)}, "shuffle": {"kind": "full"}, "packing": {"ctx": 512}, "batch_size": 8}
    batches = list(build({**cfg, "drop_remainder": False, "seed": 1}))
    assert sum(int(np.count_nonzero(b["segment_ids"])) for b in batches) == sum(d.size for d in docs)
    assert sorted(puts) == list(range(15))  # 600 documents in row groups of 40: each copied in once
    assert len(fills) == len(batches) > 10 and all(fills)
