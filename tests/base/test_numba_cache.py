"""A read-only install with a HOME that cannot be written still runs (issue 57): numba's two default cache places
(``__pycache__`` beside each kernel's source, ``~/.cache/numba``) cannot be created, and ``import datatools`` points
``NUMBA_CACHE_DIR`` at a writable directory before numba compiles anything. Before, every command failed at import
with numba's ``cannot cache function ...: no locator available``.

The unwritable places are made so for any user, root included: a regular file stands where each directory would be
(numba creates the directory and writes a file in it to check)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import datatools

SCRIPT = """
import os, numpy as np
from datatools.kernels.packing import pack_lengths
plan = pack_lengths(np.array([5, 3, 7, 2], np.int64), 8, algorithm="next_fit")  # the smallest kernel to compile
print("rows", plan.num_rows)
print("cache", os.environ.get("NUMBA_CACHE_DIR"))
"""


def _unwritable_install(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the package where no ``__pycache__`` can be made, and a HOME where no ``.cache`` can be."""
    site = tmp_path / "site"
    shutil.copytree(Path(datatools.__file__).parent, site / "datatools", ignore=shutil.ignore_patterns("__pycache__"))
    for d in [site / "datatools", *(p for p in (site / "datatools").rglob("*") if p.is_dir())]:
        (d / "__pycache__").write_text("not a directory")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".cache").write_text("not a directory")
    return site, home


def _run(site: Path, home: Path, tmp: Path, **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "XDG_"))}
    env.update(PYTHONPATH=str(site), HOME=str(home), TMPDIR=str(tmp), PYTHONDONTWRITEBYTECODE="1", **extra)
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=tmp, timeout=300)


def test_kernels_compile_and_cache_with_an_unwritable_install_and_home(tmp_path):
    site, home = _unwritable_install(tmp_path)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = _run(site, home, tmp)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cannot cache" not in done.stderr
    assert "rows 3" in done.stdout, done.stdout
    cache = Path(done.stdout.split("cache ", 1)[1].strip())
    assert cache.parent == tmp and oct(cache.stat().st_mode & 0o777) == "0o700"
    assert any(cache.rglob("*.nbi")), "numba wrote no cache index there"  # cached, not only compiled
    again = _run(site, home, tmp)  # a second process finds the same directory
    assert again.returncode == 0 and f"cache {cache}" in again.stdout, again.stderr[-2000:]


@pytest.mark.slow  # a second cold compile in a fresh process; make test keeps the unwritable-install one
def test_a_cache_dir_the_user_chose_is_kept(tmp_path):
    site, home = _unwritable_install(tmp_path)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    chosen = tmp_path / "mine"
    done = _run(site, home, tmp, NUMBA_CACHE_DIR=str(chosen))
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"cache {chosen}" in done.stdout and any(chosen.rglob("*.nbi"))


def test_a_first_run_is_told_from_numbas_cache(tmp_path):
    """Issue 58: the analyzer sat ~35 s at 'simulating strategies: 0/8' on a first run while numba compiled; it now
    says so when numba's cache holds none of its kernels (kernels_cold): an empty cache here, a warm one below."""
    script = "from datatools.base.numba_cache import kernels_cold\nfrom datatools.kernels import bucket\n"
    script += "print(kernels_cold([bucket]))"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True"]


def test_the_analyzer_says_it_compiles_on_a_first_run(monkeypatch, tmp_path):
    """The label of the analyzer's bar while numba compiles (a terminal, where the bar shows at once); after a run
    the kernels are cached, and kernels_cold says so."""
    import io

    import numpy as np
    from rich.console import Console

    from datatools.analysis import padding_input
    from datatools.base.numba_cache import kernels_cold

    (tmp_path / "docs").mkdir()
    np.save(tmp_path / "docs" / "lengths.npy", np.random.default_rng(0).integers(1, 900, 300))
    asked = padding_input.AnalysisOptions(contexts=[1024])
    padding_input.analyze_input(str(tmp_path / "docs"), asked)  # compiled (or loaded), quietly
    assert not kernels_cold([padding_input.counting, padding_input.pieces, padding_input.bucket])
    for cold in (True, False):
        monkeypatch.setattr(padding_input, "kernels_cold", lambda modules, cold=cold: cold)
        out = io.StringIO()
        console = Console(file=out, force_terminal=True, width=200)
        padding_input.analyze_input(str(tmp_path / "docs"), asked, console=console)
        line = "simulating strategies (compiling kernels: first run only, ~30 s of CPU; datatools warm compiles them"
        said = f"{line} ahead)" in out.getvalue()
        assert said == cold
