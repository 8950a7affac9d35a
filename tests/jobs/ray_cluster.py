"""A real Ray cluster of several nodes on this machine, started with ``ray start`` as a user would.

Each node is its own ``ray start`` (own CPUs, own custom resource, own temp dir), on the loopback
address; :meth:`RayCluster.kill_node` SIGKILLs one node's processes (a preempted worker) and
:meth:`RayCluster.stop` ends every process the cluster started, and nothing else.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
NODE_MARK = "DATATOOLS_TEST_RAY_NODE"
# A loopback address other than 127.0.0.1: Ray replaces "127.0.0.1" and "localhost" by the machine's network
# address (to be reachable from other machines); 127.0.0.2 it keeps, so every byte stays on loopback.
HOST = "127.0.0.2"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class RayCluster:
    """``head`` plus named worker nodes; ``address`` is what ``--ray-address`` takes."""

    def __init__(self, root: Path, env: dict[str, str] | None = None):
        self.root = Path(root)
        self.port = free_port()
        self.address = f"{HOST}:{self.port}"
        # Ray's token authentication, as a real cluster runs it: every node and every driver carries the token
        # (``self.env`` is what a driver of this cluster must run with).
        self.env = {
            **os.environ,
            **(env or {}),
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
        }
        self.nodes: dict[str, Path] = {}

    def _start(self, name: str, args: list[str]) -> None:
        temp = self.root / name
        temp.mkdir(parents=True, exist_ok=True)
        cmd = [
            RAY,
            "start",
            "--node-ip-address",
            HOST,
            "--num-cpus",
            "1",
            "--resources",
            f'{{"{name}": 1}}',
            "--temp-dir",
            str(temp),
            "--disable-usage-stats",
            *args,
        ]
        env = {**self.env, NODE_MARK: str(temp)}  # inherited by every process of the node: how kill finds them
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"ray start {name} failed: {out.stderr[-2000:]}")
        self.nodes[name] = temp

    def start_head(self) -> RayCluster:
        self._start(
            "head",
            [
                "--head",
                "--port",
                str(self.port),
                "--include-dashboard",
                "false",
                "--ray-client-server-port",
                str(free_port()),
                "--node-manager-port",
                str(free_port()),
                "--object-manager-port",
                str(free_port()),
            ],
        )
        return self

    def add_node(self, name: str) -> None:
        self._start(
            name,
            [
                "--address",
                self.address,
                "--node-manager-port",
                str(free_port()),
                "--object-manager-port",
                str(free_port()),
            ],
        )
        self.wait_for_nodes(len(self.nodes))

    def wait_for_nodes(self, count: int, timeout: float = 60) -> None:
        """Until ``count`` nodes are alive in the cluster (a node registers a moment after ``ray start``)."""
        code = (
            "import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False); "
            "print(sum(n['Alive'] for n in ray.nodes()))"
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = subprocess.run(
                [sys.executable, "-c", code, self.address], env=self.env, capture_output=True, text=True, timeout=120
            )
            if out.returncode == 0 and out.stdout.strip().isdigit() and int(out.stdout.strip()) >= count:
                return
            time.sleep(1)
        raise TimeoutError(f"the Ray cluster at {self.address} did not reach {count} nodes")

    def _processes(self, nodes: list[str]) -> list[psutil.Process]:
        """The processes started by these nodes: they carry the node's mark in their environment."""
        marks = {str(self.nodes[n]) for n in nodes}
        found = []
        for p in psutil.process_iter():
            try:
                if p.environ().get(NODE_MARK) in marks:
                    found.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found

    def kill_node(self, name: str) -> int:
        """SIGKILL every process of node ``name`` (its raylet, object store and workers); returns how many."""
        procs = self._processes([name])
        for p in procs:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        return len(procs)

    def stop(self) -> None:
        """End every process of every node, then remove the temp dirs."""
        for _ in range(3):
            procs = self._processes(list(self.nodes))
            if not procs:
                break
            for p in procs:
                try:
                    p.send_signal(signal.SIGKILL)
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(procs, timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)
