"""Running ``datatools`` in a child process with its wall time and peak memory measured (issue 36: crafted inputs
must fail or finish in bounded time and memory). Shared by tests/fuzz/test_issue36.py and scripts/fuzz_report.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass


@dataclass
class Measured:
    """One run: exit status (None when it was killed at the time bound), stdout, stderr, seconds, peak RSS bytes."""

    status: int | None
    out: str
    err: str
    seconds: float
    peak_rss: int

    def one_error_line(self) -> str | None:
        """The single ``datatools: error:`` line that ends stderr, None when stderr is not that (warnings and
        progress lines may come before it)."""
        lines = self.err.splitlines()
        if "Traceback" in self.err or not lines or not lines[-1].startswith("datatools: error: "):
            return None
        if sum(line.startswith("datatools: error: ") for line in lines) != 1:
            return None
        return lines[-1]


def _rss(pid: int) -> int:
    """Resident bytes of the process group led by ``pid`` (its workers included), from /proc."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[2]) == pid:  # the process group id (start_new_session: the child's pid)
                total += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    return total


def _high_water(pid: int) -> int:
    """``VmHWM`` of ``pid``: the peak resident bytes of its program since ``exec`` (``wait4``'s ``ru_maxrss``
    would carry the forking test process's own peak over ``exec``)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def run_measured(args: list[str], *, seconds: float, env: dict | None = None, max_rss: int = 2 << 30) -> Measured:
    """``python -m datatools ARGS`` with its peak resident memory and wall time.

    The peak is ``VmHWM`` and the process group's resident bytes, polled every 50 ms (the growth of its last
    50 ms can be missed). The run is killed (status None) after ``seconds``, or as soon as its process group
    holds over ``max_rss`` bytes (the machine is shared: a run that would take 24 GB is stopped at 2 GiB; its
    peak then reads ``max_rss + 1``)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "datatools", *map(str, args)],
            stdout=out,
            stderr=err,
            env=env,
            start_new_session=True,
        )
        killed = threading.Event()

        def kill():
            killed.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        over = threading.Event()
        done = threading.Event()

        peak = [0]

        def watch():
            while not done.wait(0.05):
                if time.monotonic() - t0 > seconds:
                    kill()
                    return
                rss = _rss(proc.pid)
                peak[0] = max(peak[0], rss, _high_water(proc.pid))
                if rss > max_rss:
                    over.set()
                    kill()
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            _, wait_status, _ = os.wait4(proc.pid, 0)
        finally:
            done.set()
            watcher.join()
        elapsed = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(wait_status)
        out.seek(0)
        err.seek(0)
        return Measured(
            None if killed.is_set() else proc.returncode,
            out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
            elapsed,
            max(peak[0], max_rss + 1 if over.is_set() else 0),
        )
