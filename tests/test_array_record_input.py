"""ArrayRecord inputs as MaxText writes them: tf.train.Example records, a glob and a comma list, exact counts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools.io import array_record_files
from datatools.io.inputs import open_documents, open_input, read_lengths


def _write_shards(tmp_path, docs_per_shard):
    """Three shards named like MaxText's (name.array_record-0000k-of-00003) of token documents."""
    rng = np.random.default_rng(0)
    all_docs = []
    for k, n in enumerate(docs_per_shard):
        docs = [rng.integers(0, 32_000, size=int(rng.integers(1, 300))).tolist() for _ in range(n)]
        array_record_files.write(
            tmp_path / f"c4.array_record-{k:05d}-of-{len(docs_per_shard):05d}", [{"inputs": d} for d in docs]
        )
        all_docs.extend(docs)
    return all_docs


def test_glob_reads_every_record_with_exact_lengths_and_tokens(tmp_path):
    docs = _write_shards(tmp_path, [5, 7, 3])
    inp = open_input(str(tmp_path / "c4.array_record*"))
    assert (inp.kind, inp.column, inp.is_text, inp.num_shards) == ("array_record", "inputs", False, 3)
    lengths = read_lengths(inp)
    assert lengths.tolist() == [len(d) for d in docs]
    assert int(lengths.sum()) == sum(len(d) for d in docs)
    source = open_documents(inp)
    assert len(source) == 15
    for i in (0, 6, 14):
        assert np.asarray(source[i]).tolist() == docs[i]


def test_comma_list_keeps_the_order_given(tmp_path):
    docs = _write_shards(tmp_path, [2, 4])
    a, b = (str(tmp_path / f"c4.array_record-{k:05d}-of-00002") for k in (0, 1))
    lengths = read_lengths(open_input(f"{b},{a}"))
    assert lengths.tolist() == [len(d) for d in docs[2:] + docs[:2]]


def test_a_pattern_matching_nothing_names_it(tmp_path):
    with pytest.raises(ValueError, match=r"nothing matches"):
        open_input(str(tmp_path / "none.array_record*"))


def test_text_feature_needs_a_tokenizer(tmp_path):
    array_record_files.write(tmp_path / "t.array_record", [{"text": "hello world"}])
    with pytest.raises(ValueError, match=r"feature 'text' holds text; pass --tokenizer"):
        open_input(str(tmp_path / "t.array_record"))


def test_missing_feature_lists_what_the_file_has(tmp_path):
    array_record_files.write(tmp_path / "t.array_record", [{"ids": [1, 2]}])
    with pytest.raises(ValueError, match=r"no token or text feature among ids"):
        open_input(str(tmp_path / "t.array_record"))


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=8), st.lists(st.integers(0, 2**62), max_size=20), max_size=4))
def test_example_round_trips_through_the_wire_format(features):
    assert array_record_files.parse_example(array_record_files.make_example(features)) == features
