"""Missing-extra messages name a command that works: this checkout with the extra (the index name is unpublished)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

import datatools
from datatools.base.install import checkout, install_command


def test_from_a_checkout_the_command_names_the_checkout():
    root = Path(datatools.__file__).resolve().parents[1]
    assert checkout() == root and (root / "pyproject.toml").is_file()
    assert install_command("jax") == f"pip install '{root}[jax]'"


def test_the_command_names_a_path_pip_can_install(tmp_path):
    cmd = shlex.split(install_command("cloud"))
    assert cmd[:2] == ["pip", "install"]
    target = cmd[2]
    assert target.endswith("[cloud]") and (Path(target[: -len("[cloud]")]) / "pyproject.toml").is_file()


ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"


def optional_dependencies() -> dict[str, list[str]]:
    import tomllib

    return tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]


def test_installed_from_a_wheel_the_command_names_the_extras_own_requirements(monkeypatch):
    """Without a checkout the command names what pyproject.toml's extra lists, each a requirement pip parses:
    it installs the extra whatever the wheel's origin (the index name is not published)."""
    from packaging.requirements import Requirement

    from datatools.base import install

    monkeypatch.setattr(install, "checkout", lambda: None)
    for extra in install.EXTRAS:
        cmd = shlex.split(install.install_command(extra))
        assert cmd[:2] == ["pip", "install"]
        assert [str(Requirement(r)) for r in cmd[2:]] == [str(Requirement(r)) for r in optional_dependencies()[extra]]
        assert install.DISTRIBUTION not in install.install_command(extra)


def test_an_unknown_extra_is_named():
    with pytest.raises(ValueError, match="extra must be one of jax, ray, cloud, maxtext; got 'tpu'"):
        install_command("tpu")


def test_no_message_or_page_names_an_uninstallable_command():
    """``pip install datatools-llm`` failed for every user (the name is not on the index): no source string, README
    or docs page may name it as a command, unless the sentence says it is for when it is published; every message
    naming an extra builds its command with ``install_command``."""
    files = [*sorted((ROOT / "datatools").rglob("*.py")), ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    files += [ROOT / "datatools" / "configs" / "README.md", ROOT / "Makefile"]
    offenders = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"pip install\s+['\"]?datatools-llm", text):
            sentence = text[m.start() : m.start() + 300].split(". ")[0]
            if "published" not in sentence and "fails" not in sentence:
                offenders.append(f"{path.relative_to(ROOT)}: {text[m.start() : m.start() + 60]!r}")
        if path.suffix == ".py" and path.name != "install.py":  # an extra named by hand in a message
            for m in re.finditer(r"pip install[^\n]{0,40}\[(jax|ray|cloud|maxtext)[\],]", text):
                offenders.append(f"{path.relative_to(ROOT)}: {text[m.start() : m.start() + 60]!r}")
    assert offenders == []


def test_the_readme_names_the_wheel_make_wheel_writes():
    """The README's install line names the file `make wheel` writes (the version in pyproject.toml)."""
    import tomllib

    version = tomllib.loads(PYPROJECT.read_text())["project"]["version"]
    readme = (ROOT / "README.md").read_text()
    wheel = f"datatools_llm-{version}-py3-none-any.whl"
    assert f"`dist/{wheel}`" in readme and f"pip install '{wheel}[jax]'" in readme
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^wheel:.*\n(\t.*\n)*\t.*pip wheel --no-deps .*-w dist \.$", makefile, flags=re.M)
    assert "`pip install .`" in readme


@pytest.mark.parametrize(
    ("module", "url"), [("s3fs", "s3://bucket/data.parquet"), ("gcsfs", "gs://bucket/data.parquet")]
)
def test_a_url_without_the_cloud_extra_names_a_command_that_works(monkeypatch, module, url):
    """Reading s3:// or gs:// without s3fs / gcsfs: the error names the URL and ``install_command('cloud')``."""
    import sys

    from datatools.base.errors import MissingPackage, exit_status
    from datatools.io import storage

    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    with pytest.raises(MissingPackage) as err:
        storage.location(url).exists()
    assert exit_status(err.value) == 1  # the environment, not the input
    assert str(err.value).startswith(url) and str(err.value).endswith(install_command("cloud"))
