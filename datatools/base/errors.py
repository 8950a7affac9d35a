"""The exception types of datatools, and the command line's exit status for each by type alone (:func:`exit_status`;
``datatools`` prints one line ``datatools: error: ...``, never a traceback), the first that matches:

* 2 (bad input): any ``ValueError``/``TypeError``/``OverflowError``/``UnicodeError``,
  ``RecursionError``, an ``OSError`` whose errno says the path is wrong (:data:`BAD_INPUT_ERRNOS`);
* 1: :class:`RunFailed`, :class:`UnsupportedVersion`, :class:`MissingPackage` (any ``ImportError``), ``MemoryError``
  (:class:`DeviceOutOfMemory` included), any other ``OSError`` (permission, disk full, :class:`StorageError`),
  anything unexpected;
* 130: ``KeyboardInterrupt``.
"""

from __future__ import annotations

import errno

EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 1
EXIT_INTERRUPTED = 130

# errno values of an OSError that mean the user named a wrong path (bad input), not a broken environment
BAD_INPUT_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.EINVAL, errno.ELOOP})


class StorageError(OSError):
    """Object storage could not be used (endpoint unreachable, bucket missing, credentials missing or refused):
    ``filename`` is the URL, ``errno`` ECONNREFUSED, ENXIO (no such bucket) or EACCES, so it exits 1."""


class RunFailed(RuntimeError):
    """A run stopped on its own figures (not a bug, not bad input): exit status 1 with the message as it is."""


class UnsupportedVersion(RuntimeError):
    """An installed package is not of a version a datatools shim knows: exit status 1, the message naming it."""


class MissingPackage(ModuleNotFoundError):
    """An optional package is not installed: exit status 1, the message (one line) naming what needs it and the
    command that installs it (:func:`datatools.base.install.missing`). ``name``: the module that is missing."""


class DeviceOutOfMemory(MemoryError):
    """The accelerator could not hold a program's buffers: exit status 1 with the message."""


def exit_status(exc: BaseException) -> int:
    """The command line's exit status for ``exc`` (the table of the module docstring), by type alone."""
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, OSError):
        return EXIT_BAD_INPUT if exc.errno in BAD_INPUT_ERRNOS else EXIT_ENVIRONMENT
    if isinstance(exc, (ValueError, TypeError, OverflowError, UnicodeError, RecursionError)):
        return EXIT_BAD_INPUT
    return EXIT_ENVIRONMENT
