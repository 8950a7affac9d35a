"""pretokenize takes every input analyze-padding and a pipeline take (issue 58): a glob, a comma list, ArrayRecord
files, a SentencePiece model, resolved by the one open_input; the store holds the tokens they read."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import store_document, without_progress, write_test_store
from datatools.cli import main
from datatools.io.formats import array_record_files
from datatools.io.formats.store import TokenStore
from datatools.io.sources.inputs import InputOptions, open_documents, open_input, read_lengths


def assert_store_holds_what_the_input_reads(store, path: str, **options) -> None:
    """The store's documents are, in order, the documents analyze-padding counts (read_lengths) and a pipeline reads
    (open_documents) from ``path`` tokenized with ``options``."""
    inp = open_input(path, InputOptions(**options))
    got = TokenStore(store)
    docs = open_documents(inp)
    assert got.lengths().tolist() == read_lengths(inp).tolist()
    assert len(got) == len(docs) > 0
    for i in range(len(docs)):
        assert np.asarray(store_document(got, i)).tolist() == np.asarray(docs[i]).tolist(), i


def _parquet_files(tmp_path, texts) -> list[str]:
    names = []
    for k in range(3):
        name = tmp_path / f"part-{k}.parquet"
        part = [t[:3000] for t in texts[k * 4 : (k + 1) * 4]]
        pq.write_table(pa.table({"text": part, "id": list(range(4))}), name)
        names.append(str(name))
    return names


def test_a_glob_of_parquet_files(tmp_path, texts, tokenizer_file):
    _parquet_files(tmp_path, texts)
    pattern, out = str(tmp_path / "part-*.parquet"), tmp_path / "store"
    args = ["pretokenize", pattern, str(out), "--tokenizer", str(tokenizer_file), "--bos", "--eos", "</s>"]
    assert main(args) == 0
    assert len(TokenStore(out)) == 12
    assert_store_holds_what_the_input_reads(out, pattern, tokenizer=str(tokenizer_file), bos="auto", eos="</s>")


def test_a_comma_list_in_the_order_given(tmp_path, texts, tokenizer_file):
    first, _, last = _parquet_files(tmp_path, texts)
    with open(tmp_path / "more.jsonl", "w") as f:
        f.writelines(json.dumps({"text": t[:3000]}) + "\n" for t in texts[20:23])
    listed, out = f"{last},{tmp_path / 'more.jsonl'},{first}", tmp_path / "store"
    assert main(["pretokenize", listed, str(out), "--tokenizer", str(tokenizer_file), "--eos"]) == 0
    assert len(TokenStore(out)) == 11
    assert_store_holds_what_the_input_reads(out, listed, tokenizer=str(tokenizer_file), eos="auto")


def test_arrayrecord_files_tokenized_by_a_sentencepiece_model(tmp_path, spm_model):
    import sentencepiece as spm

    model, lines = spm_model
    for k in range(2):
        records = [{"text": t} for t in lines[k::2][:30]]
        array_record_files.write(tmp_path / f"c4.array_record-{k:05d}-of-00002", records)
    pattern, out = str(tmp_path / "c4.array_record*"), tmp_path / "store"
    assert main(["pretokenize", pattern, str(out), "--tokenizer", str(model), "--bos", "--eos", "--workers", "2"]) == 0
    proc = spm.SentencePieceProcessor(model_file=str(model))
    texts = lines[0::2][:30] + lines[1::2][:30]
    got = TokenStore(out)
    assert [np.asarray(store_document(got, i)).tolist() for i in range(len(got))] == [
        [proc.bos_id(), *ids, proc.eos_id()] for ids in proc.encode(texts)
    ]
    assert got.manifest["tokenizer"]["kind"] == "sentencepiece"
    assert_store_holds_what_the_input_reads(out, pattern, tokenizer=str(model), bos="auto", eos="auto")


def test_parquet_text_tokenized_by_a_sentencepiece_model(tmp_path, spm_model):
    model, lines = spm_model
    pq.write_table(pa.table({"text": lines[:50]}), tmp_path / "t.parquet", row_group_size=20)
    out = tmp_path / "store"
    assert main(["pretokenize", str(tmp_path / "t.parquet"), str(out), "--tokenizer", str(model)]) == 0
    assert_store_holds_what_the_input_reads(out, str(tmp_path / "t.parquet"), tokenizer=str(model))


def test_an_input_of_tokens_is_refused_naming_it(tmp_path, tokenizer_file, capsys):
    write_test_store(tmp_path / "tokens", [[1, 2, 3]])
    args = ["pretokenize", str(tmp_path / "tokens"), str(tmp_path / "out"), "--tokenizer", str(tokenizer_file)]
    assert main(args) == 2
    err = without_progress(capsys.readouterr().err)
    assert "tokens: holds token ids already (a store input)" in err and err.count("\n") == 1, err
    array_record_files.write(tmp_path / "ids.array_record", [{"inputs": [1, 2]}])
    args[1] = str(tmp_path / "ids.array_record")
    assert main([*args, "--column", "inputs"]) == 2
    assert "holds token ids already" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("pattern", ["nothing-*.parquet", "a.parquet,missing.parquet"])
def test_a_pattern_that_names_nothing_is_one_line(tmp_path, tokenizer_file, capsys, pattern):
    pq.write_table(pa.table({"text": ["x"]}), tmp_path / "a.parquet")
    given = ",".join(str(tmp_path / p) for p in pattern.split(","))
    assert main(["pretokenize", given, str(tmp_path / "out"), "--tokenizer", str(tokenizer_file)]) == 2
    err = without_progress(capsys.readouterr().err)
    assert "no such file" in err and err.count("\n") == 1, err
