"""The install command a missing-extra message names: one that works from where datatools was installed.

``datatools-llm`` is not on the package index yet, so ``pip install 'datatools-llm[jax]'`` fails. When datatools
runs from a checkout (its ``pyproject.toml`` beside the package: ``make install`` or ``pip install -e``), the
command names that checkout: ``pip install '/path/to/checkout[jax]'``, which works. Otherwise (a built wheel)
it says to install the extra from the checkout or wheel it came from, and gives the index name as the one to use
once the package is published.
"""

from __future__ import annotations

from pathlib import Path

DISTRIBUTION = "datatools-llm"  # the package index name, reserved for when it is published


def checkout() -> Path | None:
    """The source checkout datatools is imported from (the folder holding its ``pyproject.toml``), or None."""
    root = Path(__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    try:
        if pyproject.is_file() and f'name = "{DISTRIBUTION}"' in pyproject.read_text(encoding="utf-8"):
            return root
    except OSError:
        return None
    return None


def install_command(extra: str) -> str:
    """A command that installs ``extra`` (``jax``, ``ray``, ``cloud``) for this datatools."""
    root = checkout()
    if root is not None:
        return f"pip install '{root}[{extra}]'"
    return (
        f"pip install '/path/to/datatools-checkout[{extra}]' (or the wheel of `make wheel` with [{extra}]; "
        f"'{DISTRIBUTION}[{extra}]' once it is on the package index)"
    )
