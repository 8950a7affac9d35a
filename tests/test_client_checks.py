"""The client suites' checks never skip silently (issue 57): clients/conftest.py makes every skip of a client
check a failure that says why, and the Levanter per-host byte check fails on a counter that read zero instead of
skipping itself. Both run here, in ``make test``, without any trainer installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CLIENTS = Path(__file__).resolve().parent.parent / "clients"
sys.path.insert(0, str(CLIENTS / "levanter"))
from host_share import check_bytes_per_host  # noqa: E402


def test_the_per_host_byte_check_fails_on_a_zero_counter():
    check_bytes_per_host([1_000, 1_100, 900, 1_050])  # about a quarter each
    for counters, says in (
        ([1_000, 0, 900, 1_050], r"hosts \[1\]: .*counter read \[0\]"),
        ([0, 0, 0, 0], r"hosts \[0, 1, 2, 3\]: .*cannot run"),
        ([5_000, 10, 10, 10], r"hosts \[0\] delivered half or more"),
        ([7], "2 or more hosts"),
    ):
        with pytest.raises(AssertionError, match=says):
            check_bytes_per_host(counters)


SKIPPING = """
import sys
import pytest

def test_passes():
    assert True

def test_skips_at_run_time():
    pytest.skip("the trainer is not installed")

@pytest.mark.skipif(True, reason="only on a TPU host")
def test_skipif():
    pass

def test_importorskip():
    pytest.importorskip("a_module_nobody_installed")

@pytest.mark.xfail(reason="known to fail")
def test_xfail():
    assert False
"""


def run_suite(where: Path, name: str) -> subprocess.CompletedProcess:
    """pytest over ``where/name`` as a client suite: clients/conftest.py beside it, no other configuration."""
    shutil.copy(CLIENTS / "conftest.py", where / "conftest.py")
    (where / "pytest.ini").write_text("[pytest]\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "-p", "no:xdist", name],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_client_check_that_skips_fails_with_its_reason(tmp_path):
    """Every kind of skip is a failure naming its reason; the passing check still passes."""
    (tmp_path / "test_skipping.py").write_text(SKIPPING)
    proc = run_suite(tmp_path, "test_skipping.py")
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:]
    assert "PASSED test_skipping.py::test_passes" in out, out[-3000:]
    for name, reason in (
        ("test_skips_at_run_time", "the trainer is not installed"),
        ("test_skipif", "only on a TPU host"),
        ("test_importorskip", "a_module_nobody_installed"),
        ("test_xfail", "known to fail"),
    ):
        # a skip in the call is a failure, one in setup (skipif) an error: neither is a pass
        said = [line for line in out.splitlines() if f"test_skipping.py::{name} - a client check cannot skip" in line]
        assert said and said[0].split()[0] in ("FAILED", "ERROR"), (name, out[-3000:])
        assert reason in out, (reason, out[-3000:])
    assert "skipped" not in out and "xfailed" not in out and "1 passed" in out.splitlines()[-1], out[-3000:]


def test_a_client_module_that_skips_at_import_fails_the_run(tmp_path):
    """A module-level ``importorskip`` (a trainer missing from the venv) stops the run as an error that names
    the module, instead of collecting nothing and passing."""
    (tmp_path / "test_module_skip.py").write_text('import pytest\npytest.importorskip("levanter_not_here")\n')
    proc = run_suite(tmp_path, "test_module_skip.py")
    out = proc.stdout
    assert proc.returncode != 0, out[-3000:]
    assert "ERROR test_module_skip.py - a client check cannot skip" in out and "levanter_not_here" in out, out
