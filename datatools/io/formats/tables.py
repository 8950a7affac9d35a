"""One column of a table shard (Parquet, Arrow IPC, JSON Lines), a bounded batch at a time (:func:`column_batches`),
as flat token ids and lengths (:func:`token_arrays`) or strings (:func:`text_values`). Every problem is a
``ValueError`` naming the file (and row group or line).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from datatools.base.checks import MAX_TOKEN_ID, short_repr
from datatools.io import storage
from datatools.io.formats import array_record_files, jsonl
from datatools.io.formats.discover import Shard, iter_arrow_batches, open_arrow, open_parquet, parquet_metadata
from datatools.io.formats.numpy_files import check_non_negative
from datatools.io.storage.paths import display, first_line

TOKEN_COLUMNS = ("input_ids", "tokens", "token_ids", "inputs")  # inputs: MaxText's name for its token column
TEXT_COLUMNS = ("text",)
COLUMN_CANDIDATES = TOKEN_COLUMNS + TEXT_COLUMNS


def is_text_type(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def shard_columns(shard: Shard) -> dict[str, bool]:
    """The shard's columns, each mapped to whether it holds text; one schema (or first line) read."""
    f = shard.files[0]
    if shard.kind == "parquet":
        schema = parquet_metadata(f).schema.to_arrow_schema()
    elif shard.kind == "arrow":
        schema = open_arrow(f)[0].schema
    elif shard.kind == "jsonl":
        return {k: isinstance(v, str) for k, v in jsonl.first_row(f).items()}
    elif shard.kind == "array_record":
        return array_record_files.features(f)
    else:
        raise ValueError(f"{display(f)}: plain text has no columns; pre-tokenize it first (datatools pretokenize)")
    return {fld.name: is_text_type(fld.type) for fld in schema}


NAME_THE_COLUMN = "name it with --column (analyze-padding) or source.column (a pipeline config)"


def detect_column(names: list[str], column: str | None, where: str) -> str:
    """The column to read: ``column`` when given (it must exist), else the one candidate present."""
    if column is not None:
        if column not in names:
            raise ValueError(f"{where}: no column {short_repr(column)} (columns: {', '.join(names) or 'none'})")
        return column
    found = [c for c in COLUMN_CANDIDATES if c in names]
    if len(found) == 1:
        return found[0]
    if not found:
        raise ValueError(
            f"{where}: no token or text column found (columns: {', '.join(names) or 'none'}); {NAME_THE_COLUMN}"
        )
    raise ValueError(f"{where}: ambiguous column, candidates: {', '.join(found)}; {NAME_THE_COLUMN}")


def check_column(shard: Shard, column: str) -> None:
    """Fail early, before any work, when the shard has no ``column`` (an empty JSON Lines file has none to miss)."""
    if shard.kind != "text" and ((names := list(shard_columns(shard))) or shard.kind != "jsonl"):
        detect_column(names, column, display(shard.files[0]))


MAX_TEXT_BYTES = 128 << 20  # one Parquet text value: pyarrow decodes a value with ~3x its size at once


def check_parquet_text_sizes(f: str, part: int, column: str, where: str) -> None:
    """Refuse, from the footer alone, a row group whose ``column`` holds texts of over :data:`MAX_TEXT_BYTES` on
    average (decoding one would take ~3x its size: a 28 KB file with one 300 MB cell took 1.4 GB and 10+ min)."""
    group = parquet_metadata(f).row_group(part)
    for chunk in (group.column(j) for j in range(group.num_columns)):
        size = int(chunk.total_uncompressed_size)
        if chunk.path_in_schema == column and size // max(1, group.num_rows) > MAX_TEXT_BYTES:
            raise ValueError(
                f"{where}: column {column!r} holds {size:,} bytes of text in {group.num_rows} rows (over "
                f"{MAX_TEXT_BYTES >> 20} MiB a text): split such documents before tokenizing them"
            )


def column_batches(shard: Shard, column: str, text: bool) -> Iterator[pa.Array | pa.ChunkedArray]:
    """``column`` of the shard, a bounded batch at a time (see the module docstring)."""
    f = shard.files[0]
    if shard.kind in ("parquet", "arrow"):
        detect_column(list(shard_columns(shard)), column, display(f))
    if shard.kind == "parquet":
        if text:
            check_parquet_text_sizes(f, shard.part, column, shard.describe())
        try:
            with open_parquet(f) as pf:
                col = pf.read_row_group(shard.part, columns=[column]).column(0)
        except (pa.ArrowException, OSError) as exc:
            if isinstance(exc, PermissionError):
                raise
            raise ValueError(f"{shard.describe()}: cannot read Parquet ({first_line(exc)})") from None
        yield col
    elif shard.kind == "arrow":
        for batch in iter_arrow_batches(f, shard.part, shard.stop):
            yield batch.column(column)
    elif shard.kind == "jsonl":
        yield from jsonl.read_column_blocks(
            f, column, pa.large_string() if text else pa.list_(pa.int64()), shard.part, shard.stop
        )
    else:
        raise ValueError(f"{display(f)}: {shard.kind} shards have no columns")


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


def text_values(col: pa.Array | pa.ChunkedArray, where: str, name: str) -> list[str]:
    """The strings of a text column (null rows refused)."""
    if not is_text_type(col.type):
        raise ValueError(f"{where}: column {name!r} holds {col.type}, not text")
    if col.null_count:
        raise ValueError(f"{where}: column {name!r} has null values")
    return col.to_pylist()


def shard_texts(shard: Shard, column: str = "text") -> Iterator[list[str]]:
    """The shard's documents as strings, a bounded batch at a time: the text column (an ArrayRecord file's
    feature), or whole ``.txt`` files."""
    if shard.kind == "text":
        out = []
        for f in shard.files:
            data = storage.location(f).read_bytes()  # a PermissionError names the file (a URL: its object, one GET)
            try:
                out.append(data.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise ValueError(f"{display(f)}: not UTF-8 text ({exc})") from None
        yield out
        return
    if shard.kind == "array_record":
        yield from array_record_files.texts(shard.files[0], column)
        return
    for col in column_batches(shard, column, text=True):
        texts = text_values(col, shard.describe(), column)
        del col  # the Arrow copy of the text freed before the strings are tokenized
        yield texts


def shard_bytes(shard: Shard) -> int:
    """Bytes of input this shard covers (for progress and throughput)."""
    f = shard.files[0]
    if shard.kind == "parquet":  # as stored (compressed), the unit of the file sizes a bar's total adds up
        group = parquet_metadata(f).row_group(shard.part)
        return sum(int(group.column(i).total_compressed_size) for i in range(group.num_columns))
    if shard.kind == "jsonl":
        return shard.stop - shard.part
    if shard.kind == "text":
        return sum(storage.location(x).size() for x in shard.files)
    return shard.nbytes  # arrow: counted when the file was cut into shards; array_record: the file's size
