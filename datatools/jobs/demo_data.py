"""The demo dataset: the top-level blocks of the Python standard library's sources (no download; about 24k
documents, mean 165 tokens, median 65: the skewed lengths of fine-tuning data), a tokenizer and a token store.
"""

from __future__ import annotations

import re
import sysconfig
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from datatools.io import storage

DEMO_DIR = Path("demo_data")
_TOP_LEVEL = re.compile(r"\n(?=(?:    )?(?:def |class |async def |@))")


def stdlib_documents(limit_files: int | None = None) -> list[str]:
    """Top-level blocks of the standard library's sources (non-empty, UTF-8; tests left out), in path order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and "test" not in p.parts)
    docs: list[str] = []
    for path in files[:limit_files] if limit_files else files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        docs.extend(block for block in _TOP_LEVEL.split(text) if block.strip())
    return docs


def train_tokenizer(texts: list[str], path: str | Path, *, vocab_size: int = 4096) -> Path:
    """Train a byte-level BPE (lossless, with ``<s>`` = 0 and ``</s>`` = 1) and save it as tokenizers JSON."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    path = Path(path)
    storage.location(path).write_text(tok.to_str())
    return path


def build_demo(
    root: str | Path = DEMO_DIR, *, limit_files: int | None = None, vocab_size: int = 4096, progress: bool = True
) -> dict[str, Path]:
    """Write ``root/stdlib.parquet`` (text), ``root/tokenizer.json`` and ``root/store`` (tokens, EOS per document),
    skipping those already there."""
    from datatools.jobs.pretokenize import pretokenize

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    parquet, tokenizer, store = root / "stdlib.parquet", root / "tokenizer.json", root / "store"
    docs = None
    if not parquet.exists():
        docs = stdlib_documents(limit_files)
        sink = pa.BufferOutputStream()
        pq.write_table(pa.table({"text": docs}), sink, row_group_size=2048)
        storage.location(parquet).write_bytes(sink.getvalue().to_pybytes())
    if not tokenizer.exists():
        docs = docs or pq.read_table(parquet).column("text").to_pylist()
        train_tokenizer(docs[::4], tokenizer, vocab_size=vocab_size)
    if not store.exists():
        pretokenize(parquet, store, tokenizer, eos=True, workers=1, progress=progress)
    return {"parquet": parquet, "tokenizer": tokenizer, "store": store}
