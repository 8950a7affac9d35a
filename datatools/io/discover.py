"""Finding the input files under a path and cutting them into shards.

A *shard* is the unit of work of the jobs (and of resumption) and of the chunked
document sources; each holds a bounded amount of data:

* Parquet: one row group;
* Arrow IPC files and streams (``.arrow``, ``.feather``, the data files of a Hugging
  Face ``save_to_disk`` directory): consecutive record batches, about
  :data:`PART_BYTES` at most;
* JSON Lines: the lines that *start* inside a byte range of :data:`PART_BYTES`
  (no scan needed to cut a file; a line belongs to the range it starts in);
* plain text (``.txt``): one document per file, :data:`TEXT_FILES_PER_SHARD` files.

Every problem is a ``ValueError`` naming the file, or the ``OSError`` itself (a
permission error stays a permission error, with its file name).
"""

from __future__ import annotations

import functools
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from datatools.io.paths import display, first_line, map_file

TEXT_FILES_PER_SHARD = 256
PART_BYTES = 64 << 20  # JSON Lines bytes / Arrow batch bytes per shard
EXTENSIONS = {".parquet": "parquet", ".arrow": "arrow", ".feather": "arrow", ".jsonl": "jsonl", ".txt": "text"}


@dataclass(frozen=True)
class Shard:
    """One unit of input.

    Attributes:
      kind: ``parquet``, ``arrow``, ``jsonl`` or ``text``.
      files: the file (several for text shards).
      part: Parquet row group; first Arrow record batch; first byte of a JSON Lines range.
      stop: Arrow: one past the last record batch; JSON Lines: end of the byte range.
      nbytes: Arrow: the batches' bytes (counted once, when the file is cut into shards).
    """

    kind: str
    files: tuple[str, ...]
    part: int = 0
    stop: int = 0
    nbytes: int = 0

    def describe(self) -> str:
        """Where this shard is, for messages: the file and, when the file has several shards, which part."""
        where = display(self.files[0])
        if self.kind == "parquet":
            where += f" row group {self.part}"
        elif self.kind == "arrow" and self.part:
            where += f" record batch {self.part}"
        elif self.kind == "jsonl" and self.part:
            where += f" bytes {self.part}.."
        return where + (f" (+{len(self.files) - 1} files)" if len(self.files) > 1 else "")


# --------------------------------------------------------------------------- Hugging Face directories


def is_hf_dataset_dir(path: Path) -> bool:
    """A directory written by ``datasets.Dataset.save_to_disk`` (or ``DatasetDict.save_to_disk``)."""
    return path.is_dir() and ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file())


def hf_data_files(path: Path) -> list[Path]:
    """The Arrow files of a ``save_to_disk`` directory, in row order (every split of a DatasetDict, in its
    order), as ``datasets.load_from_disk`` finds them."""
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:  # datasets raises many classes (FileNotFoundError, KeyError, JSON errors)
        if isinstance(exc, PermissionError):
            raise
        raise ValueError(f"{display(path)}: not a readable Hugging Face save_to_disk directory "
                         f"({first_line(exc)})") from None
    parts = loaded.values() if isinstance(loaded, datasets.DatasetDict) else [loaded]
    return [Path(f["filename"]) for ds in parts for f in ds.cache_files]


# --------------------------------------------------------------------------- discovery


def _raise(exc: OSError) -> None:
    raise exc


def list_input_files(path: str | os.PathLike) -> list[tuple[str, Path]]:
    """(kind, file) pairs under ``path``, sorted by path; HF dataset directories expand to their Arrow files.

    Hidden files are skipped. An unreadable directory raises its ``PermissionError``.
    """
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{display(path)}: no such file or directory")
    if path.is_file():
        kind = EXTENSIONS.get(path.suffix.lower())
        if kind is None:
            raise ValueError(f"{display(path)}: unknown format (expected one of {', '.join(sorted(EXTENSIONS))})")
        return [(kind, path)]
    if is_hf_dataset_dir(path):
        return [("arrow", f) for f in hf_data_files(path)]
    found: list[tuple[str, Path]] = []
    for root, dirs, files in os.walk(path, onerror=_raise, followlinks=True):
        dirs.sort()
        root_path = Path(root)
        if root_path != path and is_hf_dataset_dir(root_path):
            found.extend(("arrow", f) for f in hf_data_files(root_path))
            dirs.clear()
            continue
        for name in sorted(files):
            kind = EXTENSIONS.get(Path(name).suffix.lower())
            if kind and not name.startswith("."):
                found.append((kind, root_path / name))
    if not found:
        raise ValueError(f"{display(path)}: no input files ({', '.join(sorted(EXTENSIONS))}) found")
    return found


def list_shards(path: str | os.PathLike) -> list[Shard]:
    """The input under ``path`` cut into shards, in a fixed order (text shards last)."""
    shards: list[Shard] = []
    texts: list[str] = []
    for kind, f in list_input_files(path):
        name = str(f)
        if kind == "text":
            texts.append(name)
        elif kind == "parquet":
            groups = parquet_metadata(name).num_row_groups
            shards.extend(Shard("parquet", (name,), g) for g in range(groups))
        elif kind == "arrow":
            shards.extend(Shard("arrow", (name,), a, b, nbytes) for a, b, nbytes in arrow_parts(name))
        else:
            size = os.path.getsize(name)
            shards.extend(Shard("jsonl", (name,), a, min(a + PART_BYTES, size))
                          for a in range(0, max(size, 1), PART_BYTES))
    for i in range(0, len(texts), TEXT_FILES_PER_SHARD):
        shards.append(Shard("text", tuple(texts[i : i + TEXT_FILES_PER_SHARD])))
    return shards


# --------------------------------------------------------------------------- Parquet and Arrow handles


def parquet_metadata(f: str) -> pq.FileMetaData:
    """The Parquet footer, parsed once per file version (keyed by mtime and size)."""
    st = os.stat(f)
    return _parquet_metadata_at(f, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=256)
def _parquet_metadata_at(f: str, mtime_ns: int, size: int) -> pq.FileMetaData:
    with open(f, "rb") as fh:
        try:
            return pq.ParquetFile(fh).metadata
        except (pa.ArrowException, OSError) as exc:
            if isinstance(exc, PermissionError):
                raise
            raise ValueError(f"{display(f)}: cannot read Parquet ({first_line(exc)})") from None


@contextmanager
def open_parquet(f: str):
    """A ``ParquetFile`` over a Python file object (any file name works), with the cached footer."""
    meta = parquet_metadata(f)
    with open(f, "rb") as fh:
        yield pq.ParquetFile(fh, metadata=meta)


def parquet_names(f: str) -> list[str]:
    return parquet_metadata(f).schema.to_arrow_schema().names


def open_arrow(f: str):
    """A reader over an Arrow IPC file or stream, memory-mapped: ``(reader, is_file_format)``."""
    try:
        buf = map_file(f)
        try:
            return ipc.open_file(buf), True
        except pa.ArrowInvalid:
            return ipc.open_stream(buf), False
    except pa.ArrowException as exc:
        raise ValueError(f"{display(f)}: cannot read Arrow IPC ({first_line(exc)})") from None


def arrow_schema(f: str) -> pa.Schema:
    return open_arrow(f)[0].schema


def iter_arrow_batches(f: str, start: int = 0, stop: int | None = None):
    """Record batches ``[start, stop)`` of an Arrow IPC file or stream, zero-copy from the mapping."""
    reader, is_file = open_arrow(f)
    try:
        if is_file:
            for i in range(start, reader.num_record_batches if stop is None else stop):
                yield reader.get_batch(i)
        else:
            for i, batch in enumerate(reader):
                if stop is not None and i >= stop:
                    break
                if i >= start:
                    yield batch
    except pa.ArrowException as exc:
        raise ValueError(f"{display(f)}: cannot read Arrow IPC ({first_line(exc)})") from None


def arrow_parts(f: str) -> list[tuple[int, int, int]]:
    """Consecutive record-batch ranges ``(first, stop, bytes)`` of about :data:`PART_BYTES` each (at least one
    batch each)."""
    parts, first, size, count = [], 0, 0, 0
    for i, batch in enumerate(iter_arrow_batches(f)):
        if count and size + batch.nbytes > PART_BYTES:
            parts.append((first, i, size))
            first, size = i, 0
        size += batch.nbytes
        count = i + 1
    if count > first or not parts:
        parts.append((first, count, size))
    return parts
