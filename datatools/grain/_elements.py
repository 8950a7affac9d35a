"""What the streaming transforms accept as a document element."""

from __future__ import annotations

import numpy as np


def document_tokens(element, feature: str = "tokens") -> np.ndarray:
    """The 1-D token array of an element: the element itself, or ``element[feature]`` for a dict."""
    if isinstance(element, dict):
        if feature not in element:
            raise ValueError(f"element has no {feature!r} feature (features: {', '.join(map(str, element))})")
        element = element[feature]
    arr = np.asarray(element)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ValueError(f"a document must be a 1-D integer token array, got {arr.dtype} {arr.shape}")
    return arr
