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
    "InputOptions",
    "TokenInput",
    "lengths_in_place",
    "open_documents",
    "open_input",
    "read_lengths",
    "read_lengths_by_shard",
]


def open_input(path: str | os.PathLike[str], options: InputOptions | None = None) -> TokenInput:
    """Resolve ``path`` to a :class:`TokenInput`, checking the column and the tokenizer before any data is read.

    Args:
      path: a file or directory (see the module docstring).
      options: what the caller says about the input (:class:`InputOptions`, checked when made: the column, the
        tokenizer and its settings, BOS / EOS, a flat file's separator and dtype, plain text files); None: the
        defaults (the column detected, no tokenizer).
    """
    if isinstance(path, (str, os.PathLike)) and not os.fspath(path):
        raise ValueError("an empty path (name a file or directory; '.' is the current one)")
    opts = InputOptions() if options is None else options
    if not isinstance(opts, InputOptions):
        raise TypeError(f"options must be an InputOptions (datatools.io); got {short_repr(opts)}")
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
