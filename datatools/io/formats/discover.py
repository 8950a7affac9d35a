"""Finding the input files under a path and cutting them into shards, the unit of work (and of resumption):
a Parquet row group; Arrow IPC record batches of about :data:`PART_BYTES` (``.arrow``, ``.feather``, Hugging Face
``save_to_disk`` directories); the JSON Lines lines that *start* in a byte range of :data:`PART_BYTES`;
:data:`TEXT_FILES_PER_SHARD` plain ``.txt`` files (one document each). Each kind of file is one
:class:`FileKind` class, its row of :data:`FILE_KINDS` (how it is cut into shards, named in messages, and its column
read). Every problem is a ``ValueError`` naming the file, or the ``OSError`` itself.
"""

from __future__ import annotations

import functools
import itertools
import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from datatools.base.checks import short_repr
from datatools.io import storage
from datatools.io.formats import array_record_files, jsonl
from datatools.io.storage.paths import display, first_line, map_file

TEXT_FILES_PER_SHARD = 256
PART_BYTES = 64 << 20  # JSON Lines bytes / Arrow batch bytes per shard
EXTENSIONS = {".parquet": "parquet", ".arrow": "arrow", ".feather": "arrow", ".jsonl": "jsonl", ".txt": "text"}


@dataclass(frozen=True)
class Shard:
    """One unit of input.

    Attributes:
      kind: its row of :data:`FILE_KINDS`: ``parquet``, ``arrow``, ``jsonl``, ``text`` or ``array_record`` (a
        whole ArrayRecord file: one per file an ArrayRecord input names, never found by a listing here).
      files: the file (several for text shards).
      part: Parquet row group; first Arrow record batch; first byte of a JSON Lines range.
      stop: Arrow: one past the last record batch; JSON Lines: end of the byte range.
      nbytes: Arrow: the batches' bytes (counted once, when the file is cut into shards); ArrayRecord: the file's.
    """

    kind: str
    files: tuple[str, ...]
    part: int = 0
    stop: int = 0
    nbytes: int = 0

    @property
    def file_kind(self) -> FileKind:
        """How this shard's kind of file is read: its row of :data:`FILE_KINDS`."""
        try:
            return FILE_KINDS[self.kind]
        except KeyError:
            raise ValueError(f"{display(self.files[0])}: unknown shard kind {self.kind!r}") from None

    def describe(self) -> str:
        """Where this shard is, for messages: the file and, when the file has several shards, which part."""
        where = display(self.files[0]) + self.file_kind.part(self)
        return where + (f" (+{len(self.files) - 1} files)" if len(self.files) > 1 else "")


# --------------------------------------------------------------------------- Hugging Face directories


def is_hf_dataset_dir(path: Path) -> bool:
    """A directory written by ``datasets.Dataset.save_to_disk`` (or ``DatasetDict.save_to_disk``)."""
    return path.is_dir() and ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file())


def hf_data_files(path: str | os.PathLike[str]) -> list[str | Path]:
    """The Arrow files of a ``save_to_disk`` directory (local or in object storage), in row order, from its
    ``dataset_dict.json`` (splits in order) and each split's ``state.json`` (``_data_files`` in order), as
    ``datasets.load_from_disk`` reads them (which would copy a bucket's directory to local disk first)."""
    import json

    def load(name: str) -> Any:  # a JSON document, checked by the caller
        try:
            return json.loads(storage.location(path).join(name).read_bytes(max_bytes=storage.MAX_METADATA_BYTES))
        except (ValueError, UnicodeDecodeError) as exc:
            where = display(storage.location(path).join(name).path)
            raise ValueError(f"{where}: not a Hugging Face save_to_disk file ({first_line(exc)})") from None

    if storage.location(path).join("dataset_dict.json").is_file():
        splits = load("dataset_dict.json").get("splits")
        if not isinstance(splits, list) or not all(isinstance(x, str) for x in splits):
            raise ValueError(f"{display(storage.location(path).join('dataset_dict.json').path)}: no list of splits")
        return [f for split in splits for f in hf_data_files(storage.location(path).join(split).path)]
    files = load("state.json").get("_data_files")
    if not isinstance(files, list) or not all(isinstance(x, dict) and "filename" in x for x in files):
        raise ValueError(f"{display(storage.location(path).join('state.json').path)}: no _data_files list")
    return [storage.location(path).join(x["filename"]).path for x in files]


# --------------------------------------------------------------------------- discovery


def _raise(exc: OSError) -> None:
    raise exc


class LinkWarning(UserWarning):
    """A symbolic link met while listing the input files that was not followed, or that leads outside the
    directory given (shown by the CLI as one ``datatools: warning:`` line)."""


def _inside(target: str, root: str) -> bool:
    return target == root or target.startswith(root.rstrip(os.sep) + os.sep)


def walk_once(path: Path) -> list[tuple[str, Path]]:
    """(kind, file) pairs of the input files under the directory ``path``, each real file once, walking real
    directories only (the rules on links are in :func:`list_input_files`)."""
    root_real = os.path.realpath(path)
    entries: list[tuple[str, Path, tuple[int, int], bool]] = []  # kind, file, (device, inode), is a link
    skipped_dirs: list[str] = []
    outside_files: list[str] = []
    for root, dirs, files in os.walk(path, onerror=_raise, followlinks=False):
        dirs.sort()
        root_path = Path(root)
        for name in [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            dirs.remove(name)
            link, target = root_path / name, os.path.realpath(root_path / name)
            where = "inside it, read anyway" if _inside(target, root_real) else "outside it"
            skipped_dirs.append(f"{display(link)} -> {display(target)} ({where})")
        if root_path != path and is_hf_dataset_dir(root_path):
            entries.extend(("arrow", Path(f), _identity(Path(f)), False) for f in hf_data_files(root_path))
            dirs.clear()
            continue
        for name in sorted(files):
            kind = EXTENSIONS.get(Path(name).suffix.lower())
            if not kind or name.startswith("."):
                continue
            f = root_path / name
            is_link = os.path.islink(f)
            if is_link and not _inside(os.path.realpath(f), root_real):
                outside_files.append(f"{display(f)} -> {display(os.path.realpath(f))}")
            entries.append((kind, f, _identity(f), is_link))
    if skipped_dirs:
        warnings.warn(
            f"{display(path)}: links to directories not followed: {'; '.join(skipped_dirs[:3])}"
            f"{f' and {len(skipped_dirs) - 3} more' if len(skipped_dirs) > 3 else ''}",
            LinkWarning,
            stacklevel=3,
        )
    if outside_files:
        warnings.warn(
            f"{display(path)}: {len(outside_files)} file(s) read through links leading outside it: "
            f"{'; '.join(outside_files[:3])}{' ...' if len(outside_files) > 3 else ''}",
            LinkWarning,
            stacklevel=3,
        )
    first: dict[tuple[int, int], int] = {}  # each real file once: at its first non-link name, else its first link
    for i, (_, _, key, is_link) in enumerate(entries):
        if key not in first or (entries[first[key]][3] and not is_link):
            first[key] = i
    keep = set(first.values())
    return [(kind, f) for i, (kind, f, _, _) in enumerate(entries) if i in keep]


def _identity(f: Path) -> tuple[int, int]:
    """(device, inode) of the file ``f`` names (through links); a broken link is a ValueError naming it."""
    try:
        st = os.stat(f)
    except FileNotFoundError:
        if os.path.islink(f):
            raise ValueError(f"{display(f)}: a broken link (to {display(os.readlink(f))})") from None
        raise
    return st.st_dev, st.st_ino


def list_input_files(path: str | os.PathLike[str]) -> Sequence[tuple[str, str | Path]]:
    """(kind, file) pairs under ``path`` (a ``Path`` each, or a URL under an object-store prefix), sorted by path;
    HF dataset directories expand to their Arrow files; hidden files skipped; an unreadable directory raises its
    ``PermissionError``. Links: each real file is read once (by device and inode); links to directories are not
    followed and links to files leading outside ``path`` are read (the HF hub cache is made of them), each with a
    :class:`LinkWarning`; a broken link with an input extension is a ``ValueError`` naming it.
    """
    if isinstance(path, (str, os.PathLike)) and not os.fspath(path):
        raise ValueError("an empty path (name a file or directory; '.' is the current one)")
    loc = storage.location(path)
    got = loc.info()
    if got is None:
        raise ValueError(f"{loc.display}: no such file or directory")
    if got["type"] == "file":
        kind = EXTENSIONS.get(Path(loc.name).suffix.lower())
        if kind is None:
            raise ValueError(f"{loc.display}: unknown format (expected one of {', '.join(sorted(EXTENSIONS))})")
        return [(kind, loc.path)]
    if loc.has_directories:  # links: each real file once, never a tree reached through a link
        root = loc.local_path
        found = [("arrow", f) for f in hf_data_files(root)] if is_hf_dataset_dir(root) else walk_once(root)
    else:
        found = _prefix_files(loc.text)
    if not found:
        raise ValueError(f"{loc.display}: no input files ({', '.join(sorted(EXTENSIONS))}) found")
    return found


def _walk_key(relative: str) -> tuple[tuple[int, str], ...]:
    """Sort key giving the order of ``os.walk`` with sorted names: a directory's files before its subdirectories."""
    *dirs, name = relative.split("/")
    return tuple((1, d) for d in dirs) + ((0, name),)


def _prefix_files(url: str) -> list[tuple[str, str | Path]]:
    """(kind, URL) pairs of the input objects under the key prefix ``url``, in the order :func:`walk_once` gives
    a local copy of the same tree; Hugging Face ``save_to_disk`` directories expand to their Arrow files."""
    base = url.rstrip("/") + "/"
    relative = sorted((f[len(base) :] for f in storage.location(url).list()), key=_walk_key)
    hf_roots = sorted(
        {r.rpartition("/")[0] for r in relative if r.rpartition("/")[2] in ("state.json", "dataset_dict.json")}, key=len
    )
    if "" in hf_roots:
        return [("arrow", f) for f in hf_data_files(url)]
    found: list[tuple[str, str | Path]] = []
    expanded: set[str] = set()
    for r in relative:
        root = next((h for h in hf_roots if r.startswith(h + "/")), None)  # the outermost HF directory holding r
        if root is not None:
            if root not in expanded:
                expanded.add(root)
                found.extend(("arrow", f) for f in hf_data_files(base + root))
            continue
        name = r.rpartition("/")[2]
        kind = EXTENSIONS.get(Path(name).suffix.lower())
        if kind and not name.startswith(".") and not any(p.startswith(".") for p in r.split("/")[:-1]):
            found.append((kind, base + r))
    return found


def list_shards(path: str | os.PathLike[str]) -> list[Shard]:
    """The input under ``path`` cut into shards, in a fixed order (text shards last). A file of no document gives
    no shard; an input of no document at all is a ``ValueError`` naming it. A ``.txt`` file is one document, even
    when empty."""
    files = list_input_files(path)
    shards: list[Shard] = []
    grouped: dict[str, list[str]] = {}  # the kinds whose files are grouped into shards (.txt files), in order
    for kind, f in files:
        file_kind = FILE_KINDS[kind]
        if file_kind.files_per_shard:
            grouped.setdefault(kind, []).append(str(f))
        else:
            shards.extend(file_kind.shards(str(f)))
    for kind, names in grouped.items():
        n = FILE_KINDS[kind].files_per_shard
        shards.extend(Shard(kind, tuple(names[i : i + n])) for i in range(0, len(names), n))
    if not shards:
        what = "the file is empty" if len(files) == 1 else f"its {len(files)} input files are all empty"
        raise ValueError(f"{display(path)}: no documents ({what})")
    return shards


# --------------------------------------------------------------------------- Parquet and Arrow handles


def parquet_metadata(f: str) -> pq.FileMetaData:
    """The Parquet footer, parsed once per file version (keyed by mtime and size; an object's ETag and size)."""
    got = storage.location(f).info()
    if got is None:
        raise FileNotFoundError(2, "no such file", f)
    return _parquet_metadata_at(f, *got["version"])


@functools.lru_cache(maxsize=256)
def _parquet_metadata_at(f: str, mtime_ns: int | str, size: int) -> pq.FileMetaData:
    with storage.location(f).open() as fh:
        try:
            return pq.ParquetFile(fh).metadata
        except (pa.ArrowException, OSError) as exc:
            if isinstance(exc, PermissionError):
                raise
            raise ValueError(f"{display(f)}: cannot read Parquet ({first_line(exc)})") from None


@contextmanager
def open_parquet(f: str) -> Iterator[pq.ParquetFile]:
    """A ``ParquetFile`` over a Python file object (any file name works), with the cached footer."""
    meta = parquet_metadata(f)
    with storage.location(f).open() as fh:  # a URL: ranged reads of the column chunks asked for, with read-ahead
        yield pq.ParquetFile(fh, metadata=meta)


def open_arrow(f: str) -> tuple[ipc.RecordBatchFileReader | ipc.RecordBatchStreamReader, bool]:
    """A reader over an Arrow IPC file or stream, memory-mapped (an object: read through a file object, a
    batch's bytes when it is read): ``(reader, is_file_format)``."""
    loc = storage.location(f)
    source = (lambda: map_file(f)) if loc.can_memory_map else loc.open
    try:
        try:
            return ipc.open_file(source()), True
        except pa.ArrowInvalid:
            return ipc.open_stream(source()), False
    except pa.ArrowException as exc:
        raise ValueError(f"{display(f)}: cannot read Arrow IPC ({first_line(exc)})") from None


def iter_arrow_batches(f: str, start: int = 0, stop: int | None = None) -> Iterator[pa.RecordBatch]:
    """Record batches ``[start, stop)`` of an Arrow IPC file or stream, zero-copy from the mapping."""
    reader, is_file = open_arrow(f)
    try:
        if is_file:
            yield from map(reader.get_batch, range(start, reader.num_record_batches if stop is None else stop))
        else:
            yield from itertools.islice(reader, start, stop)
    except pa.ArrowException as exc:
        raise ValueError(f"{display(f)}: cannot read Arrow IPC ({first_line(exc)})") from None


def arrow_parts(f: str) -> list[tuple[int, int, int]]:
    """Consecutive record-batch ranges ``(first, stop, bytes)`` of about :data:`PART_BYTES` each (at least one
    batch each). An object in storage of at most that size is one part, counted without reading its batches."""
    if storage.location(f).reads_are_requests:
        reader, is_file = open_arrow(f)
        if is_file and storage.location(f).size() <= PART_BYTES:
            return [(0, reader.num_record_batches, storage.location(f).size())]
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


# --------------------------------------------------------------------------- columns (every kind of table file)

TOKEN_COLUMNS = ("input_ids", "tokens", "token_ids", "inputs")  # inputs: MaxText's name for its token column
TEXT_COLUMNS = ("text",)
COLUMN_CANDIDATES = TOKEN_COLUMNS + TEXT_COLUMNS
NAME_THE_COLUMN = "name it with --column (analyze-padding) or source.column (a pipeline config)"
MAX_TEXT_BYTES = 128 << 20  # one Parquet text value: pyarrow decodes a value with ~3x its size at once


def is_text_type(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


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


def text_values(col: pa.Array | pa.ChunkedArray, where: str, name: str) -> list[str]:
    """The strings of a text column (null rows refused)."""
    if not is_text_type(col.type):
        raise ValueError(f"{where}: column {name!r} holds {col.type}, not text")
    if col.null_count:
        raise ValueError(f"{where}: column {name!r} has null values")
    values: list[str] = col.to_pylist()
    return values


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


# --------------------------------------------------------------------------- the kinds of table file: one class each


class FileKind:
    """How one kind of table file is cut into shards and read: one subclass per kind, one row of :data:`FILE_KINDS`
    (by the name a :class:`Shard` and a pretokenize job's resume rows record). Nothing outside this table switches
    on a shard's kind."""

    files_per_shard = 0  # > 0: the files of this kind are grouped, this many a shard (each file one document)
    has_columns = True  # False: each file is one text (.txt), read by datatools pretokenize alone

    def part(self, shard: Shard) -> str:
        """Which part of its file ``shard`` is, for messages ("" when the file is one shard)."""
        return ""

    def shards(self, f: str) -> list[Shard]:
        """The file ``f`` cut into shards; [] for a file of no document."""
        raise ValueError(f"{display(f)}: not found by a listing")

    def nbytes(self, shard: Shard) -> int:
        """Bytes of input ``shard`` covers (for progress and throughput)."""
        return shard.nbytes

    def columns(self, shard: Shard) -> dict[str, bool]:
        """The shard's columns, each mapped to whether it holds text; one schema (or first line) read."""
        raise ValueError(
            f"{display(shard.files[0])}: plain text has no columns; pre-tokenize it first (datatools pretokenize)"
        )

    def checked_columns(self, shard: Shard) -> list[str] | None:
        """The names a column asked for must be one of, before any work (None: nothing to check)."""
        return list(self.columns(shard))

    def batches(self, shard: Shard, column: str, text: bool) -> Iterator[pa.Array | pa.ChunkedArray]:
        """``column`` of the shard, a bounded batch at a time."""
        raise ValueError(f"{display(shard.files[0])}: {shard.kind} shards have no columns")

    def texts(self, shard: Shard, column: str) -> Iterator[list[str]]:
        """The shard's documents as strings, a bounded batch at a time (its text column)."""
        for col in self.batches(shard, column, text=True):
            texts = text_values(col, shard.describe(), column)
            del col  # the Arrow copy of the text freed before the strings are tokenized
            yield texts


class ParquetFiles(FileKind):
    """Parquet: a shard is a row group."""

    def part(self, shard: Shard) -> str:
        return f" row group {shard.part}"

    def shards(self, f: str) -> list[Shard]:
        meta = parquet_metadata(f)
        return [Shard("parquet", (f,), g) for g in range(meta.num_row_groups)] if meta.num_rows > 0 else []

    def nbytes(self, shard: Shard) -> int:  # as stored (compressed), the unit of the file sizes a bar's total adds up
        group = parquet_metadata(shard.files[0]).row_group(shard.part)
        return sum(int(group.column(i).total_compressed_size) for i in range(group.num_columns))

    def columns(self, shard: Shard) -> dict[str, bool]:
        schema = parquet_metadata(shard.files[0]).schema.to_arrow_schema()
        return {fld.name: is_text_type(fld.type) for fld in schema}

    def batches(self, shard: Shard, column: str, text: bool) -> Iterator[pa.Array | pa.ChunkedArray]:
        f = shard.files[0]
        detect_column(list(self.columns(shard)), column, display(f))
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


class ArrowFiles(FileKind):
    """Arrow IPC (``.arrow``, ``.feather``, Hugging Face ``save_to_disk`` directories): a shard is a run of record
    batches of about :data:`PART_BYTES`."""

    def part(self, shard: Shard) -> str:
        return f" record batch {shard.part}" if shard.part else ""

    def shards(self, f: str) -> list[Shard]:
        if not any(batch.num_rows for batch in iter_arrow_batches(f)):
            return []
        return [Shard("arrow", (f,), a, b, nbytes) for a, b, nbytes in arrow_parts(f)]

    def columns(self, shard: Shard) -> dict[str, bool]:
        return {fld.name: is_text_type(fld.type) for fld in open_arrow(shard.files[0])[0].schema}

    def batches(self, shard: Shard, column: str, text: bool) -> Iterator[pa.Array | pa.ChunkedArray]:
        detect_column(list(self.columns(shard)), column, display(shard.files[0]))
        for batch in iter_arrow_batches(shard.files[0], shard.part, shard.stop):
            yield batch.column(column)


class JsonLinesFiles(FileKind):
    """JSON Lines: a shard is the lines that *start* in a byte range of :data:`PART_BYTES`."""

    def part(self, shard: Shard) -> str:
        return f" bytes {shard.part}.." if shard.part else ""

    def shards(self, f: str) -> list[Shard]:
        if not _has_lines(f):
            return []
        size = storage.location(f).size()
        return [Shard("jsonl", (f,), a, min(a + PART_BYTES, size)) for a in range(0, max(size, 1), PART_BYTES)]

    def nbytes(self, shard: Shard) -> int:
        return shard.stop - shard.part

    def columns(self, shard: Shard) -> dict[str, bool]:
        return {k: isinstance(v, str) for k, v in jsonl.first_row(shard.files[0]).items()}

    def checked_columns(self, shard: Shard) -> list[str] | None:
        return list(self.columns(shard)) or None  # an empty file has no column to miss

    def batches(self, shard: Shard, column: str, text: bool) -> Iterator[pa.Array | pa.ChunkedArray]:
        value_type = pa.large_string() if text else pa.list_(pa.int64())
        yield from jsonl.read_column_blocks(shard.files[0], column, value_type, shard.part, shard.stop)


class TextFiles(FileKind):
    """Plain ``.txt`` files, :data:`TEXT_FILES_PER_SHARD` a shard, each file one document (even when empty)."""

    files_per_shard = TEXT_FILES_PER_SHARD
    has_columns = False

    def nbytes(self, shard: Shard) -> int:
        return sum(storage.location(x).size() for x in shard.files)

    def checked_columns(self, shard: Shard) -> list[str] | None:
        return None

    def texts(self, shard: Shard, column: str) -> Iterator[list[str]]:
        out = []
        for f in shard.files:
            data = storage.location(f).read_bytes()  # a PermissionError names the file (a URL: its object, one GET)
            try:
                out.append(data.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise ValueError(f"{display(f)}: not UTF-8 text ({exc})") from None
        yield out


class ArrayRecordFiles(FileKind):
    """A whole ArrayRecord file (each of the files an ArrayRecord input names, never found by a listing here): its
    column is a feature of its ``tf.train.Example`` records, read :data:`array_record_files.BATCH_RECORDS` records at
    a time; ``nbytes``: the file's size."""

    def columns(self, shard: Shard) -> dict[str, bool]:
        return array_record_files.features(shard.files[0])

    def batches(self, shard: Shard, column: str, text: bool) -> Iterator[pa.Array | pa.ChunkedArray]:
        f = shard.files[0]
        for values in array_record_files.feature_values(f, column):
            if text:
                yield pa.array(array_record_files.decode_texts(values), pa.large_string())
                continue
            ids = cast("list[list[int]]", values)  # a token feature: int64 values
            low = min((x for v in ids for x in v), default=0)
            if low < 0:
                raise ValueError(f"{os.fspath(f)}: feature {column!r} holds a negative token id {low}")
            yield pa.array(ids, pa.list_(pa.int64()))

    def texts(self, shard: Shard, column: str) -> Iterator[list[str]]:
        yield from array_record_files.texts(shard.files[0], column)


FILE_KINDS: dict[str, FileKind] = {  # Shard.kind -> how that kind of file is read
    "parquet": ParquetFiles(),
    "arrow": ArrowFiles(),
    "jsonl": JsonLinesFiles(),
    "text": TextFiles(),
    "array_record": ArrayRecordFiles(),
}


def _has_lines(f: str) -> bool:
    """Whether a JSON Lines file holds a non-blank line (read only as far as its first non-blank byte)."""
    if storage.location(f).size() == 0:
        return False
    with storage.location(f).open() as fh:
        while block := fh.read(1 << 20):
            if block.strip():
                return True
    return False
