"""A Levanter (Marin) token cache read as it is, a :class:`~datatools.io.formats.token_array.TokenArray` as a token
store is.

Levanter's layout (marin-levanter 0.2.227): ``shard_ledger.json``; ``input_ids/offsets/`` (zarr v3 int64: element 0
the row count, element i the end of row i - 1) and ``input_ids/data/`` (the rows' tokens back to back); a
``sharded`` ledger keeps them in ``CACHE/<finished_shards[k]>/input_ids/...``. Checked on open (ValueError naming
the cache and what): a finished ledger, the arrays, offsets against the ledger, and every shard file the tokens need
(tensorstore reads a missing one as zeros; a missing inner chunk is zeros in Levanter too). Reads refuse ids that
are negative or do not fit int32.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorstore as ts

from datatools.io import storage
from datatools.io.formats.numpy_files import INT32_MAX
from datatools.io.formats.shard_reads import JoinedRead, Part
from datatools.io.formats.store import array_keys, chunk_elements, chunk_grid, is_count, zarr_spec
from datatools.io.storage.io_errors import as_os_error, os_errors, status_code
from datatools.io.storage.paths import display

LEDGER = "shard_ledger.json"
FIELD = "input_ids"  # the token field of Levanter's text caches
LAYOUTS = ("consolidated", "sharded")


def is_levanter_cache(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is laid out as a Levanter cache (holds ``shard_ledger.json``); content is checked on open."""
    loc = storage.location(path)  # object storage has no directories: the ledger alone says it
    return (not loc.has_directories or loc.is_dir()) and loc.join(LEDGER).is_file()


def read_ledger(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The cache's ledger, checked: it parses, is finished, names a known layout (else ValueError naming it)."""
    ledger = find_ledger(path)
    if ledger is None:
        raise ValueError(f"{display(path)}: not a Levanter cache (no {LEDGER})")
    return ledger


def find_ledger(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """:func:`read_ledger`'s ledger, None when ``path`` holds none (in a bucket, one request says both)."""
    where = storage.location(path).join(LEDGER)
    # a PermissionError propagates, naming the file; an unreachable object store raises StorageError
    data = where.read_bytes_if_any(max_bytes=storage.MAX_METADATA_BYTES)
    if data is None:
        return None
    try:
        ledger = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{display(where)}: corrupt ({exc})") from None
    if not isinstance(ledger, dict):
        raise ValueError(f"{display(where)}: corrupt (not a JSON object)")
    rows = ledger.get("total_num_rows")
    if not is_count(rows):
        raise ValueError(
            f"{display(where)}: corrupt (total_num_rows must be a non-negative integer, got {str(rows)[:40]!r})"
        )
    if ledger.get("is_finished") is not True:
        done = ledger.get("finished_shards") or []
        raise ValueError(
            f"{display(where)}: the Levanter cache is not finished (is_finished is "
            f"{json.dumps(ledger.get('is_finished'))}; {len(done)} shards and {rows} rows written so "
            f"far): let Levanter finish building it, then read it"
        )
    layout = ledger.get("layout", "consolidated")
    if layout not in LAYOUTS:
        raise ValueError(
            f"{display(where)}: unknown layout {str(layout)[:40]!r} (this datatools reads {', '.join(LAYOUTS)})"
        )
    return ledger


class LevanterCache:
    """Random access to one field (``input_ids``) of the finished Levanter cache at ``path`` (the directory holding
    ``shard_ledger.json``), as the document sources read a token store. Picklable.

    Raises (on open):
      ValueError: not a finished Levanter cache, the field's arrays missing, or offsets that disagree with
        the ledger (naming the cache and what).
    """

    def __init__(self, path: str | os.PathLike[str], field: str = FIELD, *, ledger: dict[str, Any] | None = None):
        self.path = storage.location(path).path  # a Path, or the URL of a cache in object storage
        self.field = field
        self.ledger = read_ledger(self.path) if ledger is None else ledger  # given: read_ledger's, already checked
        self.parts = self._parts()  # (directory of the field's arrays, rows) in row order
        self._data: list[ts.TensorStore] | None = None
        self.offsets, self._part_tokens = self._read_offsets()
        expected = (self.ledger.get("field_counts") or {}).get(field)
        if isinstance(expected, int) and expected != self.num_tokens:
            raise ValueError(
                f"{display(self.path)}: the ledger counts {expected} {field} tokens, the offsets "
                f"{self.num_tokens}: the cache is damaged"
            )

    def _parts(self) -> list[tuple[str | Path, int]]:
        rows, cache = int(self.ledger["total_num_rows"]), storage.location(self.path)
        if self.ledger.get("layout", "consolidated") == "consolidated":
            return [(cache.join(self.field).path, rows)]
        shard_rows = self.ledger.get("shard_rows") or {}
        parts: list[tuple[str | Path, int]] = []
        for name in self.ledger.get("finished_shards") or []:
            n = shard_rows.get(name) if isinstance(name, str) else None
            if not is_count(n) or os.path.isabs(name) or ".." in name.split("/"):
                raise ValueError(
                    f"{cache.join(LEDGER).display}: corrupt (shard {str(name)[:60]!r} has no row count "
                    f"or is not a relative path)"
                )
            parts.append((cache.join(name, self.field).path, n))
        if (total := sum(n for _, n in parts)) != rows:
            raise ValueError(
                f"{cache.join(LEDGER).display}: corrupt (its shards hold {total} rows, total_num_rows says {rows})"
            )
        return parts

    def _open(self, where: str | Path, name: str, opening: ts.Future[ts.TensorStore] | None = None) -> ts.TensorStore:
        """Array ``name`` of part ``where`` (``opening``: its open already issued), or a ValueError naming it."""
        array = storage.location(where).join(name).path
        try:
            return (opening or ts.open(zarr_spec(array), open=True, read=True)).result()
        except ValueError as exc:
            if (err := as_os_error(exc, array)) is not None:
                raise err from None
            if status_code(exc) == "NOT_FOUND":
                rel = str(array)[len(str(self.path)) :].strip("/")
                raise ValueError(
                    f"{display(self.path)}: {rel}/ is missing (no {rel}/zarr.json); the Levanter cache is incomplete"
                ) from None
            raise ValueError(f"{display(array)}: not a readable zarr v3 array ({str(exc)[:200]})") from None

    def _data_place(self, k: int) -> storage.Location:
        """Part ``k``'s ``data`` array's place, parsed once (every read names it)."""
        places: dict[int, storage.Location] = self.__dict__.setdefault("_data_places", {})
        if k not in places:
            places[k] = storage.location(self.parts[k][0]).join("data")
        return places[k]

    def _read(
        self,
        arr: ts.TensorStore,
        begin: int,
        end: int,
        where: str | os.PathLike[str],
        reading: ts.Future[Any] | None = None,
    ) -> np.ndarray:
        """Elements ``[begin, end)`` of ``arr`` (``reading``: that read, already issued), or an error naming
        ``where``."""
        try:
            return (reading or arr[begin:end].read()).result()
        except ValueError as exc:
            if (err := as_os_error(exc, where)) is not None:
                raise err from None
            state = "missing" if status_code(exc) == "NOT_FOUND" else "corrupt"
            raise ValueError(
                f"{display(where)}: a chunk holding elements [{begin}, {end}) is {state} ({str(exc)[:200]})"
            ) from None

    def _read_offsets(self) -> tuple[np.ndarray, np.ndarray]:
        """Global int64 offsets (num_rows + 1, from 0) and the first token of every part, checked against the
        ledger (one read of each part's offsets). In a bucket each step is a round trip (~0.1 s and more): both
        arrays are opened at once, and the data array's listing is taken while the offsets are read."""
        pieces, starts, base = [np.zeros(1, np.int64)], [], 0
        self._data = []
        for where, rows in self.parts:
            offsets_at, data_at = (
                storage.location(where).join("offsets").path,
                storage.location(where).join("data").path,
            )
            opening = {at: ts.open(zarr_spec(at), open=True, read=True) for at in (offsets_at, data_at)}
            offsets_array = self._open(where, "offsets", opening[offsets_at])
            self._data.append(self._open(where, "data", opening[data_at]))
            dtype = np.dtype(self._data[-1].dtype.numpy_dtype)
            if dtype.kind not in "iu":
                raise ValueError(f"{display(data_at)}: holds {dtype}, not token ids")
            reading = offsets_array[0 : rows + 1].read()
            with os_errors(data_at):
                present = array_keys(data_at)
            off = np.asarray(self._read(offsets_array, 0, rows + 1, offsets_at, reading), np.int64)
            self._check_shards(data_at, self._data[-1], int(off[-1]) if rows else 0, present)
            if off.shape[0] != rows + 1 or int(off[0]) != rows:
                raise ValueError(
                    f"{display(offsets_at)}: offsets[0] is {int(off[0]) if off.size else None}, the ledger says "
                    f"{rows} rows: the cache is damaged or still being written"
                )
            off[0] = 0
            bad = np.flatnonzero(np.diff(off) < 0)
            if bad.size:
                raise ValueError(f"{display(offsets_at)}: offsets decrease at row {int(bad[0])}: the cache is damaged")
            starts.append(base)
            pieces.append(off[1:] + base)
            base += int(off[-1])
        starts.append(base)
        return np.concatenate(pieces), np.asarray(starts, np.int64)

    def _check_shards(self, where: str | Path, arr: ts.TensorStore, tokens: int, present: set[str]) -> None:
        """Every outer chunk (shard file) holding one of the first ``tokens`` elements is ``present`` (the keys of
        the array at ``where``)."""
        missing = [k for k in chunk_grid(tokens, chunk_elements(arr.chunk_layout.write_chunk)) if k not in present]
        if missing:
            raise ValueError(
                f"{display(where)}: chunk {missing[0]} is missing"
                f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}; the Levanter cache is incomplete"
            )

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__ | {"_data": None}

    def _arrays(self) -> list[ts.TensorStore]:
        if self._data is None:
            self._data = [self._open(where, "data") for where, _ in self.parts]
        return self._data

    @property
    def num_tokens(self) -> int:
        return int(self.offsets[-1])

    def __len__(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def lengths(self) -> np.ndarray:
        """int64 tokens per document (row), from the offsets alone."""
        return np.diff(self.offsets)

    def read(self, begin: int, end: int) -> np.ndarray:
        """Tokens [begin, end) of the field, rows back to back, as int32 (one read per part touched); ValueError
        when a chunk is missing or corrupt, or an id is negative or does not fit int32."""
        if not 0 <= begin <= end <= self.num_tokens:
            raise IndexError(f"tokens [{begin}, {end}) out of range for {self.num_tokens} tokens")
        arrays, out, at = self._arrays(), np.empty(end - begin, np.int32), 0
        for k, a, b in self._spans(begin, end):
            where = self._data_place(k)
            block = self._read(arrays[k], a, b, where)
            if block.size:
                low, high = int(block.min()), int(block.max())
                if low < 0 or high > INT32_MAX:
                    raise ValueError(
                        f"{display(where)}: token id {low if low < 0 else high} is negative or does not fit int32"
                    )
            out[at : at + block.size] = block
            at += block.size
        return out

    @property
    def dtype(self) -> np.dtype:
        """What :meth:`read` returns: int32."""
        return np.dtype(np.int32)

    @property
    def read_granularity(self) -> int:
        """Tokens a read fetches at least: the inner chunk of Levanter's sharded ``data`` arrays."""
        return chunk_elements(self._arrays()[0].chunk_layout.read_chunk)

    @property
    def object_tokens(self) -> int:
        """Tokens per stored object (a shard file of ``data``)."""
        return chunk_elements(self._arrays()[0].chunk_layout.write_chunk)

    retries_failed_reads = True  # a failed background read is read again by read(), whose error names the chunk

    def read_async(
        self, begin: int, end: int, *, batch: ts.Batch | None = None, out: Sequence[np.ndarray] | None = None
    ) -> JoinedRead[np.ndarray]:
        """Tokens [begin, end) read in the background, one read per part touched (in ``batch``): a future whose
        ``result()`` is int32 (ValueError when a read fails or an id does not fit); ``out``: int32 arrays whose sizes
        add up to ``end - begin``, the tokens copied into them in order."""
        arrays = self._arrays()
        reads = [arrays[k][a:b].read(batch=batch) for k, a, b in self._spans(begin, end)]
        return JoinedRead(reads, _joined_int32 if out is None else functools.partial(_joined_into, out=out))

    def _spans(self, begin: int, end: int) -> list[tuple[int, int, int]]:
        """``(part, first, stop)``: the tokens [begin, end) of the field as a range within each part touched."""
        spans = []
        first = int(np.searchsorted(self._part_tokens, begin, side="right")) - 1
        for k in range(max(first, 0), len(self.parts)):
            lo, hi = int(self._part_tokens[k]), int(self._part_tokens[k + 1])
            if lo >= end:
                break
            if max(begin, lo) < min(end, hi):
                spans.append((k, max(begin, lo) - lo, min(end, hi) - lo))
        return spans

    def __repr__(self) -> str:
        return f"LevanterCache({str(self.path)!r}, documents={len(self)}, tokens={self.num_tokens})"


def _joined_int32(reads: Sequence[Part[np.ndarray]]) -> np.ndarray:
    """The reads of one token range over a cache's parts, joined, as int32 (ValueError when an id does not fit)."""
    blocks = [np.asarray(r.result()) for r in reads]
    out = np.concatenate(blocks) if len(blocks) != 1 else blocks[0]
    if out.size and (int(out.min()) < 0 or int(out.max()) > INT32_MAX):
        raise ValueError("a token id is negative or does not fit int32")
    return out.astype(np.int32, copy=False)


def _joined_into(reads: Sequence[Part[np.ndarray]], *, out: Sequence[np.ndarray]) -> np.ndarray:
    """:func:`_joined_int32`, copied into the arrays ``out`` in order; ``out[0]``."""
    tokens, at = _joined_int32(reads), 0
    for piece in out:
        piece[:] = tokens[at : at + piece.shape[0]]
        at += piece.shape[0]
    return out[0]
