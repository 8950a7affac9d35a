"""Real object-storage servers on loopback for the tests: moto's S3 server and gcp-storage-emulator (GCS).

Each server is a subprocess on a free port of 127.0.0.1, started once per test session
(about 1.5 s) and stopped at its end. Each test gets a fresh bucket (the GCS emulator
ignores list prefixes, so tests never share a bucket) and the standard environment
variables of its ecosystem, set with ``monkeypatch`` for that test only:

* S3: ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``;
* GCS: ``STORAGE_EMULATOR_HOST``.

The tests never talk to a server directly: each server sits behind a
:class:`~datatools.testing.slow_proxy.SlowProxy` (session-wide, ``REMOTE_LATENCY_S`` per request, no rate cap)
and the variables point at the proxy, so every remote test reads through a link with latency, on keep-alive
connections, as from a real bucket. :func:`slow_s3` and :func:`slow_gcs` give a test a bucket behind a proxy
of its own, whose latency and rate it sets and whose counters it reads.

:func:`storage_root` is parametrized over ``local``, ``s3`` and ``gs``: the same test
runs against a local directory and both servers, through a :class:`Root` that gives
the base path/URL and uploads local files or trees to it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pytest

from datatools.testing.slow_proxy import SlowProxy

START_TIMEOUT_S = 30.0
REMOTE_LATENCY_S = 0.003  # seconds added to every request of every remote test (the session proxies)
SLOW_LATENCY_S = 0.005  # seconds per request behind slow_s3 / slow_gcs until the test sets its own
AWS_VARS = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
)
GCS_VARS = (
    "STORAGE_EMULATOR_HOST",
    "TENSORSTORE_GCS_HTTP_URL",
    "GOOGLE_AUTH_TOKEN_FOR_TESTING",
    "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def closed_port() -> int:
    """A loopback port nothing listens on (an unreachable endpoint that fails at once, not after a timeout)."""
    return free_port()


class Server:
    """A server subprocess on ``127.0.0.1:port``, ready when it accepts TCP connections."""

    def __init__(self, name: str, argv: list[str], port: int, tmp: Path):
        self.name, self.port = name, port
        self.log = tmp / f"{name}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        for var in AWS_VARS + GCS_VARS:
            env.pop(var, None)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    pytest.fail(f"{name} did not start on port {port}: {self.log.read_text()[-2000:]}")
                time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """moto's S3 API server (``moto[server]``) on loopback."""
    port = free_port()
    server = Server(
        "moto_server", [_bin("moto_server"), "-H", "127.0.0.1", "-p", str(port)], port, tmp_path_factory.mktemp("moto")
    )
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory):
    """gcp-storage-emulator (in memory) on loopback."""
    port = free_port()
    server = Server(
        "gcp-storage-emulator",
        # tests/gcs_emulator.py: the emulator with generation headers and suffix ranges, as real GCS serves them
        [
            sys.executable,
            str(Path(__file__).with_name("gcs_emulator.py")),
            "start",
            "-H",
            "127.0.0.1",
            "--port",
            str(port),
            "--in-memory",
            "-q",
        ],
        port,
        tmp_path_factory.mktemp("gcs"),
    )
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_proxy(s3_server):
    """The proxy every S3 test goes through: ``REMOTE_LATENCY_S`` per request, no rate cap."""
    with SlowProxy(s3_server.port, latency_s=REMOTE_LATENCY_S) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def gcs_proxy(gcs_server):
    """The proxy every GCS test goes through: ``REMOTE_LATENCY_S`` per request, no rate cap."""
    with SlowProxy(gcs_server.port, latency_s=REMOTE_LATENCY_S) as proxy:
        yield proxy


def bucket_name() -> str:
    return f"t{uuid.uuid4().hex[:16]}"


def s3_environment(monkeypatch, endpoint: str) -> None:
    """The standard AWS variables pointing at ``endpoint``, nothing else of the caller's AWS setup."""
    for var in AWS_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")  # s3fs sends it as the LocationConstraint
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)


def gcs_environment(monkeypatch, endpoint: str) -> None:
    """``STORAGE_EMULATOR_HOST`` pointing at ``endpoint`` (what storage derives from it is reset too)."""
    for var in GCS_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint)


def new_bucket(scheme: str) -> str:
    """Create a fresh bucket on the server the environment points at; its URL (``s3://NAME``, ``gs://NAME``)."""
    from datatools.io import storage

    url = f"{scheme}://{bucket_name()}"
    fs, inner = storage.location(url).filesystem()
    fs.mkdir(inner)
    return url


def object_bytes(root) -> dict[str, bytes]:
    """Every file under a local directory or URL prefix, by its path relative to it, with its bytes."""
    from datatools.io import storage

    base = storage.location(root).text.rstrip("/")
    return {f[len(base) + 1 :]: storage.location(f).read_bytes() for f in storage.location(root).list()}


@pytest.fixture
def s3_bucket(s3_proxy, monkeypatch) -> str:
    """A fresh, empty bucket on the S3 server, as ``s3://NAME``; the AWS variables set for this test (pointing at
    the session's proxy)."""
    s3_environment(monkeypatch, s3_proxy.url)
    return new_bucket("s3")


@pytest.fixture
def gcs_bucket(gcs_proxy, monkeypatch) -> str:
    """A fresh, empty bucket on the GCS emulator, as ``gs://NAME``; ``STORAGE_EMULATOR_HOST`` set for this test
    (pointing at the session's proxy)."""
    gcs_environment(monkeypatch, gcs_proxy.url)
    return new_bucket("gs")


class SlowBucket(NamedTuple):
    """A fresh bucket behind a proxy of the test's own: ``url`` (``s3://NAME`` or ``gs://NAME``) and ``proxy``
    (set ``proxy.latency_s`` / ``proxy.bandwidth_bps`` at any time; ``proxy.stats()`` counts this test's
    requests and bytes only). Unpacks as ``url, proxy = slow_s3``."""

    url: str
    proxy: SlowProxy


@pytest.fixture
def slow_s3(s3_server, monkeypatch):
    """A :class:`SlowBucket` on the S3 server behind its own proxy (``SLOW_LATENCY_S`` per request, no rate cap
    until the test sets them); the AWS variables point at that proxy; its counters start at zero."""
    with SlowProxy(s3_server.port, latency_s=SLOW_LATENCY_S) as proxy:
        s3_environment(monkeypatch, proxy.url)
        url = new_bucket("s3")
        proxy.reset_stats()
        yield SlowBucket(url, proxy)


@pytest.fixture
def slow_gcs(gcs_server, monkeypatch):
    """A :class:`SlowBucket` on the GCS emulator behind its own proxy (as :func:`slow_s3`);
    ``STORAGE_EMULATOR_HOST`` points at that proxy."""
    with SlowProxy(gcs_server.port, latency_s=SLOW_LATENCY_S) as proxy:
        gcs_environment(monkeypatch, proxy.url)
        url = new_bucket("gs")
        proxy.reset_stats()
        yield SlowBucket(url, proxy)


@dataclass
class Root:
    """Where a test's data lives: a local directory or a bucket, with an uploader.

    ``path(name)`` is the path or URL of ``name`` under the root; ``upload(local, name)`` copies a local file or
    directory tree there (through the same libraries datatools reads with) and returns that path or URL."""

    kind: str
    base: str

    def path(self, name: str) -> str:
        return f"{self.base.rstrip('/')}/{name}"

    def upload(self, local: str | os.PathLike, name: str) -> str:
        local, dest = Path(local), self.path(name)
        if self.kind == "local":
            if local.is_dir():
                shutil.copytree(local, dest)
            else:
                Path(dest).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(local, dest)
            return dest
        from datatools.io import storage

        fs, inner = storage.location(dest).filesystem()
        files = [local] if local.is_file() else sorted(p for p in local.rglob("*") if p.is_file())
        for f in files:
            key = inner if f == local else f"{inner}/{f.relative_to(local).as_posix()}"
            fs.pipe_file(key, f.read_bytes())
        return dest


@pytest.fixture(params=["local", "s3", "gs"])
def storage_root(request, tmp_path) -> Root:
    """The same test against a local directory, the S3 server and the GCS emulator."""
    if request.param == "local":
        base = tmp_path / "root"
        base.mkdir()
        return Root("local", str(base))
    bucket = request.getfixturevalue("s3_bucket" if request.param == "s3" else "gcs_bucket")
    return Root(request.param, f"{bucket}/data")


_FIRST_BATCH = """
import json, sys
from datatools.pipeline import build_canonical, parse_config
cfg = {"source": {"path": sys.argv[1]}, "batch_size": 4, "drop_remainder": False,
       "shuffle": {"kind": "block", "io_block_size": 8, "window_blocks": 4},
       "packing": {"ctx": 256, "mode": "streaming", "window": 16}}
batch = next(iter(build_canonical(parse_config(cfg)).dataset))
assert int((batch["segment_ids"] > 0).sum()) > 0
print(json.dumps(sorted(m for m in ("s3fs", "aiobotocore", "botocore", "gcsfs") if m in sys.modules)))
"""


def first_batch_imports(url: str) -> list[str]:
    """The object-storage clients (``s3fs``, ``aiobotocore``, ``botocore``, ``gcsfs``) that a fresh process has
    imported once it has built a pipeline over ``url`` (block shuffle, streaming packing) and taken its first batch
    (the environment: this test's, the bucket's variables included)."""
    import json

    done = subprocess.run(
        [sys.executable, "-c", _FIRST_BATCH, url], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))
