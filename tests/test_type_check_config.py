"""mypy (``make lint``) checks every module of datatools with every error code (issue 32): the configuration in
pyproject.toml ignores no module's errors and disables no error code, so a type error anywhere fails the lint."""

from __future__ import annotations

import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_mypy_ignores_no_module_and_disables_no_error_code():
    mypy = tomllib.loads(PYPROJECT.read_text())["tool"]["mypy"]
    assert mypy["files"] == ["datatools"]
    assert "disable_error_code" not in mypy and "ignore_errors" not in mypy
    ignored = [o["module"] for o in mypy.get("overrides", []) if o.get("ignore_errors")]
    assert ignored == [], f"modules whose type errors mypy ignores: {ignored}"
    disabled = [o["module"] for o in mypy.get("overrides", []) if o.get("disable_error_code")]
    assert disabled == [], f"modules with error codes disabled: {disabled}"
