"""What an input is, once resolved (:class:`TokenInput`), what the user said about it (:class:`InputOptions`), and
:func:`lengths_by_shard`, the one pass that gathers an input's lengths; built and read by
:mod:`~datatools.io.sources.format_table`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from datatools.base.checks import BIN_DTYPES, short_repr
from datatools.base.progress import doing
from datatools.io.formats import numpy_files
from datatools.io.formats.discover import Shard
from datatools.io.formats.levanter_cache import LevanterCache
from datatools.io.formats.numpy_files import INT32_MAX, flat_array
from datatools.io.formats.sentencepiece_encoder import SentencePieceEncoder
from datatools.io.formats.store import TokenStore, describe_write_order
from datatools.io.formats.tables import column_batches, shard_bytes, text_values, token_arrays
from datatools.io.formats.tokenizer import TextEncoder
from datatools.io.storage.paths import display

LENGTH_ROWS = 4096  # text rows turned into Python strings at a time when only lengths are read


@dataclass(repr=False)
class TokenInput:
    """A resolved input: what it is and how to read it. Picklable (worker processes re-read shards).

    Attributes:
      path: the path given: a ``Path``, or the URL of an input in object storage.
      kind: ``store``, ``levanter`` (a Levanter cache), ``numpy`` (tokens.npy + lengths/offsets), ``lengths``
        (lengths.npy alone: planning and analysis only), ``flat`` (.bin / .npy split on eos), or ``table``
        (Parquet / Arrow / JSON Lines / HF directory, or ArrayRecord files).
      format: the name of the row of the format table that read it (``kind``, or ``array_record``: a table of
        records); :func:`~datatools.io.sources.inputs.read_lengths` and ``open_documents`` call that row.
      column: the token or text column (tables only).
      is_text: the column holds text, tokenized by ``encoder``.
      shards: the table shards, in order (an ArrayRecord input: one per file).
      nbytes: bytes of input (for progress and throughput).
    """

    path: str | Path
    kind: str
    format: str = ""
    column: str | None = None
    is_text: bool = False
    shards: list[Shard] = field(default_factory=list)
    nbytes: int = 0
    encoder: TextEncoder | SentencePieceEncoder | None = None
    eos_id: int | None = None
    bin_dtype: str = "uint16"
    levanter: LevanterCache | None = field(default=None, repr=False)  # opened once: its offsets are read on open
    store: TokenStore | None = field(default=None, repr=False)  # opened once (in a bucket: ~10 requests)

    def __post_init__(self) -> None:
        self.format = self.format or self.kind

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
        if self.eos_id is not None:  # a flat token file
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
        """The token store (kind ``store``), opened once by :func:`open_input`."""
        if self.store is None:
            raise ValueError(f"{display(self.path)}: a {self.kind} input, not a token store")
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
        if self.shards:  # a table
            return len(self.shards)
        if self.eos_id is not None:  # a flat token file: its slices
            return max(1, -(-int(flat_array(self.path, self.bin_dtype).shape[0]) // numpy_files.FLAT_SLICE))
        return 1

    def shard_batches(self, k: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(tokens, lengths) of table shard ``k``, a bounded batch at a time; text is tokenized here."""
        shard, column = self.shards[k], self.table_column
        where = shard.describe()
        for col in column_batches(shard, column, self.is_text):
            if self.is_text:
                yield self.text_encoder.encode(text_values(col, where, column))
            else:
                yield token_arrays(col, where, column)

    def shard_lengths(self, k: int) -> Iterator[np.ndarray]:
        """int64 tokens per document of table shard ``k``, a bounded batch at a time; text is counted
        :data:`LENGTH_ROWS` rows at a time, never held as tokens (a text column once took 3.1-3.7 GB on 62-86 MB)."""
        shard, column = self.shards[k], self.table_column
        where = shard.describe()
        for col in column_batches(shard, column, self.is_text):
            if not self.is_text:
                yield token_arrays(col, where, column)[1]
                continue
            for a in range(0, len(col), LENGTH_ROWS):
                yield self.text_encoder.count_tokens(text_values(col.slice(a, LENGTH_ROWS), where, column))

    def shard_nbytes(self, k: int) -> int:
        """Bytes of input shard ``k`` covers (for progress and throughput)."""
        return shard_bytes(self.shards[k])

    def shard_tokens(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(int32 tokens, int64 lengths) of table shard ``k`` whole (for :class:`ChunkedDocuments`)."""
        tokens, lengths = [], []
        for t, n in self.shard_batches(k):
            if t.size and not np.can_cast(t.dtype, np.int32) and int(t.max()) > INT32_MAX:  # int32 ids always fit
                raise ValueError(f"{self.shards[k].describe()}: token id {int(t.max())} does not fit int32")
            tokens.append(t.astype(np.int32, copy=False))
            lengths.append(n)
        return _concat(tokens, np.int32), _concat(lengths, np.int64)

    def describe(self) -> dict[str, Any]:
        """What reports record about the input."""
        out: dict[str, Any] = {"path": display(self.path), "kind": self.kind, "bytes": self.nbytes}
        if self.format != self.kind:
            out["format"] = self.format
        if self.column:
            out["column"] = self.column
        if self.encoder is not None:
            out["tokenizer"] = self.encoder.describe()
        if self.store is not None:
            out["write_order"] = describe_write_order(self.store.manifest)
        stored = self.store if self.store is not None else self.levanter
        if stored is not None:  # what one read fetches: a block shuffle's blocks should fill it
            out["read_tokens"] = int(stored.read_granularity)
        return out


def _concat(parts: list[np.ndarray], dtype: npt.DTypeLike) -> np.ndarray:
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


@dataclass(frozen=True)
class InputOptions:
    """What :func:`~datatools.io.sources.inputs.open_input` was told about an input (a format's ``detect`` uses what
    applies to it), checked when made.

    Args:
      column: the token or text column of a table; detected when exactly one of ``input_ids``, ``tokens``,
        ``token_ids``, ``inputs`` (MaxText's name), ``text`` is present.
      tokenizer: a Hugging Face ``tokenizer.json`` or a SentencePiece ``.model``, for a text column.
      tokenizer_settings: ``off`` (default: no truncation, padding or template special tokens) or ``keep``.
      bos, eos: a token (name, id, or ``"auto"``) added before / after every text.
      eos_id: the separator of a flat token file.
      bin_dtype: token dtype of a ``.bin`` file (``uint16`` or ``uint32``).
      text_files: plain ``.txt`` files are texts, one each (their shards are read by ``datatools pretokenize``
        through :func:`~datatools.io.formats.tables.shard_texts`); else they are refused, naming pretokenize.
    """

    column: str | None = None
    tokenizer: str | os.PathLike[str] | None = None
    tokenizer_settings: str = "off"
    bos: str | int | None = None
    eos: str | int | None = None
    eos_id: int | None = None
    bin_dtype: str = "uint16"
    text_files: bool = False  # plain .txt files are texts (datatools pretokenize reads them; tables here cannot)

    def __post_init__(self) -> None:
        """The options every format may use checked before any is tried."""
        if self.bin_dtype not in BIN_DTYPES:
            choices = ", ".join(BIN_DTYPES)
            raise ValueError(f"bin dtype must be one of {choices}; got {short_repr(self.bin_dtype)}")
        eos_id = self.eos_id
        if eos_id is not None and (isinstance(eos_id, bool) or not isinstance(eos_id, int) or eos_id < 0):
            raise ValueError(f"eos id must be a non-negative integer; got {short_repr(eos_id)}")


def shard_length_pieces(inp: TokenInput, k: int) -> list[tuple[int, np.ndarray, int]]:
    """Shard ``k``'s ``(k, lengths, 0)`` pieces, then ``(k, [], its bytes)``."""
    out = [(k, lengths, 0) for lengths in inp.shard_lengths(k)]
    return out + [(k, np.zeros(0, np.int64), inp.shard_nbytes(k))]


def lengths_by_shard(
    inp: TokenInput, pieces: Iterable[tuple[int, np.ndarray, int]], progress: Callable[[int, int], None] | None
) -> tuple[np.ndarray, np.ndarray]:
    """int64 tokens per document of the whole input, and documents per shard, from its format's ``(shard,
    lengths, bytes)`` pieces (see :func:`datatools.io.sources.inputs.read_lengths_by_shard`)."""
    parts: list[np.ndarray] = []
    docs_in: dict[int, int] = {}
    done_bytes = 0
    shards = inp.num_shards
    for k, lengths, nbytes in pieces:
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
