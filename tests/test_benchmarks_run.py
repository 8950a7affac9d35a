"""The benchmarks a note quotes still run: each at a tiny size, its JSON written to a temporary folder (not
benchmarks/results/). ``benchmarks/analyze.py`` wrote a store version no reader opens any more, and nothing ran it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SMOKE = {  # script: its arguments at a size that runs in seconds (JSON name, arguments)
    "analyze": ("analyze", ["--docs", "20000", "--parquet-mb", "2"]),
    "local_read": ("local_read", ["--tokens", "2000000", "--batches", "5", "--repeats", "1", "--baseline", "66e3881"]),
    "pipeline": ("pipeline_parquet", ["--parquet-only", "--corpus", "stdlib", "--max-docs", "2000", "--rounds", "1"]),
}


@pytest.mark.slow  # 10-60 s of CPU each: make test-all
@pytest.mark.parametrize("name", sorted(SMOKE))
def test_a_benchmark_runs_at_a_tiny_size(name, tmp_path):
    env = {**os.environ, "DATATOOLS_BENCH_RESULTS": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), *SMOKE[name][1]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / f"{SMOKE[name][0]}.json").read_text())
