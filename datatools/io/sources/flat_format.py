"""A flat token file (``.bin`` of ``bin_dtype``, or ``.npy``) split into documents on ``eos_id``, as an input format
(its row of :data:`~datatools.io.sources.format_table.FORMATS`): memory-mapped, scanned a slice at a time."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datatools.io import storage
from datatools.io.formats.numpy_files import FLAT_SLICE, INT32_MAX, flat_array, flat_slices
from datatools.io.formats.token_input import FormatState, InputOptions, TokenInput, lengths_by_shard
from datatools.io.sources.documents import ArrayDocuments, DocumentSource
from datatools.io.storage.paths import display


@dataclass(frozen=True)
class FlatInput(FormatState):
    """A flat token file's own part of an opened input (:attr:`TokenInput.opened`), read by this module alone.

    Attributes:
      eos_id: the separator that ends each document.
      bin_dtype: token dtype of a ``.bin`` file (``uint16`` or ``uint32``; a ``.npy`` file says its own).
    """

    eos_id: int
    bin_dtype: str = "uint16"

    def num_shards(self, path: str | Path) -> int:
        """The file's slices of :data:`~datatools.io.formats.numpy_files.FLAT_SLICE` tokens (at least one)."""
        return max(1, -(-int(flat_array(path, self.bin_dtype).shape[0]) // FLAT_SLICE))

    def repr_parts(self) -> list[str]:
        """The separator and the dtype."""
        return [f"eos_id={self.eos_id}, bin_dtype={self.bin_dtype!r}"]


def _flat(inp: TokenInput) -> FlatInput:
    """The flat file's own part of ``inp`` (made by :func:`detect`); a TypeError for another format's input."""
    if not isinstance(inp.opened, FlatInput):
        raise TypeError(f"{display(inp.path)}: a {inp.format} input, not a flat token file")
    return inp.opened


def detect(loc: storage.Location, opts: InputOptions) -> TokenInput | None:
    if Path(loc.name).suffix.lower() not in (".bin", ".npy") or not loc.is_file():
        return None
    if opts.eos_id is None:
        raise ValueError(f"{loc.display}: a flat token file needs --eos-id to find the document boundaries")
    return TokenInput(loc.path, "flat", nbytes=loc.size(), opened=FlatInput(opts.eos_id, opts.bin_dtype))


def lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    flat = _flat(inp)
    for k, (values, nbytes) in enumerate(flat_slices(inp.path, flat.bin_dtype, flat.eos_id)):
        yield k, values, nbytes


def documents(inp: TokenInput, progress: Callable[[int, int], None] | None) -> DocumentSource:
    doc_lengths = lengths_by_shard(inp, lengths(inp), progress)[0]  # negative ids refused there
    tokens = flat_array(inp.path, _flat(inp).bin_dtype)
    for a in range(0, tokens.shape[0] if tokens.dtype.itemsize >= 4 else 0, FLAT_SLICE):  # batches are int32
        if (hi := int(np.asarray(tokens[a : a + FLAT_SLICE]).max())) > INT32_MAX:
            raise ValueError(f"{display(inp.path)}: token id {hi} does not fit int32")
    return ArrayDocuments(tokens, np.concatenate(([0], np.cumsum(doc_lengths))))
