"""XLA's out-of-memory status becomes DeviceOutOfMemory (exit 1, one line); other errors pass unchanged."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from datatools.base.errors import DeviceOutOfMemory, exit_status  # noqa: E402
from datatools.train.device_errors import as_device_error, device_errors  # noqa: E402


def test_a_real_xla_allocation_failure_becomes_device_out_of_memory():
    with pytest.raises(
        DeviceOutOfMemory, match=r"out of memory on the device \(.*bytes.*\); a smaller batch_size"
    ) as caught:
        with device_errors():
            jax.jit(lambda: jnp.zeros(2**46, jnp.uint8))().block_until_ready()  # 64 TiB: XLA refuses it
    assert isinstance(caught.value.__cause__, jax.errors.JaxRuntimeError) and exit_status(caught.value) == 1


def test_other_errors_pass_unchanged():
    other = jax.errors.JaxRuntimeError("INVALID_ARGUMENT: shapes differ")
    assert as_device_error(other) is other and as_device_error(ValueError("x")).args == ("x",)
    with pytest.raises(ValueError, match="bad"):
        with device_errors():
            raise ValueError("bad")
