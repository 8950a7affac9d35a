"""The compact encoding of a plan on disk (:mod:`datatools.io.formats.plan_file` reads and writes it), and rows gathered
back out of it: ``row_starts`` (num_rows + 1,; row ``r`` holds pieces ``[row_starts[r], row_starts[r + 1])``), ``doc``,
``start`` and ``length`` (tokens), each in the smallest unsigned dtype its values need (ctx 2048, documents of a few
hundred tokens: 7 bytes a piece plus 4 a row, against 20 a piece in memory). The header holds a CRC-32 of each array
(:func:`array_digest`, ~6 GB/s) and a SHA-256 of itself (:func:`header_digest`): an edited file is refused.
"""

from __future__ import annotations

import hashlib
import json
import zlib

import numpy as np

from datatools.kernels.packing.plan import PackPlan

FORMAT_VERSION = 2  # 2: digests of the header and of every array
CHUNK = 1 << 24  # values converted at a time by the streaming passes (128 MiB as int64)
ARRAYS = ("row_starts", "doc", "start", "length")
HEADER_DIGEST = "header_sha256"  # the header's key holding its own digest


def crc32_update(values: np.ndarray, crc: int = 0) -> int:
    """``crc`` carried over ``values``' little-endian bytes (as a ``.npy`` file holds them)."""
    arr = np.ascontiguousarray(values)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return zlib.crc32(arr.view(np.uint8).reshape(-1).data, crc)


def array_digest(values: np.ndarray) -> str:
    """``crc32:XXXXXXXX`` of a 1-D array's values, :data:`CHUNK` values at a time (never copied whole)."""
    crc = 0
    for a in range(0, values.shape[0], CHUNK):
        crc = crc32_update(values[a : a + CHUNK], crc)
    return f"crc32:{crc:08x}"


def header_digest(header: dict) -> str:
    """SHA-256 (hex) of ``header``'s canonical JSON (sorted keys, no spaces) without :data:`HEADER_DIGEST`."""
    body = {k: v for k, v in header.items() if k != HEADER_DIGEST}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def smallest_uint(max_value: int) -> np.dtype:
    """The narrowest unsigned integer dtype holding ``max_value`` (>= 0)."""
    for dt in (np.uint8, np.uint16, np.uint32, np.uint64):
        if max_value <= np.iinfo(dt).max:
            return np.dtype(dt)
    raise ValueError(f"value {max_value} does not fit uint64")


def lengths_identity(lengths: np.ndarray) -> dict:
    """What names a document collection: ``documents``, ``tokens`` and ``lengths_crc32`` (CRC-32 of the lengths as
    little-endian int64), :data:`CHUNK` lengths at a time (never copied whole)."""
    crc, tokens = 0, 0
    for a in range(0, lengths.shape[0], CHUNK):
        part = np.ascontiguousarray(lengths[a : a + CHUNK], dtype="<i8")
        crc = zlib.crc32(part.tobytes(), crc)
        tokens += int(part.sum())
    return {"documents": int(lengths.shape[0]), "tokens": tokens, "lengths_crc32": crc}


def piece_stats(lengths: np.ndarray, ctx: int, overflow: str) -> tuple[int, int, int]:
    """(pieces, largest piece start, largest length) the plan of ``lengths`` will hold under ``overflow`` (not
    ``concat_split``), a chunk at a time: what the piece arrays are sized and typed from."""
    pieces, max_start, max_len = 0, 0, 0
    for a in range(0, lengths.shape[0], CHUNK):
        part = np.asarray(lengths[a : a + CHUNK], dtype=np.int64)
        if not part.size:
            continue
        max_len = max(max_len, int(part.max()))
        if overflow == "split":
            pieces += int((-(-part // ctx)).sum())
        elif overflow == "truncate":
            pieces += int(np.count_nonzero(part))
        else:
            pieces += int(np.count_nonzero((part > 0) & (part <= ctx)))
    if overflow == "split" and max_len > ctx:
        max_start = (max_len - 1) // ctx * ctx
    return pieces, max_start, max_len


def piece_dtypes(num_documents: int, num_pieces: int, max_start: int, ctx: int) -> dict[str, np.dtype]:
    """The dtype of each plan array (see the module docstring)."""
    return {
        "row_starts": np.dtype(np.uint32) if num_pieces < 2**32 else np.dtype(np.uint64),
        "doc": np.dtype(np.uint32) if num_documents <= 2**32 else np.dtype(np.uint64),
        "start": smallest_uint(max_start),
        "length": smallest_uint(ctx),
    }


def row_pieces(row_starts: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pieces of ``rows`` (checked int64 row ids; ``row_starts`` may be memory-mapped) in order: their indices
    into the piece arrays, and where each row's begin among them (``len(rows) + 1`` int64 values)."""
    first = np.asarray(row_starts[rows], dtype=np.int64)
    counts = np.asarray(row_starts[rows + 1], dtype=np.int64) - first
    splits = np.concatenate(([0], np.cumsum(counts)))
    return np.repeat(first - splits[:-1], counts) + np.arange(splits[-1], dtype=np.int64), splits


def gather_rows(
    row_starts: np.ndarray,
    doc: np.ndarray,
    start: np.ndarray,
    length: np.ndarray,
    rows,
    *,
    ctx: int,
    align: int,
    algorithm: str,
) -> PackPlan:
    """Rows ``rows`` (any order, repeats allowed) of an encoded plan as a small :class:`PackPlan` whose row ``i`` is
    row ``rows[i]``: only their pieces are read (the arrays may be memory-mapped), widened to int64 / int32."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    num_rows = row_starts.shape[0] - 1
    if rows.size and (rows.min() < 0 or rows.max() >= num_rows):
        bad = rows[(rows < 0) | (rows >= num_rows)][0]
        raise IndexError(f"row {int(bad)} out of range for a plan of {num_rows} rows")
    idx, splits = row_pieces(row_starts, rows)
    return PackPlan.of_rows(ctx, align, splits, doc[idx], start[idx], length[idx], algorithm)
