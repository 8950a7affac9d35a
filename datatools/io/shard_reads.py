"""Ranged reads of a sharded token store's inner chunks, every shard's index known before the first read.

A version-3 store keeps its tokens in shards (``tokens/c/k``, zarr v3 ``sharding_indexed``, index first): inner
chunks of ``READ_CHUNK`` tokens, each ``bytes`` (little-endian) then zstd then a crc32c of the compressed bytes,
and at the start of the shard an index of ``(offset, nbytes)`` uint64 pairs, one per inner chunk, then its own
crc32c. Read through tensorstore, every process fetches a shard's index before any of its inner chunks: from a
bucket, one more round trip ahead of the first read of each shard, in each process (a Grain worker re-read the
~130 indices of its first batches, ~20% of its start-up requests at +100 ms a request, issue 31).

So a store written now also holds all its shards' indices in one object, ``shard_index.bin`` (:data:`INDEX_KEY`:
per inner chunk its offset, size and crc32c, shard 0's then shard 1's ...: 24 bytes an inner chunk, 1.5 KiB per
shard of 2^20 tokens; 24 MiB for the 32 GB of tokens of our users), recorded in the manifest with its size and
digests. A reader in a bucket reads it once with the offsets (and carries it to its workers) and then fetches each
run of adjacent inner chunks with one ranged GET, decoded here: crc32c checked (google-crc32c), zstd decompressed
(pyarrow), tokens as stored.

A chunk's crc32c proves it intact, not that it is this store's chunk: so the index object also records each
inner chunk's crc32c, and a chunk that ends in another is refused. A swapped, replaced or foreign shard is
refused even when its inner chunks have the same sizes (tensorstore's check of each shard's index digest,
:meth:`~datatools.io.store.TokenStore.check_objects`, cannot tell such shards apart); ``datatools verify``
checks the index object against every shard's own index and chunks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import BinaryIO

import google_crc32c
import numpy as np
import pyarrow as pa
import tensorstore as ts

INDEX_KEY = "shard_index.bin"  # every shard's index entries, back to back (under the store's root)
INDEX_ENTRY_BYTES = 16  # a shard's own index entry (zarr v3 sharding_indexed): offset and size, uint64 each
ENTRY_BYTES = 24  # one inner chunk's entry: offset and size in the shard, its crc32c; uint64 little-endian each
MISSING = np.uint64(2**64 - 1)  # an inner chunk not stored (zarr v3: offset and size both all ones): fill value 0

_ZSTD = pa.Codec("zstd")


def entries_of(shard: bytes, per_shard: int) -> bytes:
    """The entries of one shard object (its whole bytes) for ``shard_index.bin``: per inner chunk its offset and
    size in the shard (the shard's own index) and the crc32c it ends with (0 for a chunk not stored), uint64
    little-endian each: ``per_shard * 24`` bytes.

    Raises:
      ValueError: the object is shorter than its index or a chunk it lists, or the index fails its crc32c.
    """
    size = per_shard * INDEX_ENTRY_BYTES
    if len(shard) < size + 4:
        raise ValueError(f"shard shorter ({len(shard)} bytes) than its index ({size + 4} bytes)")
    if google_crc32c.value(shard[:size]) != int.from_bytes(shard[size : size + 4], "little"):
        raise ValueError("shard index fails its crc32c")
    table = np.zeros((per_shard, 3), "<u8")
    table[:, :2] = np.frombuffer(shard[:size], "<u8").reshape(per_shard, 2)
    for j, (offset, nbytes) in enumerate(table[:, :2].tolist()):
        if offset != int(MISSING):
            if offset + nbytes > len(shard) or nbytes < 4:
                raise ValueError(f"inner chunk {j} lies outside the shard")
            table[j, 2] = int.from_bytes(shard[offset + nbytes - 4 : offset + nbytes], "little")
    return table.tobytes()


def mismatch(shard: BinaryIO, entries: np.ndarray) -> str | None:
    """Why the shard object open as ``shard`` (a binary file at its start) is not the one ``entries`` records (its
    rows of ``shard_index.bin``: per inner chunk offset, size, crc32c), or None when it is. Reads the shard's own
    index and the crc32c each stored inner chunk ends with, ~1.6 KiB of a 2 MiB shard: a reader through
    tensorstore checks each chunk's bytes against that crc32c as it decodes them, so every byte it returns is the
    one the index object (checked against the manifest) records."""
    per = entries.shape[0]
    head = shard.read(per * INDEX_ENTRY_BYTES)
    if len(head) < per * INDEX_ENTRY_BYTES:
        return f"is shorter ({len(head)} bytes) than its index"
    if not np.array_equal(np.frombuffer(head, "<u8").reshape(per, 2), entries[:, :2]):
        return "has another index than shard_index.bin records (replaced, swapped, from another store)"
    for j, (offset, nbytes, crc) in enumerate(entries.tolist()):
        if offset == int(MISSING):
            continue
        shard.seek(offset + nbytes - 4)
        stored = shard.read(4)
        if len(stored) < 4 or int.from_bytes(stored, "little") != crc:
            return f"inner chunk {j} is not the one the shard index records: replaced, swapped, from another store"
    return None


def index_table(data: bytes, shards: int, per_shard: int) -> np.ndarray:
    """The bytes of ``shard_index.bin`` as a (shards, per_shard, 3) uint64 array of ``(offset, nbytes, crc32c)``.

    Raises:
      ValueError: the bytes are not that many entries.
    """
    want = shards * per_shard * ENTRY_BYTES
    if len(data) != want:
        raise ValueError(f"{len(data)} bytes, want {want} ({shards} shards of {per_shard} inner chunks)")
    return np.frombuffer(data, "<u8").reshape(shards, per_shard, 3).astype(np.uint64)


def byte_runs(entries: np.ndarray) -> list[tuple[int, int, int]]:
    """``(first, count, start)`` for each run of stored inner chunks lying back to back in the shard (one ranged
    GET each): chunks ``first .. first + count - 1`` of ``entries`` (an (n, 2) slice of a shard's index), whose
    bytes start at ``start``. Chunks not stored are in no run."""
    runs: list[tuple[int, int, int]] = []
    end = -1
    for j, (offset, nbytes, _) in enumerate(entries.tolist()):
        if offset == int(MISSING):
            end = -1
            continue
        if offset == end:
            first, count, start = runs[-1]
            runs[-1] = (first, count + 1, start)
        else:
            runs.append((j, 1, offset))
        end = offset + nbytes
    return runs


def decode(chunk: bytes, crc: int, tokens: int, dtype: np.dtype) -> np.ndarray:
    """One stored inner chunk (zstd frame, then its crc32c) as ``tokens`` tokens of ``dtype``.

    Raises:
      ValueError: the chunk ends in a crc32c other than ``crc`` (the one ``shard_index.bin`` records: another
        chunk, swapped, replaced), its bytes fail it, or they do not decompress to ``tokens`` tokens.
    """
    frame = chunk[:-4]
    stored = int.from_bytes(chunk[-4:], "little") if len(chunk) >= 4 else -1
    if stored != crc:
        raise ValueError("is not the one the shard index records: replaced, swapped, from another store")
    if google_crc32c.value(frame) != stored:
        raise ValueError("fails its crc32c")
    size = tokens * dtype.itemsize
    try:
        raw = _ZSTD.decompress(frame, decompressed_size=size, asbytes=True)
    except (OSError, pa.ArrowException) as exc:
        raise ValueError(f"does not decompress ({exc})") from None
    if len(raw) != size:
        raise ValueError(f"decompresses to {len(raw)} bytes, want {size}")
    return np.frombuffer(raw, dtype.newbyteorder("<"))


class RangedRead:
    """Tokens ``[begin, end)`` of a sharded store fetched by ranged GETs of their inner chunks (:func:`read`): a
    future, like tensorstore's (``done()``, ``result()``, ``add_done_callback``). Decoded once, by the first
    ``result()`` (a reader's completion callback, on a tensorstore thread), no lock held elsewhere."""

    def __init__(self, parts: list, assemble: Callable[[list], np.ndarray]):
        self._parts = parts  # tensorstore futures of the runs' bytes
        self._assemble = assemble
        self._value: np.ndarray | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    def done(self) -> bool:
        return all(p.done() for p in self._parts)

    def result(self) -> np.ndarray:
        with self._lock:
            if self._value is None and self._error is None:
                try:
                    self._value = self._assemble(self._parts)
                except BaseException as exc:  # noqa: BLE001 -- raised again to every caller
                    self._error = exc
            if self._error is not None:
                raise self._error
            assert self._value is not None
            return self._value

    def add_done_callback(self, callback: Callable[[RangedRead], None]) -> None:
        """Call ``callback(self)`` once every ranged GET is done (on the thread that completes the last; at once
        when all are done)."""
        after_all(self._parts, lambda: callback(self))


def after_all(futures: list, then) -> None:
    """Call ``then()`` once every future of ``futures`` (tensorstore futures) is done, on the thread that completes
    the last (at once when all are done already)."""
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            then()

    if not futures:
        then()
    for f in futures:
        f.add_done_callback(one_done)


def read(
    kv: ts.KvStore,
    table: np.ndarray,
    begin: int,
    end: int,
    *,
    inner: int,
    dtype: np.dtype,
    batch: ts.Batch | None = None,
    damaged: Callable[[str], ValueError],
    failed: Callable[[BaseException, str], BaseException],
) -> RangedRead:
    """Tokens ``[begin, end)`` of the sharded array whose kvstore is ``kv`` and shard indices ``table``
    (:func:`index_table`; inner chunks of ``inner`` tokens), one ranged GET per run of adjacent inner chunks
    (:func:`byte_runs`), issued now (in ``batch`` when given). ``damaged(text)`` makes the error of a chunk that
    is missing or fails its checks (``text`` names it); ``failed(exc, key)`` the error of a GET of ``key`` that
    failed (the storage's)."""
    per_shard = table.shape[1]
    first, last = begin // inner, (end - 1) // inner  # inner chunks, over the whole array
    plan = []  # (shard, chunk in shard, count, start) per ranged GET
    for shard in range(first // per_shard, last // per_shard + 1):
        lo = max(first, shard * per_shard) - shard * per_shard
        hi = min(last, shard * per_shard + per_shard - 1) - shard * per_shard
        for j, count, start in byte_runs(table[shard, lo : hi + 1]):
            plan.append((shard, lo + j, count, start))
    parts = []
    for shard, j, count, start in plan:
        stop = int(table[shard, j + count - 1, 0] + table[shard, j + count - 1, 1])
        parts.append(kv.read(f"c/{shard}", byte_range=slice(int(start), stop), batch=batch))

    def assemble(parts: list) -> np.ndarray:
        out = np.zeros((last - first + 1) * inner, dtype)  # chunks not stored read as the fill value, 0
        for (shard, j, count, start), part in zip(plan, parts):
            try:
                got = part.result()
            except ValueError as exc:
                raise failed(exc, f"c/{shard}") from None
            if got.state != "value":
                raise damaged(f"chunk tokens/c/{shard} is missing")
            data = bytes(got.value)
            for i in range(j, j + count):
                offset, nbytes, crc = (int(v) for v in table[shard, i])
                at = (shard * per_shard + i - first) * inner
                try:
                    out[at : at + inner] = decode(data[offset - start : offset - start + nbytes], crc, inner, dtype)
                except ValueError as exc:
                    raise damaged(f"chunk tokens/c/{shard} is corrupt (inner chunk {i} {exc})") from None
        return out[begin - first * inner : end - first * inner]

    return RangedRead(parts, assemble)
