"""The input formats: ONE table (:data:`FORMATS`), one :class:`Format` row per format, tried in order by
:func:`datatools.io.sources.inputs.open_input`. Each format is one module of this floor, ``*_format.py`` (its
``detect``, ``lengths`` and ``documents``, reading through its reader in ``io/formats/``); a new format is its module
and one row here. No code outside a format's module switches on an input's kind."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from datatools.io import storage
from datatools.io.formats.token_input import InputOptions, TokenInput
from datatools.io.sources import (
    array_record_format,
    flat_format,
    lengths_format,
    levanter_format,
    numpy_format,
    store_format,
    table_format,
)
from datatools.io.sources.documents import DocumentSource


@dataclass(frozen=True)
class Format:
    """One input format: how it is recognised (``detect``: a :class:`TokenInput`, or None when the place, local or
    a URL, is not one), how its lengths stream (``lengths``: ``(shard, lengths, bytes)``) and its documents are
    read (``documents``); ``offsets``: its lengths come from stored offsets (no token read); ``pipeline``: a
    pipeline config may name it as a source; ``lengths_in_place``: its lengths as one array read in place, not
    copied (``lengths.npy`` memory-mapped: 10^9 lengths are not copied for an analysis)."""

    name: str
    detect: Callable[[storage.Location, InputOptions], TokenInput | None]
    lengths: Callable[[TokenInput], Iterator[tuple[int, np.ndarray, int]]]
    documents: Callable[[TokenInput, Callable[[int, int], None] | None], DocumentSource]
    offsets: bool = False
    pipeline: bool = True
    lengths_in_place: Callable[[TokenInput], np.ndarray] | None = None


FORMATS = (  # in the order they are tried: the table format last, it takes what no other claims
    Format("array_record", array_record_format.detect, array_record_format.lengths, array_record_format.documents),
    Format("store", store_format.detect, store_format.lengths, store_format.documents, offsets=True),
    Format("levanter", levanter_format.detect, levanter_format.lengths, levanter_format.documents, offsets=True),
    Format("numpy", numpy_format.detect, numpy_format.lengths, numpy_format.documents),
    Format(
        "lengths",
        lengths_format.detect,
        lengths_format.lengths,
        lengths_format.documents,
        pipeline=False,
        lengths_in_place=lengths_format.lengths_in_place,
    ),
    Format("flat", flat_format.detect, flat_format.lengths, flat_format.documents, pipeline=False),
    Format("table", table_format.detect, table_format.lengths, table_format.documents),
)
FORMAT = {f.name: f for f in FORMATS}  # TokenInput.format -> its row
