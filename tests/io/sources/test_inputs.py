"""Resolved inputs: the wrong kind of argument is a TypeError naming it, an input of zero documents is an error
naming the file (issue 21 defect 6), for the library, analyze-padding, pipeline and pretokenize alike."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import without_progress, write_test_store
from datatools.cli import main
from datatools.io import InputOptions, open_documents, open_input, read_lengths, read_lengths_by_shard


@pytest.mark.parametrize("value", ["x", None, 3, {"path": "x"}])
@pytest.mark.parametrize("fn", [read_lengths, read_lengths_by_shard, open_documents])
def test_a_value_that_is_not_an_input_is_a_type_error_naming_it(fn, value):
    with pytest.raises(TypeError, match="open_input") as err:
        fn(value)
    assert repr(value)[:20] in str(err.value)


def empty_inputs(tmp_path) -> dict:
    """Inputs that hold no document, one of each kind."""
    out = {}
    (tmp_path / "empty.jsonl").write_bytes(b"")
    out["empty jsonl"] = tmp_path / "empty.jsonl"
    (tmp_path / "blank.jsonl").write_text("\n  \n\n")
    out["blank lines"] = tmp_path / "blank.jsonl"
    pq.write_table(pa.table({"input_ids": pa.array([], pa.list_(pa.int32()))}), tmp_path / "none.parquet")
    out["parquet of no rows"] = tmp_path / "none.parquet"
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "a.jsonl").write_bytes(b"")
    (tmp_path / "dir" / "b.jsonl").write_text("\n")
    out["directory of empty files"] = tmp_path / "dir"
    (tmp_path / "np").mkdir()
    np.save(tmp_path / "np" / "tokens.npy", np.zeros(0, np.int32))
    np.save(tmp_path / "np" / "lengths.npy", np.zeros(0, np.int64))
    out["numpy"] = tmp_path / "np"
    (tmp_path / "flat.bin").write_bytes(b"")
    out["flat"] = tmp_path / "flat.bin"
    out["store"] = write_test_store(tmp_path / "store", [])
    return out


def test_an_input_of_zero_documents_is_an_error_naming_it(tmp_path):
    for name, path in empty_inputs(tmp_path).items():
        with pytest.raises(ValueError, match="no documents") as err:
            inp = open_input(path, InputOptions(eos_id=1))
            read_lengths(inp)
        assert path.name in str(err.value), name
        with pytest.raises(ValueError, match="no documents"):
            open_documents(open_input(path, InputOptions(eos_id=1)))


def test_the_commands_refuse_an_input_of_zero_documents(tmp_path, capsys, tokenizer_file):
    inputs = empty_inputs(tmp_path)
    for name, path in inputs.items():
        assert main(["analyze-padding", str(path), "--eos-id", "1"]) == 2, name
        err = without_progress(capsys.readouterr().err)
        assert err.count("\n") == 1 and path.name in err and "no documents" in err, (name, err)
        if name == "flat":
            continue  # a pipeline reads no flat token file (it needs --eos-id)
        config = tmp_path / "p.yaml"
        config.write_text(f"source: {{path: {path}}}\npacking: {{ctx: 64}}\nbatch_size: 1\n")
        assert main(["pipeline", str(config), "--steps", "1"]) == 2, name
        err = without_progress(capsys.readouterr().err)
        assert err.count("\n") == 1 and path.name in err and "no documents" in err, (name, err)
    (tmp_path / "text.jsonl").write_text("\n")
    out = tmp_path / "out"
    assert main(["pretokenize", str(tmp_path / "text.jsonl"), str(out), "--tokenizer", str(tokenizer_file)]) == 2
    err = without_progress(capsys.readouterr().err)
    assert err.count("\n") == 1 and "text.jsonl" in err and "no documents" in err, err
    assert not out.exists() and not (tmp_path / "out.partial").exists()


def test_an_input_with_one_empty_file_among_others_is_read(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.jsonl").write_bytes(b"")
    (tmp_path / "d" / "b.jsonl").write_text(json.dumps({"input_ids": [1, 2, 3]}) + "\n")
    assert read_lengths(open_input(tmp_path / "d")).tolist() == [3]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_a_single_token_column_named_inputs_is_detected(tmp_path, fmt):
    """MaxText names its token column ``inputs``: a table whose only candidate column is that one is read from it
    without --column, every document's length exact."""
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 1000, int(n)).tolist() for n in rng.integers(1, 50, 37)]
    table = pa.table({"inputs": docs, "id": list(range(len(docs)))})
    path = tmp_path / f"data.{fmt}"
    if fmt == "parquet":
        pq.write_table(table, path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
    inp = open_input(path)
    np.testing.assert_array_equal(read_lengths(inp), [len(d) for d in docs])
    both = tmp_path / "both.parquet"
    pq.write_table(pa.table({"inputs": docs, "input_ids": docs}), both)
    with pytest.raises(ValueError, match="ambiguous column, candidates: input_ids, inputs"):
        read_lengths(open_input(both))
