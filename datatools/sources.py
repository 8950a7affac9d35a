"""Input discovery and reading: Parquet, Arrow IPC, JSON Lines, plain text, Hugging Face datasets.

Input is cut into *shards*, the unit of work (and of resumption) of the jobs:

* Parquet: one shard per row group;
* Arrow IPC file or stream (``.arrow``, ``.feather``), and each data file of a
  Hugging Face ``save_to_disk`` directory: one shard per file;
* JSON Lines (``.jsonl``): one shard per file, one document per line;
* plain text (``.txt``): one document per file, :data:`TEXT_FILES_PER_SHARD` files a shard.

Every problem is a ``ValueError`` naming the file and what is wrong.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

TEXT_FILES_PER_SHARD = 256
EXTENSIONS = {".parquet": "parquet", ".arrow": "arrow", ".feather": "arrow", ".jsonl": "jsonl", ".txt": "text"}


@dataclass(frozen=True)
class Shard:
    """One unit of input: ``kind`` (parquet / arrow / jsonl / text), the files, and a part index."""

    kind: str
    files: tuple[str, ...]
    part: int = 0

    def describe(self) -> str:
        extra = f" row group {self.part}" if self.kind == "parquet" else ""
        return f"{self.files[0]}{extra}" + (f" (+{len(self.files) - 1} files)" if len(self.files) > 1 else "")


def is_hf_dataset_dir(path: Path) -> bool:
    """A directory written by ``datasets.Dataset.save_to_disk`` (or DatasetDict)."""
    return path.is_dir() and ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file())


def _hf_data_files(path: Path) -> list[Path]:
    if (path / "dataset_dict.json").is_file():
        try:
            splits = json.loads((path / "dataset_dict.json").read_text())["splits"]
        except (ValueError, KeyError) as exc:
            raise ValueError(f"{path}/dataset_dict.json: corrupt ({exc})") from None
        return [f for split in splits for f in _hf_data_files(path / split)]
    try:
        state = json.loads((path / "state.json").read_text())
        names = [entry["filename"] for entry in state["_data_files"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}/state.json: not a Hugging Face save_to_disk state ({exc})") from None
    files = [path / n for n in names]
    for f in files:
        if not f.is_file():
            raise ValueError(f"{f}: listed in state.json but missing")
    return files


def list_input_files(path: str | os.PathLike) -> list[tuple[str, Path]]:
    """(kind, file) pairs under ``path``, sorted by path; HF dataset directories expand to their arrow files."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such file or directory")
    if path.is_file():
        kind = EXTENSIONS.get(path.suffix.lower())
        if kind is None:
            raise ValueError(f"{path}: unknown format (expected one of {', '.join(sorted(EXTENSIONS))})")
        return [(kind, path)]
    if is_hf_dataset_dir(path):
        return [("arrow", f) for f in _hf_data_files(path)]
    found: list[tuple[str, Path]] = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        root_path = Path(root)
        if root_path != path and is_hf_dataset_dir(root_path):
            found.extend(("arrow", f) for f in _hf_data_files(root_path))
            dirs.clear()
            continue
        for name in sorted(files):
            kind = EXTENSIONS.get(Path(name).suffix.lower())
            if kind and not name.startswith("."):
                found.append((kind, root_path / name))
    if not found:
        raise ValueError(f"{path}: no input files ({', '.join(sorted(EXTENSIONS))}) found")
    return found


def list_shards(path: str | os.PathLike) -> list[Shard]:
    """The input under ``path`` cut into shards, in a fixed order."""
    shards: list[Shard] = []
    texts: list[str] = []
    for kind, f in list_input_files(path):
        if kind == "text":
            texts.append(str(f))
            continue
        if kind == "parquet":
            try:
                groups = pq.ParquetFile(f).num_row_groups
            except (pa.ArrowException, OSError) as exc:
                raise ValueError(f"{f}: cannot read Parquet ({exc})") from None
            shards.extend(Shard("parquet", (str(f),), g) for g in range(groups))
        else:
            shards.append(Shard(kind, (str(f),)))
    for i in range(0, len(texts), TEXT_FILES_PER_SHARD):
        shards.append(Shard("text", tuple(texts[i : i + TEXT_FILES_PER_SHARD])))
    return shards


def _open_arrow(f: str, schema_only: bool = False):
    """An Arrow IPC file or stream as a table (or just its schema)."""
    try:
        with pa.memory_map(f) as source:
            try:
                reader = ipc.open_file(source)
            except pa.ArrowInvalid:
                source.seek(0)
                reader = ipc.open_stream(source)
            return reader.schema if schema_only else reader.read_all()
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{f}: cannot read Arrow IPC ({exc})") from None


def read_table(shard: Shard, columns: list[str] | None = None) -> pa.Table:
    """The shard's rows as an Arrow table (parquet, arrow and jsonl shards)."""
    f = shard.files[0]
    if shard.kind == "parquet":
        try:
            pf = pq.ParquetFile(f)
            names = pf.schema_arrow.names
            for c in columns or []:
                if c not in names:
                    raise ValueError(f"{f}: no column {c!r} (columns: {', '.join(names) or 'none'})")
            return pf.read_row_group(shard.part, columns=columns)
        except (pa.ArrowException, OSError) as exc:
            raise ValueError(f"{f}: cannot read Parquet ({exc})") from None
    if shard.kind == "arrow":
        return _open_arrow(f)
    if shard.kind == "jsonl":
        rows = []
        with open(f, "rb") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except ValueError as exc:
                    raise ValueError(f"{f}:{lineno}: invalid JSON ({exc})") from None
                if not isinstance(rows[-1], dict):
                    raise ValueError(f"{f}:{lineno}: expected a JSON object per line")
        names = list(dict.fromkeys(k for r in rows for k in r))
        return pa.table({k: [r.get(k) for r in rows] for k in names}) if rows else pa.table({})
    raise ValueError(f"{f}: {shard.kind} shards have no table")


def column_of(table: pa.Table, column: str, where: str) -> pa.ChunkedArray:
    if column not in table.column_names:
        raise ValueError(f"{where}: no column {column!r} (columns: {', '.join(table.column_names) or 'none'})")
    return table.column(column)


def read_texts(shard: Shard, column: str = "text") -> list[str]:
    """The shard's documents as strings: the text column, or whole .txt files (UTF-8)."""
    if shard.kind == "text":
        out = []
        for f in shard.files:
            try:
                out.append(Path(f).read_bytes().decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise ValueError(f"{f}: not UTF-8 text ({exc})") from None
            except OSError as exc:
                raise ValueError(f"{f}: cannot read ({exc.strerror})") from None
        return out
    table = read_table(shard, [column] if shard.kind == "parquet" else None)
    col = column_of(table, column, shard.files[0])
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise ValueError(f"{shard.files[0]}: column {column!r} holds {col.type}, not text")
    values = col.to_pylist()
    if any(v is None for v in values):
        raise ValueError(f"{shard.files[0]}: column {column!r} has null values")
    return values


def check_column(shard: Shard, column: str) -> None:
    """Fail early, before any work, when the shard has no ``column`` (reads the schema or first line only)."""
    f = shard.files[0]
    if shard.kind == "text":
        return
    if shard.kind == "parquet":
        try:
            names = pq.ParquetFile(f).schema_arrow.names
        except (pa.ArrowException, OSError) as exc:
            raise ValueError(f"{f}: cannot read Parquet ({exc})") from None
    elif shard.kind == "arrow":
        names = _open_arrow(f, schema_only=True).names
    else:
        names = []
        with open(f, "rb") as fh:
            for lineno, line in enumerate(fh, start=1):
                if line.strip():
                    try:
                        first = json.loads(line)
                    except ValueError as exc:
                        raise ValueError(f"{f}:{lineno}: invalid JSON ({exc})") from None
                    names = list(first) if isinstance(first, dict) else []
                    break
            else:
                return  # an empty file has no rows to miss a column
    if column not in names:
        raise ValueError(f"{f}: no column {column!r} (columns: {', '.join(names) or 'none'})")
