"""Real text for the benchmarks, built offline: three corpora tokenized with a published tokenizer file.

The benchmarks' synthetic lengths (benchmarks/_common.py) hide what real text does: a long tail of very long
documents, many tiny ones, real token ids. These corpora are made from text every machine of the project has, and
tokenized with the ``tokenizer.json`` Anthropic published in its Python SDK (``anthropic==0.34.2``, a byte-level BPE
of 65,000 ids; the wheel is fetched from the package index with pip, the only download):

* ``man``: every English manual page under /usr/share/man (man1-man8), one document per page, as groff source
  (technical pages: mean ~1,800 tokens, a long tail past 250k).
* ``stdlib``: every .py file of the running Python's standard library (tests included), one document per file
  (long documents: mean ~4,700 tokens, median ~1,800, past 150k).
* ``docstrings``: every docstring in those files, one document each (short documents: mean ~50 tokens).

Each corpus is written to ``.bench_data/corpora/NAME.npz`` (``tokens``: int32, every document back to back;
``lengths``: int64 tokens per document) and ``NAME.parquet`` (one ``tokens`` list<int32> column, row groups of
``--row-group`` documents: the form a MaxText or Grain user reads). Documents keep the order of their files
(sorted paths), so a run is reproducible on one machine; another machine's man pages and Python give another
corpus, which is why every table names the corpus and its size.

    python benchmarks/corpora.py [--corpus man stdlib docstrings] [--max-docs N]
"""

from __future__ import annotations

import argparse
import ast
import gzip
import subprocess
import sys
import sysconfig
import warnings
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / ".bench_data"
CORPORA = DATA / "corpora"
TOKENIZER_PACKAGE = "anthropic==0.34.2"  # its wheel holds anthropic/tokenizer.json (a published BPE tokenizer)
TOKENIZER = DATA / "tokenizer" / "tokenizer.json"
NAMES = ("man", "stdlib", "docstrings")


def tokenizer_file() -> Path:
    """The published tokenizer.json: taken once from the ``anthropic`` wheel (pip download, no dependencies)."""
    if TOKENIZER.exists():
        return TOKENIZER
    wheels = DATA / "tokenizer" / "wheel"
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(wheels)]
        + [TOKENIZER_PACKAGE],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wheel = next(wheels.glob("anthropic-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        TOKENIZER.write_bytes(z.read("anthropic/tokenizer.json"))
    return TOKENIZER


def man_pages() -> list[str]:
    """Every English manual page (man1-man8) as its groff source, sorted by path."""
    texts = []
    for path in sorted(Path("/usr/share/man").glob("man[1-8]/*")):
        if not path.is_file():
            continue
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        text = raw.decode("utf-8", errors="replace")
        if text.startswith(".so ") and text.count("\n") <= 1:  # a link to another page
            continue
        texts.append(text)
    return texts


def stdlib_files() -> list[Path]:
    return sorted(p for p in Path(sysconfig.get_paths()["stdlib"]).rglob("*.py") if "site-packages" not in p.parts)


def stdlib_sources() -> list[str]:
    """Every .py file of the standard library, sorted by path."""
    return [p.read_text("utf-8", errors="replace") for p in stdlib_files()]


def docstrings() -> list[str]:
    """Every docstring (module, class, function) of the standard library's .py files, in file order."""
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for p in stdlib_files():
            try:
                tree = ast.parse(p.read_text("utf-8", errors="replace"))
            except (SyntaxError, ValueError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node)
                    if doc:
                        out.append(doc)
    return out


SOURCES = {"man": man_pages, "stdlib": stdlib_sources, "docstrings": docstrings}


def build(name: str, max_docs: int | None = None, row_group: int = 1024) -> Path:
    """Tokenize corpus ``name`` and write NAME.npz and NAME.parquet; returns the .npz path."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    texts = SOURCES[name]()[:max_docs]
    tok = Tokenizer.from_file(str(tokenizer_file()))
    ids = [np.asarray(e.ids, np.int32) for e in tok.encode_batch(texts, add_special_tokens=False)]
    ids = [d for d in ids if d.size]
    lengths = np.fromiter((d.size for d in ids), np.int64, count=len(ids))
    tokens = np.concatenate(ids)
    CORPORA.mkdir(parents=True, exist_ok=True)
    path = CORPORA / f"{name}.npz"
    np.savez(path, tokens=tokens, lengths=lengths)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    column = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(tokens)).cast(pa.list_(pa.int32()))
    pq.write_table(pa.table({"tokens": column}), CORPORA / f"{name}.parquet", row_group_size=row_group)
    return path


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(tokens int32, lengths int64) of corpus ``name``, built first if absent."""
    path = CORPORA / f"{name}.npz"
    if not path.exists():
        build(name)
    with np.load(path) as z:
        return z["tokens"], z["lengths"]


def describe(name: str, lengths: np.ndarray) -> str:
    """One line naming the corpus: documents, tokens, mean, median and max length (tokens)."""
    return (
        f"{name}: {lengths.size:,} documents, {int(lengths.sum()):,} tokens, mean {lengths.mean():,.0f}, "
        f"median {int(np.median(lengths)):,}, max {int(lengths.max()):,} (tokenizer: {TOKENIZER_PACKAGE} "
        f"tokenizer.json)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", nargs="+", default=list(NAMES), choices=NAMES)
    parser.add_argument("--max-docs", type=int, default=None, help="the first N documents of each corpus")
    parser.add_argument("--row-group", type=int, default=1024, help="documents per Parquet row group")
    args = parser.parse_args()
    for name in args.corpus:
        build(name, args.max_docs, args.row_group)
        _, lengths = load(name)
        print(describe(name, lengths))


if __name__ == "__main__":
    main()
