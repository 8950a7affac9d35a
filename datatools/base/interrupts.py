"""Ctrl-C that is never lost: the command line's SIGINT handler records the request before it raises.

Python runs a signal handler in the main thread at whatever bytecode comes next, and some places mishandle what
it raises: a KeyboardInterrupt raised inside a garbage-collection callback (JAX installs one) is printed as
"Exception ignored" and dropped (the command went on as if no Ctrl-C had come), and one raised in code run by
``exec()`` (a dataclass being defined while a module imports) makes the interpreter end by SIGINT (status -2)
whatever the command returned. With :func:`install` the request is kept in :data:`REQUESTED` and, in those two
places, not raised there: :func:`check`, called by every step of the live line (:func:`datatools.base.progress.
doing`) and every few milliseconds by the loops that wait for workers, raises it.
"""

from __future__ import annotations

import gc
import signal
import threading

REQUESTED = threading.Event()  # set by the first Ctrl-C a command got


def _on_sigint(signum, frame) -> None:
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
