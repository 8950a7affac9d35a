"""Missing-extra messages name a command that works: this checkout with the extra (the index name is unpublished)."""

from __future__ import annotations

from pathlib import Path

import datatools
from datatools.base.install import checkout, install_command


def test_from_a_checkout_the_command_names_the_checkout():
    root = Path(datatools.__file__).resolve().parents[1]
    assert checkout() == root and (root / "pyproject.toml").is_file()
    assert install_command("jax") == f"pip install '{root}[jax]'"


def test_the_command_names_a_path_pip_can_install(tmp_path):
    import shlex

    cmd = shlex.split(install_command("cloud"))
    assert cmd[:2] == ["pip", "install"]
    target = cmd[2]
    assert target.endswith("[cloud]") and (Path(target[: -len("[cloud]")]) / "pyproject.toml").is_file()
