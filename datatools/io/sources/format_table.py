"""The input formats: ONE table (:data:`FORMATS`), one :class:`Format` row per format, tried in order by
:func:`datatools.io.sources.inputs.open_input`. The readers are the format modules (:mod:`store`, :mod:`levanter_cache`,
:mod:`numpy_files`, :mod:`array_record_files`, :mod:`discover` and :mod:`tables`); a new format is its module and
one row here."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from datatools.io import storage
from datatools.io.formats import array_record_files
from datatools.io.formats.discover import list_shards
from datatools.io.formats.lengths_cache import TableLengthsCache
from datatools.io.formats.levanter_cache import LevanterCache, is_levanter_cache
from datatools.io.formats.numpy_files import (
    FLAT_SLICE,
    INT32_MAX,
    flat_array,
    flat_slices,
    lengths_only,
    lengths_only_file,
    numpy_dir,
    numpy_dir_files,
)
from datatools.io.formats.sentencepiece_encoder import is_sentencepiece, open_sentencepiece
from datatools.io.formats.store import TokenStore, is_token_store
from datatools.io.formats.tables import TEXT_COLUMNS, detect_column, shard_columns
from datatools.io.formats.token_array import TokenArray
from datatools.io.formats.token_input import InputOptions, TokenInput, lengths_by_shard, shard_length_pieces
from datatools.io.formats.tokenizer import open_encoder
from datatools.io.sources.documents import (
    TABLE_CACHE_BYTES,
    ArrayDocuments,
    ChunkedDocuments,
    DocumentSource,
    ShardSlab,
    StoreDocuments,
)
from datatools.io.storage.paths import display


def local_pattern(path: str | os.PathLike[str]) -> list[Path]:
    """The files of a local glob or comma list (as MaxText writes ``grain_train_files``), in order; [] for a
    path that exists as written or is a URL. A pattern that matches nothing is a ValueError naming it."""
    text = os.fspath(path)
    if not storage.location(text).has_directories or os.path.exists(text) or not ("," in text or glob.has_magic(text)):
        return []
    return array_record_files.expand(text)


def _tokenized(inp: TokenInput, opts: InputOptions, where: str, what: str) -> TokenInput:
    """``inp`` with its tokenizer: a text column needs one, a token column refuses one."""
    if inp.is_text:
        if opts.tokenizer is None:
            raise ValueError(
                f"{where}: {what} {inp.column!r} holds text; pass --tokenizer (tokenizer.json or a SentencePiece "
                f".model) to tokenize it"
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


def array_record_input(path: str | os.PathLike[str], opts: InputOptions) -> TokenInput:
    """ArrayRecord files (a file, a glob, a comma list): the feature and the tokenizer checked on the first file."""
    files = array_record_files.expand(path)
    col, is_text = array_record_files.detect_feature(files[0], opts.column)
    nbytes = sum(f.stat().st_size for f in files)
    inp = TokenInput(Path(os.fspath(path)), "table", column=col, is_text=is_text, files=files, nbytes=nbytes)
    return _tokenized(inp, opts, display(files[0]), "feature")


# --------------------------------------------------------------------------- the formats: detect, lengths, documents


def _detect_store(loc: storage.Location, opts: InputOptions) -> TokenInput | None:
    if not is_token_store(loc):
        return None
    store = TokenStore(loc.path)
    return TokenInput(loc.path, "store", nbytes=8 * (len(store) + 1), store=store)


def _detect_levanter(loc: storage.Location, opts: InputOptions) -> TokenInput | None:
    if not is_levanter_cache(loc):  # Marin keeps them in gs://
        return None
    cache = LevanterCache(loc.path)  # the ledger and the arrays checked here, before any token is read
    return TokenInput(loc.path, "levanter", nbytes=8 * (len(cache) + 1), levanter=cache)


def _detect_numpy(loc: storage.Location, opts: InputOptions) -> TokenInput | None:
    if not (loc.is_dir() and (files := numpy_dir_files(loc.path))):
        return None
    return TokenInput(loc.path, "numpy", nbytes=sum(storage.location(f).size() for f in files[:2]))


def _detect_lengths(loc: storage.Location, opts: InputOptions) -> TokenInput | None:
    only = lengths_only_file(loc.path)
    return None if only is None else TokenInput(loc.path, "lengths", nbytes=storage.location(only).size())


def _detect_flat(loc: storage.Location, opts: InputOptions) -> TokenInput | None:
    if Path(loc.name).suffix.lower() not in (".bin", ".npy") or not loc.is_file():
        return None
    if opts.eos_id is None:
        raise ValueError(f"{loc.display}: a flat token file needs --eos-id to find the document boundaries")
    return TokenInput(loc.path, "flat", nbytes=loc.size(), eos_id=opts.eos_id, bin_dtype=opts.bin_dtype)


def _detect_table(loc: storage.Location, opts: InputOptions) -> TokenInput:
    """Parquet, Arrow, JSON Lines files, a directory of them, a glob or comma list of them: the column checked on
    the first shard (every input that is no other format is read as a table, or refused naming why)."""
    pattern = local_pattern(loc)
    if not pattern and loc.has_directories and loc.is_dir():
        if not any(p for p in loc.local_path.iterdir() if not p.name.startswith(".")):
            raise ValueError(f"{loc.display}: empty directory")
    shards = [s for f in pattern for s in list_shards(f)] if pattern else list_shards(loc.path)
    if any(s.kind == "text" for s in shards) and not opts.text_files:
        raise ValueError(
            f"{display(shards[-1].files[0])}: plain text files have no token column; "
            f"pre-tokenize them first (datatools pretokenize)"
        )
    where = display(shards[0].files[0])
    nbytes = sum(storage.location(f).size() for f in dict.fromkeys(x for s in shards for x in s.files))
    if shards[0].kind == "text":  # .txt files alone (text_files): each file one text, tokenized when read
        inp = TokenInput(loc.path, "table", column=opts.column, is_text=True, shards=shards, nbytes=nbytes)
        return _tokenized(inp, opts, where, "column")
    columns = shard_columns(shards[0])
    col = detect_column(list(columns), opts.column, where)
    is_text = col in TEXT_COLUMNS or columns[col]
    inp = TokenInput(loc.path, "table", column=col, is_text=is_text, shards=shards, nbytes=nbytes)
    return _tokenized(inp, opts, where, "column")


def stored_array(inp: TokenInput) -> TokenArray:
    """The stored token array of a token store or a Levanter cache input: typed to return a
    :class:`~datatools.io.formats.token_array.TokenArray`, so mypy checks that both implement it."""
    return inp.token_store if inp.kind == "store" else inp.levanter_cache


def _stored_lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    yield 0, stored_array(inp).lengths(), inp.nbytes


def _numpy_lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    _, offsets = numpy_dir(inp.path)  # the token ids are checked there too: in [0, 2**31 - 1]
    yield 0, np.diff(offsets), inp.nbytes


def _lengths_lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    lengths = lengths_only(inp.path)  # memory-mapped, streamed a slice at a time
    for a in range(0, lengths.shape[0], FLAT_SLICE):
        end = a + FLAT_SLICE >= lengths.shape[0]
        yield 0, np.asarray(lengths[a : a + FLAT_SLICE], dtype=np.int64), inp.nbytes if end else 0


def _flat_lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    for k, (lengths, nbytes) in enumerate(flat_slices(inp.path, inp.bin_dtype, inp.flat_eos_id)):
        yield k, lengths, nbytes


def _table_lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    return _table_pieces(inp, shard_length_pieces)


def _table_pieces(
    inp: TokenInput, read: Callable[[TokenInput, int], list[tuple[int, np.ndarray, int]]]
) -> Iterator[tuple[int, np.ndarray, int]]:
    """A table's ``(shard, lengths, bytes)``: shards whose file the lengths cache holds from there
    (:mod:`~datatools.io.formats.lengths_cache`), the others by ``read(inp, k)``, one shard ahead in a thread, and
    cached."""
    cache = None
    if inp.shards:  # table files (ArrayRecord files are not cached)
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


def _tokenizer_key(inp: TokenInput) -> dict[str, Any] | None:
    """What a text column's lengths depend on besides the text: the tokenizer's kind and SHA-256, its settings, BOS,
    EOS and what was switched off (None for token ids)."""
    if not inp.is_text:
        return None
    enc = inp.text_encoder
    fields = ("sha256", "settings", "bos_id", "eos_id", "switched_off")
    return {"kind": type(enc).__name__} | {f: getattr(enc, f, None) for f in fields}


def _keeping(slab: ShardSlab) -> Callable[[TokenInput, int], list[tuple[int, np.ndarray, int]]]:
    """A shard reader for :func:`_table_pieces` that reads each shard whole and copies its tokens into ``slab`` while
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


def _no_documents(inp: TokenInput, progress: Callable[[int, int], None] | None) -> DocumentSource:
    raise ValueError(
        f"{display(inp.path)}: holds lengths.npy but no tokens.npy: enough to plan (datatools pack) "
        f"and analyse (datatools analyze-padding), not to read documents"
    )


def _stored_documents(inp: TokenInput, progress: Callable[[int, int], None] | None) -> DocumentSource:
    return StoreDocuments(stored_array(inp))


def _flat_documents(inp: TokenInput, progress: Callable[[int, int], None] | None) -> DocumentSource:
    lengths = lengths_by_shard(inp, _flat_lengths(inp), progress)[0]  # negative ids refused there
    tokens = flat_array(inp.path, inp.bin_dtype)
    for a in range(0, tokens.shape[0] if tokens.dtype.itemsize >= 4 else 0, FLAT_SLICE):  # batches are int32
        if (hi := int(np.asarray(tokens[a : a + FLAT_SLICE]).max())) > INT32_MAX:
            raise ValueError(f"{display(inp.path)}: token id {hi} does not fit int32")
    return ArrayDocuments(tokens, np.concatenate(([0], np.cumsum(lengths))))


def _table_documents(inp: TokenInput, progress: Callable[[int, int], None] | None) -> DocumentSource:
    slab = ShardSlab(TABLE_CACHE_BYTES // 4, inp.num_shards)  # the shards its pass for the lengths read whole
    lengths, shard_docs = lengths_by_shard(inp, _table_pieces(inp, _keeping(slab)), progress)
    return ChunkedDocuments(lengths, shard_docs, inp.shard_tokens, name=display(inp.path), slab=slab)


@dataclass(frozen=True)
class Format:
    """One input format: how it is recognised (``detect``: a :class:`TokenInput`, or None when the place, local or
    a URL, is not one), how its lengths stream (``lengths``: ``(shard, lengths, bytes)``) and its documents are
    read (``documents``); ``offsets``: its lengths come from stored offsets (no token read); ``pipeline``: a
    pipeline config may name it as a source."""

    kind: str
    detect: Callable[[storage.Location, InputOptions], TokenInput | None]
    lengths: Callable[[TokenInput], Iterator[tuple[int, np.ndarray, int]]]
    documents: Callable[[TokenInput, Callable[[int, int], None] | None], DocumentSource]
    offsets: bool = False
    pipeline: bool = True


FORMATS = (  # in the order they are tried: the table format last, it takes what no other claims
    Format("store", _detect_store, _stored_lengths, _stored_documents, offsets=True),
    Format("levanter", _detect_levanter, _stored_lengths, _stored_documents, offsets=True),
    Format("numpy", _detect_numpy, _numpy_lengths, lambda inp, _: ArrayDocuments(*numpy_dir(inp.path))),
    Format("lengths", _detect_lengths, _lengths_lengths, _no_documents, pipeline=False),
    Format("flat", _detect_flat, _flat_lengths, _flat_documents, pipeline=False),
    Format("table", _detect_table, _table_lengths, _table_documents),
)
FORMAT = {f.kind: f for f in FORMATS}  # TokenInput.kind -> its format
