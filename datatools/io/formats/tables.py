"""One column of a table shard (Parquet, Arrow IPC, JSON Lines), a bounded batch at a time (:func:`column_batches`),
as flat token ids and lengths (:func:`token_arrays`) or strings (:func:`text_values`). Every problem is a
``ValueError`` naming the file (and row group or line). Each kind of file is read by its own class, its row of
:data:`~datatools.io.formats.discover.FILE_KINDS`; the functions here are the same for every kind.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from datatools.base.checks import MAX_TOKEN_ID
from datatools.io.formats.discover import (
    COLUMN_CANDIDATES,
    MAX_TEXT_BYTES,
    NAME_THE_COLUMN,
    TEXT_COLUMNS,
    TOKEN_COLUMNS,
    Shard,
    check_parquet_text_sizes,
    detect_column,
    is_text_type,
    text_values,
)
from datatools.io.formats.numpy_files import check_non_negative
from datatools.io.storage.paths import display

__all__ = [
    "COLUMN_CANDIDATES",
    "MAX_TEXT_BYTES",
    "NAME_THE_COLUMN",
    "TEXT_COLUMNS",
    "TOKEN_COLUMNS",
    "check_column",
    "check_parquet_text_sizes",
    "column_batches",
    "detect_column",
    "is_text_type",
    "shard_bytes",
    "shard_columns",
    "shard_texts",
    "text_values",
    "token_arrays",
]


def shard_columns(shard: Shard) -> dict[str, bool]:
    """The shard's columns, each mapped to whether it holds text; one schema (or first line) read."""
    return shard.file_kind.columns(shard)


def check_column(shard: Shard, column: str) -> None:
    """Fail early, before any work, when the shard has no ``column`` (an empty JSON Lines file has none to miss)."""
    if (names := shard.file_kind.checked_columns(shard)) is not None:
        detect_column(names, column, display(shard.files[0]))


def column_batches(shard: Shard, column: str, text: bool) -> Iterator[pa.Array | pa.ChunkedArray]:
    """``column`` of the shard, a bounded batch at a time (see the module docstring)."""
    yield from shard.file_kind.batches(shard, column, text)


def token_arrays(col: pa.Array | pa.ChunkedArray, where: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(flat token ids, int64 lengths) of a list-of-integers column; ids keep their integer type."""
    t = col.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)):
        raise ValueError(f"{where}: column {name!r} holds {t}, not a list of token ids")
    vt = t.value_type
    if not pa.types.is_integer(vt):
        if not pa.types.is_null(vt):  # every list empty: JSON inference cannot tell the type
            raise ValueError(f"{where}: column {name!r} holds non-integer token ids ({vt})")
        vt = pa.int64()
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    values, lengths = [], []
    for chunk in chunks:
        if chunk.null_count:
            raise ValueError(f"{where}: column {name!r} has null rows")
        if pa.types.is_fixed_size_list(t):
            lengths.append(np.full(len(chunk), t.list_size, np.int64))
            flat = chunk.flatten()
        else:
            off = np.asarray(chunk.offsets)
            lengths.append(np.diff(off).astype(np.int64, copy=False))
            flat = chunk.values.slice(int(off[0]), int(off[-1] - off[0])) if len(chunk) else chunk.values.slice(0, 0)
        if flat.null_count:
            raise ValueError(f"{where}: column {name!r} has null token ids")
        values.append(flat.to_numpy(zero_copy_only=False).astype(vt.to_pandas_dtype(), copy=False))
    v = np.concatenate(values) if len(values) != 1 else values[0]
    check_non_negative(v, f"{where}: column {name!r}")
    # ids travel as int32: a larger one is no vocabulary's (2**40 was taken)
    if v.size and v.dtype.itemsize >= 4 and int(v.max()) > MAX_TOKEN_ID:
        raise ValueError(
            f"{where}: column {name!r}: token id {int(v.max())} (token {int(np.argmax(v))}) is over datatools' "
            f"limit of {MAX_TOKEN_ID:,}"
        )
    return v, (np.concatenate(lengths) if len(lengths) != 1 else lengths[0])


def shard_texts(shard: Shard, column: str = "text") -> Iterator[list[str]]:
    """The shard's documents as strings, a bounded batch at a time: the text column (an ArrayRecord file's
    feature), or whole ``.txt`` files."""
    yield from shard.file_kind.texts(shard, column)


def shard_bytes(shard: Shard) -> int:
    """Bytes of input this shard covers (for progress and throughput)."""
    return shard.file_kind.nbytes(shard)
