"""The token store: tokenized documents on disk, on tensorstore (zarr v3).

Layout of a store directory (readable with tensorstore alone)::

    STORE/
      manifest.json   {"format": "datatools-token-store", "version": 1, "dtype", "vocab_size",
                       "num_documents", "num_tokens", "tokenizer_sha256", "sources", "job", ...}
      tokens/         zarr v3 array, shape [num_tokens], uint16 when the vocabulary fits, else uint32;
                      chunks of TOKEN_CHUNK tokens, zstd-compressed
      offsets/        zarr v3 array, shape [num_documents + 1], int64: document i is
                      tokens[offsets[i]:offsets[i + 1]]

Documents are back to back, so a contiguous range of documents is one contiguous
read. :class:`TokenStore` reads it; :func:`write_store` writes one into a fresh
directory (the pre-tokenize job renames it into place when complete, so a reader
never sees a half-written store).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

import numpy as np
import tensorstore as ts

from datatools.io.atomic import atomic_write_text
from datatools.io.paths import display, resolved

FORMAT = "datatools-token-store"
VERSION = 1
TOKEN_CHUNK = 1 << 20  # tokens per chunk: 2-4 MiB uncompressed
OFFSET_CHUNK = 1 << 18  # offsets per chunk


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every token id fits (vocab_size <= 65536), else uint32."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def zarr_spec(path: str | os.PathLike) -> dict:
    """The tensorstore spec of one of the store's arrays; the path is resolved (tensorstore rejects ``..``)."""
    return {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(resolved(path))}}


def _create(path: Path, dtype: np.dtype, length: int, chunk: int):
    codec = ts.CodecSpec({"driver": "zarr3", "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                                        {"name": "zstd", "configuration": {"level": 3}}]})
    return ts.open(zarr_spec(path), create=True, dtype=ts.dtype(dtype.name), shape=[length],
                   chunk_layout=ts.ChunkLayout(chunk_shape=[max(1, min(chunk, max(length, 1)))]), codec=codec).result()


def write_store(path: str | os.PathLike, shards: Iterable[tuple[np.ndarray, np.ndarray]], *, num_tokens: int,
                num_documents: int, dtype: np.dtype, manifest: dict) -> None:
    """Write a store into the (new, empty) directory ``path`` from (tokens, lengths) shards in order.

    ``num_tokens`` / ``num_documents`` are the totals over the shards (known up
    front from the shards' lengths). The manifest is written last.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=False)
    tokens = _create(path / "tokens", np.dtype(dtype), num_tokens, TOKEN_CHUNK)
    offsets = np.zeros(num_documents + 1, dtype=np.int64)
    tok_pos = doc_pos = 0
    pending: list[np.ndarray] = []
    pending_size = 0
    flush_at = TOKEN_CHUNK * 8

    def flush() -> None:
        nonlocal tok_pos, pending, pending_size
        if pending_size:
            block = np.concatenate(pending)
            tokens[tok_pos : tok_pos + block.size].write(block).result()
            tok_pos += block.size
        pending, pending_size = [], 0

    for shard_tokens, shard_lengths in shards:
        n = shard_lengths.shape[0]
        offsets[doc_pos + 1 : doc_pos + n + 1] = np.cumsum(shard_lengths, dtype=np.int64) + tok_pos + pending_size
        doc_pos += n
        pending.append(np.asarray(shard_tokens, dtype=dtype))
        pending_size += shard_tokens.size
        if pending_size >= flush_at:
            flush()
    flush()
    if tok_pos != num_tokens or doc_pos != num_documents:
        raise ValueError(f"shards hold {doc_pos} documents / {tok_pos} tokens, expected {num_documents} / {num_tokens}")
    _create(path / "offsets", np.dtype(np.int64), num_documents + 1, OFFSET_CHUNK)[:].write(offsets).result()
    manifest = {"format": FORMAT, "version": VERSION, "dtype": np.dtype(dtype).name, "num_documents": num_documents,
                "num_tokens": num_tokens, **manifest}
    atomic_write_text(path / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def read_manifest(path: str | os.PathLike) -> dict:
    """The store's manifest; ValueError naming the path when it is missing or not a token store."""
    path = Path(path)
    try:
        with open(path / "manifest.json", "rb") as f:  # a PermissionError propagates, naming the file
            manifest = json.loads(f.read())
    except FileNotFoundError:
        raise ValueError(f"{display(path)}: not a datatools token store (no manifest.json)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{display(path / 'manifest.json')}: corrupt ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{display(path)}: manifest.json is not a {FORMAT} manifest")
    if manifest.get("version") != VERSION:
        raise ValueError(f"{display(path)}: token store version {str(manifest.get('version'))[:20]} is not supported "
                         f"(want {VERSION})")
    for key in ("num_documents", "num_tokens"):
        value = manifest.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{display(path / 'manifest.json')}: corrupt ({key} must be a non-negative integer, got "
                             f"{str(value)[:40]!r})")
    if manifest.get("dtype") not in ("uint16", "uint32"):
        raise ValueError(f"{display(path / 'manifest.json')}: corrupt (dtype must be uint16 or uint32, got "
                         f"{str(manifest.get('dtype'))[:40]!r})")
    return manifest


def is_token_store(path: str | os.PathLike) -> bool:
    """Whether ``path`` is laid out as a token store (a manifest beside ``offsets/``). Its content is checked
    when it is opened, so a store with a corrupt or unreadable manifest is reported as such, not skipped."""
    path = Path(path)
    return (path / "manifest.json").is_file() and (path / "offsets").is_dir()


class TokenStore:
    """Random access to a token store; a Grain random-access data source.

    ``len(store)`` documents; ``store[i]`` the tokens of document i (a numpy array
    of the store's dtype); :meth:`read_range` a contiguous range in one read;
    :meth:`lengths` from the offsets alone, without touching the tokens. Picklable
    (the tensorstore handles reopen lazily in each worker process).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        self._offsets: np.ndarray | None = None
        self._tokens = None

    def __getstate__(self):
        return {"path": self.path, "manifest": self.manifest, "_offsets": None, "_tokens": None}

    @property
    def offsets(self) -> np.ndarray:
        """int64 (num_documents + 1,) token offsets."""
        if self._offsets is None:
            arr = ts.open(zarr_spec(self.path / "offsets"), open=True).result()
            self._offsets = arr.read().result()
            if self._offsets.shape[0] != self.manifest["num_documents"] + 1:
                raise ValueError(f"{self.path}: offsets hold {self._offsets.shape[0] - 1} documents, "
                                 f"manifest says {self.manifest['num_documents']}")
        return self._offsets

    @property
    def tokens(self):
        """The tensorstore handle of the flat token array."""
        if self._tokens is None:
            self._tokens = ts.open(zarr_spec(self.path / "tokens"), open=True).result()
        return self._tokens

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.manifest["dtype"])

    @property
    def num_tokens(self) -> int:
        return int(self.manifest["num_tokens"])

    def __len__(self) -> int:
        return int(self.manifest["num_documents"])

    def lengths(self) -> np.ndarray:
        """int64 tokens per document, from the offsets alone."""
        return np.diff(self.offsets)

    def __getitem__(self, i: int) -> np.ndarray:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"document {i} out of range for a store of {n} documents")
        i %= n
        a, b = self.offsets[i], self.offsets[i + 1]
        return self.tokens[a:b].read().result()

    def read_range(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Documents [start, stop) in one contiguous read: (flat tokens, offsets relative to them)."""
        if not 0 <= start <= stop <= len(self):
            raise IndexError(f"range [{start}, {stop}) out of bounds for a store of {len(self)} documents")
        off = self.offsets[start : stop + 1]
        flat = self.tokens[off[0] : off[-1]].read().result()
        return flat, off - off[0]

    def read_tokens(self, begin: int, end: int) -> np.ndarray:
        """Tokens [begin, end) of the flat array (one read)."""
        return self.tokens[begin:end].read().result()

    def __repr__(self) -> str:
        return f"TokenStore({str(self.path)!r}, documents={len(self)}, tokens={self.num_tokens}, dtype={self.dtype})"
