"""The token store as an input format (its row of :data:`~datatools.io.sources.format_table.FORMATS`): a directory
(or a bucket's prefix) that :func:`~datatools.io.formats.store.is_token_store` recognises, opened once; its lengths
are its stored offsets, its documents read through the :class:`~datatools.io.formats.token_array.TokenArray`
protocol (:class:`~datatools.io.sources.documents.StoreDocuments`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from datatools.io import storage
from datatools.io.formats.store import TokenStore, is_token_store
from datatools.io.formats.token_input import InputOptions, TokenInput
from datatools.io.sources.documents import DocumentSource, StoreDocuments


def detect(loc: storage.Location, opts: InputOptions) -> TokenInput | None:
    if not is_token_store(loc):
        return None
    store = TokenStore(loc.path)
    return TokenInput(loc.path, "store", nbytes=8 * (len(store) + 1), store=store)


def lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    yield 0, inp.token_store.lengths(), inp.nbytes


def documents(inp: TokenInput, progress: Callable[[int, int], None] | None) -> DocumentSource:
    return StoreDocuments(inp.token_store)
