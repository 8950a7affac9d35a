"""Streaming JSON Lines: lines of any length, any cut into parts and blocks, errors located to their line."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools.io.formats import discover, jsonl
from datatools.io.sources.inputs import InputOptions, open_documents, open_input, read_lengths


def write_jsonl(path, docs, column="input_ids", blank_every=0):
    with open(path, "w") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"id": i, column: np.asarray(d).tolist(), "meta": "x" * (i % 7)}) + "\n")
            if blank_every and i % blank_every == 0:
                f.write("\n")


def test_a_20_mb_line_is_analyzed_correctly_without_hanging(tmp_path):
    rng = np.random.default_rng(0)
    long_doc = rng.integers(10000, 60000, 3_500_000)  # about 21 MB of JSON on one line
    docs = [rng.integers(0, 60000, n) for n in (5, 300, 17)] + [long_doc] + [rng.integers(0, 9, 40)]
    f = tmp_path / "long lines.jsonl"
    write_jsonl(f, docs)
    assert max(len(line) for line in f.read_bytes().split(b"\n")) > 20 << 20
    proc = subprocess.run(
        [sys.executable, "-m", "datatools", "analyze-padding", str(f), "--ctx", "1024", "--json", "-"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["num_sequences"] == 5 and rep["num_tokens"] == sum(len(d) for d in docs)
    assert rep["lengths"]["max"] == len(long_doc)
    source = open_documents(open_input(f))
    np.testing.assert_array_equal(source[3], long_doc)
    np.testing.assert_array_equal(source[4], docs[4])


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 300), min_size=0, max_size=60),
    part=st.integers(1, 4000),
    block=st.integers(1, 3000),
    blank=st.integers(0, 5),
)
def test_any_parts_and_blocks_give_every_line_once(tmp_path_factory, lengths, part, block, blank):
    rng = np.random.default_rng(len(lengths))
    docs = [rng.integers(0, 50000, n) for n in lengths]
    f = tmp_path_factory.mktemp("j") / "x.jsonl"
    write_jsonl(f, docs, blank_every=blank)
    old = discover.PART_BYTES, jsonl.BLOCK_BYTES
    discover.PART_BYTES, jsonl.BLOCK_BYTES = part, block
    try:
        if not docs:  # an input of zero documents is refused, naming the file (issue 21)
            with pytest.raises(ValueError, match="no documents"):
                open_input(f)
            return
        inp = open_input(f)
        got = read_lengths(inp)
        source = open_documents(inp)
    finally:
        discover.PART_BYTES, jsonl.BLOCK_BYTES = old
    np.testing.assert_array_equal(got, lengths)
    for i in range(len(docs)):
        np.testing.assert_array_equal(source[i], docs[i])


@pytest.mark.parametrize(
    "body, message",
    [
        ('{"input_ids": [1, 2]}\n{"input_ids": [3]}\n{oops\n', "x.jsonl:3: invalid JSON Lines"),
        ('{"input_ids": [1]}\n\n[1, 2]\n', "x.jsonl:3: invalid JSON Lines (expected an object per line"),
        (
            '{"input_ids": [1]}\n{"input_ids": [1.5]}\n',
            "x.jsonl:2: column 'input_ids' holds non-integer token ids (1.5)",
        ),
        ('{"input_ids": [1]}\n{"input_ids": "abc"}\n', "x.jsonl:2: column 'input_ids' holds str, not a list"),
        ('{"input_ids": [1]}\n{"other": 1}\n', "x.jsonl:2: the line has no column 'input_ids'"),
        ('{"input_ids": [1]}\n{"input_ids": null}\n', "x.jsonl:2: the line has a null column 'input_ids'"),
        ('{"input_ids": [1, -3]}\n', "column 'input_ids': negative token id -3"),
    ],
)
def test_errors_name_the_line(tmp_path, body, message):
    (tmp_path / "x.jsonl").write_text(body)
    with pytest.raises(ValueError) as err:
        read_lengths(open_input(tmp_path / "x.jsonl"))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_text_column_streams_through_the_tokenizer(tmp_path, texts, tokenizer_file):
    from tokenizers import Tokenizer

    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    tok = Tokenizer.from_file(str(tokenizer_file))
    want = [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)]
    old = discover.PART_BYTES
    discover.PART_BYTES = 20000  # many parts
    try:
        inp = open_input(tmp_path / "t.jsonl", InputOptions(tokenizer=tokenizer_file))
        assert len(inp.shards) > 5
        np.testing.assert_array_equal(read_lengths(inp), want)
    finally:
        discover.PART_BYTES = old


def test_a_long_line_is_held_once_while_its_text_is_used(tmp_path):
    """While the consumer tokenizes a line's text, the reader holds neither the line's bytes nor its Arrow column
    (a 50 MB line was held three times over, issue 57). Counted: with the text in hand, Python's traced memory is
    the text and little more, and Arrow's pool is empty."""
    import tracemalloc

    import pyarrow as pa

    from datatools.io.formats.tables import shard_texts

    text = "word " * (2 << 20)  # 10 MiB, one line
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"text": text}) + "\n" + json.dumps({"text": "b"}) + "\n")
    shard = discover.Shard("jsonl", (str(path),), 0, path.stat().st_size)
    batches = shard_texts(shard, "text")
    tracemalloc.start()
    try:
        texts = next(batches)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert texts == [text, "b"]
    assert held < len(text) + (1 << 20), held  # the text (1 byte a character), not the line bytes besides
    assert pa.total_allocated_bytes() < 1 << 20, pa.total_allocated_bytes()
    assert next(batches, None) is None
