"""The install command a missing-extra message names, one that works from where datatools was installed:
``pip install '/path/to/checkout[jax]'`` from a checkout, else the extra's requirements from the installed
metadata. ``datatools-llm`` is not on the package index yet.
"""

from __future__ import annotations

import contextlib
import re
from importlib import metadata
from pathlib import Path

from datatools.base.errors import MissingPackage

DISTRIBUTION = "datatools-llm"  # the package index name, reserved for when it is published (not there yet)
EXTRAS = ("jax", "ray", "cloud", "maxtext")  # the extras a missing-module message may name (pyproject.toml)
# a module imported only where it is needed -> the extra that installs it
EXTRA_OF_MODULE = {
    "jax": "jax",
    "jaxlib": "jax",
    "optax": "jax",
    "ray": "ray",
    "s3fs": "cloud",
    "gcsfs": "cloud",
    "sentencepiece": "maxtext",
    "array_record": "maxtext",
}


def checkout() -> Path | None:
    """The source checkout datatools is imported from (the folder holding its ``pyproject.toml``), or None."""
    root = Path(__file__).resolve().parents[2]
    with contextlib.suppress(OSError):  # no pyproject.toml there
        if f'name = "{DISTRIBUTION}"' in (root / "pyproject.toml").read_text(encoding="utf-8"):
            return root
    return None


def extra_requirements(extra: str) -> list[str]:
    """The requirements ``extra`` adds (``['jax>=0.4.30', 'optax>=0.2']``), from the installed distribution's
    metadata; [] when datatools is not installed as a distribution (imported from a bare folder)."""
    try:
        requires = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    marker = re.compile(r"""\s*;\s*extra\s*==\s*["']""" + re.escape(extra) + r"""["']\s*$""")
    return [marker.sub("", r) for r in requires if marker.search(r)]


def install_command(extra: str) -> str:
    """A command that installs ``extra`` (one of :data:`EXTRAS`, else ValueError) for this datatools."""
    if extra not in EXTRAS:
        raise ValueError(f"extra must be one of {', '.join(EXTRAS)}; got {extra!r}")
    root = checkout()
    if root is not None:
        return f"pip install '{root}[{extra}]'"
    requirements = extra_requirements(extra)
    if requirements:
        return "pip install " + " ".join(f"'{r}'" for r in requirements)
    return (
        f"pip install '/path/to/datatools-checkout[{extra}]' (or the wheel of `make wheel` with [{extra}]; "
        f"'{DISTRIBUTION}[{extra}]' once it is published on the package index)"
    )


def missing(module: str, what: str) -> MissingPackage:
    """The error for optional ``module`` (a key of :data:`EXTRA_OF_MODULE`) not installed: ``"{what} needs
    {module}: {install command}"``, one line (exit status 1)."""
    return MissingPackage(f"{what} needs {module}: {install_command(EXTRA_OF_MODULE[module])}", name=module)


def import_error_message(exc: ImportError) -> str:
    """The one line for an ``ImportError`` that reached the command line: a :class:`MissingPackage` as it is; a
    missing optional module with the command that installs its extra; any other with what to reinstall."""
    if isinstance(exc, MissingPackage):
        return str(exc)
    name = (exc.name or "").split(".")[0]
    if isinstance(exc, ModuleNotFoundError) and name in EXTRA_OF_MODULE:
        return f"{name} is not installed: {install_command(EXTRA_OF_MODULE[name])}"
    if isinstance(exc, ModuleNotFoundError) and name:
        return f"{name} is not installed, and datatools needs it: {_reinstall_command(name)}"
    return f"a package failed to import ({' '.join(str(exc).split())}): install it again"


def _reinstall_command(module: str) -> str:
    """What installs datatools' base requirement ``module``: this checkout, else the requirement the installed
    metadata lists under that name, else the module's name."""
    root = checkout()
    if root is not None:
        return f"pip install '{root}'"
    key = re.sub(r"[-_.]+", "-", module).lower()
    try:
        requires = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        requires = []
    for r in requires:
        name = re.match(r"[A-Za-z0-9._-]+", r)
        if name and "extra" not in r and re.sub(r"[-_.]+", "-", name.group()).lower() == key:
            return f"pip install '{r}'"
    return f"pip install {module}"
