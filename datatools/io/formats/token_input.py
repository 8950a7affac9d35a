"""What an input is, once resolved (:class:`TokenInput`; its format's own part a :class:`FormatState`, defined in
that format's module), what the user said about it (:class:`InputOptions`), and :func:`lengths_by_shard`, the one
pass that gathers an input's lengths; built and read by :mod:`~datatools.io.sources.format_table`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from datatools.base.checks import BIN_DTYPES, short_repr
from datatools.base.progress import doing
from datatools.io.formats.discover import Shard
from datatools.io.formats.numpy_files import INT32_MAX
from datatools.io.formats.sentencepiece_encoder import SentencePieceEncoder
from datatools.io.formats.tokenizer import TextEncoder
from datatools.io.storage.paths import display

Encoder = TextEncoder | SentencePieceEncoder  # what tokenizes a text column


@dataclass(frozen=True)
class FormatState:
    """A format's own part of an opened input (:attr:`TokenInput.opened`): made by the format's ``detect`` and read
    by its module alone (``io/sources/NAME_format.py``: ``TableInput``, ``FlatInput``, ``StoreInput``,
    ``LevanterInput``); a format with nothing of its own (a NumPy directory, ``lengths.npy`` alone) keeps this one.
    What the layers above may ask of any input is declared here, answered as for an input without such a thing; a
    format's class overrides what it has (nothing probes for it)."""

    @property
    def encoder(self) -> Encoder | None:
        """The tokenizer of a text input; None for token ids."""
        return None

    @property
    def shards(self) -> Sequence[Shard]:
        """The table shards, in order (the units a worker process re-reads); empty when the input is no table."""
        return ()

    def num_shards(self, path: str | Path) -> int:
        """Shards of the input at ``path`` (the pieces its lengths stream in): one, unless the format cuts it."""
        return 1

    def describe(self) -> dict[str, object]:
        """What reports record of the format's own state, after the path, kind and bytes (nothing here)."""
        return {}

    def repr_parts(self) -> list[str]:
        """Short ``name=value`` texts for :meth:`TokenInput.__repr__` (never a tokenizer's JSON)."""
        return []

    def tokenizer_identity(self) -> dict[str, object] | None:
        """What tokenized the input: ``{"file", "sha256", "vocab_size"}`` of a text column's tokenizer (a token
        store: its manifest's record); None when nothing says."""
        enc = self.encoder
        if enc is None:
            return None
        return {"file": Path(str(enc.source)).name, "sha256": enc.sha256, "vocab_size": enc.vocab_size}


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
      nbytes: bytes of input (for progress and throughput).
      opened: the format's own part (:class:`FormatState`: a table's column, shards and tokenizer, a flat file's
        separator and dtype, the opened token store or Levanter cache), read by the format's module alone.
    """

    path: str | Path
    kind: str
    format: str = ""
    nbytes: int = 0
    opened: FormatState = field(default_factory=FormatState)

    def __post_init__(self) -> None:
        self.format = self.format or self.kind

    def __repr__(self) -> str:
        """Short: the path, the kind, the bytes, then the format's own (a table's column and shard count, the
        tokenizer file, not its JSON; a flat file's separator and dtype)."""
        parts = [repr(str(self.path)), f"kind={self.kind!r}", f"nbytes={self.nbytes}", *self.opened.repr_parts()]
        return f"TokenInput({', '.join(parts)})"

    @property
    def encoder(self) -> Encoder | None:
        """The tokenizer of a text input (its summary is shown, its identity compared); None for token ids."""
        return self.opened.encoder

    @property
    def text_encoder(self) -> Encoder:
        """The tokenizer of a text input; a ValueError for an input of token ids."""
        enc = self.opened.encoder
        if enc is None:
            raise ValueError(f"{display(self.path)}: a {self.kind} input holds token ids, no text to tokenize")
        return enc

    @property
    def shards(self) -> Sequence[Shard]:
        """The table shards, in order (an ArrayRecord input: one per file); empty when the input is no table."""
        return self.opened.shards

    @property
    def num_shards(self) -> int:
        """Shards the input's lengths stream in (a table's shards, a flat file's slices; else one)."""
        return self.opened.num_shards(self.path)

    def tokenizer_identity(self) -> dict[str, object] | None:
        """What tokenized the input (:meth:`FormatState.tokenizer_identity`); None when nothing says."""
        return self.opened.tokenizer_identity()

    def describe(self) -> dict[str, object]:
        """What reports record about the input."""
        out: dict[str, object] = {"path": display(self.path), "kind": self.kind, "bytes": self.nbytes}
        if self.format != self.kind:
            out["format"] = self.format
        return out | self.opened.describe()


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
