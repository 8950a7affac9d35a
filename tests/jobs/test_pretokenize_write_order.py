"""``pretokenize --shuffle-seed``: every document once, in the seed's order across files, the same bytes on a
rerun, with two workers and after a kill and resume; another seed another order; the manifest says which."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_pretokenize import decode_all, jsonl_dir, tree_digest  # noqa: F401  (jsonl_dir: a fixture)

from conftest import store_document
from datatools.io.formats.store import TokenStore
from datatools.jobs.pretokenize import pretokenize
from datatools.jobs.write_order import describe_write_order, shuffled_shards, write_order_record, written_order


@settings(max_examples=60, deadline=None)
@given(
    shards=st.lists(st.lists(st.integers(0, 9), max_size=12), min_size=1, max_size=5),
    seed=st.integers(0, (1 << 64) - 1),
    block=st.integers(1, 40),
)
def test_blocks_hold_every_document_once_in_the_seed_order(tmp_path_factory, shards, seed, block):
    lengths = [np.array(s, np.int64) for s in shards]
    flat_lengths = np.concatenate(lengths)
    n = flat_lengths.shape[0]
    docs = [np.arange(k, k + int(m), dtype=np.uint16) + 1000 * i for i, (k, m) in enumerate(enumerate(flat_lengths))]
    per_shard, i = [], 0
    for s in lengths:
        part = docs[i : i + s.shape[0]]
        per_shard.append(np.concatenate(part) if part else np.zeros(0, np.uint16))
        i += s.shape[0]
    spill = tmp_path_factory.mktemp("spill") / "order.bin"
    blocks = list(shuffled_shards(lambda k: per_shard[k], lengths, seed, spill, np.uint16, block_tokens=block))
    got_lengths = np.concatenate([b[1] for b in blocks]) if blocks else np.zeros(0, np.int64)
    got_tokens = np.concatenate([b[0] for b in blocks]) if blocks else np.zeros(0, np.uint16)
    order = written_order(n, seed)
    assert sorted(order.tolist()) == list(range(n))  # a permutation: every document exactly once
    np.testing.assert_array_equal(got_lengths, flat_lengths[order])
    expected = np.concatenate([docs[j] for j in order]) if n else np.zeros(0, np.uint16)
    np.testing.assert_array_equal(got_tokens, expected)
    for tokens, lens in blocks:  # bounded blocks: over the budget only by a single long document
        assert tokens.size == lens.sum() and (tokens.size <= block or lens.shape[0] == 1)


def test_the_shuffled_store_holds_every_document_once_across_files(tmp_path, jsonl_dir, tokenizer_file):  # noqa: F811
    plain, shuffled = tmp_path / "plain", tmp_path / "shuffled"
    pretokenize(jsonl_dir, plain, tokenizer_file, progress=False)
    result = pretokenize(jsonl_dir, shuffled, tokenizer_file, shuffle_seed=7, progress=False)
    a, b = TokenStore(plain), TokenStore(shuffled)
    assert result.documents == len(a) == len(b)
    order = written_order(len(a), 7)
    for j in range(len(b)):
        np.testing.assert_array_equal(store_document(b, j), store_document(a, int(order[j])))
    assert sorted(decode_all(b, tokenizer_file)) == sorted(decode_all(a, tokenizer_file))
    first_file = [int(order[j]) // 10 for j in range(10)]  # 10 documents a file: the first ten come from several
    assert len(set(first_file)) > 1
    manifest = json.loads((shuffled / "manifest.json").read_text())
    assert manifest["write_order"] == write_order_record(7) and describe_write_order(manifest).endswith("(seed 7)")
    plain_manifest = json.loads((plain / "manifest.json").read_text())
    assert plain_manifest["write_order"] == {"order": "input"} and "shuffle_seed" not in plain_manifest["options"]
    assert describe_write_order(plain_manifest) == "input order"


def test_same_seed_same_bytes_another_seed_another_order(tmp_path, jsonl_dir, tokenizer_file):  # noqa: F811
    one = tmp_path / "one"
    pretokenize(jsonl_dir, one, tokenizer_file, shuffle_seed=3, progress=False)
    two = tmp_path / "two"
    pretokenize(jsonl_dir, two, tokenizer_file, shuffle_seed=3, workers=2, progress=False)
    assert tree_digest(one) == tree_digest(two)
    other = tmp_path / "other"
    pretokenize(jsonl_dir, other, tokenizer_file, shuffle_seed=4, progress=False)
    a, b = TokenStore(one), TokenStore(other)
    assert [store_document(a, i).tolist() for i in range(len(a))] != [
        store_document(b, i).tolist() for i in range(len(b))
    ]
    assert sorted(store_document(a, i).tolist() for i in range(len(a))) == sorted(
        store_document(b, i).tolist() for i in range(len(b))
    )


def _cli(args, point=None):
    env = {**os.environ} | ({"DATATOOLS_FAULT": point} if point else {})
    return subprocess.run([sys.executable, "-m", "datatools", *args], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("point", ["after-shard-1", "committing-0"])
def test_kill_then_resume_gives_the_same_shuffled_store(tmp_path, jsonl_dir, tokenizer_file, point):  # noqa: F811
    reference = tmp_path / "reference"
    pretokenize(jsonl_dir, reference, tokenizer_file, shuffle_seed=11, progress=False)
    out = tmp_path / "out"
    args = ["pretokenize", str(jsonl_dir), str(out), "--tokenizer", str(tokenizer_file), "--shuffle-seed", "11"]
    killed = _cli(args, point)
    assert killed.returncode == -9, killed.stderr
    assert not out.exists() and (tmp_path / "out.partial").exists()
    resumed = _cli(args)
    assert resumed.returncode == 0, resumed.stderr
    assert tree_digest(out) == tree_digest(reference)
    assert not (tmp_path / "out.partial").exists()


def test_shuffle_report_and_analyze_padding_say_the_write_order(tmp_path, jsonl_dir, tokenizer_file, capsys):  # noqa: F811
    from datatools.cli import main

    out = tmp_path / "shuffled"
    pretokenize(jsonl_dir, out, tokenizer_file, shuffle_seed=9, progress=False)
    args = ["--io-block-size", "2", "--window-blocks", "2", "--group-size", "10", "--batch-size", "8"]
    assert main(["shuffle-report", "--store", str(out), *args]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "store write order: shuffled at write time (seed 9)" in said
    assert main(["analyze-padding", str(out), "--ctx", "1024"]) == 0
    assert "write order: shuffled at write time (seed 9)" in " ".join(capsys.readouterr().out.split())
    assert main(["shuffle-report", *args]) == 2  # neither --n nor --store: one line, exit 2
    assert "--n" in capsys.readouterr().err
