"""XLA's out-of-memory error as :class:`DeviceOutOfMemory`. XLA raises one ``JaxRuntimeError`` type whose message
starts with the status code (``RESOURCE_EXHAUSTED: ...``); it is read here once, so the command line maps types.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from datatools.base.errors import DeviceOutOfMemory

OUT_OF_MEMORY_STATUS = "RESOURCE_EXHAUSTED"  # XLA's status code for an allocation that failed


def as_device_error(exc: BaseException) -> BaseException:
    """``exc`` as a datatools type when it is XLA's out-of-memory status, else ``exc`` itself."""
    import jax

    if isinstance(exc, jax.errors.JaxRuntimeError) and OUT_OF_MEMORY_STATUS in str(exc):
        detail = str(exc).split(f"{OUT_OF_MEMORY_STATUS}:")[-1].strip()[:200]
        return DeviceOutOfMemory(f"out of memory on the device ({detail}); a smaller batch_size or ctx would fit")
    return exc


@contextmanager
def device_errors() -> Iterator[None]:
    """Re-raise XLA's out-of-memory error inside the block as :class:`DeviceOutOfMemory` (chained to it)."""
    try:
        yield
    except Exception as exc:
        mapped = as_device_error(exc)
        if mapped is exc:
            raise
        raise mapped from exc
