"""Files never seen half-written (a temporary file renamed into place), with the permissions the umask asks for
(``0666 & ~umask`` as ``open()`` gives, not ``mkstemp``'s 0600: other users of a shared cluster can read them).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import BinaryIO


def current_umask() -> int:
    """The process umask, read without changing it (Linux ``/proc``); elsewhere set and restored at once."""
    with suppress(OSError, ValueError, IndexError), open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"Umask:"):
                return int(line.split()[1], 8)
    old = os.umask(0o022)
    os.umask(old)
    return old


def new_file_mode() -> int:
    """The mode ``open(path, 'w')`` gives a new file: ``0o666`` less the umask."""
    return 0o666 & ~current_umask()


def atomic_write_with(path: str | os.PathLike[str], write: Callable[[BinaryIO], object]) -> None:
    """Call ``write(f)`` on a temporary file beside ``path``, fsync it, set umask permissions, rename it to ``path``.
    A special file (``/dev/null``, a FIFO) is written directly. On an error ``path`` is left as it was and every
    ``OSError`` names ``path``, never the temporary name."""
    path = Path(path)
    if _is_special(path):
        try:
            with open(path, "wb") as f:
                write(f)
        except OSError as exc:
            raise _naming(exc, path) from None
        return
    parent = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise _naming(exc, path) from None
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fchmod(f.fileno(), new_file_mode())
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _naming(exc, path) from None
        raise


def _is_special(path: Path) -> bool:
    """Whether ``path`` exists and is neither a regular file nor a directory (a device, a FIFO, a socket)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _naming(exc: OSError, path: Path) -> OSError:
    """``exc`` naming ``path``; its errno is kept (OSError picks the subclass from it: ENOSPC, EACCES, EISDIR)."""
    return OSError(exc.errno, exc.strerror or str(exc), str(path))
