"""``datatools train`` on 8 devices: the batch axis sharded in contiguous slices, block-sparse attention through
``sharded_blocksparse_attention`` with each device's own tile list; the same loss and gradients as one device for
the same batch, and per-step records of each device's work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import built_once
from device_workers import run_worker

WORKER = Path(__file__).with_name("sharded_train_worker.py")


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """The worker's results (a fresh process: 8 host-platform CPU devices need XLA_FLAGS before jax starts)."""
    folder = built_once(tmp_path_factory, "sharded_train", lambda d: run_worker(WORKER, d / "out.npz", devices=8))
    return dict(np.load(folder / "out.npz"))


def test_step_on_eight_devices_equals_one_device_each_reading_its_own_tiles(sharded):
    """One test over the worker's results (its ~20 s run is a module fixture: tests of one module on two xdist
    workers ran it twice): the same loss and gradient norm as one device; each device handed its neighbour's list
    computes another loss (the lists are read device by device); the step records hold each device's work."""
    loss, grad_norm = sharded["eight"]
    np.testing.assert_allclose(loss, sharded["one"][0], rtol=1e-5)
    np.testing.assert_allclose(grad_norm, sharded["one"][1], rtol=1e-4)
    assert not np.allclose(sharded["rolled"], sharded["eight"], rtol=1e-5)  # the tolerance the equality holds to
    np.testing.assert_array_equal(sharded["recorded"], sharded["counted"])
    np.testing.assert_allclose(sharded["attention"], sharded["counted_attention"], rtol=1e-12)
