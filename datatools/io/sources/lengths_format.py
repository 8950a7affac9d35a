"""``lengths.npy`` alone as an input format (its row of :data:`~datatools.io.sources.format_table.FORMATS`):
enough to plan (``datatools pack``) and analyse (``datatools analyze-padding``), not to read documents; memory-mapped,
streamed a slice at a time, or read in place (:func:`lengths_in_place`: 10^9 lengths are not copied)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from datatools.io import storage
from datatools.io.formats.numpy_files import FLAT_SLICE, lengths_only, lengths_only_file
from datatools.io.formats.token_input import InputOptions, TokenInput
from datatools.io.sources.documents import DocumentSource
from datatools.io.storage.paths import display


def detect(loc: storage.Location, opts: InputOptions) -> TokenInput | None:
    only = lengths_only_file(loc.path)
    return None if only is None else TokenInput(loc.path, "lengths", nbytes=storage.location(only).size())


def lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    values = lengths_only(inp.path)  # memory-mapped, streamed a slice at a time
    for a in range(0, values.shape[0], FLAT_SLICE):
        end = a + FLAT_SLICE >= values.shape[0]
        yield 0, np.asarray(values[a : a + FLAT_SLICE], dtype=np.int64), inp.nbytes if end else 0


def lengths_in_place(inp: TokenInput) -> np.ndarray:
    return lengths_only(inp.path)  # memory-mapped


def documents(inp: TokenInput, progress: Callable[[int, int], None] | None) -> DocumentSource:
    raise ValueError(
        f"{display(inp.path)}: holds lengths.npy but no tokens.npy: enough to plan (datatools pack) "
        f"and analyse (datatools analyze-padding), not to read documents"
    )
