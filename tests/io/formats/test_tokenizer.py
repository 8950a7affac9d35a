"""A tokenizer file as published (truncation 128, padding to 128, [CLS]/[SEP] template) tokenizes what was asked."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import store_document
from datatools.cli import main
from datatools.io import TokenStore, open_encoder
from datatools.jobs.pretokenize import pretokenize


@pytest.fixture(scope="module")
def documents(texts) -> list[str]:
    """Real text of mixed lengths: whole stdlib modules (thousands of tokens) and their short paragraphs."""
    paragraphs = [p for t in texts[:10] for p in t.split("\n\n") if p.strip()][:300]
    return texts[:20] + paragraphs


@pytest.fixture(scope="module")
def bert_like_tokenizer(tmp_path_factory, documents):
    """A WordPiece tokenizer trained here and saved the way BERT-family files are published."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(documents, trainers.WordPieceTrainer(vocab_size=3000, special_tokens=specials))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tok.enable_truncation(max_length=128)
    tok.enable_padding(length=128, pad_id=0, pad_token="[PAD]")
    path = tmp_path_factory.mktemp("bert") / "tokenizer.json"
    tok.save(str(path))
    saved = json.loads(path.read_text())
    assert saved["truncation"]["max_length"] == 128 and saved["padding"]["strategy"] == {"Fixed": 128}
    return path


def plain_lengths(path, documents) -> np.ndarray:
    """What the user asked for: encode_batch with truncation and padding off, no template tokens."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tok.no_truncation()
    tok.no_padding()
    return np.array([len(e.ids) for e in tok.encode_batch(documents, add_special_tokens=False)])


def test_the_published_settings_are_a_real_trap(bert_like_tokenizer, documents):
    from tokenizers import Tokenizer

    as_is = Tokenizer.from_file(str(bert_like_tokenizer)).encode_batch(documents)
    assert {len(e.ids) for e in as_is} == {128}  # every document 128 tokens, silently
    want = plain_lengths(bert_like_tokenizer, documents)
    assert want.max() > 1000 and want.min() < 60


def test_pretokenize_and_analyze_give_the_plain_lengths(tmp_path, bert_like_tokenizer, documents, capsys):
    want = plain_lengths(bert_like_tokenizer, documents)
    pq.write_table(pa.table({"text": documents}), tmp_path / "docs.parquet", row_group_size=64)
    result = pretokenize(tmp_path / "docs.parquet", tmp_path / "store", bert_like_tokenizer, progress=False)
    store = TokenStore(tmp_path / "store")
    np.testing.assert_array_equal(store.lengths(), want)
    assert result.tokens == int(want.sum())
    manifest = json.loads((tmp_path / "store" / "manifest.json").read_text())
    assert manifest["tokenizer"]["settings"] == "off"
    assert set(manifest["tokenizer"]["switched_off"]) == {"truncation", "padding"}
    assert len(manifest["tokenizer"]["sha256"]) == 64

    assert (
        main(
            [
                "analyze-padding",
                str(tmp_path / "docs.parquet"),
                "--tokenizer",
                str(bert_like_tokenizer),
                "--ctx",
                "2048",
                "--json",
                "-",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    rep = json.loads(captured.out)
    assert rep["num_sequences"] == len(documents) and rep["num_tokens"] == int(want.sum())
    assert rep["lengths"]["max"] == int(want.max()) and rep["lengths"]["min"] == int(want.min())
    assert rep["input"]["tokenizer"]["sha256"] == manifest["tokenizer"]["sha256"]
    assert "its truncation (max_length 128) and padding (to 128) switched off" in captured.err  # said once, on stderr


def test_special_tokens_only_when_asked(tmp_path, bert_like_tokenizer, documents, capsys):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(bert_like_tokenizer))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    want = plain_lengths(bert_like_tokenizer, documents)
    pq.write_table(pa.table({"text": documents}), tmp_path / "docs.parquet")
    assert (
        main(
            [
                "pretokenize",
                str(tmp_path / "docs.parquet"),
                str(tmp_path / "plain"),
                "--tokenizer",
                str(bert_like_tokenizer),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "pretokenize",
                str(tmp_path / "docs.parquet"),
                str(tmp_path / "special"),
                "--tokenizer",
                str(bert_like_tokenizer),
                "--bos",
                "--eos",
                "[SEP]",
            ]
        )
        == 0
    )
    assert "bos [CLS]=" in capsys.readouterr().err
    plain, special = TokenStore(tmp_path / "plain"), TokenStore(tmp_path / "special")
    np.testing.assert_array_equal(plain.lengths(), want)
    np.testing.assert_array_equal(special.lengths(), want + 2)
    for i in (0, 5, len(documents) - 1):
        want_i = np.concatenate(([cls], store_document(plain, i), [sep]))
        np.testing.assert_array_equal(store_document(special, i), want_i)
        assert cls not in store_document(plain, i) and sep not in store_document(plain, i)

    assert (
        main(
            [
                "analyze-padding",
                str(tmp_path / "docs.parquet"),
                "--tokenizer",
                str(bert_like_tokenizer),
                "--bos",
                str(cls),
                "--ctx",
                "2048",
                "--json",
                "-",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["num_tokens"] == int((want + 1).sum())
    # the escape hatch applies the file as published
    enc = open_encoder(bert_like_tokenizer, settings="keep")
    _, lengths = enc.encode(documents)
    assert set(lengths.tolist()) == {128}


def test_special_token_errors(bert_like_tokenizer):
    with pytest.raises(ValueError, match="no such token"):
        open_encoder(bert_like_tokenizer, bos="<nope>")
    with pytest.raises(ValueError, match="not a token id"):
        open_encoder(bert_like_tokenizer, eos=10**9)
    with pytest.raises(ValueError, match="settings must be one of off, keep"):
        open_encoder(bert_like_tokenizer, settings="strip")
