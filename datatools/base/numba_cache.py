"""Where numba caches datatools' compiled kernels, chosen before numba compiles anything (``import datatools``).

numba caches a ``cache=True`` function beside its source (``__pycache__``) or in its user-wide directory
(``$XDG_CACHE_HOME/numba``, ``~/.cache/numba``) and, when neither can be written (a read-only install with a HOME
that cannot be written: a container with a read-only root, a system user), refuses to import the module at all:
``cannot cache function ...: no locator available``. So when the user set no ``NUMBA_CACHE_DIR`` and neither
default is writable, this points ``NUMBA_CACHE_DIR`` at the first writable of ``$XDG_CACHE_HOME/datatools-numba``,
``~/.cache/datatools-numba`` and ``TMPDIR/datatools-numba-UID`` (numba compiles the kernels once per directory).
Nothing here imports numba.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

_KERNEL_DIRS = ("kernels", "kernels/packing", "io", "analysis")  # datatools' modules holding cache=True kernels


def _writable(path: Path) -> bool:
    """Whether a directory can be created (if missing) and written, as numba checks it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def _private(path: Path) -> bool:
    """``path`` is (made) a directory of this user's that no one else may write: numba loads pickles from it."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
    except OSError:
        return False
    mine = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    return mine and stat.S_ISDIR(st.st_mode) and not st.st_mode & 0o022


def user_cache(name: str) -> Path | None:
    """``$XDG_CACHE_HOME/name`` or ``~/.cache/name`` (a user's cache folder on Linux: numba's own, datatools'
    lengths cache), None with no home."""
    base = os.environ.get("XDG_CACHE_HOME")
    if base:
        return Path(base) / name
    home = os.path.expanduser("~")
    return None if home == "~" else Path(home) / ".cache" / name


def cache_dir() -> str | None:
    """The directory ``NUMBA_CACHE_DIR`` is set to (see the module docstring), or None when numba's defaults serve
    (or the user chose one)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return None
    root = Path(__file__).resolve().parent.parent
    if all(_writable(root / d / "__pycache__") for d in _KERNEL_DIRS):
        return None
    numba_own = user_cache("numba")
    if numba_own is not None and _writable(numba_own):
        return None
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    places = [user_cache("datatools-numba"), Path(tempfile.gettempdir()) / f"datatools-numba-{uid}"]
    for place in places:
        if place is not None and _private(place) and _writable(place):
            return str(place)
    return None  # nowhere to write: numba says so (`cannot cache function`), naming the file


def configure() -> None:
    """Set ``NUMBA_CACHE_DIR`` when numba's default places cannot be written (also in an already imported numba)."""
    chosen = cache_dir()
    if chosen is None:
        return
    os.environ["NUMBA_CACHE_DIR"] = chosen  # worker processes (Grain, Ray, the tokenizer pool) inherit it
    config = sys.modules.get("numba.core.config")
    if config is not None:  # numba read its environment already: its locator reads this attribute
        config.CACHE_DIR = chosen  # type: ignore[attr-defined]


def _index_file(kernel: object) -> str | None:
    """numba's cache index file of a ``cache=True`` kernel (None: not one, or numba keeps its cache otherwise)."""
    index = getattr(getattr(getattr(kernel, "_cache", None), "_cache_file", None), "_index_path", None)
    return index if isinstance(index, str) else None


def kernels_cold(modules: Iterable[ModuleType]) -> bool:
    """Whether numba's cache holds none of the ``cache=True`` kernels of ``modules`` (imported modules): a first
    run, where numba compiles them before they run (~30 s on 2 cores for the analyzer's). Read from numba's
    dispatchers (each one's cache index file); False when there is none to read, rather than guess."""
    indexes = [i for module in modules for kernel in vars(module).values() if (i := _index_file(kernel)) is not None]
    return bool(indexes) and not any(os.path.exists(index) for index in indexes)
