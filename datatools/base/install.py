"""The install command a missing-extra message names, one that works from where datatools was installed:
``pip install '/path/to/checkout[jax]'`` from a checkout, else the extra's requirements from the installed
metadata. ``datatools-llm`` is not on the package index yet.
"""

from __future__ import annotations

import contextlib
import re
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "datatools-llm"  # the package index name, reserved for when it is published (not there yet)
EXTRAS = ("jax", "ray", "cloud")  # the extras a missing-module message may name (pyproject.toml)


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
