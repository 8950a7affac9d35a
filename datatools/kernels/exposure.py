"""An exposure ledger's counts: how many tokens of each document were delivered, and how many times its first token.

Numba, one pass over pieces (``doc``, ``start``, ``length``: int64 arrays, as a
:class:`~datatools.kernels.packing.PackPlan` holds them) adding into per-document counters in place: no temporary of
the documents' size (a ``np.bincount`` per batch of pieces would allocate one).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def _add(doc, start, length, tokens, visits):
    for i in range(doc.shape[0]):
        d = doc[i]
        tokens[d] += length[i]
        if start[i] == 0 and length[i] > 0:
            visits[d] += 1


def add_pieces(doc, start, length, tokens: np.ndarray, visits: np.ndarray) -> None:
    """Add pieces to the counters: ``tokens[d]`` (int64) gains each piece's length (tokens), ``visits[d]`` (int64)
    one for each piece of document ``d`` that starts at its token 0 (one per time the document is seen)."""
    _add(
        np.asarray(doc, np.int64),
        np.asarray(start, np.int64),
        np.asarray(length, np.int64),
        tokens,
        visits,
    )


@numba.njit(cache=True)
def _add_rows(row_splits, rows, doc, start, length, sign, tokens, visits):
    for r in rows:
        for i in range(row_splits[r], row_splits[r + 1]):
            d = doc[i]
            tokens[d] += sign * np.int64(length[i])
            if start[i] == 0 and length[i] > 0:
                visits[d] += sign


def add_rows(row_splits, rows, doc, start, length, tokens: np.ndarray, visits: np.ndarray, *, sign: int = 1) -> None:
    """:func:`add_pieces` of the pieces of plan rows ``rows`` (row r holds pieces ``[row_splits[r],
    row_splits[r + 1])``; the arrays as a plan holds them, any integer dtype, memory-mapped or not), without
    gathering them; ``sign`` -1 takes them away (an epoch counted as the whole plan less its rows not delivered)."""
    _add_rows(row_splits, np.asarray(rows, np.int64), doc, start, length, np.int64(sign), tokens, visits)


@numba.njit(cache=True)
def _add_documents(docs, lengths, tokens, visits):
    for i in range(docs.shape[0]):
        d = docs[i]
        n = lengths[d]
        tokens[d] += n
        if n > 0:
            visits[d] += 1


def add_documents(docs, lengths, tokens: np.ndarray, visits: np.ndarray) -> None:
    """:func:`add_pieces` of documents delivered whole: ``tokens[d]`` gains ``lengths[d]``, ``visits[d]`` one if
    the document holds a token, for each of ``docs`` (int64 global ids; a repeated id counts each time)."""
    _add_documents(np.asarray(docs, np.int64), lengths, tokens, visits)


def smallest_count_dtype(values: np.ndarray) -> np.dtype:
    """The smallest unsigned dtype holding every value of ``values`` (counts >= 0): what a ledger file stores."""
    top = int(values.max()) if values.size else 0
    for dtype in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.uint64)
