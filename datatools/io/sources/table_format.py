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
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from datatools.io import storage
from datatools.io.formats import array_record_files
from datatools.io.formats.discover import TEXT_COLUMNS, Shard, detect_column, list_shards
from datatools.io.formats.lengths_cache import TableLengthsCache
from datatools.io.formats.numpy_files import INT32_MAX
from datatools.io.formats.sentencepiece_encoder import is_sentencepiece, open_sentencepiece
from datatools.io.formats.tables import column_batches, shard_bytes, shard_columns, text_values, token_arrays
from datatools.io.formats.token_input import Encoder, FormatState, InputOptions, TokenInput, lengths_by_shard
from datatools.io.formats.tokenizer import open_encoder
from datatools.io.sources.documents import TABLE_CACHE_BYTES, ChunkedDocuments, DocumentSource, ShardSlab
from datatools.io.storage.paths import display

LENGTH_ROWS = 4096  # text rows turned into Python strings at a time when only lengths are read


@dataclass(frozen=True)
class TableInput(FormatState):
    """A table's own part of an opened input (:attr:`TokenInput.opened`; an ArrayRecord input's too): read by this
    module and :mod:`~datatools.io.sources.array_record_format` alone. Picklable: a worker process re-reads shards
    through it (:meth:`shard_tokens`).

    Attributes:
      column: the token or text column (None: ``.txt`` files, each file one text).
      is_text: the column holds text, tokenized by ``encoder``.
      shards: the table shards, in order (an ArrayRecord input: one per file); a tuple, so that this class's
        default stands in for :attr:`FormatState.shards` (a default factory would leave the base's property).
      encoder: the tokenizer of a text column (None for token ids).
    """

    column: str | None = None
    is_text: bool = False
    shards: tuple[Shard, ...] = ()
    encoder: Encoder | None = None

    def num_shards(self, path: str | Path) -> int:
        """The table's shards (one when it has none)."""
        return max(1, len(self.shards))

    def describe(self) -> dict[str, object]:
        """The column and the tokenizer (its file, SHA-256, settings), as reports record them."""
        out: dict[str, object] = {}
        if self.column:
            out["column"] = self.column
        if self.encoder is not None:
            out["tokenizer"] = self.encoder.describe()
        return out

    def repr_parts(self) -> list[str]:
        """The column (``(text)`` when it holds text), the shard count, the tokenizer file and its SHA-256."""
        parts = []
        if self.column is not None:
            parts.append(f"column={self.column!r}" + (" (text)" if self.is_text else ""))
        if self.shards:
            parts.append(f"shards={len(self.shards)}")
        if self.encoder is not None:
            parts.append(f"tokenizer={self.encoder.source!r} (sha256 {self.encoder.sha256[:12]})")
        return parts

    def column_name(self, where: str) -> str:
        """The token or text column; a ValueError naming ``where`` when there is none (plain ``.txt`` files)."""
        if self.column is None:
            raise ValueError(f"{where}: a table input has no column")
        return self.column

    def text_encoder(self, where: str) -> Encoder:
        """The tokenizer of a text column; a ValueError naming ``where`` when none was given."""
        if self.encoder is None:
            raise ValueError(f"{where}: column {self.column!r} holds text and no tokenizer was given")
        return self.encoder

    def shard_batches(self, k: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(tokens, lengths) of shard ``k``, a bounded batch at a time; text is tokenized here."""
        shard = self.shards[k]
        where = shard.describe()
        column = self.column_name(where)
        for col in column_batches(shard, column, self.is_text):
            if self.is_text:
                yield self.text_encoder(where).encode(text_values(col, where, column))
            else:
                yield token_arrays(col, where, column)

    def shard_lengths(self, k: int) -> Iterator[np.ndarray]:
        """int64 tokens per document of shard ``k``, a bounded batch at a time; text is counted :data:`LENGTH_ROWS`
        rows at a time, never held as tokens (a text column once took 3.1-3.7 GB on 62-86 MB)."""
        shard = self.shards[k]
        where = shard.describe()
        column = self.column_name(where)
        for col in column_batches(shard, column, self.is_text):
            if not self.is_text:
                yield token_arrays(col, where, column)[1]
                continue
            for a in range(0, len(col), LENGTH_ROWS):
                yield self.text_encoder(where).count_tokens(text_values(col.slice(a, LENGTH_ROWS), where, column))

    def shard_nbytes(self, k: int) -> int:
        """Bytes of input shard ``k`` covers (for progress and throughput)."""
        return shard_bytes(self.shards[k])

    def shard_tokens(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(int32 tokens, int64 lengths) of shard ``k`` whole (for :class:`ChunkedDocuments`)."""
        tokens, lengths = [], []
        for t, n in self.shard_batches(k):
            if t.size and not np.can_cast(t.dtype, np.int32) and int(t.max()) > INT32_MAX:  # int32 ids always fit
                raise ValueError(f"{self.shards[k].describe()}: token id {int(t.max())} does not fit int32")
            tokens.append(t.astype(np.int32, copy=False))
            lengths.append(n)
        return _concat(tokens, np.int32), _concat(lengths, np.int64)

    def shard_length_pieces(self, k: int) -> list[tuple[int, np.ndarray, int]]:
        """Shard ``k``'s ``(k, lengths, 0)`` pieces, then ``(k, [], its bytes)``."""
        out = [(k, lengths, 0) for lengths in self.shard_lengths(k)]
        return out + [(k, np.zeros(0, np.int64), self.shard_nbytes(k))]


def _concat(parts: list[np.ndarray], dtype: npt.DTypeLike) -> np.ndarray:
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def table_of(inp: TokenInput) -> TableInput:
    """The table's own part of ``inp`` (made by :func:`detect` or the ArrayRecord format's); a TypeError for an
    input another format made."""
    if not isinstance(inp.opened, TableInput):
        raise TypeError(f"{display(inp.path)}: a {inp.format} input, not a table")
    return inp.opened


def local_pattern(path: str | os.PathLike[str]) -> list[Path]:
    """The files of a local glob or comma list (as MaxText writes ``grain_train_files``), in order; [] for a
    path that exists as written or is a URL. A pattern that matches nothing is a ValueError naming it."""
    text = os.fspath(path)
    if not storage.location(text).has_directories or os.path.exists(text) or not ("," in text or glob.has_magic(text)):
        return []
    return array_record_files.expand(text)


def tokenized(table: TableInput, opts: InputOptions, where: str, what: str) -> TableInput:
    """``table`` with its tokenizer: a text column needs one, a token column refuses one."""
    if table.is_text:
        if opts.tokenizer is None:
            raise ValueError(
                f"{where}: {what} {table.column!r} holds text; pass --tokenizer (tokenizer.json or a SentencePiece "
                f".model) to tokenize it, in a pipeline config source.tokenizer (datatools pipeline: --set "
                f"source.tokenizer=PATH)"
            )
        tok = opts.tokenizer  # a tokenizer.json, or a SentencePiece .model (MaxText's tokenizer_path)
        if is_sentencepiece(tok):
            return replace(table, encoder=open_sentencepiece(tok, bos=opts.bos, eos=opts.eos))
        return replace(table, encoder=open_encoder(tok, settings=opts.tokenizer_settings, bos=opts.bos, eos=opts.eos))
    if opts.tokenizer is not None or opts.bos is not None or opts.eos is not None:
        applies = "--tokenizer/--bos/--eos apply" if what == "column" else "--tokenizer applies"
        raise ValueError(f"{where}: {what} {table.column!r} holds token ids already; {applies} to text")
    return table


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
        table = TableInput(column=opts.column, is_text=True, shards=tuple(shards))
    else:
        columns = shard_columns(shards[0])
        col = detect_column(list(columns), opts.column, where)
        table = TableInput(column=col, is_text=col in TEXT_COLUMNS or columns[col], shards=tuple(shards))
    return TokenInput(loc.path, "table", nbytes=nbytes, opened=tokenized(table, opts, where, "column"))


def lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    return table_pieces(inp, TableInput.shard_length_pieces)


ShardReader = Callable[[TableInput, int], list[tuple[int, np.ndarray, int]]]  # (table, k) -> shard k's pieces


def table_pieces(inp: TokenInput, read: ShardReader, cached: bool = True) -> Iterator[tuple[int, np.ndarray, int]]:
    """A table's ``(shard, lengths, bytes)``: shards whose file the lengths cache holds from there
    (:mod:`~datatools.io.formats.lengths_cache`; ``cached`` False: none, as for ArrayRecord files), the others by
    ``read(table, k)``, one shard ahead in a thread, and cached."""
    table = table_of(inp)
    cache = None
    if cached:
        cache = TableLengthsCache.for_shards(table.shards, table.column_name(display(inp.path)), _tokenizer_key(table))
    hits = cache.cached() if cache is not None else {}
    count = inp.num_shards
    todo = iter([k for k in range(count) if k not in hits])
    with ThreadPoolExecutor(1) as pool:  # decoded one shard ahead, in a thread
        ahead: dict[int, Future[list[tuple[int, np.ndarray, int]]]] = {}

        def read_next() -> None:
            if (k := next(todo, None)) is not None:
                ahead[k] = pool.submit(read, table, k)

        read_next()
        for k in range(count):
            if k in hits:
                yield k, hits[k], table.shard_nbytes(k)
                continue
            read_next()
            pieces = ahead.pop(k).result()
            if cache is not None:
                cache.add(k, np.concatenate([lengths for _, lengths, _ in pieces]))
            yield from pieces


def _tokenizer_key(table: TableInput) -> dict[str, object] | None:
    """What a text column's lengths depend on besides the text: the tokenizer's kind and SHA-256, its settings, BOS,
    EOS and what was switched off (None for token ids)."""
    if not table.is_text:
        return None
    enc = table.text_encoder(f"column {table.column!r}")
    fields = ("sha256", "settings", "bos_id", "eos_id", "switched_off")
    return {"kind": type(enc).__name__} | {f: getattr(enc, f, None) for f in fields}


def _keeping(slab: ShardSlab) -> ShardReader:
    """A shard reader for :func:`table_pieces` that reads each shard whole and copies its tokens into ``slab`` while
    they fit (the pass for the lengths then decodes, or tokenizes, what the documents' reads would: the column is
    read once, and each decoded buffer is freed for the next decode); once the slab is full, lengths alone (text
    counted a bounded batch at a time)."""

    def read(table: TableInput, k: int) -> list[tuple[int, np.ndarray, int]]:
        if not slab.fits_without_eviction(1):
            return table.shard_length_pieces(k)
        tokens, lengths = table.shard_tokens(k)
        if slab.fits_without_eviction(tokens.shape[0]):
            slab.put(k, tokens)
        return [(k, lengths, 0), (k, np.zeros(0, np.int64), table.shard_nbytes(k))]

    return read


def documents(inp: TokenInput, progress: Callable[[int, int], None] | None, cached: bool = True) -> DocumentSource:
    slab = ShardSlab(TABLE_CACHE_BYTES // 4, inp.num_shards)  # the shards its pass for the lengths read whole
    lengths, shard_docs = lengths_by_shard(inp, table_pieces(inp, _keeping(slab), cached), progress)
    return ChunkedDocuments(lengths, shard_docs, table_of(inp).shard_tokens, name=display(inp.path), slab=slab)
