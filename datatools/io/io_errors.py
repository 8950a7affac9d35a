"""tensorstore's and pyarrow's I/O failures as the ``OSError`` they are, naming the file they were about.

tensorstore reports every failure as a ``ValueError`` starting with an absl status code, pyarrow's
``ArrowIOError`` often lacks ``errno`` and ``filename``. A full disk, a refused permission or a store gone away is
the environment, not bad input: :func:`as_os_error` makes it ``OSError(errno, strerror, filename)`` (one line,
exit 1); anything else (a corrupt chunk) is left to the caller as bad data.
"""

from __future__ import annotations

import errno
import os
import re

# absl status code -> errno, for the codes that mean "the environment", when the message holds no os_error_code
STATUS_ERRNO = {
    "RESOURCE_EXHAUSTED": errno.ENOSPC,
    "PERMISSION_DENIED": errno.EACCES,
    "UNAUTHENTICATED": errno.EACCES,
    "UNAVAILABLE": errno.EIO,
    "DEADLINE_EXCEEDED": errno.ETIMEDOUT,
    "ABORTED": errno.EIO,
}
_OS_CODE = re.compile(r"os_error_code='?(\d+)")
_FILE = re.compile(r'(?:local file|file) "([^"]+)"')


def status_code(exc: BaseException) -> str | None:
    """The absl status code a tensorstore error starts with (``NOT_FOUND``, ``DATA_LOSS``, ...), or None."""
    m = re.match(r"([A-Z_]{4,}): ", str(exc))
    return m.group(1) if m else None


def as_os_error(exc: BaseException, where: str | os.PathLike | None = None) -> OSError | None:
    """``exc`` as an ``OSError`` naming ``where`` (or the file tensorstore named) when it is an environment
    failure (disk full, permission, I/O, an unreachable store); None when it is something else.

    The errno is the operating system's when the message carries one (``os_error_code``), else the one
    that the status code means (``RESOURCE_EXHAUSTED`` -> ``ENOSPC``).
    """
    if isinstance(exc, OSError):  # pyarrow's ArrowIOError, a plain OSError: add what is missing
        if exc.errno is not None and exc.filename is not None:
            return exc
        filename = exc.filename or (str(where) if where else None)
        return OSError(exc.errno or errno.EIO, exc.strerror or _first_line(exc), filename)
    text = str(exc)
    m = _OS_CODE.search(text)
    code = int(m.group(1)) if m else STATUS_ERRNO.get(status_code(exc) or "")
    if code is None:
        return None
    f = _FILE.search(text)
    name = str(where) if where is not None else (f.group(1) if f else None)
    strerror = os.strerror(code) if m or code != errno.EIO else _first_line(exc)
    return OSError(code, strerror, name)


def _first_line(exc: BaseException) -> str:
    """The message without tensorstore's spec dump (``[tensorstore_spec=...]``), at most 200 characters."""
    text = str(exc).split(" [tensorstore_spec=")[0].splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]
