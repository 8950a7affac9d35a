"""The hypothesis profiles of tests/conftest.py, run as make runs them (HYPOTHESIS_PROFILE): ``ci`` (make test) runs
each test's own number of examples, the same examples on every run; ``all`` (make test-all) runs EXAMPLES_FACTOR
times as many, whether the test names its count or takes the profile's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES_FACTOR

TESTS = Path(__file__).parent

MODULE = """
import os
from hypothesis import given, settings, strategies as st


def seen(name, x):
    with open(os.environ["SEEN"], "a") as f:
        f.write(f"{name} {x}\\n")


@settings(max_examples=7)
@given(st.integers())
def test_names_its_count(x):
    seen("named", x)


@given(st.integers())
def test_takes_the_profiles(x):
    seen("unnamed", x)
"""


def examples(tmp_path: Path, profile: str, run: int) -> list[str]:
    """The examples a small hypothesis module got under ``profile``, with tests/conftest.py as a plugin (its profiles
    and its hook), in a pytest of its own: lines ``named X`` / ``unnamed X``."""
    (tmp_path / "test_counted.py").write_text(MODULE)
    seen = tmp_path / f"seen-{profile}-{run}"
    env = {**os.environ, "HYPOTHESIS_PROFILE": profile, "SEEN": str(seen)}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(TESTS.parent), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider", "-c", os.devnull]
        + ["--rootdir", str(tmp_path), "test_counted.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return seen.read_text().splitlines()


def test_ci_runs_each_tests_examples_the_same_on_every_run(tmp_path):
    first = examples(tmp_path, "ci", 1)
    assert sum(line.startswith("named ") for line in first) == 7
    assert sum(line.startswith("unnamed ") for line in first) == 100
    assert examples(tmp_path, "ci", 2) == first  # derandomized: the same examples, in the same order


def test_all_runs_several_times_the_examples(tmp_path):
    seen = examples(tmp_path, "all", 1)
    assert sum(line.startswith("named ") for line in seen) == 7 * EXAMPLES_FACTOR
    assert sum(line.startswith("unnamed ") for line in seen) == 100 * EXAMPLES_FACTOR


def test_an_unknown_profile_stops_the_run(tmp_path):
    with pytest.raises(AssertionError, match="nosuch"):
        examples(tmp_path, "nosuch", 1)
