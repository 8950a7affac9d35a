"""ArrayRecord inputs as MaxText writes them: tf.train.Example records, a glob and a comma list, exact counts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools.io.formats import array_record_files
from datatools.io.sources.inputs import InputOptions, open_documents, open_input, read_lengths
from datatools.io.sources.table_format import table_of


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
    assert (inp.kind, table_of(inp).column, table_of(inp).is_text, inp.num_shards) == ("table", "inputs", False, 3)
    assert inp.describe()["format"] == "array_record"
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


def test_text_records_tokenized_by_sentencepiece_count_as_sentencepiece_does(tmp_path, spm_model):
    import sentencepiece as spm

    model, lines = spm_model
    texts = lines[:40]
    array_record_files.write(tmp_path / "t.array_record-00000-of-00002", [{"text": t} for t in texts[:25]])
    array_record_files.write(tmp_path / "t.array_record-00001-of-00002", [{"text": t} for t in texts[25:]])
    want = [len(ids) for ids in spm.SentencePieceProcessor(model_file=str(model)).encode(texts)]
    inp = open_input(str(tmp_path / "t.array_record-*"), InputOptions(tokenizer=str(model)))
    assert (table_of(inp).column, table_of(inp).is_text) == ("text", True)
    assert read_lengths(inp).tolist() == want
    inp = open_input(str(tmp_path / "t.array_record-*"), InputOptions(tokenizer=str(model), eos="auto"))
    assert read_lengths(inp).tolist() == [n + 1 for n in want]
    doc = np.asarray(open_documents(inp)[3]).tolist()
    assert doc == spm.SentencePieceProcessor(model_file=str(model)).encode(texts[3]) + [inp.encoder.eos_id]


def test_a_file_that_is_not_a_sentencepiece_model_is_one_line(tmp_path):
    array_record_files.write(tmp_path / "t.array_record", [{"text": "hi"}])
    (tmp_path / "bad.model").write_bytes(b"\x00not a model")
    with pytest.raises(ValueError, match=r"bad.model: not a SentencePiece model"):
        open_input(str(tmp_path / "t.array_record"), InputOptions(tokenizer=str(tmp_path / "bad.model")))


def test_analyze_padding_reads_the_files_and_tokenizer_a_maxtext_config_names(tmp_path, spm_model, capsys):
    """MaxText's own inputs: grain_train_files a glob of ArrayRecord shards of text, tokenizer_path a
    SentencePiece model, beside a base.yml; analyze-padding takes nothing else and counts what MaxText would."""
    import json

    import sentencepiece as spm

    from datatools.cli import main

    model, lines = spm_model
    texts = lines[:60]
    for k in range(3):
        array_record_files.write(tmp_path / f"c4.array_record-{k:05d}-of-00003", [{"text": t} for t in texts[k::3]])
    config = tmp_path / "base.yml"
    config.write_text(
        f"grain_train_files: '{tmp_path}/c4.array_record*'\n"
        f"tokenizer_path: {model}\ntrain_data_columns: ['text']\nmax_target_length: 128\n"
        "per_device_batch_size: 4\n",
        encoding="utf-8",
    )
    assert main(["analyze-padding", "--maxtext-config", str(config), "--json", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    proc = spm.SentencePieceProcessor(model_file=str(model))
    order = [t for k in range(3) for t in texts[k::3]]
    assert report["num_sequences"] == 60
    # with BOS and EOS, as MaxText's tokenizer makes them (add_bos, add_eos: true by default; issue 58)
    assert report["num_tokens"] == sum(len(ids) + 2 for ids in proc.encode(order))
    assert (report["input"]["tokenizer"]["bos"]["id"], report["input"]["tokenizer"]["eos"]["id"]) == (
        proc.bos_id(),
        proc.eos_id(),
    )
    assert report["input"]["format"] == "array_record" and report["input"]["tokenizer"]["kind"] == "sentencepiece"
    assert "maxtext" in report and report["maxtext"]


def test_analyze_padding_without_path_or_config_is_a_usage_error(capsys):
    from datatools.cli import main

    assert main(["analyze-padding"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_glob_and_a_comma_list_of_parquet_files_read_in_order(tmp_path):
    """grain_train_files with grain_file_type: parquet: a glob (sorted) or a comma list (as given)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = {k: [[k] * (k + j + 1) for j in range(k + 2)] for k in range(3)}
    for k, rows in docs.items():
        pq.write_table(pa.table({"input_ids": rows}), tmp_path / f"train-{k}.parquet")
    inp = open_input(str(tmp_path / "train-*.parquet"))
    assert (inp.kind, table_of(inp).column) == ("table", "input_ids")
    assert read_lengths(inp).tolist() == [len(d) for k in range(3) for d in docs[k]]
    two = ",".join(str(tmp_path / f"train-{k}.parquet") for k in (2, 0))
    assert read_lengths(open_input(two)).tolist() == [len(d) for k in (2, 0) for d in docs[k]]
    assert np.asarray(open_documents(open_input(two))[0]).tolist() == docs[2][0]
    with pytest.raises(ValueError, match=r"nothing matches"):
        open_input(str(tmp_path / "valid-*.parquet"))


def test_a_record_that_is_not_an_example_names_the_file_when_counting_and_reading(tmp_path, capsys):
    """A corrupt record (a truncated tf.train.Example) is a ValueError naming the file on both paths: counting
    lengths (it used to say only "truncated varint") and reading documents; the CLI says it in one line, exit 2."""
    from conftest import without_progress
    from datatools.cli import main

    path = tmp_path / "d.array_record"
    writer = array_record_files._module().ArrayRecordWriter(str(path), "group_size:1")
    for n in range(3, 8):
        writer.write(array_record_files.make_example({"input_ids": list(range(1, n))}))
    writer.write(b"\x0a\xff\xff\xff")
    writer.close()
    inp = open_input(path)
    with pytest.raises(ValueError, match=r"d\.array_record: a record is not a tf\.train\.Example"):
        read_lengths(inp)
    with pytest.raises(ValueError, match=r"d\.array_record: a record is not a tf\.train\.Example"):
        list(array_record_files.documents(path, "input_ids"))
    assert main(["analyze-padding", str(path), "--ctx", "64"]) == 2
    err = without_progress(capsys.readouterr().err)
    assert err.count("\n") == 1 and "d.array_record" in err and "tf.train.Example" in err, err
