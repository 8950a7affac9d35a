"""Index-only packed plans on disk: written atomically in bounded memory, read lazily (memory-mapped).

A plan directory (``datatools pack DATA OUT``) holds ``plan.json`` (options, figures, the arrays' dtypes and
digests, the documents' identity), the pieces (:mod:`datatools.kernels.packing.plan_format`) and ``lengths.npy``
(so it is also a lengths-only input). :class:`PlanFile` refuses an edited plan (``ValueError`` naming the file).
It is written in a staging directory beside ``OUT`` (``.OUT.XXXXXXXX.tmp``, its ``.owner`` naming host and pid) and
renamed into place; the next ``pack`` removes what a dead writer on this host left (:func:`remove_stale_staging`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from datatools.base.checks import MAX_CTX, check_int
from datatools.io import storage
from datatools.io.storage.atomic import current_umask, new_file_mode
from datatools.io.storage.paths import display
from datatools.kernels.packing import PackOptions, PackPlan
from datatools.kernels.packing.groups import lower_bound_rows, pack_in_groups, size_histogram
from datatools.kernels.packing.plan_format import (
    ARRAYS,
    CHUNK,
    FORMAT_VERSION,
    HEADER_DIGEST,
    array_digest,
    crc32_update,
    gather_rows,
    header_digest,
    lengths_identity,
    piece_dtypes,
    piece_stats,
    smallest_uint,
)

HEADER = "plan.json"
FORMAT = "datatools-plan"
GROUP_DOCS = 50_000_000  # documents planned at once: ~4 GB of working memory (about 80 bytes a document)
MAX_HEADER_BYTES = 1 << 20  # a plan header is ~1 KB; a larger plan.json is not one (a link to /dev/urandom)
OWNER = ".owner"  # in a staging directory: {"host": ..., "pid": ...} of the pack writing it
FILES = frozenset({HEADER, OWNER, "lengths.npy", *(f"{name}.npy" for name in ARRAYS)})
UNOWNED_STALE_S = 600  # a staging directory with no owner file (killed at its first instant) this old is stale


def is_plan(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a plan directory (holds ``plan.json``)."""
    return storage.location(path).can_memory_map and (Path(path) / HEADER).is_file()


class _NpyAppender:
    """A 1-D ``.npy`` file written in pieces, its header rewritten with the final length when closed."""

    def __init__(self, path: Path, dtype: np.dtype):
        self.path, self.dtype, self.count, self.crc = path, np.dtype(dtype), 0, 0
        self.f = open(path, "wb")
        self.data_offset = self._header(0)

    @property
    def digest(self) -> str:
        """The values' digest (:func:`~datatools.kernels.packing.plan_format.array_digest`)."""
        return f"crc32:{self.crc:08x}"

    def _header(self, n: int) -> int:
        np.lib.format.write_array_header_1_0(
            self.f, {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": (n,)}
        )
        return self.f.tell()

    def append(self, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values, dtype=self.dtype)
        values.tofile(self.f)
        self.crc = crc32_update(values, self.crc)
        self.count += int(values.shape[0])

    def close(self) -> None:
        end = self.f.tell()
        self.f.seek(0)
        if self._header(self.count) != self.data_offset:
            raise OSError(f"{self.path}: the .npy header outgrew the room NumPy reserves for it")
        self.f.seek(end)
        os.fchmod(self.f.fileno(), new_file_mode())
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()


def write_plan(
    out: str | os.PathLike[str],
    lengths: np.ndarray,
    options: PackOptions,
    *,
    group_docs: int = GROUP_DOCS,
    source: str = "",
    overwrite: bool = False,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Plan ``lengths`` (tokens per document, any integer dtype) with ``options`` (their ``window`` unused) into the
    plan directory ``out``; its header. Memory: one group of documents and ``CHUNK`` lengths. ``progress(documents)``
    is called as groups finish.

    Raises:
      ValueError: a bad ``group_docs``, ``out`` is a URL, or ``out`` exists and ``overwrite`` is false.
      OSError: the directory cannot be written (naming it).
    """
    ctx = options.ctx
    group_docs = check_int(group_docs, "group_docs", minimum=1)
    out = _checked_destination(out, overwrite)
    lengths = np.asarray(lengths) if not isinstance(lengths, np.ndarray) else lengths
    if lengths.ndim != 1 or lengths.dtype.kind not in "iu":
        raise ValueError(f"lengths must be a 1-D integer array, got {lengths.dtype} {lengths.shape}")
    identity = lengths_identity(lengths)  # one streaming pass (also the largest length below)
    pieces, max_start, max_len = piece_stats(lengths, ctx, options.overflow)
    if options.packer.cuts_documents:  # documents are cut across rows: starts up to the longest document
        pieces, max_start = identity["documents"] + identity["tokens"] // ctx + 1, max(max_len - 1, 0)
    for a in range(0, lengths.shape[0], CHUNK):
        part = lengths[a : a + CHUNK]
        if part.dtype.kind == "i" and part.size and int(part.min()) < 0:
            i = a + int(np.argmin(part))
            raise ValueError(f"lengths[{i}] = {int(lengths[i])} is negative")
    dtypes = piece_dtypes(identity["documents"], pieces, max_start, ctx)
    if removed := remove_stale_staging(out):
        warnings.warn(
            f"{display(out)}: removed {len(removed)} staging director{'y' if len(removed) == 1 else 'ies'} an "
            f"interrupted pack left ({', '.join(p.name for p in removed)})",
            stacklevel=2,
        )
    try:
        stage = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
        (stage / OWNER).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), str(out)) from None
    try:
        header = _write_arrays(stage, lengths, options, group_docs, dtypes, max_len, progress)
        header.update(data=identity, source=source)
        header[HEADER_DIGEST] = header_digest(header)
        storage.location(stage / HEADER).write_text(json.dumps(header, indent=2) + "\n")
        (stage / OWNER).unlink()
        os.chmod(stage, 0o777 & ~current_umask())  # mkdtemp makes it 0700, as mkdir would not
        _commit(stage, out)
    except BaseException as exc:
        shutil.rmtree(stage, ignore_errors=True)
        if isinstance(exc, OSError):
            raise OSError(exc.errno, exc.strerror or str(exc), str(out)) from None
        raise
    return header


def _checked_destination(out: str | os.PathLike[str], overwrite: bool) -> Path:
    """``out`` as a local path a plan may be written to: not a URL, and absent unless ``overwrite`` replaces a plan."""
    if not storage.location(out).can_memory_map:
        raise ValueError(f"{display(out)}: a plan is written to a local directory (it is memory-mapped when read)")
    path = Path(out)
    if path.exists() and not overwrite:
        raise ValueError(f"{display(path)}: already exists; choose another path or pass --overwrite to replace it")
    if path.exists() and not is_plan(path):
        raise ValueError(f"{display(path)}: exists and is not a plan directory; refusing to replace it")
    return path


def _commit(stage: Path, out: Path) -> None:
    """Move the finished plan ``stage`` to ``out``; an existing plan there (overwrite asked for) is moved aside
    first, then removed."""
    if out.exists():
        old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".old"))
        os.replace(out, old / "plan")
        os.replace(stage, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(stage, out)


def remove_stale_staging(out: str | os.PathLike[str]) -> list[Path]:
    """Remove (and return) the staging directories (``.OUT.*.tmp``, ``.OUT.*.old``) a killed ``pack`` of ``out``
    left: only a directory holding nothing but a plan's files whose ``.owner`` names this host and a process that
    is gone (with no owner file: older than :data:`UNOWNED_STALE_S`)."""
    out = Path(out)
    removed: list[Path] = []
    try:
        candidates = [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]
    except OSError:
        return removed
    for stage in candidates:
        if stage.suffix not in (".tmp", ".old") or stage.is_symlink() or not stage.is_dir():
            continue
        try:
            inner = stage / "plan" if stage.suffix == ".old" else stage
            if stage.suffix == ".old" and [p.name for p in stage.iterdir()] not in ([], ["plan"]):
                continue
            if inner.exists() and not all(_own_file(p) for p in inner.iterdir()):
                continue
            if not _abandoned(stage):
                continue
            shutil.rmtree(stage)
            removed.append(stage)
        except OSError:
            continue
    return removed


def _own_file(p: Path) -> bool:
    """A plan's file, or an atomic write's temporary of one (``.NAME.XXXXXXXX.tmp``)."""
    if p.is_symlink() or not p.is_file():
        return False
    return p.name in FILES or any(p.name.startswith(f".{f}.") and p.name.endswith(".tmp") for f in FILES)


def _abandoned(stage: Path) -> bool:
    """Whether the pack that made ``stage`` is gone: its owner (host, pid) is this host and no such process runs."""
    owner = stage / OWNER
    if not owner.is_file():
        return time.time() - stage.stat().st_mtime > UNOWNED_STALE_S
    try:
        who = json.loads(owner.read_bytes()[:4096])
        host, pid = who["host"], int(who["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # there, another user's
        return False
    return False


def _write_arrays(
    stage: Path,
    lengths: np.ndarray,
    options: PackOptions,
    group_docs: int,
    dtypes: dict[str, np.dtype],
    max_len: int,
    progress: Callable[[int], None] | None,
) -> dict[str, Any]:
    """The plan's arrays into ``stage``, group by group; the header's figures."""
    ctx, align = options.ctx, options.align
    files = {name: _NpyAppender(stage / f"{name}.npy", dtypes[name]) for name in ARRAYS}
    lens = _NpyAppender(stage / "lengths.npy", smallest_uint(max_len))
    for a in range(0, lengths.shape[0], CHUNK):
        lens.append(lengths[a : a + CHUNK])
    lens.close()
    hist = np.zeros(ctx // align + 1, np.int64)
    rows = pieces = kept = dropped = empty = 0
    files["row_starts"].append(np.zeros(1, np.int64))
    done = 0
    try:
        for part in pack_in_groups(lengths, options, group_docs=group_docs):
            files["row_starts"].append(part.row_splits[1:] + pieces)
            files["doc"].append(part.doc)
            files["start"].append(part.start)
            files["length"].append(part.length)
            hist += size_histogram(part.length, ctx, align)
            rows, pieces = rows + part.num_rows, pieces + part.num_pieces
            kept, dropped, empty = kept + part.kept_tokens, dropped + part.dropped_tokens, empty + part.empty_documents
            if progress is not None:
                now = min(int(lengths.shape[0]), done + group_docs)
                progress(now - done)
                done = now
    finally:
        for f in files.values():
            if not f.f.closed:
                f.close()
    bound = lower_bound_rows(hist, kept, ctx, options.max_segments)
    digests = {f"{name}.npy": files[name].digest for name in ARRAYS}
    digests["lengths.npy"] = lens.digest
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "ctx": ctx,
        "algorithm": options.algorithm,
        "max_segments": options.max_segments,
        "align": align,
        "overflow": options.overflow,
        "group_docs": group_docs,
        "num_rows": rows,
        "num_pieces": pieces,
        "kept_tokens": kept,
        "dropped_tokens": dropped,
        "empty_documents": empty,
        "lower_bound_rows": bound,
        "efficiency": kept / (rows * ctx) if rows else 0.0,
        "dtypes": {name: np.dtype(dtypes[name]).name for name in ARRAYS},
        "digests": digests,
    }


class PlanFile:
    """A plan directory opened for reading: the header checked, the arrays memory-mapped (read by :meth:`rows_plan`)."""

    def __init__(self, path: str | os.PathLike[str]):
        if not storage.location(path).can_memory_map:
            raise ValueError(f"{display(path)}: a plan is read from a local directory (memory-mapped)")
        self.path = Path(path)
        head = self.path / HEADER
        if not head.is_file():
            raise ValueError(f"{display(self.path)}: not a plan directory (no {HEADER}; write one with datatools pack)")
        try:
            self.header = json.loads(storage.location(head).read_bytes(max_bytes=MAX_HEADER_BYTES))
        except (ValueError, UnicodeError) as exc:
            raise ValueError(f"{display(head)}: not valid JSON ({exc})") from None
        if not isinstance(self.header, dict) or self.header.get("format") != FORMAT:
            raise ValueError(f"{display(head)}: not a datatools plan header (format {FORMAT!r} expected)")
        if self.header.get("version") != FORMAT_VERSION:
            raise ValueError(
                f"{display(head)}: plan format version {str(self.header.get('version'))[:20]}; this datatools "
                f"reads version {FORMAT_VERSION} (re-pack it: {self._repack})"
            )
        if self.header.get(HEADER_DIGEST) != header_digest(self.header):
            raise ValueError(
                f"{display(head)}: edited or damaged (its {HEADER_DIGEST} does not match its content); "
                f"re-pack it: {self._repack}"
            )
        self._check_values()
        self.arrays = {name: self._load(name) for name in ARRAYS}
        pieces = self.header["num_pieces"]
        expect = {"row_starts": self.header["num_rows"] + 1, "doc": pieces, "start": pieces, "length": pieces}
        for name, n in expect.items():
            if self.arrays[name].shape != (n,):
                raise ValueError(
                    f"{display(self.path / (name + '.npy'))}: {self.arrays[name].shape[0]} values, the "
                    f"header says {n} (a damaged or mixed plan directory)"
                )
        for name in ARRAYS:
            self._verify(name, self.arrays[name])

    @property
    def _repack(self) -> str:
        """The command that re-makes this plan, for messages."""
        source, ctx = self.header.get("source"), self.header.get("ctx")  # a dict: checked before any message
        src = source if isinstance(source, str) and source else "DATA"
        return f"datatools pack {src} {display(self.path)} --ctx {ctx if isinstance(ctx, int) else 'CTX'} --overwrite"

    def _check_values(self) -> None:
        """The header's numbers in range (a consistent header could still be written by hand)."""
        h, head = self.header, display(self.path / HEADER)
        try:
            ctx = check_int(h.get("ctx"), "ctx", minimum=1, maximum=MAX_CTX)
            check_int(h.get("align"), "align", minimum=1, maximum=ctx)
            for key in ("num_rows", "num_pieces", "dropped_tokens", "empty_documents", "lower_bound_rows"):
                check_int(h.get(key), key, minimum=0)
            if not isinstance(h.get("dtypes"), dict) or not isinstance(h.get("digests"), dict):
                raise ValueError("no dtypes or digests")
            if not isinstance(h.get("data"), dict):
                raise ValueError("no data identity")
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{head}: corrupt ({exc}); re-pack it: {self._repack}") from None

    def _verify(self, name: str, arr: np.ndarray) -> None:
        """ValueError naming ``NAME.npy`` when its dtype or its values' digest is not the header's."""
        path = self.path / f"{name}.npy"
        want = self.header["dtypes"].get(name) if name in ARRAYS else None
        if want is not None and arr.dtype.name != want:
            raise ValueError(
                f"{display(path)}: dtype {arr.dtype.name}, the header says {want}; re-pack it: {self._repack}"
            )
        if array_digest(arr) != self.header["digests"].get(f"{name}.npy"):
            raise ValueError(
                f"{display(path)}: edited or damaged (its values do not match the digest in {HEADER}); "
                f"re-pack it: {self._repack}"
            )

    def _load(self, name: str) -> np.ndarray:
        path = self.path / f"{name}.npy"
        try:
            arr: np.ndarray = np.load(path, mmap_mode="r", allow_pickle=False)
        except FileNotFoundError:
            raise ValueError(f"{display(path)}: missing from the plan directory") from None
        except ValueError as exc:
            raise ValueError(f"{display(path)}: not a valid NumPy file ({exc})") from None
        if arr.ndim != 1 or arr.dtype.kind != "u":
            raise ValueError(f"{display(path)}: expected a 1-D unsigned array, got {arr.dtype} {arr.shape}")
        return arr

    ctx = property(lambda self: int(self.header["ctx"]))
    align = property(lambda self: int(self.header["align"]))
    algorithm = property(lambda self: str(self.header["algorithm"]))
    num_rows = property(lambda self: int(self.header["num_rows"]))
    num_pieces = property(lambda self: int(self.header["num_pieces"]))
    efficiency = property(lambda self: float(self.header["efficiency"]))
    lower_bound_rows = property(lambda self: int(self.header["lower_bound_rows"]))
    identity = property(lambda self: dict(self.header["data"]))
    # the piece arrays under a PackPlan's names (memory-mapped, narrow unsigned dtypes)
    row_splits = property(lambda self: self.arrays["row_starts"])
    doc = property(lambda self: self.arrays["doc"])
    start = property(lambda self: self.arrays["start"])
    length = property(lambda self: self.arrays["length"])

    @property
    def max_doc(self) -> int:
        """An upper bound of the documents the plan refers to: the planned collection's last."""
        return int(self.header["data"]["documents"]) - 1

    def lengths(self) -> np.ndarray:
        """Tokens per document of the planned collection (memory-mapped; its digest checked)."""
        arr = self._load("lengths")
        self._verify("lengths", arr)
        return arr

    def rows_plan(self, rows: np.ndarray) -> PackPlan:
        """Rows ``rows`` as a small :class:`PackPlan` whose row ``i`` is plan row ``rows[i]`` (only their pieces
        are read)."""
        a = self.arrays
        return gather_rows(
            a["row_starts"],
            a["doc"],
            a["start"],
            a["length"],
            rows,
            ctx=self.ctx,
            align=self.align,
            algorithm=self.algorithm,
        )

    def to_plan(self) -> PackPlan:
        """The whole plan in memory (int64 arrays: 20 bytes a piece)."""
        h = self.header
        return dataclasses.replace(
            self.rows_plan(np.arange(self.num_rows)),
            dropped_tokens=int(h["dropped_tokens"]),
            empty_documents=int(h["empty_documents"]),
        )

    def check_identity(self, identity: dict[str, Any], source: str) -> None:
        """ValueError naming both when ``identity`` (:func:`lengths_identity` of a source) is not the plan's."""
        mine = self.identity
        if {k: identity.get(k) for k in mine} != mine:
            raise ValueError(
                f"{display(self.path)} was planned for other documents than {source}: the plan's "
                f"{_describe(mine)} against the source's {_describe(identity)}; re-pack it from "
                f"{source} (datatools pack)"
            )


def _describe(identity: dict[str, Any]) -> str:
    return (
        f"{identity.get('documents')} documents, {identity.get('tokens')} tokens, lengths CRC-32 "
        f"{identity.get('lengths_crc32')}"
    )
