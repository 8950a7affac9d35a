"""Any supported input, resolved once: what it is, how to stream its lengths, how to read its documents.

Inputs (a file or a directory):

* the token store of the pre-tokenize job (lengths from its offsets, no token read);
* a Levanter (Marin) token cache, found by its ``shard_ledger.json``
  (:mod:`datatools.io.levanter_cache`: its ``input_ids``, lengths from its offsets);
* Parquet, Arrow IPC / Feather, JSON Lines and Hugging Face ``save_to_disk``
  directories, with a list-of-integers token column, or a text column plus a
  tokenizer (:mod:`datatools.io.tokenizer`: truncation and padding off);
* ArrayRecord files (MaxText's Grain input; :mod:`datatools.io.array_record_files`): one file, a glob or a
  comma list as MaxText writes ``grain_train_files``, records of ``tf.train.Example`` with a token feature
  (``inputs``, ...) or a text feature tokenized by the tokenizer;
* NumPy: a directory with ``tokens.npy`` and ``lengths.npy`` or ``offsets.npy``; or
  one flat token file (``.bin``/``.npy``) cut after every ``eos_id``.

:func:`open_input` checks the path, the column and the tokenizer before any data is
read. :func:`read_lengths` streams the input shard by shard (a Parquet row group,
Arrow batches, a block of JSON lines, a slice of a flat file): memory holds the
lengths and one batch, never the data. :func:`open_documents` gives a
:class:`~datatools.io.documents.DocumentSource` that reads documents on demand.
"""

from __future__ import annotations

import glob
import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from datatools.base.checks import short_repr
from datatools.base.progress import doing
from datatools.io import array_record_files, numpy_files, storage
from datatools.io.discover import Shard, list_shards
from datatools.io.documents import ArrayDocuments, ChunkedDocuments, DocumentSource, StoreDocuments
from datatools.io.levanter_cache import LevanterCache, is_levanter_cache
from datatools.io.numpy_files import (
    BIN_DTYPES,
    check_token_values,
    flat_array,
    flat_slices,
    lengths_only,
    lengths_only_file,
    numpy_dir,
    numpy_dir_files,
)
from datatools.io.paths import display
from datatools.io.sentencepiece_encoder import SentencePieceEncoder, is_sentencepiece, open_sentencepiece
from datatools.io.store import TokenStore, is_token_store
from datatools.io.tables import (
    TEXT_COLUMNS,
    column_batches,
    detect_column,
    shard_bytes,
    shard_columns,
    text_values,
    token_arrays,
)
from datatools.io.tokenizer import TextEncoder, open_encoder

INT32_MAX = np.iinfo(np.int32).max
LENGTH_ROWS = 4096  # text rows turned into Python strings at a time when only lengths are read


@dataclass(repr=False)
class TokenInput:
    """A resolved input: what it is and how to read it. Picklable (worker processes re-read shards).

    Attributes:
      path: the path given: a ``Path``, or the URL of an input in object storage.
      kind: ``store``, ``levanter`` (a Levanter cache), ``numpy`` (tokens.npy + lengths/offsets), ``lengths``
        (lengths.npy alone: planning and analysis only),
        ``flat`` (.bin / .npy split on eos), or ``table`` (Parquet / Arrow / JSON Lines / HF directory, or
        ArrayRecord files: then ``files`` lists them).
      column: the token or text column (tables only).
      is_text: the column holds text, tokenized by ``encoder``.
      shards: the table shards, in order.
      nbytes: bytes of input (for progress and throughput).
    """

    path: str | Path
    kind: str
    column: str | None = None
    is_text: bool = False
    shards: list[Shard] = field(default_factory=list)
    nbytes: int = 0
    encoder: TextEncoder | SentencePieceEncoder | None = None
    eos_id: int | None = None
    bin_dtype: str = "uint16"
    levanter: LevanterCache | None = field(default=None, repr=False)  # opened once: its offsets are read on open
    store: TokenStore | None = field(default=None, repr=False)  # opened once (in a bucket: ~10 requests)
    files: list[Path] = field(default_factory=list)  # ArrayRecord files, in order (a table of records)

    def __repr__(self) -> str:
        """Short: the path, the kind, the column, shard count and bytes, the tokenizer file (not its JSON)."""
        parts = [repr(str(self.path)), f"kind={self.kind!r}"]
        if self.column is not None:
            parts.append(f"column={self.column!r}" + (" (text)" if self.is_text else ""))
        if self.shards:
            parts.append(f"shards={len(self.shards)}")
        parts.append(f"nbytes={self.nbytes}")
        if self.encoder is not None:
            parts.append(f"tokenizer={self.encoder.source!r} (sha256 {self.encoder.sha256[:12]})")
        if self.kind == "flat":
            parts.append(f"eos_id={self.eos_id}, bin_dtype={self.bin_dtype!r}")
        return f"TokenInput({', '.join(parts)})"

    @property
    def table_column(self) -> str:
        """The token or text column (tables)."""
        if self.column is None:
            raise ValueError(f"{display(self.path)}: a {self.kind} input has no column")
        return self.column

    @property
    def text_encoder(self) -> TextEncoder | SentencePieceEncoder:
        """The tokenizer of a text column."""
        if self.encoder is None:
            raise ValueError(f"{display(self.path)}: column {self.column!r} holds text and no tokenizer was given")
        return self.encoder

    @property
    def token_store(self) -> TokenStore:
        """The token store (kind ``store``), opened once: by :func:`open_input`, or here."""
        if self.kind != "store":
            raise ValueError(f"{display(self.path)}: a {self.kind} input, not a token store")
        if self.store is None:
            self.store = TokenStore(self.path)
        return self.store

    @property
    def levanter_cache(self) -> LevanterCache:
        """The Levanter cache, opened once (kind ``levanter``)."""
        if self.levanter is None:
            raise ValueError(f"{display(self.path)}: a {self.kind} input, not an opened Levanter cache")
        return self.levanter

    @property
    def flat_eos_id(self) -> int:
        """The separator of a flat token file (kind ``flat``)."""
        if self.eos_id is None:
            raise ValueError(f"{display(self.path)}: a flat token file needs --eos-id to find the document boundaries")
        return self.eos_id

    @property
    def num_shards(self) -> int:
        if self.files:
            return len(self.files)
        if self.kind == "table":
            return len(self.shards)
        if self.kind == "flat":
            return max(1, -(-int(flat_array(self.path, self.bin_dtype).shape[0]) // numpy_files.FLAT_SLICE))
        return 1

    def shard_batches(self, k: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(tokens, lengths) of table shard ``k``, a bounded batch at a time; text is tokenized here."""
        if self.files:
            encode = self.encoder.encode if self.is_text and self.encoder is not None else None
            yield from array_record_files.documents(self.files[k], str(self.column), encode)
            return
        shard, column = self.shards[k], self.table_column
        where = shard.describe()
        for col in column_batches(shard, column, self.is_text):
            if self.is_text:
                tokens, lengths = self.text_encoder.encode(text_values(col, where, column))
            else:
                tokens, lengths = token_arrays(col, where, column)
            yield tokens, lengths

    def shard_lengths(self, k: int) -> Iterator[np.ndarray]:
        """int64 tokens per document of table shard ``k``, a bounded batch at a time. Text is tokenized
        :data:`LENGTH_ROWS` rows at a time and only the counts are kept (:meth:`TextEncoder.count_tokens`):
        memory holds one batch's strings, never its tokens (a text column once took 3.1-3.7 GB on 62-86 MB
        of Parquet)."""
        if self.files:
            count = self.encoder.count_tokens if self.is_text and self.encoder is not None else None
            yield from array_record_files.lengths(self.files[k], str(self.column), count)
            return
        shard, column = self.shards[k], self.table_column
        where = shard.describe()
        for col in column_batches(shard, column, self.is_text):
            if not self.is_text:
                yield token_arrays(col, where, column)[1]
                continue
            for a in range(0, len(col), LENGTH_ROWS):
                yield self.text_encoder.count_tokens(text_values(col.slice(a, LENGTH_ROWS), where, column))

    def shard_tokens(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(int32 tokens, int64 lengths) of table shard ``k`` whole (for :class:`ChunkedDocuments`)."""
        tokens, lengths = [], []
        for t, n in self.shard_batches(k):
            if t.size and int(t.max()) > INT32_MAX:
                where = display(self.files[k]) if self.files else self.shards[k].describe()
                raise ValueError(f"{where}: token id {int(t.max())} does not fit int32")
            tokens.append(t.astype(np.int32, copy=False))
            lengths.append(n)
        return _concat(tokens, np.int32), _concat(lengths, np.int64)

    def describe(self) -> dict:
        """What reports record about the input."""
        out = {"path": display(self.path), "kind": self.kind, "bytes": self.nbytes}
        if self.files:
            out["format"] = "array_record"
        if self.column:
            out["column"] = self.column
        if self.encoder is not None:
            out["tokenizer"] = self.encoder.describe()
        return out


def _concat(parts: list[np.ndarray], dtype) -> np.ndarray:
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def open_input(
    path: str | os.PathLike,
    *,
    column: str | None = None,
    tokenizer: str | os.PathLike | None = None,
    tokenizer_settings: str = "off",
    bos: str | int | None = None,
    eos: str | int | None = None,
    eos_id: int | None = None,
    bin_dtype: str = "uint16",
) -> TokenInput:
    """Resolve ``path`` to a :class:`TokenInput`, checking the column and the tokenizer before any data is read.

    Args:
      path: a file or directory (see the module docstring).
      column: the token or text column of a table; detected when exactly one of
        ``input_ids``, ``tokens``, ``token_ids``, ``inputs`` (MaxText's name), ``text`` is present.
      tokenizer: a Hugging Face ``tokenizer.json``, for a text column.
      tokenizer_settings: ``off`` (default: no truncation, padding or template
        special tokens) or ``keep`` (the file's settings as they are).
      bos, eos: a token (name, id, or ``"auto"``) added before / after every text.
      eos_id: the separator of a flat token file.
      bin_dtype: token dtype of a ``.bin`` file (``uint16`` or ``uint32``).
    """
    if isinstance(path, (str, os.PathLike)) and not os.fspath(path):
        raise ValueError("an empty path (name a file or directory; '.' is the current one)")
    opts = InputOptions(column, tokenizer, tokenizer_settings, bos, eos, eos_id, bin_dtype)
    loc = storage.location(path)
    if loc.has_directories and array_record_files.detect(path):  # files, globs, comma lists: local names
        return _array_record_input(path, opts)
    doing(f"listing {loc.display}")
    if not _local_pattern(path) and not loc.exists():
        raise ValueError(f"{loc.display}: no such file or directory")
    if bin_dtype not in BIN_DTYPES:
        raise ValueError(f"bin dtype must be one of {', '.join(BIN_DTYPES)}; got {short_repr(bin_dtype)}")
    if eos_id is not None and (isinstance(eos_id, bool) or not isinstance(eos_id, int) or eos_id < 0):
        raise ValueError(f"eos id must be a non-negative integer; got {short_repr(eos_id)}")
    for fmt in FORMATS:
        if (found := fmt.detect(loc, opts)) is not None:
            return found
    raise AssertionError("the table format takes any input")  # pragma: no cover


@dataclass(frozen=True)
class InputOptions:
    """What :func:`open_input` was told about an input (a format's ``detect`` uses what applies to it)."""

    column: str | None = None
    tokenizer: str | os.PathLike | None = None
    tokenizer_settings: str = "off"
    bos: str | int | None = None
    eos: str | int | None = None
    eos_id: int | None = None
    bin_dtype: str = "uint16"


def _local_pattern(path: str | os.PathLike) -> list[Path]:
    """The files of a local glob or comma list (as MaxText writes ``grain_train_files``), in order; [] for a
    path that exists as written or is a URL. A pattern that matches nothing is a ValueError naming it."""
    text = os.fspath(path)
    if not storage.location(text).has_directories or os.path.exists(text) or not ("," in text or glob.has_magic(text)):
        return []
    return array_record_files.expand(text)


def _encoder(
    tokenizer: str | os.PathLike, settings: str, bos: str | int | None, eos: str | int | None
) -> TextEncoder | SentencePieceEncoder:
    """A ``tokenizer.json`` (Hugging Face tokenizers) or a SentencePiece ``.model`` (MaxText's tokenizer_path)."""
    if is_sentencepiece(tokenizer):
        return open_sentencepiece(tokenizer, bos=bos, eos=eos)
    return open_encoder(tokenizer, settings=settings, bos=bos, eos=eos)


def _tokenized(inp: TokenInput, opts: InputOptions, where: str, what: str) -> TokenInput:
    """``inp`` with its tokenizer: a text column needs one, a token column refuses one."""
    if inp.is_text:
        if opts.tokenizer is None:
            raise ValueError(
                f"{where}: {what} {inp.column!r} holds text; pass --tokenizer (tokenizer.json or a SentencePiece "
                f".model) to tokenize it"
            )
        inp.encoder = _encoder(opts.tokenizer, opts.tokenizer_settings, opts.bos, opts.eos)
    elif opts.tokenizer is not None or opts.bos is not None or opts.eos is not None:
        applies = "--tokenizer/--bos/--eos apply" if what == "column" else "--tokenizer applies"
        raise ValueError(f"{where}: {what} {inp.column!r} holds token ids already; {applies} to text")
    return inp


def _array_record_input(path: str | os.PathLike, opts: InputOptions) -> TokenInput:
    """ArrayRecord files (a file, a glob, a comma list): the feature and the tokenizer checked on the first file."""
    files = array_record_files.expand(path)
    col, is_text = array_record_files.detect_feature(files[0], opts.column)
    inp = TokenInput(Path(os.fspath(path)), "table", column=col, is_text=is_text, files=files)
    inp.nbytes = sum(f.stat().st_size for f in files)
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
    return TokenInput(loc.path, "numpy", nbytes=sum(storage.size(f) for f in files[:2]))


def _detect_lengths(loc: storage.Location, opts: InputOptions) -> TokenInput | None:
    only = lengths_only_file(loc.path)
    return None if only is None else TokenInput(loc.path, "lengths", nbytes=storage.size(only))


def _detect_flat(loc: storage.Location, opts: InputOptions) -> TokenInput | None:
    if Path(loc.name).suffix.lower() not in (".bin", ".npy") or not loc.is_file():
        return None
    if opts.eos_id is None:
        raise ValueError(f"{loc.display}: a flat token file needs --eos-id to find the document boundaries")
    return TokenInput(loc.path, "flat", nbytes=loc.size(), eos_id=opts.eos_id, bin_dtype=opts.bin_dtype)


def _detect_table(loc: storage.Location, opts: InputOptions) -> TokenInput:
    """Parquet, Arrow, JSON Lines files, a directory of them, a glob or comma list of them: the column checked on
    the first shard (every input that is no other format is read as a table, or refused naming why)."""
    pattern = _local_pattern(loc)
    if not pattern and loc.has_directories and loc.is_dir():
        if not any(p for p in loc.local_path.iterdir() if not p.name.startswith(".")):
            raise ValueError(f"{loc.display}: empty directory")
    shards = [s for f in pattern for s in list_shards(f)] if pattern else list_shards(loc.path)
    if any(s.kind == "text" for s in shards):
        raise ValueError(
            f"{display(shards[-1].files[0])}: plain text files have no token column; "
            f"pre-tokenize them first (datatools pretokenize)"
        )
    where = display(shards[0].files[0])
    columns = shard_columns(shards[0])
    col = detect_column(list(columns), opts.column, where)
    nbytes = sum(storage.size(f) for f in dict.fromkeys(x for s in shards for x in s.files))
    inp = TokenInput(loc.path, "table", column=col, shards=shards, nbytes=nbytes)
    inp.is_text = col in TEXT_COLUMNS or columns[col]
    return _tokenized(inp, opts, where, "column")


def _store_lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    yield 0, inp.token_store.lengths(), inp.nbytes


def _levanter_lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    yield 0, inp.levanter_cache.lengths(), inp.nbytes


def _numpy_lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    _, offsets = numpy_dir(inp.path)  # the token ids are checked there too: in [0, 2**31 - 1]
    yield 0, np.diff(offsets), inp.nbytes


def _lengths_lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    lengths = lengths_only(inp.path)  # memory-mapped, streamed a slice at a time
    for a in range(0, lengths.shape[0], numpy_files.FLAT_SLICE):
        end = a + numpy_files.FLAT_SLICE >= lengths.shape[0]
        yield 0, np.asarray(lengths[a : a + numpy_files.FLAT_SLICE], dtype=np.int64), inp.nbytes if end else 0


def _flat_lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    for k, (lengths, nbytes) in enumerate(flat_slices(inp.path, inp.bin_dtype, inp.flat_eos_id)):
        yield k, lengths, nbytes


def _table_lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    with ThreadPoolExecutor(1) as pool:  # decoded one shard ahead, in a thread
        ahead: deque = deque()
        for k in range(inp.num_shards):
            ahead.append(pool.submit(_shard_lengths, inp, k))
            if len(ahead) > 1:
                yield from ahead.popleft().result()
        while ahead:
            yield from ahead.popleft().result()


def _numpy_documents(inp: TokenInput, progress: Callable[[int, int], None] | None) -> DocumentSource:
    tokens, offsets = numpy_dir(inp.path)  # token ids checked there
    return ArrayDocuments(tokens, offsets)


def _no_documents(inp: TokenInput, progress: Callable[[int, int], None] | None) -> DocumentSource:
    raise ValueError(
        f"{display(inp.path)}: holds lengths.npy but no tokens.npy: enough to plan (datatools pack) "
        f"and analyse (datatools analyze-padding), not to read documents"
    )


def _flat_documents(inp: TokenInput, progress: Callable[[int, int], None] | None) -> DocumentSource:
    lengths = read_lengths(inp, progress=progress)
    tokens = flat_array(inp.path, inp.bin_dtype)
    _check_int32(tokens, display(inp.path))
    return ArrayDocuments(tokens, np.concatenate(([0], np.cumsum(lengths))))


def _table_documents(inp: TokenInput, progress: Callable[[int, int], None] | None) -> DocumentSource:
    lengths, shard_docs = read_lengths_by_shard(inp, progress=progress)
    return ChunkedDocuments(lengths, shard_docs, inp.shard_tokens, name=display(inp.path))


@dataclass(frozen=True)
class Format:
    """One input format: how it is recognised (``detect``: a :class:`TokenInput`, or None when the place is not
    one), how its lengths stream (``lengths``: ``(shard, lengths, bytes)``) and its documents are read
    (``documents``); ``offsets``: its lengths come from stored offsets (no token read); ``pipeline``: a pipeline
    config may name it as a source."""

    kind: str
    detect: Callable[[storage.Location, InputOptions], TokenInput | None]
    lengths: Callable[[TokenInput], Iterator[tuple[int, np.ndarray, int]]]
    documents: Callable[[TokenInput, Callable[[int, int], None] | None], DocumentSource]
    offsets: bool = False
    pipeline: bool = True


FORMATS = (  # in the order they are tried: the table format last, it takes what no other claims
    Format("store", _detect_store, _store_lengths, lambda inp, _: StoreDocuments(inp.token_store), offsets=True),
    Format("levanter", _detect_levanter, _levanter_lengths, lambda inp, _: StoreDocuments(inp.levanter_cache), True),
    Format("numpy", _detect_numpy, _numpy_lengths, _numpy_documents),
    Format("lengths", _detect_lengths, _lengths_lengths, _no_documents, pipeline=False),
    Format("flat", _detect_flat, _flat_lengths, _flat_documents, pipeline=False),
    Format("table", _detect_table, _table_lengths, _table_documents),
)
FORMAT = {f.kind: f for f in FORMATS}  # TokenInput.kind -> its format


def iter_lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    """Yield ``(shard, lengths, bytes)`` a bounded batch at a time; ``bytes`` is counted at a shard's last batch.
    A store and a NumPy directory give their lengths from their offsets alone; tables are decoded one shard
    ahead, in a thread."""
    return FORMAT[inp.kind].lengths(inp)


def _shard_lengths(inp: TokenInput, k: int) -> list[tuple[int, np.ndarray, int]]:
    out = [(k, lengths, 0) for lengths in inp.shard_lengths(k)]
    nbytes = inp.files[k].stat().st_size if inp.files else shard_bytes(inp.shards[k])
    return out + [(k, np.zeros(0, np.int64), nbytes)]


def read_lengths_by_shard(
    inp: TokenInput, *, progress: Callable[[int, int], None] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """int64 tokens per document of the whole input, and documents per shard.

    Memory: the lengths it returns, plus at most half as much again while reading
    (batches are kept as int32 and copied into the result one by one), plus one batch.
    ``progress``, when given, is called with ``(shards_done, bytes_done)`` after each shard.
    An input of no document is a ValueError naming it; ``inp`` that is not a :class:`TokenInput` a TypeError.
    """
    _check_input(inp)
    parts: list[np.ndarray] = []
    docs_in: dict[int, int] = {}
    done_bytes = 0
    shards = inp.num_shards
    for k, lengths, nbytes in iter_lengths(inp):
        if k not in docs_in:  # what the command is doing, when no bar shows it (base/progress.py)
            doing(f"reading the lengths of {display(inp.path)}: shard {k + 1:,} of {shards:,}")
        docs_in[k] = docs_in.get(k, 0) + lengths.size
        if lengths.size:
            parts.append(lengths.astype(np.int32) if int(lengths.max()) <= INT32_MAX else lengths)
        if nbytes:
            done_bytes += nbytes
            if progress is not None:
                progress(k + 1, done_bytes)
    shard_docs = np.zeros(max(docs_in, default=0) + 1, np.int64)
    shard_docs[list(docs_in)] = list(docs_in.values())
    out = np.empty(int(shard_docs.sum()), np.int64)
    at = 0
    parts.reverse()  # pop from the end: O(1) each
    while parts:  # copy and free the parts one at a time: the peak is the result plus the int32 parts
        part = parts.pop()
        out[at : at + part.size] = part
        at += part.size
    if not out.size:
        raise ValueError(f"{display(inp.path)}: no documents (an empty input)")
    return out, shard_docs


def _check_input(inp) -> None:
    if not isinstance(inp, TokenInput):
        raise TypeError(f"expected the TokenInput that open_input() returns, got {short_repr(inp)}")


def read_lengths(inp: TokenInput, *, progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """int64 tokens per document of the whole input (see :func:`read_lengths_by_shard`)."""
    return read_lengths_by_shard(inp, progress=progress)[0]


def open_documents(inp: TokenInput, *, progress: Callable[[int, int], None] | None = None) -> DocumentSource:
    """The input's documents, read on demand: a token store through its chunk cache, NumPy files
    memory-mapped, tables shard by shard (:class:`ChunkedDocuments`, after one streaming pass for the lengths).
    An input of no document is a ValueError naming it; ``inp`` that is not a :class:`TokenInput` a TypeError."""
    _check_input(inp)
    source = _open_documents(inp, progress)
    if len(source) == 0:
        raise ValueError(f"{display(inp.path)}: no documents (an empty input)")
    return source


def _open_documents(inp: TokenInput, progress: Callable[[int, int], None] | None) -> DocumentSource:
    fmt = FORMAT[inp.kind]
    doing(f"reading the {'offsets' if fmt.offsets else 'lengths'} of {display(inp.path)}")
    return fmt.documents(inp, progress)


def _check_int32(tokens: np.ndarray, where: str) -> None:
    """Token ids must be non-negative and fit int32 (the batches' dtype); checked a slice at a time."""
    check_token_values(tokens, where)
    if tokens.dtype.itemsize >= 4 and tokens.size:
        step = numpy_files.FLAT_SLICE
        for a in range(0, tokens.shape[0], step):
            hi = int(np.asarray(tokens[a : a + step]).max(initial=0))
            if hi > INT32_MAX:
                raise ValueError(f"{where}: token id {hi} does not fit int32")
