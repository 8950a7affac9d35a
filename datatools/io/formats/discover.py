"""Finding the input files under a path and cutting them into shards, the unit of work (and of resumption):
a Parquet row group; Arrow IPC record batches of about :data:`PART_BYTES` (``.arrow``, ``.feather``, Hugging Face
``save_to_disk`` directories); the JSON Lines lines that *start* in a byte range of :data:`PART_BYTES`;
:data:`TEXT_FILES_PER_SHARD` plain ``.txt`` files (one document each). Every problem is a ``ValueError`` naming
the file, or the ``OSError`` itself.
"""

from __future__ import annotations

import functools
import itertools
import os
import warnings
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from datatools.io import storage
from datatools.io.storage.paths import display, first_line, map_file

TEXT_FILES_PER_SHARD = 256
PART_BYTES = 64 << 20  # JSON Lines bytes / Arrow batch bytes per shard
EXTENSIONS = {".parquet": "parquet", ".arrow": "arrow", ".feather": "arrow", ".jsonl": "jsonl", ".txt": "text"}


@dataclass(frozen=True)
class Shard:
    """One unit of input.

    Attributes:
      kind: ``parquet``, ``arrow``, ``jsonl``, ``text`` or ``array_record`` (a whole ArrayRecord file: made by
        ``datatools pretokenize`` from the files an ArrayRecord input names, never found by a listing here).
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


def hf_data_files(path: str | os.PathLike) -> list[str | Path]:
    """The Arrow files of a ``save_to_disk`` directory (local or in object storage), in row order, from its
    ``dataset_dict.json`` (splits in order) and each split's ``state.json`` (``_data_files`` in order), as
    ``datasets.load_from_disk`` reads them (which would copy a bucket's directory to local disk first)."""
    import json

    def load(name: str):
        try:
            return json.loads(storage.location(path).join(name).read_bytes(max_bytes=storage.MAX_METADATA_BYTES))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(
                f"{storage.location(path).join(name).display}: not a Hugging Face save_to_disk file ({first_line(exc)})"
            ) from None

    if storage.location(path).join("dataset_dict.json").is_file():
        splits = load("dataset_dict.json").get("splits")
        if not isinstance(splits, list) or not all(isinstance(x, str) for x in splits):
            raise ValueError(f"{storage.location(path).join('dataset_dict.json').display}: no list of splits")
        return [f for split in splits for f in hf_data_files(storage.location(path).join(split).path)]
    files = load("state.json").get("_data_files")
    if not isinstance(files, list) or not all(isinstance(x, dict) and "filename" in x for x in files):
        raise ValueError(f"{storage.location(path).join('state.json').display}: no _data_files list")
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


def list_input_files(path: str | os.PathLike) -> Sequence[tuple[str, str | Path]]:
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


def _walk_key(relative: str) -> tuple:
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


def list_shards(path: str | os.PathLike) -> list[Shard]:
    """The input under ``path`` cut into shards, in a fixed order (text shards last). A file of no document gives
    no shard; an input of no document at all is a ``ValueError`` naming it. A ``.txt`` file is one document, even
    when empty."""
    shards: list[Shard] = []
    texts: list[str] = []
    files = list_input_files(path)
    for kind, f in files:
        name = str(f)
        if kind == "text":
            texts.append(name)
        elif not _has_documents(kind, name):
            continue
        elif kind == "parquet":
            groups = parquet_metadata(name).num_row_groups
            shards.extend(Shard("parquet", (name,), g) for g in range(groups))
        elif kind == "arrow":
            shards.extend(Shard("arrow", (name,), a, b, nbytes) for a, b, nbytes in arrow_parts(name))
        else:
            size = storage.location(name).size()
            shards.extend(
                Shard("jsonl", (name,), a, min(a + PART_BYTES, size)) for a in range(0, max(size, 1), PART_BYTES)
            )
    for i in range(0, len(texts), TEXT_FILES_PER_SHARD):
        shards.append(Shard("text", tuple(texts[i : i + TEXT_FILES_PER_SHARD])))
    if not shards:
        what = "the file is empty" if len(files) == 1 else f"its {len(files)} input files are all empty"
        raise ValueError(f"{display(path)}: no documents ({what})")
    return shards


def _has_documents(kind: str, f: str) -> bool:
    """Whether a Parquet, Arrow or JSON Lines file holds at least one row (a JSON Lines file: a non-blank line;
    read only as far as its first non-blank byte)."""
    if kind == "parquet":
        return parquet_metadata(f).num_rows > 0
    if kind == "arrow":
        return any(batch.num_rows for batch in iter_arrow_batches(f))
    if storage.location(f).size() == 0:
        return False
    with storage.location(f).open() as fh:
        while block := fh.read(1 << 20):
            if block.strip():
                return True
    return False


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
def open_parquet(f: str):
    """A ``ParquetFile`` over a Python file object (any file name works), with the cached footer."""
    meta = parquet_metadata(f)
    with storage.location(f).open() as fh:  # a URL: ranged reads of the column chunks asked for, with read-ahead
        yield pq.ParquetFile(fh, metadata=meta)


def open_arrow(f: str):
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


def iter_arrow_batches(f: str, start: int = 0, stop: int | None = None):
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
