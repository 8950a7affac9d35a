"""An object-storage endpoint that accepts connections and never answers fails in at most 30 s with one line naming
the URL, through every client: fsspec (s3fs) for files and manifests, tensorstore's ``s3`` driver for store arrays
(issue 36, item 5). Before, ``analyze-padding``, ``pretokenize`` and ``verify`` stayed silent for over 10 minutes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import without_progress

BOUND_S = 30.0


@pytest.fixture
def silent_endpoint():
    """``http://127.0.0.1:PORT`` of a server that accepts every connection, reads what it is sent and never
    answers (a hung proxy, a stuck load balancer)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.settimeout(0.01)
            held.append(conn)
            for c in held:  # drain what clients send, so they wait on the answer, not on a full buffer
                try:
                    c.recv(1 << 16)
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(5)
    for c in held:
        c.close()
    server.close()


def _env(endpoint: str, scheme: str = "s3") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TENSORSTORE_", "STORAGE_EMULATOR"))}
    if scheme == "gs":
        return dict(env, STORAGE_EMULATOR_HOST=endpoint)
    env.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_REGION="eu-west-1",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
    )
    return env


def _fails_in_bound(args: list[str], url: str, endpoint: str, scheme: str = "s3") -> str:
    t0 = time.monotonic()
    try:
        out = subprocess.run(
            [sys.executable, "-m", "datatools", *args],
            capture_output=True,
            text=True,
            env=_env(endpoint, scheme),
            timeout=BOUND_S * 3,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"datatools {' '.join(args)} still silent after {BOUND_S * 3:.0f} s")
    elapsed = time.monotonic() - t0
    said = without_progress(out.stderr).splitlines()  # what the command said: its progress lines left out
    lines = [line for line in said if not line.startswith("datatools: warning: ")]
    assert out.returncode == 1, out.stderr[-2000:]
    assert elapsed <= BOUND_S, (elapsed, args)
    assert len(lines) == 1 and lines[0].startswith("datatools: error: ") and url in lines[0], out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [
        "analyze-padding",
        pytest.param("pretokenize-in", marks=pytest.mark.slow),  # ~20 s each: make test runs one of the four
        pytest.param("pretokenize-out", marks=pytest.mark.slow),
        pytest.param("verify", marks=pytest.mark.slow),
    ],
)
def test_a_silent_s3_endpoint_fails_within_30_s(silent_endpoint, tokenizer_file, tmp_path, command):
    (tmp_path / "docs.jsonl").write_text(json.dumps({"text": "hello world"}) + "\n")
    url = {
        "analyze-padding": "s3://bucket/docs.jsonl",
        "pretokenize-in": "s3://bucket/docs.jsonl",
        "pretokenize-out": "s3://bucket/store",
        "verify": "s3://bucket/store",
    }[command]
    args = {
        "analyze-padding": ["analyze-padding", url, "--tokenizer", str(tokenizer_file)],
        "pretokenize-in": ["pretokenize", url, str(tmp_path / "store"), "--tokenizer", str(tokenizer_file)],
        "pretokenize-out": ["pretokenize", str(tmp_path / "docs.jsonl"), url, "--tokenizer", str(tokenizer_file)],
        "verify": ["verify", url],
    }[command]
    line = _fails_in_bound(args, url, silent_endpoint)
    assert silent_endpoint in line or "timed out" in line or "cannot reach" in line, line


def test_a_silent_gcs_endpoint_fails_at_the_probe(silent_endpoint):
    """gcsfs's 6 attempts are fixed in its class: the once-per-process probe's HEAD finds the silence first."""
    url = "gs://bucket/docs.jsonl"
    line = _fails_in_bound(["analyze-padding", url], url, silent_endpoint, "gs")
    assert "sent no answer" in line and silent_endpoint in line, line


_TENSORSTORE_READ = """
import sys, time, tensorstore as ts
from datatools.io.io_errors import as_os_error
from datatools.io.storage import kvstore_spec
url = sys.argv[1]
t0 = time.monotonic()
try:  # as the token store reads: tensorstore's ValueError made the OSError it is (io_errors)
    kv = ts.KvStore.open(kvstore_spec(url)).result()
    kv.read(b"zarr.json").result()
except ValueError as exc:
    err = as_os_error(exc, url)
    print(f"{time.monotonic() - t0:.1f} {type(err).__name__} {err}")
else:
    print("answered")
"""


def test_a_silent_endpoint_fails_tensorstore_reads_within_30_s(silent_endpoint):
    """The store arrays are read by tensorstore's own HTTP client (curl): its spec has no timeout, so the
    low-speed watchdog and the connect timeout come from its environment variables, set by storage."""
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", _TENSORSTORE_READ, "s3://bucket/store/tokens"],
        capture_output=True,
        text=True,
        env=_env(silent_endpoint),
        timeout=BOUND_S * 4,
    )
    assert time.monotonic() - t0 <= BOUND_S + 5, (out.stdout, out.stderr[-1000:])  # + interpreter start
    assert "OSError" in out.stdout and "s3://bucket/store/tokens" in out.stdout, (out.stdout, out.stderr[-1000:])
