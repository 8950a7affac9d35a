"""Documented limits and the argument checks every layer shares: bad input raises the same ``ValueError`` /
``TypeError`` wording everywhere, naming the offending value.
"""

from __future__ import annotations

import numbers
from collections.abc import Collection
from typing import Any

import numpy as np
import numpy.typing as npt

OVERFLOW_POLICIES = ("split", "truncate", "drop", "error")

# Documented limits, checked once at every boundary (public functions, CLI options, config fields), so that a
# huge value is refused naming itself instead of overflowing a kernel's int32 or asking for terabytes.
MAX_CTX = 1 << 24  # tokens per row / bucket / tile / chunk: 16,777,216 (one int32 row of 64 MiB per array)
MAX_RECORDS = 1 << 62  # records a permutation or block shuffle addresses (uint64 Feistel arithmetic)
MAX_REPORT_RECORDS = 1 << 24  # records shuffle-report materializes (~80 bytes a record: 1.3 GB, ~10 s at the limit)
MAX_WINDOW = 1 << 20  # open rows of a streaming packer simulation, documents per packing window
MAX_BUCKETS = 1 << 12  # buckets (each is one compiled shape)
MAX_VOCAB = 1 << 24  # model vocabulary (embedding rows)
MAX_TOKEN_ID = (1 << 31) - 1  # token ids travel as int32
MAX_BATCH = 1 << 24  # rows per batch, documents per read block
MAX_TOKEN_BUDGET = 1 << 40  # tokens per batch
# here: the command line parses --workers without importing Grain
MAX_WORKERS = 64  # Grain worker processes: each is a fresh interpreter (~1-2 s of CPU to start); 1024 ran past 60 s
# pretokenize's engines, pack's algorithms, the analyzer's default context cap and trainers: here, so the command
# line parses its flags without importing the modules that use them (a usage error before any live line)
ENGINES = ("local", "ray")
PACK_ALGORITHMS = ("next_fit", "first_fit", "best_fit", "first_fit_decreasing", "best_fit_decreasing", "concat_split")
# the packing algorithm when none is named: every default (pack_lengths, PackOptions, the config, --algorithm) is this
DEFAULT_ALGORITHM = "best_fit_decreasing"
DEFAULT_CTX_CAP = 32768  # tokens: the analyzer's default contexts stop here (longer rows: pass --ctx)
TRAINERS = ("datatools", "maxtext", "levanter", "hf")
BIN_DTYPES = ("uint16", "uint32")  # token dtypes of a flat .bin file (datatools.io.formats.numpy_files)
# model.attention of datatools.train.model (here: the command line parses it without importing JAX)
ATTENTIONS = ("dense", "blocksparse", "fused", "splash", "pallas_blocksparse", "pallas_gpu", "cudnn")


def check_token_ids(tokens: npt.ArrayLike, vocab_size: int, name: str, hint: str = "") -> None:
    """ValueError ``token id T >= NAME V`` (then ``hint``) when an id of ``tokens`` (an int array) is at or above
    ``vocab_size``: the model's embedding has no row for it (``datatools train``, the Levanter integration)."""
    top = int(np.max(tokens)) if np.size(tokens) else -1
    if top >= vocab_size:
        raise ValueError(f"token id {top} >= {name} {vocab_size}{hint}")


def as_lengths(lengths: npt.ArrayLike, name: str = "lengths") -> np.ndarray:
    """Return ``lengths`` as a 1-D int64 array of non-negative integers (tokens). Floats are accepted when every
    value is finite and integral (a CSV or float column); anything else raises ``ValueError`` naming the first
    offending index and value."""
    try:
        arr = np.asarray(lengths)
    except (OverflowError, ValueError, TypeError):
        raise ValueError(f"{name} must be a 1-D sequence of integers, got {short_repr(lengths)}") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of integers, got shape {arr.shape}")
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iuf":
        if arr.dtype.kind == "O" and arr.size:
            try:
                arr = arr.astype(np.float64)
            except (TypeError, ValueError, OverflowError):
                raise ValueError(f"{name} must hold integers, got dtype {np.asarray(lengths).dtype}") from None
        elif arr.size == 0:
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "f":
        finite = np.isfinite(arr)
        bad = ~finite | (arr != np.floor(np.where(finite, arr, 0))) | (np.abs(np.where(finite, arr, 0)) >= 2.0**63)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{name}[{i}] = {arr[i]!r} is not an integer in the int64 range")
        arr = arr.astype(np.int64)
    elif arr.dtype.kind == "u" and arr.dtype.itemsize == 8:
        if arr.size and arr.max() > np.iinfo(np.int64).max:
            i = int(np.argmax(arr))
            raise ValueError(f"{name}[{i}] = {arr[i]} is too large")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < 0:
        i = int(np.argmin(arr))
        raise ValueError(f"{name}[{i}] = {arr[i]} is negative")
    if arr.size and arr.max() > MAX_TOKEN_ID:
        i = int(np.argmax(arr))
        raise ValueError(f"{name}[{i}] = {arr[i]} is over datatools' limit of {MAX_TOKEN_ID:,}")
    return np.ascontiguousarray(arr)


def check_int(value: object, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an int, raising TypeError for non-integers and ValueError outside [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {short_repr(value)}")
    number = int(value)
    if minimum is not None and number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {short_repr(number)}")
    if maximum is not None and number > maximum:
        raise ValueError(f"{name} must be <= {maximum:,} (datatools' limit), got {short_repr(number)}")
    return number


def short_repr(value: object, limit: int = 60) -> str:
    """The repr of a value cut to ``limit`` characters: a message never quotes a huge value whole."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_id(value: object, name: str) -> int:
    """A token id (pad id, eos id): an int in [0, 2**31 - 1], the range int32 batches hold."""
    return check_int(value, name, minimum=0, maximum=MAX_TOKEN_ID)


def check_choice(value: Any, name: str, choices: Collection[object]) -> Any:
    """Return ``value`` if it is one of ``choices``, else raise ValueError listing them."""
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {short_repr(value)}")
    return value
