"""A mixture's sources must speak one vocabulary (issue 36, item 8): ``pretokenize`` records the tokenizer in the
store's manifest (file, sha256, vocab size) and a pipeline over ``sources:`` compares what each source was
tokenized with. Different vocabularies are refused naming both sources (exit 2); the same vocabulary size from
different tokenizer files is mixed with a warning saying why. Before, stores of different tokenizers were mixed
without a word."""

from __future__ import annotations

import json
import warnings

import pytest

from datatools.cli import main
from datatools.io.formats.store import read_manifest
from datatools.jobs.pretokenize import pretokenize
from datatools.pipeline import build_canonical, parse_config


@pytest.fixture(scope="module")
def docs(tmp_path_factory, texts):
    path = tmp_path_factory.mktemp("mixtok") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": t[:3000]}) + "\n" for t in texts[:8]))
    return path


@pytest.fixture(scope="module")
def other_tokenizer(tmp_path_factory, texts):
    """A second BPE with another vocabulary (600 tokens, not the shared tokenizer's 1000)."""
    from datatools.jobs.demo_data import train_tokenizer

    return train_tokenizer(texts[:40], tmp_path_factory.mktemp("tok600") / "small.json", vocab_size=600)


def _mixture(a, b) -> dict:
    return {
        "sources": [{"path": str(a), "weight": 1, "name": "a"}, {"path": str(b), "weight": 1, "name": "b"}],
        "packing": {"ctx": 256, "mode": "streaming"},
        "batch_size": 2,
    }


def test_the_store_records_its_tokenizer(tmp_path, docs, tokenizer_file):
    pretokenize(docs, tmp_path / "s", tokenizer_file, progress=False)
    m = read_manifest(tmp_path / "s")
    assert m["tokenizer_file"] == tokenizer_file.name and len(m["tokenizer_sha256"]) == 64
    assert m["vocab_size"] == 1000


def test_stores_of_different_vocabularies_are_refused_naming_both(tmp_path, docs, tokenizer_file, other_tokenizer):
    pretokenize(docs, tmp_path / "a", tokenizer_file, progress=False)
    pretokenize(docs, tmp_path / "b", other_tokenizer, progress=False)
    with pytest.raises(ValueError, match=r"'a' and 'b' were tokenized by different tokenizers.*vocab_size 1000.*600"):
        build_canonical(parse_config(_mixture(tmp_path / "a", tmp_path / "b")))
    config = tmp_path / "mix.yaml"
    config.write_text(json.dumps(_mixture(tmp_path / "a", tmp_path / "b")))
    assert main(["pipeline", str(config), "--steps", "1", "--workers", "0"]) == 2


def test_a_text_source_is_compared_with_its_tokenizer(tmp_path, docs, tokenizer_file, other_tokenizer):
    """A text table read with another tokenizer than the store's is refused the same way."""
    pretokenize(docs, tmp_path / "a", tokenizer_file, progress=False)
    cfg = _mixture(tmp_path / "a", docs)
    cfg["sources"][1]["tokenizer"] = str(other_tokenizer)
    with pytest.raises(ValueError, match="different tokenizers"):
        build_canonical(parse_config(cfg))
    cfg["sources"][1]["tokenizer"] = str(tokenizer_file)  # the store's own tokenizer: mixed
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(list(build_canonical(parse_config(cfg)).dataset)) > 0


def test_the_same_vocabulary_from_another_file_is_mixed_with_a_warning(tmp_path, docs, tokenizer_file):
    resaved = tmp_path / "resaved.json"
    resaved.write_text(json.dumps(json.loads(tokenizer_file.read_text()), indent=1))  # same tokens, other bytes
    pretokenize(docs, tmp_path / "a", tokenizer_file, progress=False)
    pretokenize(docs, tmp_path / "b", resaved, progress=False)
    with pytest.warns(UserWarning, match=r"different tokenizer files.*tokenizer\.json.*resaved\.json"):
        built = build_canonical(parse_config(_mixture(tmp_path / "a", tmp_path / "b")))
    assert len(list(built.dataset)) > 0
