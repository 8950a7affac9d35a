"""A Levanter cache as an input format (its row of :data:`~datatools.io.sources.format_table.FORMATS`), read in
place: its ledger and arrays checked when it is detected, its lengths its stored offsets, its documents read
through the :class:`~datatools.io.formats.token_array.TokenArray` protocol, as a token store's are."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from datatools.io import storage
from datatools.io.formats.levanter_cache import LevanterCache, is_levanter_cache
from datatools.io.formats.token_input import InputOptions, TokenInput
from datatools.io.sources.documents import DocumentSource, StoreDocuments


def detect(loc: storage.Location, opts: InputOptions) -> TokenInput | None:
    if not is_levanter_cache(loc):  # Marin keeps them in gs://
        return None
    cache = LevanterCache(loc.path)  # the ledger and the arrays checked here, before any token is read
    return TokenInput(loc.path, "levanter", nbytes=8 * (len(cache) + 1), levanter=cache)


def lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    yield 0, inp.levanter_cache.lengths(), inp.nbytes


def documents(inp: TokenInput, progress: Callable[[int, int], None] | None) -> DocumentSource:
    return StoreDocuments(inp.levanter_cache)
