"""Shared fixtures: real text from the Python standard library and a tokenizer trained on it locally."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest


def stdlib_texts(count: int = 40) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(root.glob("*.py"))[:count]
    return [f.read_text(encoding="utf-8", errors="replace") for f in files]


@pytest.fixture(scope="session")
def texts() -> list[str]:
    return stdlib_texts()


@pytest.fixture(scope="session")
def tokenizer_file(tmp_path_factory, texts) -> Path:
    """A small byte-level BPE (lossless: decode(encode(x)) == x), trained on stdlib sources."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path
