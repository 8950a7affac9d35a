"""A Levanter cache as an input format (its row of :data:`~datatools.io.sources.format_table.FORMATS`), read in
place: its ledger and arrays checked when it is detected, its lengths its stored offsets, its documents read
through the :class:`~datatools.io.formats.token_array.TokenArray` protocol, as a token store's are."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from datatools.io import storage
from datatools.io.formats.levanter_cache import LevanterCache, find_ledger
from datatools.io.formats.token_input import FormatState, InputOptions, TokenInput
from datatools.io.sources.documents import DocumentSource, StoreDocuments
from datatools.io.storage.paths import display


@dataclass(frozen=True)
class LevanterInput(FormatState):
    """A Levanter cache's own part of an opened input (:attr:`TokenInput.opened`), read by this module alone.

    Attributes:
      cache: the cache, opened once by :func:`detect` (its offsets are read on open).
    """

    cache: LevanterCache

    def describe(self) -> dict[str, object]:
        """What one read fetches, in tokens (a block shuffle's blocks should fill it)."""
        return {"read_tokens": int(self.cache.read_granularity)}


def _cache(inp: TokenInput) -> LevanterCache:
    """The Levanter cache :func:`detect` opened; a TypeError for another format's input."""
    if not isinstance(inp.opened, LevanterInput):
        raise TypeError(f"{display(inp.path)}: a {inp.format} input, not a Levanter cache")
    return inp.opened.cache


def detect(loc: storage.Location, opts: InputOptions) -> TokenInput | None:
    ledger = find_ledger(loc.path)  # the probe is the ledger's read (Marin keeps caches in gs://: one request)
    if ledger is None:
        return None
    cache = LevanterCache(loc.path, ledger=ledger)  # the arrays checked here, before any token is read
    return TokenInput(loc.path, "levanter", nbytes=8 * (len(cache) + 1), opened=LevanterInput(cache))


def lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    yield 0, _cache(inp).lengths(), inp.nbytes


def documents(inp: TokenInput, progress: Callable[[int, int], None] | None) -> DocumentSource:
    return StoreDocuments(_cache(inp))
