"""Full check of a token store, every byte read once (``datatools verify``): every recorded key present with its
recorded size and sha256; the offsets decoded and in order; every token below ``vocab_size``; ``shard_index.bin``
as recorded and equal to each shard's own index. The first problem raises ``ValueError`` naming the chunk.
Memory: one batch of raw chunks and the offsets.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from datatools.base.reports import Report
from datatools.io import storage
from datatools.io.formats import shard_reads
from datatools.io.formats.store import (
    ARRAYS,
    TokenStore,
    array_kvstore,
    chunk_elements,
    is_count,
    lacks_shard_index,
    read_keys,
)
from datatools.io.storage.paths import display


class IndexDamage(ValueError):
    """``shard_index.bin`` is missing or disagrees with its record or with a shard, every chunk being as recorded
    (checked before it): rewriting the index from the chunks repairs it
    (:func:`~datatools.io.formats.store.add_shard_index`)."""


@dataclass
class VerifyReport(Report):
    """What :func:`verify_store` checked (sizes in bytes, times in seconds); ``datatools verify`` prints it and
    ``--json`` is :meth:`to_json`."""

    path: str
    version: int
    documents: int
    tokens: int
    dtype: str
    vocab_size: int | None
    max_token: int | None
    chunks: dict[str, int] = field(default_factory=dict)  # array -> chunk files checked
    stored_bytes: int = 0
    checksums: bool = True
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def verify_store(path: str | os.PathLike[str], *, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Check every byte of the store at ``path`` (see the module docstring); the report when it is whole.
    ``progress(done, total)`` is called in stored bytes read (checksums), then in tokens decoded.

    Raises:
      ValueError: not a store, or the first chunk that is missing, of the wrong size, with the wrong checksum,
        undecodable, with offsets out of order or a token id >= vocab_size (naming the store and the chunk).
      OSError: the storage failed (permission, I/O).
    """
    t0 = time.perf_counter()
    store = TokenStore(path)
    where = display(store.path)
    vocab = store.manifest.get("vocab_size")
    vocab = vocab if is_count(vocab) and vocab > 0 else None
    report = VerifyReport(where, store.version, len(store), store.num_tokens, store.dtype.name, vocab, None)
    _check_checksums(store, report, progress)
    if lacks_shard_index(store.manifest):
        report.notes.append(
            f"written before {shard_reads.INDEX_KEY}: a reader in a bucket requests each shard's index first, in "
            f"every process; `datatools pretokenize ... --overwrite` (the same job) adds it, rewriting no token"
        )
    _ = store.offsets  # read and checked: from 0, in order, ending at num_tokens
    step = chunk_elements(store.tokens.chunk_layout.write_chunk)  # one stored object (a shard) a read
    top = -1
    for begin in range(0, store.num_tokens, step):
        block = store.read(begin, min(begin + step, store.num_tokens))
        if block.size:
            m = int(block.max())
            if vocab is not None and m >= vocab:
                at = begin + int(np.argmax(block >= vocab))
                raise store.damaged(
                    f"{where}: chunk tokens/c/{begin // step} is corrupt (token {at} is {m}, not below "
                    f"the vocabulary size {vocab})"
                )
            top = max(top, m)
        if progress is not None:
            progress(min(begin + step, store.num_tokens), store.num_tokens)
    report.max_token = top if top >= 0 else None
    if vocab is None:
        report.notes.append("no vocab_size in the manifest: token range not checked")
    report.seconds = time.perf_counter() - t0
    return report


def _check_checksums(store: TokenStore, report: VerifyReport, progress: Callable[[int, int], None] | None) -> None:
    """Every recorded key read through the array's kvstore: present, recorded size, recorded sha256."""
    where = display(store.path)
    chunks = store.manifest["chunks"]
    total = sum(rec[0] for name in ARRAYS for rec in chunks[name].values())
    done = 0
    indexed = isinstance(store.manifest.get("shard_index"), dict)
    per_shard = store.object_tokens // store.read_granularity
    heads: dict[int, bytes] = {}  # tokens shard -> its own index entries (indexed stores)
    for name in ARRAYS:
        records = chunks[name]
        kv = array_kvstore(storage.location(store.path).join(name).path)
        for key, value in read_keys(kv, sorted(records)):
            size, digest = records[key]
            if value is None:
                raise store.damaged(f"{where}: chunk {name}/{key} is missing")
            if len(value) != size:
                raise store.damaged(
                    f"{where}: chunk {name}/{key} is corrupt ({len(value)} bytes, the manifest records {size})"
                )
            if hashlib.sha256(value).hexdigest() != digest:
                raise store.damaged(f"{where}: chunk {name}/{key} is corrupt (its sha256 differs from the manifest's)")
            if indexed and name == "tokens" and key != "zarr.json":
                heads[int(key.split("/")[-1])] = shard_reads.entries_of(value, per_shard)
            done += size
            if progress is not None:
                progress(done, total)
        report.chunks[name] = len(records)
    report.stored_bytes = total
    if indexed:
        _check_shard_index(store, [heads[k] for k in sorted(heads)])


def _check_shard_index(store: TokenStore, heads: list[bytes]) -> None:
    """``shard_index.bin`` is the recorded one and holds each shard's own index (``heads``, in shard order)."""
    where = f"{display(store.path)}: {shard_reads.INDEX_KEY}"
    record = store.manifest["shard_index"]
    try:
        data = storage.location(store.path).join(shard_reads.INDEX_KEY).read_bytes()
    except FileNotFoundError:
        raise IndexDamage(str(store.damaged(f"{where} is missing"))) from None
    if len(data) != record.get("bytes") or hashlib.sha256(data).hexdigest() != record.get("sha256"):
        raise IndexDamage(str(store.damaged(f"{where} is corrupt (its bytes differ from the manifest's record)")))
    size = len(heads[0]) if heads else 0
    for k, head in enumerate(heads):
        if data[k * size : (k + 1) * size] != head:
            raise IndexDamage(
                str(store.damaged(f"{where} is corrupt (it disagrees with tokens/c/{k}: its index or chunks)"))
            )
    if len(data) != size * len(heads):
        raise IndexDamage(
            str(store.damaged(f"{where} is corrupt ({len(data)} bytes for {len(heads)} shards of {size})"))
        )
