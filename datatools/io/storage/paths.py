"""Paths as users type them: relative with ``..``, spaces, symlinks, names that are not UTF-8 (kept by Python as
surrogate escapes, PEP 383, which pyarrow and tensorstore cannot encode): files are opened by Python and handed to
libraries as file objects or buffers; :func:`resolved` gives tensorstore its absolute path; :func:`display` and
:func:`printable` give text that always prints (undecodable bytes as ``\\xNN``).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pyarrow as pa


def display(path: str | os.PathLike[str] | bytes) -> str:
    """``path`` as printable text: undecodable bytes of its name appear as ``\\xNN``."""
    return printable(os.fsdecode(path))


def printable(text: str) -> str:
    """``text`` with surrogate-escaped bytes (from non-UTF-8 file names) and control characters (from a corrupt
    file's bytes quoted in a library's message) replaced by ``\\xNN``; newlines and tabs become spaces."""
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    if any(c < " " or c == "\x7f" for c in text):
        text = "".join(" " if c in "\n\r\t" else f"\\x{ord(c):02x}" if c < " " or c == "\x7f" else c for c in text)
    return text


def resolved(path: str | os.PathLike[str]) -> Path:
    """The absolute path with ``..`` and symlinks resolved (what tensorstore's file driver accepts)."""
    return Path(path).expanduser().resolve()


def map_file(path: str | os.PathLike[str]) -> pa.Buffer:
    """The whole file memory-mapped as a pyarrow buffer (zero-copy), opened by Python so any file name works."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return pa.py_buffer(b"")
        return pa.py_buffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def first_line(exc: BaseException) -> str:
    """An exception's message cut to its first line (library messages can span many), or its class name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
