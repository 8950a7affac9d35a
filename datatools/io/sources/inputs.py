"""Any supported input (the formats of :mod:`datatools.io.sources.format_table`), resolved once by :func:`open_input`
(the path, the column and the tokenizer checked before any data is read); :func:`read_lengths` streams its lengths shard
by shard, :func:`open_documents` reads its documents on demand.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from datatools.base.checks import short_repr
from datatools.base.progress import doing
from datatools.io import storage
from datatools.io.formats.token_input import InputOptions, TokenInput, lengths_by_shard
from datatools.io.sources.documents import DocumentSource
from datatools.io.sources.format_table import FORMAT, FORMATS
from datatools.io.storage.paths import display

__all__ = [
    "FORMAT",
    "FORMATS",
    "TokenInput",
    "lengths_in_place",
    "open_documents",
    "open_input",
    "read_lengths",
    "read_lengths_by_shard",
]


def open_input(
    path: str | os.PathLike[str],
    *,
    column: str | None = None,
    tokenizer: str | os.PathLike[str] | None = None,
    tokenizer_settings: str = "off",
    bos: str | int | None = None,
    eos: str | int | None = None,
    eos_id: int | None = None,
    bin_dtype: str = "uint16",
    text_files: bool = False,
) -> TokenInput:
    """Resolve ``path`` to a :class:`TokenInput`, checking the column and the tokenizer before any data is read.

    Args:
      path: a file or directory (see the module docstring).
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
    if isinstance(path, (str, os.PathLike)) and not os.fspath(path):
        raise ValueError("an empty path (name a file or directory; '.' is the current one)")
    opts = InputOptions(column, tokenizer, tokenizer_settings, bos, eos, eos_id, bin_dtype, text_files)  # checked
    loc = storage.location(path)
    doing(f"listing {loc.display}")
    for fmt in FORMATS:  # the table format last: it takes any input (read as a table, or refused naming why)
        if (found := fmt.detect(loc, opts)) is not None:
            return found
    raise AssertionError(f"{loc.display}: no format took it (the table format takes any input)")


def read_lengths_by_shard(
    inp: TokenInput, *, progress: Callable[[int, int], None] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """int64 tokens per document of the whole input, and documents per shard, streamed shard by shard (memory: the
    result, half as much again as int32 batches, and one batch). ``progress``, when given, is called with
    ``(shards_done, bytes_done)`` after each shard. An input of no document is a ValueError naming it; ``inp`` that
    is not a :class:`TokenInput` a TypeError.
    """
    _check_input(inp)
    return lengths_by_shard(inp, FORMAT[inp.format].lengths(inp), progress)


def _check_input(inp: object) -> None:
    if not isinstance(inp, TokenInput):
        raise TypeError(f"expected the TokenInput that open_input() returns, got {short_repr(inp)}")


def read_lengths(inp: TokenInput, *, progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """int64 tokens per document of the whole input (see :func:`read_lengths_by_shard`)."""
    return read_lengths_by_shard(inp, progress=progress)[0]


def lengths_in_place(inp: TokenInput) -> np.ndarray | None:
    """The input's lengths as one array read in place (``lengths.npy`` alone: memory-mapped, never copied), or None
    when its format reads them only by :func:`read_lengths`."""
    _check_input(inp)
    read = FORMAT[inp.format].lengths_in_place
    return None if read is None else read(inp)


def open_documents(inp: TokenInput, *, progress: Callable[[int, int], None] | None = None) -> DocumentSource:
    """The input's documents, read on demand: a token store through its chunk cache, NumPy files
    memory-mapped, tables shard by shard (:class:`ChunkedDocuments`, after one streaming pass for the lengths).
    An input of no document is a ValueError naming it; ``inp`` that is not a :class:`TokenInput` a TypeError."""
    _check_input(inp)
    fmt = FORMAT[inp.format]
    doing(f"reading the {'offsets' if fmt.offsets else 'lengths'} of {display(inp.path)}")
    source = fmt.documents(inp, progress)
    if len(source) == 0:
        raise ValueError(f"{display(inp.path)}: no documents (an empty input)")
    return source
