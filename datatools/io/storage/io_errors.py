"""tensorstore's and pyarrow's I/O failures as the ``OSError`` they are, naming the file they were about.

tensorstore reports every failure as a ``ValueError`` starting with an absl status code; pyarrow's ``ArrowIOError``
often lacks ``errno`` and ``filename``. A full disk, a refused permission or a store gone away is the environment
(:func:`as_os_error`: one line, exit 1); anything else (a corrupt chunk) is left to the caller as bad data.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

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
# tensorstore on a read of the last N bytes (``Range: bytes=-N``, a sharded array's index at its end) that the
# server did not answer as asked: the whole object back (a 200), a 416, or another length
_SUFFIX_RANGE = re.compile(r"Requested byte range \[-(\d+), \?\)")


def status_code(exc: BaseException) -> str | None:
    """The absl status code a tensorstore error starts with (``NOT_FOUND``, ``DATA_LOSS``, ...), or None."""
    m = re.match(r"([A-Z_]{4,}): ", str(exc))
    return m.group(1) if m else None


def as_os_error(exc: BaseException, where: str | os.PathLike[str] | None = None) -> OSError | None:
    """``exc`` as an ``OSError`` naming ``where`` (or the file tensorstore named) when it is an environment
    failure, else None. The errno is the one the message carries (``os_error_code``), else the status code's."""
    if isinstance(exc, OSError):  # pyarrow's ArrowIOError, a plain OSError: add what is missing
        if exc.errno is not None and exc.filename is not None:
            return exc
        filename = exc.filename or (str(where) if where else None)
        return OSError(exc.errno or errno.EIO, exc.strerror or short_message(exc), filename)
    text = str(exc)
    if (suffix := _SUFFIX_RANGE.search(text)) is not None:
        return suffix_range_error(int(suffix.group(1)), where)
    m = _OS_CODE.search(text)
    code = int(m.group(1)) if m else STATUS_ERRNO.get(status_code(exc) or "")
    if code is None:
        return None
    f = _FILE.search(text)
    name = str(where) if where is not None else (f.group(1) if f else None)
    strerror = os.strerror(code) if m or code != errno.EIO else short_message(exc)
    return OSError(code, strerror, name)


def suffix_range_error(size: int, where: str | os.PathLike[str] | None) -> OSError:
    """The object server's fault, not the data's: it does not serve suffix-range requests (``Range: bytes=-N``,
    the last N bytes), with which tensorstore reads the shard index at the end of a sharded zarr array (a Levanter
    cache's). An ``OSError`` (EOPNOTSUPP: exit 1, the environment) naming ``where``."""
    return OSError(
        errno.EOPNOTSUPP,
        f"the object server does not serve suffix-range requests (Range: bytes=-{size}, the last {size} bytes), "
        f"with which a sharded array's index at its end is read: the data is not at fault; real GCS and S3 serve "
        f"them, gcp-storage-emulator does not: use a server that does, or copy the data to local disk",
        where,
    )


@contextmanager
def os_errors(where: str | os.PathLike[str]) -> Iterator[None]:
    """Raise a tensorstore ``ValueError`` that is an environment failure as :func:`as_os_error` of it."""
    try:
        yield
    except ValueError as exc:
        raise as_os_error(exc, where) or exc from None


def short_message(exc: BaseException) -> str:
    """The message without tensorstore's spec dump (``[tensorstore_spec=...]``), at most 200 characters."""
    return str(exc).split(" [tensorstore_spec=")[0].splitlines()[0][:200] if str(exc) else type(exc).__name__
