"""Per-document lengths of table files kept on local disk, so a second run over the same input reads no column for
them: a pipeline, ``pack`` or ``analyze-padding`` over a Parquet, Arrow or JSON Lines input then reads each
file's tokens once (its lengths come from here), and a text column is tokenized once instead of twice.

One entry per input file: its shards' lengths (int32, int64 past 2**31 - 1) and documents per shard, in a
``.npz`` named by the SHA-256 of its *key*: the file's identity (real path, bytes, mtime and ctime in ns, inode,
device), its shards (row groups, batch or byte ranges), the column, and the tokenizer of a text column (its
kind, SHA-256, settings, BOS/EOS ids, what was switched off). A file changed in any of those, or read with
another column or tokenizer, has another key: its old entry is never used. An entry is written (atomically,
:mod:`datatools.io.storage.atomic`) only for a file last changed (mtime, ctime) over 2 s (:data:`SETTLED_NS`) before its
read began and unchanged after it, so a write within the file system's timestamp tick cannot leave a stale entry.

Where: ``$DATATOOLS_CACHE_DIR/lengths`` (``off`` turns the cache off), else ``$XDG_CACHE_HOME/datatools/lengths``
or ``~/.cache/datatools/lengths``. At most :data:`MAX_BYTES` of entries (``DATATOOLS_LENGTHS_CACHE_BYTES``), the
least recently used removed first. Files in object storage are not cached (read as before). The cache is only an
optimisation: a folder that cannot be written, or an unreadable entry, is the same as no entry.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
import zipfile
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

import numpy as np

from datatools.base.numba_cache import user_cache
from datatools.io import storage
from datatools.io.formats.discover import Shard

VERSION = 1  # of the entries' layout and key: a new one ignores older entries
SETTLED_NS = 2 * 10**9  # a file changed (mtime or ctime) less than this before its read is not cached (a
# timestamp tick is up to ~10 ms)
MAX_BYTES = 1 << 30  # entries kept at most (int32 lengths: ~268M documents), least recently used removed first
ENV_DIR = "DATATOOLS_CACHE_DIR"
ENV_BYTES = "DATATOOLS_LENGTHS_CACHE_BYTES"


def cache_folder() -> Path | None:
    """The lengths cache's folder (see the module docstring); None when it is off or there is no home."""
    chosen = os.environ.get(ENV_DIR)
    if chosen is not None and chosen.strip().lower() == "off":
        return None
    base = Path(chosen) if chosen else user_cache("datatools")
    return None if base is None else base / "lengths"


def max_bytes() -> int:
    """Bytes of entries kept at most (``DATATOOLS_LENGTHS_CACHE_BYTES``, else :data:`MAX_BYTES`)."""
    with suppress(ValueError):
        return max(0, int(os.environ.get(ENV_BYTES, MAX_BYTES)))
    return MAX_BYTES


def file_identity(path: str) -> dict[str, Any] | None:
    """A local file's identity (real path, bytes, mtime and ctime in ns, inode, device); None for an object in
    storage or a file that cannot be read."""
    loc = storage.location(path)
    if not loc.has_directories:
        return None
    try:
        st = os.stat(loc.local_path)
    except OSError:
        return None
    ident = {"file": loc.identity, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}
    return ident | {"inode": st.st_ino, "device": st.st_dev}


class TableLengthsCache:
    """The lengths cache for one table input: :meth:`cached` gives the shards whose file has an entry,
    :meth:`add` takes each shard's lengths as it is read and writes a file's entry once all its shards are in.

    Args:
      shards: the input's shards, in order (shard ``k`` is ``shards[k]``).
      column: the column read.
      tokenizer: what a text column's lengths depend on besides the text (the tokenizer's digest, settings, ...),
        None for token ids; a ``file`` item (its name) is left out: the digest says which it is.
      folder: the cache folder (default :func:`cache_folder`; None: off).
    """

    def __init__(
        self, shards: Sequence[Shard], column: str, tokenizer: dict[str, Any] | None, folder: Path | None = None
    ):
        self.folder = folder
        self._files: dict[str, list[int]] = {}  # file -> its shards (k), in order
        for k, s in enumerate(shards):
            self._files.setdefault(s.files[0], []).append(k)
        self._shards = shards
        self._what = {"column": column, "tokenizer": {k: v for k, v in (tokenizer or {}).items() if k != "file"}}
        # file -> its identity when first asked (None: not cacheable)
        self._before: dict[str, dict[str, Any] | None] = {}
        self._asked_ns = 0  # when they were asked (time.time_ns)
        self._got: dict[int, np.ndarray] = {}  # lengths read of shards whose file is not complete yet
        self._missing = {f: len(ks) for f, ks in self._files.items()}  # shards of each file not read yet
        self.hits = self.writes = 0  # files found, entries written (for tests and reports)

    @classmethod
    def for_shards(
        cls, shards: Sequence[Shard], column: str, tokenizer: dict[str, Any] | None
    ) -> TableLengthsCache | None:
        """The cache for these shards in :func:`cache_folder`, or None when it is off (or none is local)."""
        folder = cache_folder()
        if folder is None or not any(storage.location(s.files[0]).has_directories for s in shards):
            return None
        return cls(shards, column, tokenizer, folder)

    def _key(self, f: str, ident: dict[str, Any]) -> str:
        parts = [[s.kind, s.part, s.stop] for s in (self._shards[k] for k in self._files[f])]
        return json.dumps({"version": VERSION, **ident, "shards": parts, **self._what}, sort_keys=True, default=str)

    def _entry(self, key: str) -> Path:
        assert self.folder is not None
        return self.folder / f"{hashlib.sha256(key.encode()).hexdigest()[:40]}.npz"

    def cached(self) -> dict[int, np.ndarray]:
        """int64 lengths of every shard whose file has a valid entry, by shard number."""
        out: dict[int, np.ndarray] = {}
        self._asked_ns = time.time_ns()
        for f, ks in self._files.items():
            ident = self._before[f] = file_identity(f)
            if ident is None or self.folder is None:
                continue
            key = self._key(f, ident)
            got = _load(self._entry(key), key, len(ks))
            if got is None:
                continue
            self.hits += 1
            for k, lengths in zip(ks, got):
                out[k] = lengths
        return out

    def add(self, k: int, lengths: np.ndarray) -> None:
        """Shard ``k``'s lengths, just read; a file's entry is written when its last shard comes in."""
        f = self._shards[k].files[0]
        if k not in self._got:
            self._missing[f] -= 1  # counted, not searched: a file of 50,000 shards took 53 s in any(...)
        self._got[k] = lengths
        if self._missing[f] > 0:
            return
        parts = [self._got.pop(j) for j in self._files[f]]
        before = self._before.get(f)
        if before is None or self.folder is None:
            return
        settled = max(before["mtime_ns"], before["ctime_ns"]) < self._asked_ns - SETTLED_NS
        if not settled or file_identity(f) != before:
            return
        key = self._key(f, before)
        if _store(self.folder, self._entry(key), key, parts):
            self.writes += 1


def _load(path: Path, key: str, shards: int) -> list[np.ndarray] | None:
    """The shards' lengths of the entry at ``path`` when it holds ``key`` and is whole; None otherwise."""
    try:
        with np.load(path, allow_pickle=False) as z:
            if bytes(z["key"]).decode() != key:
                return None
            lengths, docs = z["lengths"], z["shard_docs"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # UnicodeDecodeError: a ValueError
        return None
    if docs.shape != (shards,) or (docs < 0).any() or int(docs.sum()) != lengths.shape[0] or (lengths < 0).any():
        return None
    with suppress(OSError):
        os.utime(path)  # used now: removed last
    at = np.concatenate(([0], np.cumsum(docs)))
    return [lengths[at[i] : at[i + 1]].astype(np.int64) for i in range(shards)]


def _store(folder: Path, path: Path, key: str, parts: list[np.ndarray]) -> bool:
    """Write an entry atomically, then keep the folder under :func:`max_bytes`; False when it cannot be written."""
    lengths = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    if lengths.size and int(lengths.max()) <= np.iinfo(np.int32).max:
        lengths = lengths.astype(np.int32)
    docs = np.array([p.shape[0] for p in parts], np.int64)
    buf = io.BytesIO()
    np.savez(buf, key=np.frombuffer(key.encode(), np.uint8), lengths=lengths, shard_docs=docs)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        storage.location(path).write_with(lambda f: f.write(buf.getbuffer()))
    except OSError:
        return False
    _trim(folder, max_bytes())
    return True


def _trim(folder: Path, limit: int) -> None:
    """Remove the least recently used entries until the folder's entries take at most ``limit`` bytes."""
    entries = []
    for p in folder.glob("*.npz"):
        with suppress(OSError):
            st = p.stat()
            entries.append((st.st_mtime_ns, st.st_size, p))
    total = sum(size for _, size, _ in entries)
    for _, size, p in sorted(entries, key=lambda e: e[0]):
        if total <= limit:
            break
        with suppress(OSError):
            p.unlink()
            total -= size
