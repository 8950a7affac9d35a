"""The token store as an input format (its row of :data:`~datatools.io.sources.format_table.FORMATS`): a directory
(or a bucket's prefix) that :func:`~datatools.io.formats.store.token_store_manifest` recognises, opened once; its
lengths are its stored offsets, its documents read through the
:class:`~datatools.io.formats.token_array.TokenArray` protocol
(:class:`~datatools.io.sources.documents.StoreDocuments`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from datatools.io import storage
from datatools.io.formats.store import TokenStore, describe_write_order, token_store_manifest
from datatools.io.formats.token_input import FormatState, InputOptions, TokenInput
from datatools.io.sources.documents import DocumentSource, StoreDocuments
from datatools.io.storage.paths import display


@dataclass(frozen=True)
class StoreInput(FormatState):
    """A token store's own part of an opened input (:attr:`TokenInput.opened`), read by this module alone.

    Attributes:
      store: the store, opened once by :func:`detect` (in a bucket: ~10 requests).
    """

    store: TokenStore

    def describe(self) -> dict[str, object]:
        """The write order, and what one read fetches (a block shuffle's blocks should fill it), in tokens."""
        return {
            "write_order": describe_write_order(self.store.manifest),
            "read_tokens": int(self.store.read_granularity),
        }

    def tokenizer_identity(self) -> dict[str, object] | None:
        """The tokenizer the manifest records (its file, SHA-256 and vocabulary size); None when it records none."""
        m = self.store.manifest
        if not m.get("tokenizer_sha256"):
            return None
        return {"file": m.get("tokenizer_file"), "sha256": m["tokenizer_sha256"], "vocab_size": m.get("vocab_size")}


def _store(inp: TokenInput) -> TokenStore:
    """The token store :func:`detect` opened; a TypeError for another format's input."""
    if not isinstance(inp.opened, StoreInput):
        raise TypeError(f"{display(inp.path)}: a {inp.format} input, not a token store")
    return inp.opened.store


def detect(loc: storage.Location, opts: InputOptions) -> TokenInput | None:
    manifest = token_store_manifest(loc)
    if manifest is None:
        return None
    store = TokenStore(loc.path, manifest=manifest)
    return TokenInput(loc.path, "store", nbytes=8 * (len(store) + 1), opened=StoreInput(store))


def lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    yield 0, _store(inp).lengths(), inp.nbytes


def documents(inp: TokenInput, progress: Callable[[int, int], None] | None) -> DocumentSource:
    return StoreDocuments(_store(inp))
