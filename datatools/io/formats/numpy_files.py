"""NumPy token inputs: a directory with ``tokens.npy`` + ``lengths.npy``/``offsets.npy`` (or ``lengths.npy``
alone: enough to plan and analyse, not to read documents), or one flat token file (``.bin`` of uint16/uint32,
nanoGPT style, or a 1-D ``.npy``) of documents each ending with ``eos_id``, memory-mapped and read in slices of
:data:`FLAT_SLICE` tokens. Never unpickled. A URL's files are read whole into memory (prefer a token store there).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from datatools.base.checks import BIN_DTYPES  # noqa: F401 (here since the command line lists them)
from datatools.io import storage
from datatools.io.storage.paths import display

FLAT_SLICE = 1 << 24  # tokens per slice of a flat token file (64 MiB as int32)
INT32_MAX = (1 << 31) - 1  # token ids travel as int32


def _token_array(arr: np.ndarray, where: str) -> np.ndarray:
    """``arr`` checked: a 1-D array of integers."""
    if arr.ndim != 1:
        raise ValueError(f"{where}: expected a flat 1-D token array, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{where}: token ids must be integers, got {arr.dtype}")
    return arr


def check_non_negative(values: np.ndarray, where: str) -> None:
    if values.size and values.dtype.kind == "i":
        lo = values.min()
        if lo < 0:
            raise ValueError(f"{where}: negative token id {int(lo)} (token {int(np.argmin(values))})")


def _load(path: Path | str, mmap: bool) -> np.ndarray:
    loc = storage.location(path)
    try:  # numpy opens local files with Python's open(): any file name works, a PermissionError names the file
        arr: np.ndarray  # np.load is typed Any (it may give an .npz archive: never here, .npy files are named)
        if loc.can_memory_map:
            arr = np.load(loc.local_path, mmap_mode="r" if mmap else None, allow_pickle=False)
        else:
            arr = np.load(io.BytesIO(loc.read_bytes()), allow_pickle=False)
    except ValueError as exc:
        raise ValueError(f"{display(path)}: not a valid NumPy file ({exc})") from None
    return arr


def flat_array(path: str | Path, bin_dtype: str) -> np.ndarray:
    """The flat token file memory-mapped (no token read yet; a URL: read into memory)."""
    if Path(storage.location(path).name).suffix.lower() == ".npy":
        arr = _load(path, mmap=True)
    else:
        size = storage.location(path).size()
        item = np.dtype(bin_dtype).itemsize
        if size % item:
            raise ValueError(f"{display(path)}: {size} bytes is not a whole number of {bin_dtype} tokens (truncated?)")
        if not size:
            return np.zeros(0, bin_dtype)
        loc = storage.location(path)
        if loc.can_memory_map:
            arr = np.memmap(loc.local_path, dtype=bin_dtype, mode="r")
        else:
            arr = np.frombuffer(loc.read_bytes(), dtype=bin_dtype)
    return _token_array(arr, display(path))


def flat_slices(path: str | Path, bin_dtype: str, eos_id: int) -> Iterator[tuple[np.ndarray, int]]:
    """``(lengths, bytes)`` slice by slice: the documents that end in each slice; a document ends after its eos
    (the unterminated tail is one too) and may start in an earlier slice."""
    flat = flat_array(path, bin_dtype)
    n, item, begin = flat.shape[0], flat.dtype.itemsize, 0
    for a in range(0, n, FLAT_SLICE):
        b = min(a + FLAT_SLICE, n)
        part = np.asarray(flat[a:b])
        check_non_negative(part, display(path))
        ends = np.flatnonzero(part == eos_id) + 1 + a
        if b == n and n > begin and (ends.size == 0 or ends[-1] != n):
            ends = np.append(ends, n)
        yield np.diff(ends, prepend=begin).astype(np.int64), (b - a) * item
        begin = int(ends[-1]) if ends.size else begin


def numpy_dir_files(path: str | Path) -> tuple[str | Path, str | Path, str] | None:
    """(tokens.npy, lengths.npy or offsets.npy, which) of a NumPy directory, None when it is not one."""
    tokens = storage.location(path).join("tokens.npy")
    if not tokens.is_file():
        return None
    for name, what in (("lengths.npy", "lengths"), ("offsets.npy", "offsets")):
        if storage.location(path).join(name).is_file():
            return tokens.path, storage.location(path).join(name).path, what
    raise ValueError(f"{display(path)}: has tokens.npy but neither lengths.npy nor offsets.npy")


def lengths_only_file(path: str | Path) -> Path | None:
    """``lengths.npy`` of a local directory that holds it without ``tokens.npy`` (a lengths-only input, for
    planning and analysis: ``datatools pack``, ``analyze-padding``), None otherwise."""
    if not storage.location(path).can_memory_map or not Path(path).is_dir() or (Path(path) / "tokens.npy").exists():
        return None
    found = Path(path) / "lengths.npy"
    return found if found.is_file() else None


def lengths_only(path: str | Path) -> np.ndarray:
    """The lengths of a lengths-only directory, memory-mapped (10^9 lengths are not copied), checked: a 1-D
    integer array of non-negative values (a vectorized pass, :data:`FLAT_SLICE` at a time)."""
    index_file = Path(path) / "lengths.npy"
    lengths = _load(index_file, mmap=True)
    if lengths.ndim != 1 or lengths.dtype.kind not in "iu":
        raise ValueError(f"{display(index_file)}: expected a 1-D integer array, got {lengths.dtype} {lengths.shape}")
    if lengths.dtype.kind == "i":
        for a in range(0, lengths.shape[0], FLAT_SLICE):
            part = np.asarray(lengths[a : a + FLAT_SLICE])
            if part.size and int(part.min()) < 0:
                raise ValueError(
                    f"{display(index_file)}: negative length {int(part.min())} (document {a + int(np.argmin(part))})"
                )
    return lengths


def numpy_dir(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(memory-mapped tokens, int64 offsets) of a NumPy directory, checked before any use: the index non-negative,
    monotone and covering every token, ``lengths.npy`` and ``offsets.npy`` agreeing when both are there, every id
    in [0, 2**31 - 1] (:data:`FLAT_SLICE` at a time), at least one document; a ValueError otherwise."""
    files = numpy_dir_files(path)
    if files is None:
        raise ValueError(f"{display(path)}: not a NumPy directory (no tokens.npy)")
    tokens_file, index_file, what = files
    tokens = _token_array(_load(tokens_file, mmap=True), display(tokens_file))
    offsets = _index_offsets(index_file, what)
    other_file = storage.location(path).join("offsets.npy")
    if what == "lengths" and other_file.is_file():
        other = _index_offsets(other_file.path, "offsets")
        if other.shape != offsets.shape:
            raise ValueError(
                f"{display(index_file)} and {display(other_file)} disagree: {offsets.size - 1} vs "
                f"{other.size - 1} documents; keep one of them"
            )
        if (other != offsets).any():
            doc = int(np.flatnonzero(other != offsets)[0]) - 1
            raise ValueError(
                f"{display(index_file)} and {display(other_file)} disagree from document {doc} on "
                f"(it ends at token {int(offsets[doc + 1])} vs {int(other[doc + 1])}); keep one of them"
            )
    if int(offsets[-1]) != tokens.shape[0]:
        raise ValueError(
            f"{display(index_file)}: {what} cover {int(offsets[-1])} tokens but tokens.npy holds {tokens.shape[0]}"
        )
    if offsets.size == 1:
        raise ValueError(f"{display(path)}: no documents ({display(index_file)} is empty)")
    check_token_range(tokens, display(tokens_file))
    return tokens, offsets


def _index_offsets(index_file: str | Path, what: str) -> np.ndarray:
    """int64 offsets from ``lengths.npy`` or ``offsets.npy``, checked (non-negative, monotone, from 0)."""
    index = _load(index_file, mmap=False)
    if index.ndim != 1 or index.dtype.kind not in "iu":
        raise ValueError(f"{display(index_file)}: expected a 1-D integer array, got {index.dtype} {index.shape}")
    if what == "lengths":
        lengths = index.astype(np.int64)
        if lengths.size and lengths.min() < 0:
            raise ValueError(f"{display(index_file)}: negative length {int(lengths.min())}")
        return np.concatenate(([0], np.cumsum(lengths)))
    offsets = index.astype(np.int64)
    if offsets.size == 0 or offsets[0] != 0 or (np.diff(offsets) < 0).any():
        raise ValueError(f"{display(index_file)}: offsets must start at 0 and never decrease")
    return offsets


def check_token_range(tokens: np.ndarray, where: str) -> None:
    """Token ids must be in [0, 2**31 - 1] (batches are int32): a slice at a time (the array may be mapped)."""
    wide = tokens.dtype.itemsize > 4 or tokens.dtype == np.uint32
    for a in range(0, tokens.shape[0], FLAT_SLICE):
        part = np.asarray(tokens[a : a + FLAT_SLICE])
        check_non_negative(part, where)
        if wide and part.size and int(part.max()) > INT32_MAX:
            raise ValueError(
                f"{where}: token id {int(part.max())} (token {a + int(np.argmax(part))}) does not fit "
                f"int32 (ids must be in [0, 2**31 - 1])"
            )
