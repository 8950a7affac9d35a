"""Ranged reads of a sharded token store's inner chunks, every shard's index known before the first read.

Through tensorstore each process fetched a shard's index before its chunks: from a bucket a round trip more per
shard (~20% of a Grain worker's start-up requests, issue 31). So a store holds every shard's index in one object,
``shard_index.bin`` (per inner chunk its offset, size and crc32c), read once; each run of adjacent inner chunks is
one ranged GET, decoded here. A chunk ending in another crc32c than the index records is refused.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import BinaryIO, Generic, Protocol, Self, TypeVar

import google_crc32c
import numpy as np
import pyarrow as pa
import tensorstore as ts

from datatools.io import storage

INDEX_KEY = "shard_index.bin"  # every shard's index entries, back to back (under the store's root)
INDEX_ENTRY_BYTES = 16  # a shard's own index entry (zarr v3 sharding_indexed): offset and size, uint64 each
ENTRY_BYTES = 24  # one inner chunk's entry: offset and size in the shard, its crc32c; uint64 little-endian each
MISSING = np.uint64(2**64 - 1)  # an inner chunk not stored (zarr v3: offset and size both all ones): fill value 0

_ZSTD = pa.Codec("zstd")


def entries_of(shard: bytes, per_shard: int) -> bytes:
    """One shard object's (its whole bytes) entries for ``shard_index.bin``: per inner chunk its offset, size and
    final crc32c (0 for a chunk not stored). ValueError when the object is shorter than its index or a chunk it
    lists, or the index fails its crc32c."""
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
    """Why the shard open as binary file ``shard`` is not the one its ``shard_index.bin`` rows ``entries`` record, or
    None. Reads its index (checked against its crc32c) and each inner chunk's crc32c (~1.6 KiB of 2 MiB; a read
    checks the bytes against those as it decodes)."""
    per = entries.shape[0]
    size = per * INDEX_ENTRY_BYTES
    head = shard.read(size + 4)  # the index and its crc32c
    if len(head) < size + 4:
        return f"is shorter ({len(head)} bytes) than its index"
    if google_crc32c.value(head[:size]) != int.from_bytes(head[size:], "little"):
        return "has an index that fails its crc32c"
    if not np.array_equal(np.frombuffer(head[:size], "<u8").reshape(per, 2), entries[:, :2]):
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
    """``shard_index.bin``'s bytes as a (shards, per_shard, 3) uint64 array of ``(offset, nbytes, crc32c)``;
    ValueError when they are not that many entries."""
    want = shards * per_shard * ENTRY_BYTES
    if len(data) != want:
        raise ValueError(f"{len(data)} bytes, want {want} ({shards} shards of {per_shard} inner chunks)")
    return np.frombuffer(data, "<u8").reshape(shards, per_shard, 3).astype(np.uint64)


def byte_runs(entries: np.ndarray) -> list[tuple[int, int, int]]:
    """``(first, count, start byte)`` of each run of stored inner chunks of ``entries`` (a shard's index rows) lying
    back to back in the shard (one ranged GET each)."""
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
    """One stored inner chunk (zstd frame, then its crc32c) as ``tokens`` tokens of ``dtype``. ValueError when its
    crc32c is not ``crc`` (the index's) or fails, or it does not decompress to that size."""
    frame = chunk[:-4]
    stored = int.from_bytes(chunk[-4:], "little") if len(chunk) >= 4 else -1
    if stored != crc:
        raise ValueError("is not the one the shard index records: replaced, swapped, from another store")
    if google_crc32c.value(frame) != stored:
        raise ValueError("fails its crc32c")
    size = tokens * dtype.itemsize
    try:
        raw = _ZSTD.decompress(frame, decompressed_size=size)
    except (OSError, pa.ArrowException) as exc:
        raise ValueError(f"does not decompress ({exc})") from None
    if raw.size != size:
        raise ValueError(f"decompresses to {raw.size} bytes, want {size}")
    return np.frombuffer(raw, dtype.newbyteorder("<"))


R_co = TypeVar("R_co", covariant=True)  # what a read in flight gives


class Part(Protocol[R_co]):
    """A read in flight, a part of a :class:`JoinedRead`: a tensorstore future, or a :class:`JoinedRead`."""

    def done(self) -> bool: ...
    def result(self) -> R_co: ...
    def add_done_callback(self, callback: Callable[[Self], None]) -> None: ...


class JoinedRead(Generic[R_co]):
    """A future made of several reads in flight ``parts`` (tensorstore futures, each giving an ``R_co``), like theirs
    (``done()``, ``result()``, ``add_done_callback``): ``result()`` is ``assemble(parts)``, computed once (its error
    raised to every caller)."""

    def __init__(self, parts: Sequence[Part[R_co]], assemble: Callable[[Sequence[Part[R_co]]], np.ndarray]) -> None:
        self._parts = parts
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

    def add_done_callback(self, callback: Callable[[JoinedRead[R_co]], None]) -> None:
        """Call ``callback(self)`` once every part is done, on the thread that completes the last."""
        left = [len(self._parts)]
        lock = threading.Lock()

        def one_done(_: Part[R_co]) -> None:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                callback(self)

        if not self._parts:
            callback(self)
        for f in self._parts:
            f.add_done_callback(one_done)


def all_done(parts: Sequence[Part[object]], value: np.ndarray) -> JoinedRead[object]:
    """A future done when every read of ``parts`` is, whose ``result()`` is ``value`` (reads that decode into it;
    the first error raised)."""

    def after_all(parts: Sequence[Part[object]]) -> np.ndarray:
        for part in parts:
            part.result()
        return value

    return JoinedRead(parts, after_all)


@dataclass(frozen=True)
class ShardedArray:
    """A sharded token array in ``kv`` read by ranged GETs: its shard indices ``table`` (shards, inner chunks, 3),
    inner chunks of ``inner`` tokens of ``dtype``. ``damaged(text)`` makes the error of a missing or bad chunk,
    ``failed(exc, key)`` that of a failed GET. ``where``: the array's place (in a bucket each GET is bounded,
    :meth:`storage.Location.bounded`: one unanswered past the bound raises a StorageError naming the object)."""

    kv: ts.KvStore
    table: np.ndarray
    inner: int
    dtype: np.dtype
    damaged: Callable[[str], ValueError]
    failed: Callable[[BaseException, str], BaseException]
    where: str | os.PathLike[str] | None = None

    def read(
        self, begin: int, end: int, *, batch: ts.Batch | None = None, out: np.ndarray | None = None
    ) -> JoinedRead[ts.KvStore.ReadResult]:
        """Tokens ``[begin, end)``, one ranged GET per :func:`byte_runs` run, issued now (in ``batch``), decoded into
        ``out`` (``end - begin`` tokens of ``dtype``; a new array if None) by whoever asks for the result first."""
        plan = self._gets(begin, end)
        parts: list[ts.Future[ts.KvStore.ReadResult]] = []
        for shard, j, count, start in plan:
            stop = int(self.table[shard, j + count - 1, 0] + self.table[shard, j + count - 1, 1])
            part = self.kv.read(f"c/{shard}", byte_range=slice(int(start), stop), batch=batch)
            parts.append(part if self.where is None else storage.location(self.where).join(f"c/{shard}").bounded(part))
        return JoinedRead(parts, lambda got: self._assemble(begin, end, plan, got, out))

    def _gets(self, begin: int, end: int) -> list[tuple[int, int, int, int]]:
        """(shard, first inner chunk in the shard, inner chunks, first byte) of each ranged GET tokens
        ``[begin, end)`` need."""
        per_shard = self.table.shape[1]
        first, last = begin // self.inner, (end - 1) // self.inner  # inner chunks, over the whole array
        plan: list[tuple[int, int, int, int]] = []
        for shard in range(first // per_shard, last // per_shard + 1):
            lo = max(first, shard * per_shard) - shard * per_shard
            hi = min(last, shard * per_shard + per_shard - 1) - shard * per_shard
            plan += [(shard, lo + j, count, start) for j, count, start in byte_runs(self.table[shard, lo : hi + 1])]
        return plan

    def _assemble(
        self,
        begin: int,
        end: int,
        plan: list[tuple[int, int, int, int]],
        parts: Sequence[Part[ts.KvStore.ReadResult]],
        out: np.ndarray | None,
    ) -> np.ndarray:
        """Tokens ``[begin, end)`` decoded from the GETs' results (each inner chunk's checksum checked); chunks not
        stored read as the fill value, 0."""
        inner, per_shard = self.inner, self.table.shape[1]
        target = np.empty(end - begin, self.dtype) if out is None else out
        first, last = begin // inner, (end - 1) // inner
        not_stored = np.flatnonzero(self.table.reshape(-1, 3)[first : last + 1, 0] == MISSING) + first
        for c in not_stored.tolist():
            lo = c * inner
            target[max(lo, begin) - begin : min(lo + inner, end) - begin] = 0
        for (shard, j, count, start), part in zip(plan, parts):
            data = self._fetched(part, shard)
            for i in range(j, j + count):
                offset, nbytes, crc = (int(v) for v in self.table[shard, i])
                lo = (shard * per_shard + i) * inner  # the chunk's first token in the array
                a, b = max(lo, begin), min(lo + inner, end)
                try:
                    value = decode(data[offset - start : offset - start + nbytes], crc, inner, self.dtype)
                except ValueError as exc:
                    raise self.damaged(f"chunk tokens/c/{shard} is corrupt (inner chunk {i} {exc})") from None
                target[a - begin : b - begin] = value[a - lo : b - lo]
        return target

    def _fetched(self, part: Part[ts.KvStore.ReadResult], shard: int) -> bytes:
        """The bytes of one ranged GET of shard ``shard``, or the error that names it."""
        try:
            got = part.result()
        except ValueError as exc:
            raise self.failed(exc, f"c/{shard}") from None
        except asyncio.CancelledError:  # past its bound, unanswered (Location.bounded)
            if self.where is None:
                raise
            raise storage.location(self.where).join(f"c/{shard}").timeout_error() from None
        if got.state != "value":
            raise self.damaged(f"chunk tokens/c/{shard} is missing")
        return bytes(got.value)
