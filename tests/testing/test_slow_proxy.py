"""SlowProxy: bytes pass unchanged, requests are counted and delayed one by one, each connection's rate is capped."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools.testing.slow_proxy import SlowProxy, _RequestParser
from object_storage import s3_environment


class HttpServer:
    """A tiny keep-alive HTTP/1.1 server on loopback: GET /N answers N bytes of a fixed pattern, PUT echoes the
    body's length."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        f = conn.makefile("rb")
        while True:
            line = f.readline()
            if not line:
                break
            method, path, _ = line.decode().split()
            length = 0
            while (h := f.readline()) not in (b"\r\n", b""):
                if h.lower().startswith(b"content-length:"):
                    length = int(h.split(b":")[1])
            body = f.read(length) if length else b""
            payload = pattern(int(path[1:])) if method == "GET" else str(len(body)).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload)
        conn.close()

    def close(self) -> None:
        self.sock.close()


def pattern(n: int) -> bytes:
    return (np.arange(n) % 251).astype(np.uint8).tobytes()


def get(sock_file, sock: socket.socket, n: int) -> bytes:
    sock.sendall(b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n" % n)
    length = 0
    while (h := sock_file.readline()) != b"\r\n":
        if h.lower().startswith(b"content-length:"):
            length = int(h.split(b":")[1])
    return sock_file.read(length)


@pytest.fixture()
def server():
    s = HttpServer()
    yield s
    s.close()


def test_requests_on_one_keep_alive_connection_are_counted_and_delayed_each(server):
    with SlowProxy(server.port, latency_s=0.05) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            f = sock.makefile("rb")
            t0 = time.perf_counter()
            for n in (10, 100_000, 0, 7):
                assert get(f, sock, n) == pattern(n)  # bytes unchanged
            took = time.perf_counter() - t0
            sock.sendall(b"PUT /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")
            assert b"\r\n\r\n5" in sock.recv(1000)
        stats = proxy.stats()
    assert took >= 4 * 0.05  # every request waited, not just the connection's first
    assert stats.requests == 5 and stats.connections == 1
    assert stats.bytes_down >= 100_117 and stats.bytes_up > 5
    p50, p99 = stats.latency_quantiles()
    assert 0.05 <= p50 <= p99 < 5


def test_the_rate_of_each_connection_is_capped(server):
    with SlowProxy(server.port, bandwidth_bps=8e6) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            t0 = time.perf_counter()
            assert get(sock.makefile("rb"), sock, 4_000_000) == pattern(4_000_000)
            took = time.perf_counter() - t0
        proxy.reset_stats()
        assert proxy.stats().bytes_down == 0
    assert took >= 0.45  # 4 MB at 8 MB/s, less the first read's burst


@settings(max_examples=60, deadline=None)
@given(
    bodies=st.lists(st.tuples(st.binary(max_size=300), st.booleans()), min_size=1, max_size=6),
    cuts=st.lists(st.integers(1, 50), min_size=1, max_size=30),
)
def test_the_parser_finds_every_request_however_the_stream_is_cut(bodies, cuts):
    stream, starts = b"", []
    for body, chunked in bodies:
        starts.append(len(stream))
        if chunked:
            parts = [body[i : i + 7] for i in range(0, len(body), 7)]
            encoded = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
            stream += b"PUT /k HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + encoded
        else:
            stream += b"PUT /k HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    parser, found, at, i = _RequestParser(), [], 0, 0
    while at < len(stream):
        step = cuts[i % len(cuts)]
        found += [at + s for s in parser.feed(stream[at : at + step])]
        at, i = at + step, i + 1
    assert found == starts


def test_moto_through_the_proxy(s3_server, s3_bucket, monkeypatch):
    """A real client (s3fs) through the proxy: objects round-trip, and the proxy counts the requests."""
    from datatools.io import storage

    with SlowProxy(s3_server.port, latency_s=0.002) as proxy:
        s3_environment(monkeypatch, proxy.url)
        data = pattern(300_000)
        storage.write_bytes(f"{s3_bucket}/a.bin", data)
        assert storage.read_bytes(f"{s3_bucket}/a.bin") == data
        stats = proxy.stats()
    assert stats.requests >= 2 and stats.bytes_down >= len(data) and stats.bytes_up >= len(data)
