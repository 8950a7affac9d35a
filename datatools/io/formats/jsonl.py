"""Streaming JSON Lines: lines of any length, bounded memory (``pyarrow.json.read_json`` on a whole file holds the
table and fails on a line over its block size). A byte range is read in blocks of whole lines (:func:`line_blocks`),
each parsed by pyarrow for the one column wanted, two at a time in threads; a parse error is located with the
``json`` module, naming the file, line and problem.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.json as pajson

from datatools.io import storage
from datatools.io.storage import paths
from datatools.io.storage.paths import display

BLOCK_BYTES = 2 << 20  # parse unit (bytes of whole lines): pyarrow holds ~20x a block while parsing it: keep it small
PARSE_THREADS = 2
MAX_BLOCK_BYTES = (1 << 31) - 2  # pyarrow's block_size is an int32


def _next_line_start(fh: BinaryIO, pos: int, size: int) -> int:
    """The first line start at or after byte ``pos`` (or the end of the file)."""
    if pos <= 0:
        return 0
    if pos >= size:
        return size
    fh.seek(pos - 1)
    at = pos - 1
    while data := fh.read(1 << 16):
        if (i := data.find(b"\n")) >= 0:
            return at + i + 1
        at += len(data)
    return size


def line_blocks(fh: BinaryIO, a: int, b: int, block_bytes: int) -> Iterator[tuple[bytes, int]]:
    """Blocks of whole lines covering bytes ``[a, b)`` of ``fh``, each with its offset in the file."""
    fh.seek(a)
    pos, carry, carry_at = a, bytearray(), a
    while pos < b:
        data = fh.read(min(block_bytes, b - pos))
        if not data:
            break
        pos += len(data)
        carry += data
        cut = len(carry) if pos >= b else carry.rfind(b"\n") + 1
        if cut:  # one copy, and the carried bytes dropped before the block is handed over (a 50 MB line: 50 MB)
            if cut == len(carry):
                block, carry = bytes(carry), bytearray()
            else:
                with memoryview(carry) as view:
                    block = bytes(view[:cut])
                del carry[:cut]
            at, carry_at = carry_at, carry_at + cut
            yield block, at
    if carry:
        yield bytes(carry), carry_at


def _parse(block: bytes, schema: pa.Schema) -> pa.Table | Exception:
    if len(block) > MAX_BLOCK_BYTES:
        return ValueError(f"a line of more than {MAX_BLOCK_BYTES} bytes")
    try:
        return pajson.read_json(
            pa.BufferReader(block),
            read_options=pajson.ReadOptions(use_threads=False, block_size=len(block) + 1),
            parse_options=pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
    except pa.ArrowInvalid as exc:
        return exc


def read_column_blocks(
    path: str, column: str, value_type: pa.DataType, start: int = 0, stop: int | None = None
) -> Iterator[pa.ChunkedArray]:
    """The values of ``column`` for the lines starting in bytes ``[start, stop)`` of a JSON Lines file, a block
    at a time, as arrays of ``value_type``; a ValueError naming the file and line for invalid JSON, a line that is
    not an object, a missing column or a value of another type."""
    schema = pa.schema([(column, value_type)])
    want_text = pa.types.is_string(value_type) or pa.types.is_large_string(value_type)
    with storage.location(path).open() as fh:  # a URL: ranged reads with read-ahead, as a local file
        size = storage.location(path).size()
        a, b = _next_line_start(fh, start, size), _next_line_start(fh, size if stop is None else stop, size)
        with ThreadPoolExecutor(PARSE_THREADS) as pool:
            blocks = (
                (block, at, pool.submit(_parse, block, schema)) for block, at in line_blocks(fh, a, b, BLOCK_BYTES)
            )
            pending = deque(itertools.islice(blocks, PARSE_THREADS))
            while pending:
                block, at, fut = pending.popleft()
                result = fut.result()
                if isinstance(result, BaseException):  # only now count lines, to name the one that failed
                    line_no = 1 + _count_lines(path, at)
                    if isinstance(result, pa.ArrowInvalid):
                        raise _located(path, block, line_no, column, want_text, result)
                    raise ValueError(f"{display(path)}:{line_no}: {result}")
                col = result.column(0)
                if col.null_count:
                    raise _null_error(path, block, 1 + _count_lines(path, at), column)
                out = [col]
                del block, result, col, fut  # held only by the consumer: a 50 MB line is not kept twice here
                yield out.pop()
                pending.extend(itertools.islice(blocks, 1))  # one more block parsing once this one is used


def _count_lines(path: str, upto: int) -> int:
    """Newlines in the file's first ``upto`` bytes (the line number of an error, counted only when one occurs)."""
    n, pos = 0, 0
    with storage.location(path).open() as fh:
        while pos < upto and (data := fh.read(min(1 << 24, upto - pos))):
            n += data.count(b"\n")
            pos += len(data)
    return n


def _located(path: str, block: bytes, first_line: int, column: str, want_text: bool, exc: BaseException) -> ValueError:
    """A one-line error for the first line of ``block`` that fails, found with the ``json`` module."""
    for k, line in enumerate(block.split(b"\n")):
        if not line.strip():
            continue
        where = f"{display(path)}:{first_line + k}"
        try:
            row = json.loads(line)
        except ValueError as err:
            return ValueError(f"{where}: invalid JSON Lines ({err})")
        if not isinstance(row, dict):
            return ValueError(f"{where}: invalid JSON Lines (expected an object per line, got {type(row).__name__})")
        value = row.get(column)
        if value is None:
            continue
        if want_text:
            if not isinstance(value, str):
                return ValueError(f"{where}: column {column!r} holds {type(value).__name__}, not text")
            continue
        if not isinstance(value, list):
            return ValueError(f"{where}: column {column!r} holds {type(value).__name__}, not a list of token ids")
        bad = [v for v in value if not isinstance(v, int) or isinstance(v, bool)]
        if bad:
            return ValueError(f"{where}: column {column!r} holds non-integer token ids ({str(bad[0])[:40]})")
        if value and (max(value) >= 1 << 63 or min(value) < -(1 << 63)):
            return ValueError(f"{where}: column {column!r} holds a token id outside int64")
    return ValueError(f"{display(path)}:{first_line}: invalid JSON Lines ({paths.first_line(exc)})")


def _null_error(path: str, block: bytes, first_line: int, column: str) -> ValueError:
    for k, line in enumerate(block.split(b"\n")):
        if line.strip():
            row = json.loads(line)
            if row.get(column) is None:
                what = "has no" if column not in row else "has a null"
                return ValueError(f"{display(path)}:{first_line + k}: the line {what} column {column!r}")
    return ValueError(f"{display(path)}:{first_line}: column {column!r} has null rows")


def first_row(path: str) -> dict[str, Any]:
    """The first non-empty line as a dict (for column detection); ``{}`` for an empty file."""
    with storage.location(path).open(block_size=1 << 20) as fh:
        for k, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise ValueError(f"{display(path)}:{k}: invalid JSON Lines ({exc})") from None
                if not isinstance(row, dict):
                    raise ValueError(f"{display(path)}:{k}: invalid JSON Lines (expected an object per line)")
                return row
    return {}
