"""A NumPy directory (``tokens.npy`` with ``lengths.npy`` or ``offsets.npy``) as an input format (its row of
:data:`~datatools.io.sources.format_table.FORMATS`): memory-mapped, its token ids checked once."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from datatools.io import storage
from datatools.io.formats.numpy_files import numpy_dir, numpy_dir_files
from datatools.io.formats.token_input import InputOptions, TokenInput
from datatools.io.sources.documents import ArrayDocuments, DocumentSource


def detect(loc: storage.Location, opts: InputOptions) -> TokenInput | None:
    if not (loc.is_dir() and (files := numpy_dir_files(loc.path))):
        return None
    return TokenInput(loc.path, "numpy", nbytes=sum(storage.location(f).size() for f in files[:2]))


def lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    _, offsets = numpy_dir(inp.path)  # the token ids are checked there too: in [0, 2**31 - 1]
    yield 0, np.diff(offsets), inp.nbytes


def documents(inp: TokenInput, progress: Callable[[int, int], None] | None) -> DocumentSource:
    return ArrayDocuments(*numpy_dir(inp.path))
