"""Run a test's JAX worker script in a fresh process with several host-platform CPU devices (XLA_FLAGS must be set
before jax starts, so not in the test's own process) and load the arrays it saved."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def run_worker(worker: Path, out: Path, devices: int, timeout_s: float = 300) -> dict[str, np.ndarray]:
    """``python WORKER OUT`` on ``devices`` CPU devices (this checkout's ``datatools``); the ``.npz`` it wrote."""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, str(worker), str(out)], env=env, capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(np.load(out))
