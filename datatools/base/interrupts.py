"""Ctrl-C that is never lost: the command line's SIGINT handler records the request before it raises.

Where a KeyboardInterrupt would be dropped (a garbage-collection callback: JAX installs one) or would make the
interpreter exit by SIGINT (code run by ``exec()``), the handler only sets :data:`REQUESTED`; :func:`check` raises it.
"""

from __future__ import annotations

import gc
import signal
import threading
from types import FrameType

REQUESTED = threading.Event()  # set by the first Ctrl-C a command got


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    REQUESTED.set()
    if frame is not None and (
        frame.f_code in {getattr(cb, "__code__", None) for cb in gc.callbacks} or frame.f_code.co_filename == "<string>"
    ):  # a garbage-collection callback would print and drop it; code run by exec() would make the interpreter
        return  # exit by SIGINT whatever status the command returns: check() raises it at the next step
    raise KeyboardInterrupt


def install() -> None:
    """Handle SIGINT with :func:`_on_sigint` (only from the main thread, where handlers can be set)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)


def check() -> None:
    """Raise KeyboardInterrupt when a Ctrl-C has been requested (its first KeyboardInterrupt may have been lost)."""
    if REQUESTED.is_set():
        raise KeyboardInterrupt
