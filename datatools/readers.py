"""Token sequences and their lengths from any supported input, format detected.

Supported inputs (a file, or a directory of files):

* the token store of the pre-tokenize job (lengths from its offsets, no token read);
* Parquet, Arrow IPC / Feather, JSON Lines and Hugging Face ``save_to_disk``
  directories, with a list-of-integers token column, or a text column plus a
  Hugging Face ``tokenizers`` JSON file;
* NumPy: a directory with a flat ``tokens.npy`` and ``lengths.npy`` or
  ``offsets.npy``; or one flat token file (``.bin`` of uint16/uint32, or ``.npy``)
  cut into documents after every ``eos_id`` (nanoGPT style).

The column is detected when exactly one of :data:`COLUMN_CANDIDATES` is present.
Reading streams shard by shard (Parquet row group, Arrow file, JSON Lines file,
NumPy slice), so :func:`read_lengths` holds the lengths array and one shard, never
the whole data. Every problem is a ``ValueError`` naming the file and what is wrong.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson

from datatools.sources import Shard, _open_arrow, list_shards, read_table
from datatools.store import TokenStore, is_token_store

TOKEN_COLUMNS = ("input_ids", "tokens", "token_ids")
TEXT_COLUMNS = ("text",)
COLUMN_CANDIDATES = TOKEN_COLUMNS + TEXT_COLUMNS
BIN_DTYPES = ("uint16", "uint32")
FLAT_SLICE = 1 << 24  # tokens per shard when splitting a flat token file (64 MiB as int32)


@dataclass
class TokenInput:
    """A resolved input: what it is and how to read it.

    Attributes:
      path: the path given.
      kind: ``store``, ``numpy`` (tokens.npy + lengths/offsets), ``flat`` (.bin / .npy
        split on eos), or ``table`` (Parquet / Arrow / JSON Lines / HF).
      column: the token or text column (tables only).
      is_text: the column holds text (tokenized with ``tokenizer``).
      shards: the table shards, in order.
      nbytes: bytes of input (for progress and throughput).
    """

    path: Path
    kind: str
    column: str | None = None
    is_text: bool = False
    shards: list[Shard] = field(default_factory=list)
    nbytes: int = 0
    tokenizer: object = None
    eos_id: int | None = None
    bin_dtype: str = "uint16"

    @property
    def num_shards(self) -> int:
        if self.kind == "table":
            return len(self.shards)
        if self.kind == "flat":
            return max(1, -(-self._flat_size() // FLAT_SLICE))
        return 1

    def _flat_size(self) -> int:
        return int(_flat_array(self.path, self.bin_dtype).shape[0])


# --------------------------------------------------------------------------- opening


def _columns(shard: Shard) -> dict[str, bool]:
    """The shard's columns, each mapped to whether it holds text; one schema (or first line) read."""
    f = shard.files[0]
    if shard.kind == "parquet":
        try:
            schema = _parquet_file(f).schema_arrow
        except (pa.ArrowException, OSError) as exc:
            raise ValueError(f"{f}: cannot read Parquet ({exc})") from None
    elif shard.kind == "arrow":
        schema = _open_arrow(f, schema_only=True)
    elif shard.kind == "jsonl":
        return {k: isinstance(v, str) for k, v in _first_json_row(f).items()}
    else:
        raise ValueError(f"{f}: plain text has no columns; pre-tokenize it first (datatools pretokenize)")
    return {fld.name: pa.types.is_string(fld.type) or pa.types.is_large_string(fld.type) for fld in schema}


def _first_json_row(f: str) -> dict:
    with open(f, "rb") as fh:
        for line in fh:
            if line.strip():
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise ValueError(f"{f}: invalid JSON Lines ({exc})") from None
                if not isinstance(row, dict):
                    raise ValueError(f"{f}: invalid JSON Lines (expected an object per line)")
                return row
    return {}


def _parquet_file(f: str):
    """The opened Parquet file: its footer is parsed once, not once per row group (keyed by mtime and size,
    so a rewritten file is opened afresh)."""
    st = os.stat(f)
    return _parquet_file_at(str(f), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _parquet_file_at(f: str, mtime_ns: int, size: int):
    import pyarrow.parquet as pq

    return pq.ParquetFile(f)


def detect_column(names: list[str], column: str | None, where: str) -> str:
    """The column to read: ``column`` when given (it must exist), else the one candidate present."""
    if column is not None:
        if column not in names:
            raise ValueError(f"{where}: no column {column!r} (columns: {', '.join(names) or 'none'})")
        return column
    found = [c for c in COLUMN_CANDIDATES if c in names]
    if len(found) == 1:
        return found[0]
    if not found:
        raise ValueError(f"{where}: no token or text column found (columns: {', '.join(names) or 'none'}); "
                         f"pass --column")
    raise ValueError(f"{where}: ambiguous column, candidates: {', '.join(found)}; pass --column")


def _numpy_dir_files(path: Path) -> tuple[Path, Path, str] | None:
    tokens = path / "tokens.npy"
    if not tokens.is_file():
        return None
    for name, what in (("lengths.npy", "lengths"), ("offsets.npy", "offsets")):
        if (path / name).is_file():
            return tokens, path / name, what
    raise ValueError(f"{path}: has tokens.npy but neither lengths.npy nor offsets.npy")


def open_tokens(path: str | os.PathLike, *, column: str | None = None, tokenizer: str | os.PathLike | None = None,
                eos_id: int | None = None, bin_dtype: str = "uint16") -> TokenInput:
    """Resolve ``path`` to a :class:`TokenInput`, checking column and tokenizer before any data is read."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such file or directory")
    if bin_dtype not in BIN_DTYPES:
        raise ValueError(f"bin dtype must be one of {', '.join(BIN_DTYPES)}; got {bin_dtype!r}")
    if eos_id is not None and (isinstance(eos_id, bool) or not isinstance(eos_id, int) or eos_id < 0):
        raise ValueError(f"eos id must be a non-negative integer; got {eos_id!r}")
    if path.is_dir() and is_token_store(path):
        return TokenInput(path, "store", nbytes=_dir_bytes(path / "offsets"))
    if path.is_dir() and (files := _numpy_dir_files(path)):
        return TokenInput(path, "numpy", nbytes=sum(f.stat().st_size for f in files[:2]))
    if path.is_file() and path.suffix.lower() in (".bin", ".npy"):
        if eos_id is None:
            raise ValueError(f"{path}: a flat token file needs --eos-id to find the document boundaries")
        return TokenInput(path, "flat", nbytes=path.stat().st_size, eos_id=eos_id, bin_dtype=bin_dtype)
    if path.is_dir() and not any(p for p in path.iterdir() if not p.name.startswith(".")):
        raise ValueError(f"{path}: empty directory")
    shards = list_shards(path)
    if any(s.kind == "text" for s in shards):
        raise ValueError(f"{shards[0].files[0]}: plain text files have no token column; "
                         f"pre-tokenize them first (datatools pretokenize)")
    where = shards[0].files[0]
    columns = _columns(shards[0])
    col = detect_column(list(columns), column, where)
    inp = TokenInput(path, "table", column=col, shards=shards,
                     nbytes=sum(os.path.getsize(f) for f in dict.fromkeys(x for s in shards for x in s.files)))
    inp.is_text = col in TEXT_COLUMNS or columns[col]
    if inp.is_text:
        if tokenizer is None:
            raise ValueError(f"{where}: column {col!r} holds text; pass --tokenizer tokenizer.json to tokenize it")
        from datatools.pretokenize import load_tokenizer

        inp.tokenizer = load_tokenizer(tokenizer)
    return inp


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _read_jsonl(f: str) -> pa.Table:
    try:
        return pajson.read_json(f)
    except pa.ArrowInvalid as exc:
        msg = str(exc).splitlines()[0]
        if "Empty" in msg or os.path.getsize(f) == 0:
            return pa.table({})
        raise ValueError(f"{f}: invalid JSON Lines ({msg})") from None
    except OSError as exc:
        raise ValueError(f"{f}: cannot read ({exc})") from None


def _flat_array(path: Path, bin_dtype: str) -> np.ndarray:
    try:
        if path.suffix.lower() == ".npy":
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        else:
            size = path.stat().st_size
            item = np.dtype(bin_dtype).itemsize
            if size % item:
                raise ValueError(f"{path}: {size} bytes is not a whole number of {bin_dtype} tokens (truncated?)")
            arr = np.memmap(path, dtype=bin_dtype, mode="r") if size else np.zeros(0, bin_dtype)
    except ValueError as exc:
        if str(exc).startswith(str(path)):
            raise
        raise ValueError(f"{path}: not a valid NumPy file ({exc})") from None
    if arr.ndim != 1:
        raise ValueError(f"{path}: expected a flat 1-D token array, got shape {arr.shape}")
    _check_token_dtype(arr.dtype, str(path))
    return arr


def _check_token_dtype(dtype: np.dtype, where: str) -> None:
    if dtype.kind not in "iu" or dtype == np.bool_:
        raise ValueError(f"{where}: token ids must be integers, got {dtype}")


def _check_values(values: np.ndarray, where: str) -> None:
    if values.size and values.dtype.kind == "i":
        lo = values.min()
        if lo < 0:
            i = int(np.argmin(values))
            raise ValueError(f"{where}: negative token id {int(lo)} (token {i})")


# --------------------------------------------------------------------------- reading


def _token_column(col: pa.ChunkedArray, where: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(flat token values, lengths) of a list-of-integers column."""
    t = col.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)):
        raise ValueError(f"{where}: column {name!r} holds {t}, not a list of token ids")
    vt = t.value_type
    if not pa.types.is_integer(vt):
        if pa.types.is_null(vt):  # every list empty: JSON inference cannot tell the type
            vt = pa.int64()
        else:
            raise ValueError(f"{where}: column {name!r} holds non-integer token ids ({vt})")
    values, lengths = [], []
    for chunk in col.chunks:
        if chunk.null_count:
            raise ValueError(f"{where}: column {name!r} has null rows")
        if pa.types.is_fixed_size_list(t):
            lengths.append(np.full(len(chunk), t.list_size, np.int64))
        else:
            off = np.asarray(chunk.offsets)
            lengths.append(np.diff(off).astype(np.int64, copy=False))
        flat = chunk.flatten()
        if flat.null_count:
            raise ValueError(f"{where}: column {name!r} has null token ids")
        values.append(flat.to_numpy(zero_copy_only=False).astype(vt.to_pandas_dtype(), copy=False))
    v = np.concatenate(values) if values else np.zeros(0, np.int64)
    _check_values(v, f"{where}: column {name!r}")
    return v, (np.concatenate(lengths) if lengths else np.zeros(0, np.int64))


def _encode(tokenizer, texts: list, where: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    if any(not isinstance(x, str) for x in texts):
        raise ValueError(f"{where}: column {name!r} has null or non-text values")
    from datatools.pretokenize import flatten_ids

    return flatten_ids([e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)], np.int64)


def _table_shard(inp: TokenInput, shard: Shard) -> tuple[np.ndarray, np.ndarray]:
    where = shard.describe()
    table = _read_jsonl(shard.files[0]) if shard.kind == "jsonl" else read_table(
        shard, [inp.column] if shard.kind == "parquet" else None)
    if table.num_rows == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if inp.column not in table.column_names:
        raise ValueError(f"{where}: no column {inp.column!r} (columns: {', '.join(table.column_names) or 'none'})")
    col = table.column(inp.column)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        if inp.tokenizer is None:
            raise ValueError(f"{where}: column {inp.column!r} holds text; pass --tokenizer tokenizer.json")
        return _encode(inp.tokenizer, col.to_pylist(), where, inp.column)
    return _token_column(col, where, inp.column)


def iter_shards(inp: TokenInput, *, with_tokens: bool = True) -> Iterator[tuple[np.ndarray | None, np.ndarray, int]]:
    """Yield ``(tokens, lengths, nbytes)`` shard by shard; ``tokens`` is None when ``with_tokens`` is False
    and the lengths are known without the tokens (token store, NumPy directory)."""
    if inp.kind == "store":
        store = TokenStore(inp.path)
        yield (store.read_tokens(0, store.num_tokens) if with_tokens else None), store.lengths(), inp.nbytes
    elif inp.kind == "numpy":
        yield _numpy_dir(inp.path, with_tokens) + (inp.nbytes,)
    elif inp.kind == "flat":
        # Documents straddle slices: a document starts at `begin` and ends after its eos.
        flat = _flat_array(inp.path, inp.bin_dtype)
        n, item, begin = flat.shape[0], flat.dtype.itemsize, 0
        for a in range(0, n, FLAT_SLICE):
            b = min(a + FLAT_SLICE, n)
            part = np.asarray(flat[a:b])
            _check_values(part, str(inp.path))
            ends = np.flatnonzero(part == inp.eos_id) + 1 + a
            if b == n and n > begin and (ends.size == 0 or ends[-1] != n):
                ends = np.append(ends, n)  # the unterminated tail is a document too
            lengths = np.diff(ends, prepend=begin).astype(np.int64)
            stop = int(ends[-1]) if ends.size else begin
            yield (np.asarray(flat[begin:stop]) if with_tokens else None), lengths, (b - a) * item
            begin = stop
    else:
        for shard in inp.shards:
            tokens, lengths = _table_shard(inp, shard)
            nbytes = os.path.getsize(shard.files[0]) if shard.kind != "parquet" else _row_group_bytes(shard)
            yield tokens, lengths, nbytes


def _row_group_bytes(shard: Shard) -> int:
    return int(_parquet_file(shard.files[0]).metadata.row_group(shard.part).total_byte_size)


def _numpy_dir(path: Path, with_tokens: bool) -> tuple[np.ndarray | None, np.ndarray]:
    tokens_file, index_file, what = _numpy_dir_files(path)
    try:
        tokens = np.load(tokens_file, mmap_mode="r", allow_pickle=False)
        index = np.load(index_file, allow_pickle=False)
    except ValueError as exc:
        raise ValueError(f"{path}: not a valid NumPy file ({exc})") from None
    if tokens.ndim != 1:
        raise ValueError(f"{tokens_file}: expected a flat 1-D token array, got shape {tokens.shape}")
    _check_token_dtype(tokens.dtype, str(tokens_file))
    if index.ndim != 1 or index.dtype.kind not in "iu":
        raise ValueError(f"{index_file}: expected a 1-D integer array, got {index.dtype} {index.shape}")
    if what == "lengths":
        lengths = index.astype(np.int64)
        if lengths.size and lengths.min() < 0:
            raise ValueError(f"{index_file}: negative length {int(lengths.min())}")
        total = int(lengths.sum())
    else:
        off = index.astype(np.int64)
        if off.size == 0 or off[0] != 0 or (np.diff(off) < 0).any():
            raise ValueError(f"{index_file}: offsets must start at 0 and never decrease")
        lengths, total = np.diff(off), int(off[-1])
    if total != tokens.shape[0]:
        raise ValueError(f"{index_file}: {what} cover {total} tokens but tokens.npy holds {tokens.shape[0]}")
    if not with_tokens:
        return None, lengths
    flat = np.asarray(tokens)
    _check_values(flat, str(tokens_file))
    return flat, lengths


def read_lengths(inp: TokenInput, *, progress=None) -> np.ndarray:
    """int64 tokens per document of the whole input; memory: the lengths plus one shard.

    ``progress``, when given, is called with ``(shards_done, bytes_done)`` after each shard.
    """
    parts, done_bytes = [], 0
    need_tokens = inp.kind not in ("store", "numpy")
    for k, (_, lengths, nbytes) in enumerate(iter_shards(inp, with_tokens=need_tokens)):
        parts.append(lengths)
        done_bytes += nbytes
        if progress is not None:
            progress(k + 1, done_bytes)
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def read_documents(inp: TokenInput):
    """Every document in memory as :class:`~datatools.documents.ArrayDocuments`;
    a token store stays on disk (a :class:`~datatools.store.TokenStore`, read on demand)."""
    from datatools.documents import ArrayDocuments

    if inp.kind == "store":
        return TokenStore(inp.path)
    tokens, lengths = [], []
    for t, n, _ in iter_shards(inp):
        tokens.append(t)
        lengths.append(n)
    flat = np.concatenate(tokens) if tokens else np.zeros(0, np.int32)
    n = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    if flat.size and int(flat.max()) > np.iinfo(np.int32).max:
        raise ValueError(f"{inp.path}: token id {int(flat.max())} does not fit int32")
    return ArrayDocuments(flat.astype(np.int32, copy=False), np.concatenate(([0], np.cumsum(n))))
