"""The stored token array protocol: what the readers above a store
(:class:`~datatools.io.sources.documents.StorePieceReader`) read a :class:`~datatools.io.formats.store.TokenStore` and a
:class:`~datatools.io.formats.levanter_cache.LevanterCache` through.

Documents back to back in one flat array of tokens, ``offsets`` giving where each begins (int64, ``len + 1``
values from 0 to ``num_tokens``). A token range is read by one call, :meth:`TokenArray.read` (waits) or
:meth:`TokenArray.read_async` (the same read issued in the background); every other read (a document, a range of
documents) is a range of tokens found from the offsets. Both implementations are checked against this protocol by
mypy (``StoreDocuments`` takes a ``TokenArray``: the store and the Levanter cache formats each pass theirs; and
``tests/test_architecture.py`` calls a function typed to take one with each).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Protocol, Self

import numpy as np
import tensorstore as ts


class TokenRead(Protocol):
    """A token range read in the background (:meth:`TokenArray.read_async`): a tensorstore future, or one made of
    several (:class:`~datatools.io.formats.shard_reads.JoinedRead`)."""

    def done(self) -> bool: ...
    def result(self) -> np.ndarray: ...
    def add_done_callback(self, callback: Callable[[Self], None]) -> None: ...


class TokenArray(Protocol):
    """A token store or a Levanter cache: documents' tokens back to back, read by token range."""

    @property
    def path(self) -> str | os.PathLike[str]:
        """Where it is stored (a local directory, or the URL of a prefix in object storage)."""
        ...

    @property
    def dtype(self) -> np.dtype:
        """The dtype :meth:`read` returns (the store's uint16/uint32; a Levanter cache's int32)."""
        ...

    @property
    def num_tokens(self) -> int:
        """Tokens stored, every document's back to back."""
        ...

    @property
    def offsets(self) -> np.ndarray:
        """int64 (documents + 1,): document i is tokens ``[offsets[i], offsets[i + 1])``."""
        ...

    @property
    def read_granularity(self) -> int:
        """Tokens a read fetches at least (an inner chunk of a sharded array, else a stored chunk)."""
        ...

    @property
    def object_tokens(self) -> int:
        """Tokens per stored object (file or bucket object); a read never needs to cross one."""
        ...

    @property
    def retries_failed_reads(self) -> bool:
        """Whether a failed :meth:`read_async` is worth one more try through :meth:`read` before its error is
        raised: True where :meth:`read`'s error names the damaged chunk (and a passing storage failure may pass);
        False where the background read's own error names it already (a token store's ranged reads)."""
        ...

    def __len__(self) -> int:
        """Documents stored."""
        ...

    def lengths(self) -> np.ndarray:
        """int64 tokens per document, from the offsets alone."""
        ...

    def read(self, begin: int, end: int) -> np.ndarray:
        """Tokens ``[begin, end)`` of the flat array, checked (ValueError naming the store and the chunk when one is
        missing or corrupt, OSError when the storage fails)."""
        ...

    def read_async(
        self, begin: int, end: int, *, batch: ts.Batch | None = None, out: Sequence[np.ndarray] | None = None
    ) -> TokenRead:
        """:meth:`read` issued now (in ``batch``), not waited for: a future (``done()``, ``result()``,
        ``add_done_callback``) whose ``result()`` is the tokens, or raises what :meth:`read` would. ``out``: writeable
        arrays of the array's dtype whose sizes add up to ``end - begin``, filled in order (a token store decodes
        straight into them, one read each, all in ``batch``; a Levanter cache reads the range once and copies): the
        tokens are there once ``result()`` returns."""
        ...
