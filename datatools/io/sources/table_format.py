"""Tables as an input format (its row of :data:`~datatools.io.sources.format_table.FORMATS`, tried last: it takes
what no other claims): Parquet, Arrow, JSON Lines files, a directory of them (a Hugging Face ``save_to_disk`` one
too), a glob or comma list of them, cut into shards (each kind of file read by its
:class:`~datatools.io.formats.discover.FileKind`); the column and the tokenizer checked on the first shard. Its
lengths stream shard by shard, one shard ahead in a thread, kept in the lengths cache; its documents are a
:class:`~datatools.io.sources.documents.ChunkedDocuments` over the shards that pass read."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from datatools.io import storage
from datatools.io.formats import array_record_files
from datatools.io.formats.discover import TEXT_COLUMNS, detect_column, list_shards
from datatools.io.formats.lengths_cache import TableLengthsCache
from datatools.io.formats.sentencepiece_encoder import is_sentencepiece, open_sentencepiece
from datatools.io.formats.tables import shard_columns
from datatools.io.formats.token_input import InputOptions, TokenInput, lengths_by_shard, shard_length_pieces
from datatools.io.formats.tokenizer import open_encoder
from datatools.io.sources.documents import TABLE_CACHE_BYTES, ChunkedDocuments, DocumentSource, ShardSlab
from datatools.io.storage.paths import display


def local_pattern(path: str | os.PathLike[str]) -> list[Path]:
    """The files of a local glob or comma list (as MaxText writes ``grain_train_files``), in order; [] for a
    path that exists as written or is a URL. A pattern that matches nothing is a ValueError naming it."""
    text = os.fspath(path)
    if not storage.location(text).has_directories or os.path.exists(text) or not ("," in text or glob.has_magic(text)):
        return []
    return array_record_files.expand(text)


def tokenized(inp: TokenInput, opts: InputOptions, where: str, what: str) -> TokenInput:
    """``inp`` with its tokenizer: a text column needs one, a token column refuses one."""
    if inp.is_text:
        if opts.tokenizer is None:
            raise ValueError(
                f"{where}: {what} {inp.column!r} holds text; pass --tokenizer (tokenizer.json or a SentencePiece "
                f".model) to tokenize it, in a pipeline config source.tokenizer (datatools pipeline: --set "
                f"source.tokenizer=PATH)"
            )
        tok = opts.tokenizer  # a tokenizer.json, or a SentencePiece .model (MaxText's tokenizer_path)
        if is_sentencepiece(tok):
            inp.encoder = open_sentencepiece(tok, bos=opts.bos, eos=opts.eos)
        else:
            inp.encoder = open_encoder(tok, settings=opts.tokenizer_settings, bos=opts.bos, eos=opts.eos)
    elif opts.tokenizer is not None or opts.bos is not None or opts.eos is not None:
        applies = "--tokenizer/--bos/--eos apply" if what == "column" else "--tokenizer applies"
        raise ValueError(f"{where}: {what} {inp.column!r} holds token ids already; {applies} to text")
    return inp


def detect(loc: storage.Location, opts: InputOptions) -> TokenInput:
    """Parquet, Arrow, JSON Lines files, a directory of them, a glob or comma list of them: the column checked on
    the first shard (every input that is no other format is read as a table, or refused naming why). Tried last:
    every other format names itself by a file it holds, so a missing place is found missing here."""
    pattern = local_pattern(loc)
    # asked only now: in a bucket "exists" is two requests (an object, then a prefix), ~0.2 s at +100 ms
    if not pattern and not loc.exists():
        raise ValueError(f"{loc.display}: no such file or directory")
    if not pattern and loc.has_directories and loc.is_dir():
        if not any(p for p in loc.local_path.iterdir() if not p.name.startswith(".")):
            raise ValueError(f"{loc.display}: empty directory")
    shards = [s for f in pattern for s in list_shards(f)] if pattern else list_shards(loc.path)
    if not all(s.file_kind.has_columns for s in shards) and not opts.text_files:
        raise ValueError(
            f"{display(shards[-1].files[0])}: plain text files have no token column; "
            f"pre-tokenize them first (datatools pretokenize)"
        )
    where = display(shards[0].files[0])
    nbytes = sum(storage.location(f).size() for f in dict.fromkeys(x for s in shards for x in s.files))
    if not shards[0].file_kind.has_columns:  # .txt files alone (text_files): each file one text, tokenized when read
        inp = TokenInput(loc.path, "table", column=opts.column, is_text=True, shards=shards, nbytes=nbytes)
        return tokenized(inp, opts, where, "column")
    columns = shard_columns(shards[0])
    col = detect_column(list(columns), opts.column, where)
    is_text = col in TEXT_COLUMNS or columns[col]
    inp = TokenInput(loc.path, "table", column=col, is_text=is_text, shards=shards, nbytes=nbytes)
    return tokenized(inp, opts, where, "column")


def lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    return table_pieces(inp, shard_length_pieces)


def table_pieces(
    inp: TokenInput, read: Callable[[TokenInput, int], list[tuple[int, np.ndarray, int]]], cached: bool = True
) -> Iterator[tuple[int, np.ndarray, int]]:
    """A table's ``(shard, lengths, bytes)``: shards whose file the lengths cache holds from there
    (:mod:`~datatools.io.formats.lengths_cache`; ``cached`` False: none, as for ArrayRecord files), the others by
    ``read(inp, k)``, one shard ahead in a thread, and cached."""
    cache = None
    if cached:
        cache = TableLengthsCache.for_shards(inp.shards, inp.table_column, _tokenizer_key(inp))
    hits = cache.cached() if cache is not None else {}
    todo = iter([k for k in range(inp.num_shards) if k not in hits])
    with ThreadPoolExecutor(1) as pool:  # decoded one shard ahead, in a thread
        ahead: dict[int, Future[list[tuple[int, np.ndarray, int]]]] = {}

        def read_next() -> None:
            if (k := next(todo, None)) is not None:
                ahead[k] = pool.submit(read, inp, k)

        read_next()
        for k in range(inp.num_shards):
            if k in hits:
                yield k, hits[k], inp.shard_nbytes(k)
                continue
            read_next()
            pieces = ahead.pop(k).result()
            if cache is not None:
                cache.add(k, np.concatenate([lengths for _, lengths, _ in pieces]))
            yield from pieces


def _tokenizer_key(inp: TokenInput) -> dict[str, object] | None:
    """What a text column's lengths depend on besides the text: the tokenizer's kind and SHA-256, its settings, BOS,
    EOS and what was switched off (None for token ids)."""
    if not inp.is_text:
        return None
    enc = inp.text_encoder
    fields = ("sha256", "settings", "bos_id", "eos_id", "switched_off")
    return {"kind": type(enc).__name__} | {f: getattr(enc, f, None) for f in fields}


def _keeping(slab: ShardSlab) -> Callable[[TokenInput, int], list[tuple[int, np.ndarray, int]]]:
    """A shard reader for :func:`table_pieces` that reads each shard whole and copies its tokens into ``slab`` while
    they fit (the pass for the lengths then decodes, or tokenizes, what the documents' reads would: the column is
    read once, and each decoded buffer is freed for the next decode); once the slab is full, lengths alone (text
    counted a bounded batch at a time)."""

    def read(inp: TokenInput, k: int) -> list[tuple[int, np.ndarray, int]]:
        if not slab.fits_without_eviction(1):
            return shard_length_pieces(inp, k)
        tokens, lengths = inp.shard_tokens(k)
        if slab.fits_without_eviction(tokens.shape[0]):
            slab.put(k, tokens)
        return [(k, lengths, 0), (k, np.zeros(0, np.int64), inp.shard_nbytes(k))]

    return read


def documents(inp: TokenInput, progress: Callable[[int, int], None] | None, cached: bool = True) -> DocumentSource:
    slab = ShardSlab(TABLE_CACHE_BYTES // 4, inp.num_shards)  # the shards its pass for the lengths read whole
    lengths, shard_docs = lengths_by_shard(inp, table_pieces(inp, _keeping(slab), cached), progress)
    return ChunkedDocuments(lengths, shard_docs, inp.shard_tokens, name=display(inp.path), slab=slab)
