"""What the streaming transforms accept as documents: one per element, or a block of them."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


def _tokens(value: npt.ArrayLike, what: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ValueError(f"{what} must be a 1-D integer token array, got {arr.dtype} {arr.shape}")
    return arr


def document_block(element: Any, feature: str = "tokens") -> tuple[np.ndarray, np.ndarray]:
    """``(tokens, lengths)`` of an element: a token array (one document), a dict holding one under
    ``feature``, or a document block (a dict with ``tokens`` back to back and ``lengths``)."""
    if isinstance(element, dict):
        if "lengths" in element and "tokens" in element:
            tokens, lengths = _tokens(element["tokens"], "a block's tokens"), np.asarray(element["lengths"], np.int64)
            if lengths.ndim != 1 or int(lengths.sum()) != tokens.shape[0] or (lengths < 0).any():
                raise ValueError(f"a document block's lengths must be >= 0 and sum to its {tokens.shape[0]} tokens")
            return tokens, lengths
        if feature not in element:
            raise ValueError(f"element has no {feature!r} feature (features: {', '.join(map(str, element))})")
        element = element[feature]
    tokens = _tokens(element, "a document")
    return tokens, np.asarray([tokens.shape[0]], np.int64)
