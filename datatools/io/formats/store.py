"""The token store: tokenized documents on tensorstore (zarr v3) that knows its own content.

Layout: ``manifest.json`` (written last: dtype, counts, job, each key's ``[bytes, sha256]``, xxh3_64 digests);
``tokens/`` (uint16 or uint32; each object ``c/k`` a shard of TOKEN_CHUNK tokens in zstd + crc32c inner chunks of
READ_CHUNK); ``offsets/`` (int64, num_documents + 1); ``shard_index.bin`` (every shard's index: :mod:`shard_reads`).
tensorstore reads a missing chunk as 0, so on open every recorded key is listed with its size, each object a reader
touches is checked against the digests once per process, and a bad chunk is a ``ValueError`` naming it and ending
with :func:`repair_command`; :func:`store_verify.verify_store` reads every byte. Only the version ``pretokenize``
writes is read: an older store (version 1: no records; 2: unsharded; 3 before its xxh3 digests) is refused in one line
naming the job that rewrites it (``pretokenize ... --overwrite``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeAlias, TypeGuard, cast

import numpy as np
import tensorstore as ts
import xxhash

from datatools.io import storage
from datatools.io.formats import shard_reads
from datatools.io.formats.shard_reads import INDEX_ENTRY_BYTES, JoinedRead, all_done
from datatools.io.formats.token_array import TokenRead
from datatools.io.storage.io_errors import as_os_error, os_errors, short_message, status_code
from datatools.io.storage.paths import display

# A started check of one stored object (:meth:`TokenStore.check_objects`): the future of the bytes to check (None when
# the shard's entries were compared already), and what they are checked against: ``(kind, want)``, ``kind`` one of
# ``index``, ``xxh3`` (``want`` the digest) or ``entries`` (``want`` the mismatch, None when they matched).
_Check: TypeAlias = "tuple[ts.Future[ts.KvStore.ReadResult] | None, tuple[str, str | ValueError | None]]"
_Pending: TypeAlias = "list[tuple[str, str, _Check]]"  # (array name, key, its check) of each object to wait for

FORMAT = "datatools-token-store"
# offsets up to this size (bytes) are pickled with a store to Grain workers (from a bucket, re-reading 5 MB took ~1 s)
CARRIED_OFFSETS_BYTES = 256 << 20
VERSION = 3  # 2: per-chunk records in the manifest, crc32c in every chunk; 3: tokens sharded (inner chunks)
TOKEN_CHUNK = 1 << 20  # tokens per stored object (a shard): 2-4 MiB uncompressed
READ_CHUNK = 1 << 14  # tokens per inner chunk of a shard: the unit a ranged read fetches (32-64 KiB uncompressed)
OFFSET_CHUNK = 1 << 18  # offsets per chunk
ARRAYS = ("tokens", "offsets")
CHECKSUM = "sha256"
REQUESTS_IN_FLIGHT = 64  # concurrent requests per open array to an object store (tensorstore's default: 32)
INDEX_CACHE_BYTES = 32 << 20  # tensorstore's cache per open array: shard indices (1 KiB each) and recent chunks
_READS_IN_FLIGHT = 64  # kvstore reads issued at once when recording or verifying chunks
FAST_DIGEST = "xxh3_64"  # the per-object digest readers check (~20 GB/s; sha256, ~1.7 GB/s, stays for verify)
ROOT_STAGING = ".partial"  # a store at a bucket root stages its job under ROOT/.partial/ (never another bucket)
# tensorstore status codes of a bad chunk (not an environment failure) when reading
_DATA_ERRORS = ("NOT_FOUND", "DATA_LOSS", "INVALID_ARGUMENT", "FAILED_PRECONDITION", "OUT_OF_RANGE", "INTERNAL", None)


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every token id fits (vocab_size <= 65536), else uint32."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def chunk_elements(grid: ts.ChunkLayout.Grid) -> int:
    """Elements per chunk of a 1-d array's chunk ``grid``: ``chunk_layout.write_chunk`` a stored object's (a shard's),
    ``chunk_layout.read_chunk`` an inner chunk's (else the stored chunk's). tensorstore types a grid's shape optional;
    a zarr array's is always set (ValueError otherwise)."""
    shape = grid.shape
    if shape is None or shape[0] is None:
        raise ValueError("a chunk grid without a shape")
    return int(shape[0])


def zarr_spec(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The tensorstore spec of a zarr v3 array at ``path`` (local or a bucket: :meth:`Location.kvstore_spec`)."""
    return {"driver": "zarr3", "kvstore": storage.location(path).kvstore_spec()}


def array_kvstore(path: str | os.PathLike[str]) -> ts.KvStore:
    """The kvstore holding one array's keys (``zarr.json``, ``c/0``, ...), from the array's own spec."""
    spec = storage.location(path).kvstore_spec()
    if spec["path"] and not spec["path"].endswith("/"):
        spec["path"] += "/"
    loc = storage.location(path)
    return loc.result(loc.bounded(ts.KvStore.open(spec)))


def _create(path: str | Path, dtype: np.dtype, length: int, chunk: int, inner: int | None = None) -> ts.TensorStore:
    """A new 1-d zarr v3 array of ``length`` elements in stored objects of ``chunk`` elements; with ``inner``, each
    object is a shard (``sharding_indexed``, index first) of separately compressed and checksummed inner chunks."""
    leaf = [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 3}},
        {"name": "crc32c"},
    ]
    stored = min(chunk, max(length, 1))
    codecs = leaf
    if inner is not None and inner < stored:
        stored = -(-stored // inner) * inner  # a shard holds whole inner chunks
        codecs = [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [inner],
                    "codecs": leaf,
                    "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                    "index_location": "start",  # a prefix range: some servers (the GCS emulator) refuse suffix ranges
                },
            }
        ]
    spec = {
        **zarr_spec(path),
        "store_data_equal_to_fill_value": True,
        "metadata": {"codecs": codecs, "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [stored]}}},
    }
    return ts.open(spec, create=True, dtype=ts.dtype(dtype.name), shape=[length]).result()


def write_store(
    path: str | os.PathLike[str],
    shards: Iterable[tuple[np.ndarray, np.ndarray]],
    *,
    num_tokens: int,
    num_documents: int,
    dtype: np.dtype,
    manifest: dict[str, Any],
) -> None:
    """Write a store into the (new, empty) directory ``path`` from (tokens, lengths) shards in order; the totals
    are known up front. The manifest, with the chunk records, is written last.

    Raises:
      OSError: the disk is full, a permission is refused (naming the file being written).
      ValueError: the shards do not hold the totals given.
    """
    path = storage.location(path).path
    _claim(path)
    tokens_at, offsets_at = storage.location(path).join("tokens").path, storage.location(path).join("offsets").path
    with os_errors(tokens_at):
        tokens = _create(tokens_at, np.dtype(dtype), num_tokens, TOKEN_CHUNK, READ_CHUNK)
    offsets = np.zeros(num_documents + 1, dtype=np.int64)
    tok_pos, doc_pos = _write_tokens(path, tokens, shards, offsets, np.dtype(dtype))
    if tok_pos != num_tokens or doc_pos != num_documents:
        raise ValueError(f"shards hold {doc_pos} documents / {tok_pos} tokens, expected {num_documents} / {num_tokens}")
    with os_errors(offsets_at):
        offsets_array = _create(offsets_at, np.dtype(np.int64), num_documents + 1, OFFSET_CHUNK)
        offsets_array[:].write(offsets).result()
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "dtype": np.dtype(dtype).name,
        "num_documents": num_documents,
        "num_tokens": num_tokens,
        **manifest,
        **record_contents(path),
    }
    # Written last, in one atomic write (a rename locally, one PUT in object storage): the store's commit point.
    storage.location(path).join("manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def _claim(path: str | Path) -> None:
    """Make the store's directory (it must not exist); in object storage, check that the prefix holds nothing but
    the store's own staging."""
    if storage.location(path).has_directories:
        Path(path).mkdir(parents=True, exist_ok=False)
        return
    staging = f"{storage.location(path).join(ROOT_STAGING).path}/" if not storage.location(path).key else None
    held = [f for f in storage.location(path).list() if not (staging and storage.location(f).text.startswith(staging))]
    if held:
        raise ValueError(
            f"{display(path)}: already holds objects ({display(held[0])}); a store is written under an empty "
            f"prefix (or beside its own staging, {ROOT_STAGING}/)"
        )


def _write_tokens(
    path: str | Path,
    tokens: ts.TensorStore,
    shards: Iterable[tuple[np.ndarray, np.ndarray]],
    offsets: np.ndarray,
    dtype: np.dtype,
) -> tuple[int, int]:
    """Write the shards' tokens into the array ``tokens``, each stored object once (pending tokens are held until
    an object is whole), and their documents' ends into ``offsets``; the tokens and documents written."""
    tok_pos = doc_pos = 0
    pending: list[np.ndarray] = []
    pending_size = 0

    def flush(final: bool = False) -> None:
        """Write the pending tokens up to the last whole stored object (all when ``final``): each object once."""
        nonlocal tok_pos, pending, pending_size
        if not pending_size:
            return
        block = np.concatenate(pending)
        take = block.size if final else (tok_pos + block.size) // TOKEN_CHUNK * TOKEN_CHUNK - tok_pos
        if take > 0:
            with os_errors(storage.location(path).join("tokens").path):
                tokens[tok_pos : tok_pos + take].write(block[:take]).result()
            tok_pos += take
        rest = block[take:]
        pending, pending_size = ([rest] if rest.size else []), int(rest.size)

    for shard_tokens, shard_lengths in shards:
        n = shard_lengths.shape[0]
        offsets[doc_pos + 1 : doc_pos + n + 1] = np.cumsum(shard_lengths, dtype=np.int64) + tok_pos + pending_size
        doc_pos += n
        pending.append(np.asarray(shard_tokens, dtype=dtype))
        pending_size += shard_tokens.size
        if pending_size >= TOKEN_CHUNK * 8:
            flush()
    flush(final=True)
    return tok_pos, doc_pos


def record_contents(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest's ``chunks``, ``digests`` and (sharded tokens) ``shard_index`` record; writes the index."""
    chunks, digests, index = record_chunks(path)
    return {"chunks": chunks, "digests": digests} | (_write_shard_index(path, index) if index is not None else {})


def _write_shard_index(path: str | os.PathLike[str], index: bytes) -> dict[str, Any]:
    """Write ``shard_index.bin``; the manifest's record of it (``{"shard_index": {...}}``)."""
    storage.location(path).join(shard_reads.INDEX_KEY).write_bytes(index)
    record = {"bytes": len(index), "sha256": hashlib.sha256(index).hexdigest()}
    return {"shard_index": record | {FAST_DIGEST: xxhash.xxh3_64_hexdigest(index)}}


def lacks_shard_index(manifest: dict[str, Any]) -> bool:
    """Whether a sharded store was written before ``shard_index.bin`` (:func:`add_shard_index`)."""
    return "shard_index" not in manifest and "tokens_index" in (manifest.get("digests") or {})


def add_shard_index(path: str | os.PathLike[str]) -> None:
    """Give a store written before ``shard_index.bin`` its index and record (as a fresh run of the job would), or
    rewrite a damaged or missing one from the chunks (the manifest rewritten only when its record changes).
    ValueError naming the store, nothing written, when its chunks differ from the manifest's records."""
    path = storage.location(path).path
    manifest = read_manifest(path)
    chunks, digests, index = record_chunks(path)
    if chunks != manifest.get("chunks") or digests != manifest.get("digests") or index is None:
        raise _damaged(path, manifest, f"{display(path)}: its chunks differ from the manifest's records")
    record = _write_shard_index(path, index)
    if manifest.get("shard_index") != record["shard_index"]:
        manifest.update(record)
        storage.location(path).join("manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def chunk_records(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``{"checksum": "sha256", "tokens": {key: [bytes, hex]}, "offsets": {...}}`` of every key the arrays hold."""
    return record_chunks(path)[0]


def record_chunks(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any], bytes | None]:
    """From one read of every key: the manifest's ``chunks`` (:func:`chunk_records`), its ``digests`` (xxh3_64 of
    every key and, as ``tokens_index``, of each shard's index) and ``shard_index.bin`` (None when not sharded)."""
    path = storage.location(path).path
    records_out: dict[str, Any] = {"checksum": CHECKSUM}
    digests: dict[str, Any] = {"algorithm": FAST_DIGEST}
    table: list[bytes] = []
    for name in ARRAYS:
        where = storage.location(path).join(name).path
        with os_errors(where):
            index = _index_bytes(ts.open(zarr_spec(where), open=True).result())
            records: dict[str, list[int | str]] = {}
            fast: dict[str, str] = {}
            heads: dict[str, str] = {}
            for key, value in read_keys(array_kvstore(where), sorted(array_keys(where), key=_key_order), where):
                if value is None:  # listed a moment ago
                    raise ValueError(
                        f"{storage.location(where).join(key).display}: removed while the store was recorded"
                    )
                records[key] = [len(value), hashlib.sha256(value).hexdigest()]
                fast[key] = xxhash.xxh3_64_hexdigest(value)
                if index and key != "zarr.json":
                    heads[key] = xxhash.xxh3_64_hexdigest(value[:index])
                    if name == "tokens":  # keys in chunk order: c/0, c/1, ...
                        table.append(shard_reads.entries_of(value, (index - 4) // INDEX_ENTRY_BYTES))
        records_out[name] = records
        digests[name] = fast
        if index:
            digests[f"{name}_index"] = heads
    return records_out, digests, (b"".join(table) if table else None)


def _index_bytes(arr: ts.TensorStore) -> int:
    """Bytes of the shard index (entries and crc32c) starting each object of a sharded array; 0 if not sharded."""
    stored, inner = chunk_elements(arr.chunk_layout.write_chunk), chunk_elements(arr.chunk_layout.read_chunk)
    return INDEX_ENTRY_BYTES * (stored // inner) + 4 if inner < stored else 0


def repair_command(path: str | os.PathLike[str], manifest: dict[str, Any] | None = None) -> str:
    """The ``datatools pretokenize ... --overwrite`` job the manifest records (placeholders when it records none)."""
    where = shlex.quote(str(display(path)))
    m = manifest or {}
    sources, tok, opts = m.get("sources"), m.get("tokenizer"), m.get("options")
    if not (isinstance(sources, list) and sources and isinstance(tok, dict) and isinstance(tok.get("file"), str)):
        return f"datatools pretokenize INPUTS... {where} --tokenizer TOKENIZER --overwrite (the job that wrote it)"
    shown = [shlex.quote(str(x)) for x in sources[:3]] + (["..."] if len(sources) > 3 else [])
    parts = ["datatools pretokenize", *shown, where, "--tokenizer", shlex.quote(tok["file"])]
    o = opts if isinstance(opts, dict) else {}
    if o.get("column", "text") != "text":
        parts += ["--column", shlex.quote(str(o["column"]))]
    if o.get("tokenizer_settings", "off") != "off":
        parts += ["--tokenizer-settings", shlex.quote(str(o["tokenizer_settings"]))]
    for key, flag in (("bos_id", "--bos"), ("eos_id", "--eos"), ("ctx", "--ctx"), ("tile", "--tile")):
        if isinstance(o.get(key), int):
            parts += [flag, str(o[key])]
    return " ".join([*parts, "--overwrite"])


def _damaged(path: str | os.PathLike[str], manifest: dict[str, Any] | None, text: str) -> ValueError:
    """A store error that says how to repair: ``text``, then :func:`repair_command`."""
    return ValueError(f"{text}; repair: {repair_command(path, manifest)}")


def _older(path: str | os.PathLike[str], manifest: dict[str, Any], what: str) -> ValueError:
    """The one-line refusal of a store an older datatools wrote: ``what`` it is, and the job that rewrites it."""
    return ValueError(
        f"{display(path)}: {what}, from an older datatools, is no longer read (this one reads version {VERSION}); "
        f"rewrite it: {repair_command(path, manifest)}"
    )


def array_keys(where: str | os.PathLike[str]) -> set[str]:
    """The keys (``zarr.json``, ``c/0``, ...) under one array, from one listing (through tensorstore only in S3,
    :meth:`storage.Location.keys`: its listing crashed on a GCS emulator that ignores prefixes)."""
    return storage.location(where).keys()


def _key_order(key: str) -> tuple[int, int, str]:
    """``zarr.json`` first, then chunks by number (``c/2`` before ``c/10``)."""
    m = re.fullmatch(r"c/(\d+)", key)
    return (1, int(m.group(1)), key) if m else (0, 0, key)


def read_keys(
    kv: ts.KvStore, keys: list[str], where: str | os.PathLike[str] | None = None
) -> Iterator[tuple[str, bytes | None]]:
    """(key, value) of each kvstore key, ``_READS_IN_FLIGHT`` reads at a time; None for a missing key. ``where``: the
    kvstore's place (a URL's requests are bounded: :meth:`storage.Location.bounded`)."""
    for i in range(0, len(keys), _READS_IN_FLIGHT):
        batch = keys[i : i + _READS_IN_FLIGHT]
        named = [storage.location(where).join(k).path if where is not None else k for k in batch]
        for k, name, f in zip(
            batch, named, [storage.location(name).bounded(kv.read(k)) for k, name in zip(batch, named)]
        ):
            r = storage.location(name).result(f)
            yield k, (bytes(r.value) if r.state == "value" else None)


def is_count(value: object) -> TypeGuard[int]:
    """Whether ``value`` (read from JSON) is a non-negative integer, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_manifest(path: str | os.PathLike[str], data: bytes | None = None) -> dict[str, Any]:
    """The store's manifest (``data``: its bytes, already read); ValueError naming the path when it is missing,
    corrupt or not a token store."""
    path = storage.location(path).path
    manifest_file = storage.location(path).join("manifest.json")

    def corrupt(why: str) -> ValueError:
        return _damaged(path, None, f"{display(manifest_file)}: corrupt ({why})")

    try:  # a PermissionError propagates, naming the file; an unreachable object store raises StorageError
        manifest = json.loads(manifest_file.read_bytes(max_bytes=storage.MAX_METADATA_BYTES) if data is None else data)
    except (FileNotFoundError, NotADirectoryError):
        raise ValueError(f"{display(path)}: not a datatools token store (no manifest.json)") from None
    except IsADirectoryError:
        raise corrupt("a directory, not a file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise corrupt(str(exc)) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{display(path)}: manifest.json is not a {FORMAT} manifest")
    version = manifest.get("version")
    if is_count(version) and version < VERSION:
        raise _older(path, manifest, f"token store version {version}")
    if version != VERSION:
        raise ValueError(
            f"{display(path)}: token store version {str(version)[:20]} is not supported "
            f"(this datatools reads version {VERSION})"
        )
    for key in ("num_documents", "num_tokens"):
        if not is_count(value := manifest.get(key)):
            raise corrupt(f"{key} must be a non-negative integer, got {str(value)[:40]!r}")
    if manifest.get("dtype") not in ("uint16", "uint32"):
        raise corrupt(f"dtype must be uint16 or uint32, got {str(manifest.get('dtype'))[:40]!r}")
    chunks = manifest.get("chunks")  # {"checksum": "sha256", "tokens": {key: [bytes, hex]}, "offsets": {...}}
    if not isinstance(chunks, dict) or chunks.get("checksum") != CHECKSUM:
        raise corrupt(f"no chunk records, or not {CHECKSUM}")
    for name in ARRAYS:
        records = chunks.get(name)
        if not isinstance(records, dict) or "zarr.json" not in records:
            raise corrupt(f"no chunk records for {name}/")
        for key, rec in records.items():
            ok = isinstance(rec, list) and len(rec) == 2 and is_count(rec[0]) and isinstance(rec[1], str)
            if not (ok and len(rec[1]) == 64):
                raise corrupt(f"chunk record of {name}/{str(key)[:40]} is {str(rec)[:60]!r}, want [bytes, sha256 hex]")
    digests = manifest.get("digests")
    if not (isinstance(digests, dict) and digests.get("algorithm") == FAST_DIGEST):
        raise _older(path, manifest, f"a token store written before its chunks' {FAST_DIGEST} digests")
    return manifest


def write_order_record(seed: int | None) -> dict[str, Any]:
    """The manifest's ``write_order`` (the order ``pretokenize`` wrote the documents in): ``{"order": "input"}``
    or ``{"order": "shuffled", "seed": S, "permutation": "feistel"}``."""
    if seed is None:
        return {"order": "input"}
    return {"order": "shuffled", "seed": int(seed), "permutation": "feistel"}


def write_seed(manifest: dict[str, Any]) -> int | None:
    """The seed a store's documents were shuffled with when written, or None (input order; also a store written
    before the manifest recorded its write order, which was always the input's)."""
    record = manifest.get("write_order")
    if isinstance(record, dict) and record.get("order") == "shuffled":
        return int(record["seed"])
    return None


def describe_write_order(manifest: dict[str, Any]) -> str:
    """One phrase for reports: ``input order`` or ``shuffled at write time (seed S)``."""
    seed = write_seed(manifest)
    return "input order" if seed is None else f"shuffled at write time (seed {seed})"


def is_token_store(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is laid out as a token store (a manifest beside ``offsets/``); content is checked on open."""
    return token_store_manifest(path) is not None


def token_store_manifest(path: str | os.PathLike[str]) -> bytes | None:
    """``manifest.json``'s bytes when ``path`` is laid out as a token store, else None: the probe is the manifest's
    read itself (in a bucket one request, not one for its size and then one for its bytes; object storage has no
    directories: the manifest alone says it, on a disk it lies beside ``offsets/``)."""
    loc = storage.location(path)
    if loc.has_directories and not loc.join("offsets").is_dir():
        return None
    return loc.join("manifest.json").read_bytes_if_any(max_bytes=storage.MAX_METADATA_BYTES)


def chunk_grid(length: int, chunk: int) -> list[str]:
    """The chunk keys (``c/0`` ...) of a 1-d zarr v3 array of ``length`` elements in chunks of ``chunk``."""
    return [f"c/{i}" for i in range(-(-length // chunk))]


class TokenStore:
    """Random access to a token store by token range (a :class:`~datatools.io.formats.token_array.TokenArray`: ``read``,
    ``read_async``; document i is ``[offsets[i], offsets[i + 1])``, and
    :class:`~datatools.io.sources.documents.StoreDocuments` reads it as a document source). Picklable (tensorstore
    handles reopen lazily in each worker). ``check=False`` skips the listing on open.

    Raises (on open):
      ValueError: not a store, a corrupt manifest, a recorded chunk missing, arrays whose dtype or shape disagree
        with the manifest (naming the store and what).
    """

    def __init__(self, path: str | os.PathLike[str], *, check: bool = True, manifest: bytes | None = None):
        self.path = storage.location(path).path
        self.manifest = read_manifest(self.path, manifest)  # ``manifest``: manifest.json's bytes, already read
        self._offsets: np.ndarray | None = None
        self._arrays: dict[str, ts.TensorStore] = {}  # name -> its opened tensorstore array
        self._checked: set[str] = set()  # stored objects this process has checked against the manifest
        self._checking: dict[str, _Check] = {}  # key -> (future of its bytes, what they are) being checked
        self._check_lock = threading.Lock()
        self._shard_table: np.ndarray | None = None  # shard_index.bin, read by ranged readers (shard_reads)
        self._shard_table_read: ts.Future[ts.KvStore.ReadResult] | None = None
        if check:
            self.check_present()

    def __getstate__(self) -> dict[str, Any]:
        offsets = self._offsets if self._offsets is not None and self._offsets.nbytes <= CARRIED_OFFSETS_BYTES else None
        table = self.shard_table() if self._shard_table_read is not None else self._shard_table  # read: carried
        unopened: dict[str, Any] = {"_arrays": {}, "_shard_table_read": None}  # opened again where used
        return {"path": self.path, "manifest": self.manifest, "_offsets": offsets, "_shard_table": table} | unopened

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._checked, self._checking, self._check_lock = set(), {}, threading.Lock()

    @property
    def ranged_reads(self) -> bool:
        """Whether reads fetch inner chunks by ranged GETs (:mod:`shard_reads`): ``shard_index.bin``, in a bucket.
        On disk tensorstore's sharded reads decode on its own threads (reading and decoding runs here, on disk too,
        made a first batch ~0.25 s later and 2 workers no faster)."""
        return isinstance(self.manifest.get("shard_index"), dict) and self._at().reads_are_requests

    def _at(self, *names: str) -> storage.Location:
        """The store's place joined with ``names`` (an array's), parsed once per process: every read names it."""
        places: dict[tuple[str, ...], storage.Location] = self.__dict__.setdefault("_places", {})
        if names not in places:
            places[names] = storage.location(self.path).join(*names) if names else storage.location(self.path)
        return places[names]

    def _start_shard_table(self) -> None:
        """Start reading ``shard_index.bin`` (with the offsets, or on open) when reads will use it; no wait."""
        if self.ranged_reads and self._shard_table is None and self._shard_table_read is None:
            store = storage.location(self.path)
            spec = store.kvstore_spec()  # the store's prefix (a bucket's: "KEY/")
            kv = store.result(store.bounded(ts.KvStore.open(spec)))
            self._shard_table_read = store.join(shard_reads.INDEX_KEY).bounded(kv.read(shard_reads.INDEX_KEY))

    def shard_table(self) -> np.ndarray:
        """``shard_index.bin`` as (shards, inner chunks per shard, 3) uint64 ``(offset, nbytes, crc32c)``, read once
        and checked against the manifest; ValueError naming the store when it is missing or not the one recorded."""
        if self._shard_table is None:
            self._start_shard_table()
            record = self.manifest.get("shard_index")
            if not isinstance(record, dict):
                raise ValueError(f"{display(self.path)}: this store has no shard index")
            if self._shard_table_read is not None:
                got = storage.location(self.path).join(shard_reads.INDEX_KEY).result(self._shard_table_read)
                data = bytes(got.value) if got.state == "value" else None
                self._shard_table_read = None
            else:
                try:
                    data = storage.location(self.path).join(shard_reads.INDEX_KEY).read_bytes()
                except FileNotFoundError:
                    data = None
            where = f"{display(self.path)}: {shard_reads.INDEX_KEY}"
            if data is None:
                raise self.damaged(f"{where} is missing; the store is incomplete")
            if len(data) != record.get("bytes") or xxhash.xxh3_64_hexdigest(data) != record.get(FAST_DIGEST):
                raise self.damaged(f"{where} is corrupt (its bytes differ from the manifest's record)")
            layout = self.tokens.chunk_layout  # not object_tokens: a test may patch it
            shard, inner = chunk_elements(layout.write_chunk), chunk_elements(layout.read_chunk)
            try:
                self._shard_table = shard_reads.index_table(data, -(-self.num_tokens // shard), shard // inner)
            except ValueError as exc:
                raise self.damaged(f"{where} is corrupt ({exc})") from None
        return self._shard_table

    def damaged(self, text: str) -> ValueError:
        """A ValueError for damage found in this store: ``text`` and the command that repairs it."""
        return _damaged(self.path, self.manifest, text)

    @property
    def version(self) -> int:
        return int(self.manifest["version"])

    def shape_of(self, name: str) -> int:
        """Elements the manifest says array ``name`` holds."""
        return self.num_tokens if name == "tokens" else len(self) + 1

    def dtype_of(self, name: str) -> np.dtype:
        return self.dtype if name == "tokens" else np.dtype(np.int64)

    def _opening(self, name: str) -> ts.Future[ts.TensorStore]:
        """Start opening ``tokens`` or ``offsets``, the manifest's dtype and shape asserted, missing chunks refused."""
        spec = {
            **zarr_spec(storage.location(self.path).join(name).path),
            "fill_missing_data_reads": False,
            # A store never changes once committed: cached shard indices are not revalidated (a request each).
            "recheck_cached_data": "open",
            "context": {
                "cache_pool": {"total_bytes_limit": INDEX_CACHE_BYTES},
                # Readers issue many small ranged reads at once (inner chunks): let more run concurrently.
                "s3_request_concurrency": {"limit": REQUESTS_IN_FLIGHT},
                "gcs_request_concurrency": {"limit": REQUESTS_IN_FLIGHT},
            },
        }
        opening = ts.open(
            spec, open=True, read=True, dtype=ts.dtype(self.dtype_of(name).name), shape=[self.shape_of(name)]
        )
        return storage.location(self.path).join(name, "zarr.json").bounded(opening)

    def _opened(self, name: str, opening: ts.Future[ts.TensorStore]) -> ts.TensorStore:
        """The array :meth:`_opening` opens; ValueError naming the store when it is missing or disagrees."""
        try:
            return storage.location(self.path).join(name, "zarr.json").result(opening)
        except ValueError as exc:
            if (err := as_os_error(exc, storage.location(self.path).join(name).path)) is not None:
                raise err from None
            if status_code(exc) == "NOT_FOUND":
                raise self.damaged(
                    f"{display(self.path)}: {name}/ is missing (no {name}/zarr.json); the store is incomplete"
                ) from None
            raise self.damaged(
                f"{display(self.path)}: {name}/ disagrees with the manifest (which says "
                f"{self.dtype_of(name)}[{self.shape_of(name)}]): {short_message(exc)}"
            ) from None

    def check_present(self) -> None:
        """No data read: both arrays open with the manifest's dtype and shape; one listing per array finds every key
        of the chunk grid with its recorded size."""
        opening = {name: self._opening(name) for name in ARRAYS}
        self._start_shard_table()
        # both arrays' listings at once too (s3fs: each ~0.1-0.2 s of requests in a bucket)
        with ThreadPoolExecutor(len(ARRAYS), thread_name_prefix="datatools-store-listing") as pool:
            listing = {name: pool.submit(storage.location(self.path).join(name).file_sizes) for name in ARRAYS}
        for name in ARRAYS:
            arr = self._arrays[name] = self._opened(name, opening[name])
            records = self.manifest["chunks"][name]
            chunk = chunk_elements(arr.chunk_layout.write_chunk)
            grid = chunk_grid(self.shape_of(name), chunk)
            if set(records) != {"zarr.json", *grid}:
                extra = sorted(set(records) - {"zarr.json", *grid}, key=_key_order)
                lack = [k for k in grid if k not in records]
                what = f"records {name}/{extra[0]}" if extra else f"has no record of {name}/{lack[0]}"
                raise self.damaged(
                    f"{display(self.path)}: the manifest disagrees with the arrays: it {what} "
                    f"({len(grid)} chunks of {chunk} in {name}/)"
                )
            with os_errors(storage.location(self.path).join(name).path):
                present = listing[name].result()
            missing = [k for k in ["zarr.json", *grid] if k not in present]
            if missing:
                raise self.damaged(
                    f"{display(self.path)}: chunk {name}/{missing[0]} is missing"
                    f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}; the store is incomplete"
                )
            for key in ["zarr.json", *grid]:  # a chunk of another size is another chunk (swapped, replaced, foreign)
                if present[key] != records[key][0]:
                    raise self.damaged(
                        f"{display(self.path)}: chunk {name}/{key} is corrupt ({present[key]} bytes, the manifest "
                        f"records {records[key][0]}: damaged, or another chunk: replaced, swapped, from another store)"
                    )

    def _array(self, name: str) -> ts.TensorStore:
        if name not in self._arrays:
            self._arrays[name] = self._opened(name, self._opening(name))
        return self._arrays[name]

    def read(self, begin: int, end: int) -> np.ndarray:
        """Tokens [begin, end) of the flat array (:meth:`TokenArray.read
        <datatools.io.formats.token_array.TokenArray.read>`): ValueError naming the store and the chunk when a chunk is
        missing or corrupt, OSError when the storage fails."""
        if end > begin and self.ranged_reads:
            return self.read_async(begin, end).result()
        return self._read_checked("tokens", begin, end)

    def _read_checked(self, name: str, begin: int, end: int) -> np.ndarray:
        """Elements [begin, end) of ``tokens`` or ``offsets`` through tensorstore, the objects they touch checked
        first (:meth:`check_objects`); the errors :meth:`read` names."""
        arr = self._array(name)
        if end > begin:
            self.check_objects(name, begin, end)
        where = self._at(name)
        try:
            return where.result(where.bounded(arr[begin:end].read()))
        except ValueError as exc:
            if status_code(exc) not in _DATA_ERRORS:
                if (err := as_os_error(exc, where.path)) is not None:
                    raise err from None
            chunk = chunk_elements(arr.chunk_layout.write_chunk)
            inner = chunk_elements(arr.chunk_layout.read_chunk)
            key = re.search(r"/c/(\d+)\b", str(exc))  # the stored object (a shard of a sharded array)
            cell = re.search(r"chunk \{(\d+)\}", str(exc))  # a chunk of the grid (an inner chunk when sharded)
            if key:
                k = int(key.group(1))
            else:
                k = int(cell.group(1)) * inner // chunk if cell else begin // chunk
            state = "missing" if status_code(exc) == "NOT_FOUND" else "corrupt"
            raise self.damaged(f"{display(self.path)}: chunk {name}/c/{k} is {state} ({short_message(exc)})") from None

    @property
    def read_granularity(self) -> int:
        """Tokens a read fetches at least: the inner chunk of a sharded store, else the whole stored chunk."""
        return chunk_elements(self.tokens.chunk_layout.read_chunk)

    @property
    def object_tokens(self) -> int:
        """Tokens per stored object (``tokens/c/k``): a shard of a sharded store, the chunk of an older one."""
        return chunk_elements(self.tokens.chunk_layout.write_chunk)

    @property
    def sharded(self) -> bool:
        """Whether the tokens are stored in shards of inner chunks (ranged reads fetch a piece's inner chunks)."""
        layout = self.tokens.chunk_layout
        return chunk_elements(layout.read_chunk) < chunk_elements(layout.write_chunk)

    @property
    def offsets(self) -> np.ndarray:
        """int64 (num_documents + 1,) token offsets: checked to start at 0, never decrease, end at num_tokens."""
        if self._offsets is None:
            self._start_shard_table()  # read with the offsets (carried to workers with them)
            offsets = self._read_checked("offsets", 0, len(self) + 1)
            where = display(self.path)
            if offsets.shape[0] == 0 or offsets[0] != 0:
                raise self.damaged(
                    f"{where}: chunk offsets/c/0 is corrupt (offsets[0] is "
                    f"{offsets[0] if offsets.shape[0] else 'absent'}, want 0)"
                )
            bad = np.flatnonzero(np.diff(offsets) < 0)
            if bad.size:
                i = int(bad[0]) + 1
                raise self.damaged(
                    f"{where}: chunk offsets/c/{i // OFFSET_CHUNK} is corrupt (offsets decrease at document "
                    f"{i - 1}: {offsets[i - 1]} then {offsets[i]})"
                )
            if offsets[-1] != self.num_tokens:
                raise self.damaged(
                    f"{where}: the manifest disagrees with the arrays (offsets end at {offsets[-1]} tokens, the "
                    f"manifest says {self.num_tokens})"
                )
            self._offsets = offsets
        return self._offsets

    @property
    def tokens(self) -> ts.TensorStore:
        """The tensorstore handle of the flat token array (missing chunks are refused on read)."""
        return self._array("tokens")

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(str(self.manifest["dtype"]))  # uint16 or uint32: read_manifest checked it

    @property
    def num_tokens(self) -> int:
        return int(self.manifest["num_tokens"])

    def __len__(self) -> int:
        return int(self.manifest["num_documents"])

    def lengths(self) -> np.ndarray:
        """int64 tokens per document, from the offsets alone."""
        return np.diff(self.offsets)

    def read_async(
        self, begin: int, end: int, *, batch: ts.Batch | None = None, out: Sequence[np.ndarray] | None = None
    ) -> TokenRead:
        """Tokens [begin, end) read in the background (issued with ``batch``): a future whose ``result()`` raises
        ValueError for a failed read or an object that fails :meth:`check_objects` (issued in the same batch).
        ``out``: writeable arrays of the store's dtype whose sizes add up to ``end - begin``, each decoded into by a
        read of its own (no copy; ``result()`` is ``out[0]``)."""
        if out is None or len(out) == 1:
            return self._read_into(begin, end, batch, None if out is None else out[0])
        parts: list[TokenRead] = []
        at = begin
        for piece in out:
            parts.append(self._read_into(at, at + piece.shape[0], batch, piece))
            at += piece.shape[0]
        return all_done(parts, out[0])

    @property
    def retries_failed_reads(self) -> bool:
        """A failed read is read again through :meth:`read` (whose error names the chunk), unless it was ranged:
        :mod:`shard_reads` names the chunk already."""
        return not self.ranged_reads

    def _read_into(self, begin: int, end: int, batch: ts.Batch | None, out: np.ndarray | None) -> TokenRead:
        """One background read of tokens [begin, end), decoded into ``out`` when given (:meth:`read_async`)."""
        if self.ranged_reads and end > begin:  # in a bucket: one ranged GET a run of inner chunks, each checked
            array = shard_reads.ShardedArray(
                self._kvstore("tokens"),
                self.shard_table(),
                self.read_granularity,
                self.dtype,
                damaged=lambda text: self.damaged(f"{display(self.path)}: {text}"),
                failed=self._read_failed,
                where=self._at("tokens").path,
            )
            return array.read(begin, end, batch=batch, out=out)
        checks = self.check_objects("tokens", begin, end, batch=batch, wait=False) if end > begin else []
        remote = self._at().reads_are_requests
        where = self._at("tokens")
        read: ts.Future[object]  # the tokens (out None), else the write into out done
        if out is None:
            read = tokens_read = where.bounded(self.tokens[begin:end].read(batch=batch))
            if not checks and not remote:
                return tokens_read
        else:
            commit = ts.array(out, copy=False, write=True).write(self.tokens[begin:end], batch=batch).commit
            read = where.bounded(commit)

        def checked(_: Sequence[shard_reads.Part[object]]) -> np.ndarray:  # once the objects read are checked
            self.confirm(checks)
            value = where.result(read)  # a request cancelled past its bound: a StorageError naming it
            return cast(np.ndarray, value) if out is None else out  # out None: the read's result, the tokens

        return JoinedRead([read, *(f for _, _, (f, _) in checks if f is not None)], checked)

    def _read_failed(self, exc: BaseException, key: str) -> BaseException:
        """The error of a failed read of tokens object ``key``: OSError when the storage failed, else ValueError."""
        where = storage.location(self.path).join("tokens", key).path
        return as_os_error(exc, where) or self.damaged(
            f"{display(self.path)}: chunk tokens/{key} is unreadable ({short_message(exc)})"
        )

    def check_objects(
        self, name: str, begin: int, end: int, batch: ts.Batch | None = None, wait: bool = True
    ) -> _Pending:
        """Check the objects of array ``name`` holding elements [begin, end) against the manifest, once per object
        per process (locally: a shard's index and crc32cs against ``shard_index.bin``, else every byte; in a bucket:
        each shard's index). With ``wait``, done on return (ValueError naming the chunk), else the pending checks
        are returned for :meth:`confirm`."""
        arr = self._array(name)
        per = chunk_elements(arr.chunk_layout.write_chunk)
        pending: _Pending = []
        with self._check_lock:
            for k in range(begin // per, (end - 1) // per + 1):
                key, item = f"c/{k}", f"{name}/c/{k}"
                if item not in self._checked:
                    if item not in self._checking:
                        self._checking[item] = self._start_check(name, key, arr, batch)
                    pending.append((name, key, self._checking[item]))
        if wait:
            self.confirm(pending)
            return []
        return pending

    def _start_check(self, name: str, key: str, arr: ts.TensorStore, batch: ts.Batch | None) -> _Check:
        """(future of the bytes to check, which digest they are checked against) for one stored object."""
        digests = self.manifest["digests"]  # xxh3_64: read_manifest refuses a store without them
        kv = self._kvstore(name)
        index = _index_bytes(arr)
        if self._at().reads_are_requests and index:  # in a bucket without shard_index.bin: the
            heads = digests.get(f"{name}_index") or {}  # shard's index only (its inner chunks carry crc32c)
            read = kv.read(key, batch=batch, byte_range=slice(0, index))
            return (storage.location(self.path).join(name, key).bounded(read), ("index", heads.get(key)))
        if name == "tokens" and index and isinstance(self.manifest.get("shard_index"), dict):
            return (None, ("entries", self._shard_mismatch(key)))  # local: the index and the chunks' crc32c
        return (
            storage.location(self.path).join(name, key).bounded(kv.read(key, batch=batch)),
            ("xxh3", (digests.get(name) or {}).get(key)),
        )

    def _shard_mismatch(self, key: str) -> str | ValueError | None:
        """Why local tokens shard ``key`` is not the one ``shard_index.bin`` records, or None
        (:func:`shard_reads.mismatch`: ~1.6 KiB read where a whole-object digest read 2 MiB, ~0.6 s a worker)."""
        try:
            entries = self.shard_table()[int(key.rsplit("/", 1)[1])]
        except ValueError as exc:  # shard_index.bin missing or not the one recorded: raised where the read waits
            return exc
        try:
            with storage.location(self.path).join("tokens", key).open() as f:
                return shard_reads.mismatch(f, entries)
        except FileNotFoundError:
            return "is missing"

    def _kvstore(self, name: str) -> ts.KvStore:
        """Array ``name``'s own kvstore, once per process (a check and a read in one ``ts.Batch``: one request)."""
        kvs: dict[str, ts.KvStore] = self.__dict__.setdefault("_kvs", {})
        if name not in kvs:
            kv = self._array(name).kvstore
            if kv is None:  # a zarr array's is always there
                raise ValueError(f"{display(self.path)}: {name}/ has no kvstore")
            kvs[name] = kv
        return kvs[name]

    def confirm(self, pending: _Pending) -> None:
        """Wait for pending :meth:`check_objects` checks; ValueError naming the first object that is not the one the
        manifest records."""
        for name, key, (future, (kind, want)) in pending:
            item, where = f"{name}/{key}", f"{display(self.path)}: chunk {name}/{key}"
            if kind == "entries" and want is not None:
                with self._check_lock:
                    self._checking.pop(item, None)
                if isinstance(want, ValueError):
                    raise want
                raise self.damaged(f"{where} {want if want == 'is missing' else f'is corrupt ({want})'}")
            ok = future is None  # the entries matched
            value: bytes | None = b""
            if future is not None:
                try:
                    got = storage.location(self.path).join(name, key).result(future)
                except ValueError as exc:
                    if (err := as_os_error(exc, storage.location(self.path).join(name, key).path)) is not None:
                        raise err from None
                    raise self.damaged(f"{where} is unreadable ({short_message(exc)})") from None
                value = bytes(got.value) if got.state == "value" else None
                if value is not None and want is not None:
                    ok = xxhash.xxh3_64_hexdigest(value) == want
            with self._check_lock:
                if ok:
                    self._checked.add(item)
                self._checking.pop(item, None)
            if not ok:
                part = "shard index" if kind == "index" else "bytes"
                what = (
                    "is missing"
                    if value is None
                    else f"is corrupt (its {part} differ from the manifest's record: damaged, or another chunk: "
                    f"replaced, swapped, from another store)"
                )
                raise self.damaged(f"{where} {what}")

    def __repr__(self) -> str:
        return f"TokenStore({str(self.path)!r}, documents={len(self)}, tokens={self.num_tokens}, dtype={self.dtype})"
