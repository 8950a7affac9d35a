"""SlowProxy: bytes pass unchanged, requests are counted and delayed one by one, each connection's rate is capped."""

from __future__ import annotations

import concurrent.futures
import http.client
import socket
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datatools.testing import ProxyStats, SlowProxy
from datatools.testing.slow_proxy import _RequestParser
from object_storage import s3_environment

# a sleep of t seconds in the proxy's loop lasts at least t; the host's timer may fire up to ~1 ms early
TIMER_SLACK_S = 0.002


class HttpServer:
    """A tiny keep-alive HTTP/1.1 server on loopback: GET /N answers N bytes of a fixed pattern, PUT and POST
    answer the length of the body they got (Content-Length or chunked)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
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
        with conn, conn.makefile("rb") as f:
            while line := f.readline():
                method, path, _ = line.decode().split()
                length, chunked = 0, False
                while (h := f.readline()) not in (b"\r\n", b""):
                    name, _, value = h.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                    elif name.lower() == b"transfer-encoding":
                        chunked = b"chunked" in value.lower()
                body = f.read(length) if length else b""
                if chunked:
                    while size := int(f.readline().split(b";")[0], 16):
                        body += f.read(size)
                        f.readline()
                    while f.readline() not in (b"\r\n", b""):  # the trailer
                        pass
                payload = pattern(int(path[1:])) if method in ("GET", "HEAD") else str(len(body)).encode()
                head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(payload)
                conn.sendall(head if method == "HEAD" else head + payload)

    def close(self) -> None:
        self.sock.close()


class EchoServer:
    """A TCP server on loopback that sends back every byte it gets (no HTTP at all)."""

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

    @staticmethod
    def _serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(1 << 16):
                conn.sendall(data)

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


@pytest.fixture(scope="module")
def server():
    s = HttpServer()
    yield s
    s.close()


@pytest.fixture(scope="module")
def echo():
    s = EchoServer()
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
    assert took >= 4 * (0.05 - TIMER_SLACK_S)  # every request waited, not just the connection's first
    assert stats.requests == 5 and stats.connections == 1 and len(stats.latencies_s) == 5
    assert stats.bytes_down >= 100_117 and stats.bytes_up > 5
    assert min(stats.latencies_s) >= 0.05 - TIMER_SLACK_S
    p50, p99 = stats.latency_quantiles()
    assert 0.05 - TIMER_SLACK_S <= p50 <= p99 < 5


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(0, 300_000), min_size=1, max_size=12),
    methods=st.lists(st.sampled_from(["GET", "HEAD", "PUT", "PUT-chunked", "POST"]), min_size=1, max_size=12),
)
def test_every_request_of_a_keep_alive_connection_is_counted_once(server, sizes, methods):
    """http.client on one connection: GET, HEAD (a Content-Length and no body), PUT/POST with a Content-Length
    body or a chunked one; the answers come back unchanged and the proxy counts exactly the requests sent."""
    with SlowProxy(server.port) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
        sent_up = 0
        for i, size in enumerate(sizes):
            method = methods[i % len(methods)]
            if method in ("GET", "HEAD"):
                conn.request(method, f"/{size}")
                expected = pattern(size) if method == "GET" else b""
            elif method == "PUT-chunked":  # the body in pieces of unknown total length: Transfer-Encoding chunked
                body = pattern(size)
                conn.request("PUT", "/k", body=iter([body[j : j + 70_000] for j in range(0, size, 70_000)]))
                expected, sent_up = str(size).encode(), sent_up + size
            else:
                conn.request(method, "/k", body=pattern(size))
                expected, sent_up = str(size).encode(), sent_up + size
            response = conn.getresponse()
            assert response.read() == expected
        conn.close()
        stats = proxy.stats()
    assert stats.requests == len(sizes) and stats.connections == 1
    assert len(stats.latencies_s) == len(sizes) and min(stats.latencies_s) >= 0
    assert stats.bytes_up >= sent_up
    assert stats.bytes_down >= sum(size for i, size in enumerate(sizes) if methods[i % len(methods)] == "GET")


def test_latency_and_rate_change_while_running(server):
    with SlowProxy(server.port) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
        for latency in (0.0, 0.04, 0.0):
            proxy.latency_s = latency
            t0 = time.perf_counter()
            conn.request("GET", "/1000")
            assert conn.getresponse().read() == pattern(1000)
            took = time.perf_counter() - t0
            assert took >= latency - TIMER_SLACK_S
        proxy.bandwidth_bps = 4e6
        t0 = time.perf_counter()
        conn.request("GET", "/1000000")
        assert conn.getresponse().read() == pattern(1_000_000)
        assert time.perf_counter() - t0 >= 0.2  # 1 MB at 4 MB/s: ~0.25 s
        conn.close()
        latencies = proxy.stats().latencies_s
    assert len(latencies) == 4 and latencies[1] >= 0.04 - TIMER_SLACK_S


def test_the_rate_of_each_connection_is_capped(server):
    with SlowProxy(server.port, bandwidth_bps=8e6) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            t0 = time.perf_counter()
            assert get(sock.makefile("rb"), sock, 4_000_000) == pattern(4_000_000)
            took = time.perf_counter() - t0
        assert proxy.stats().bytes_down >= 4_000_000
        proxy.reset_stats()
        assert proxy.stats() == ProxyStats(0, 0, 0, 0, ())
    assert took >= 0.45  # 4 MB at 8 MB/s: 0.5 s less the first ~10 ms slice


@pytest.mark.timing  # an upper bound on wall time (the lower bounds elsewhere hold however loaded the machine is)
def test_the_cap_is_per_connection(server):
    """Four connections at once each get the whole rate: 4 x 1 MB at 4 MB/s per connection takes ~0.25 s, not 1 s."""
    with SlowProxy(server.port, bandwidth_bps=4e6) as proxy:

        def one(_):
            with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
                t0 = time.perf_counter()
                assert get(sock.makefile("rb"), sock, 1_000_000) == pattern(1_000_000)
                return time.perf_counter() - t0

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            t0 = time.perf_counter()
            took = list(pool.map(one, range(4)))
            total = time.perf_counter() - t0
        assert proxy.stats().connections == 4
    assert min(took) >= 0.2
    assert total < 0.9  # the four shared no single budget (1 s if they had); generous for a loaded host


def test_many_connections_at_once_get_their_own_bytes(server):
    """32 concurrent clients (what tensorstore and s3fs open), each its own sizes: every byte to its reader."""
    with SlowProxy(server.port, latency_s=0.002) as proxy:

        def client(k: int) -> int:
            with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
                f = sock.makefile("rb")
                for n in (k * 1000 + 1, 50_000 + k, 7):
                    assert get(f, sock, n) == pattern(n)
            return 3

        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            requests = sum(pool.map(client, range(32)))
        stats = proxy.stats()
    assert stats.requests == requests == 96 and stats.connections == 32
    assert stats.bytes_down >= sum(k * 1000 + 1 + 50_000 + k + 7 for k in range(32))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=st.lists(st.binary(min_size=1, max_size=100_000), min_size=1, max_size=5))
def test_any_bytes_pass_unchanged_both_ways(echo, messages):
    """A stream that is not HTTP (or is, by chance) goes through byte for byte, in both directions."""
    with SlowProxy(echo.port) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
            for message in messages:
                sock.sendall(message)
                got = b""
                while len(got) < len(message):
                    got += sock.recv(1 << 20)
                assert got == message
        stats = proxy.stats()
    total = sum(len(m) for m in messages)
    assert stats.bytes_up == stats.bytes_down == total


def test_stop_closes_open_connections_and_is_idempotent(server):
    proxy = SlowProxy(server.port).start()
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    assert get(sock.makefile("rb"), sock, 10) == pattern(10)
    proxy.stop()
    proxy.stop()
    assert sock.recv(10) == b""  # the client sees the connection closed
    sock.close()
    assert not [t for t in threading.enumerate() if t.name == f"SlowProxy->{server.port}"]  # its thread ended
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=2).close()


def test_a_server_that_is_down_closes_the_client():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there
    with SlowProxy(port) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
            assert sock.recv(10) == b""
        assert proxy.stats().connections == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [({"latency_s": -1}, "latency_s must be >= 0, got -1"), ({"bandwidth_bps": 0}, "bandwidth_bps must be > 0")],
)
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SlowProxy(1, **kwargs)


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


@pytest.mark.parametrize(
    "stream",
    [
        b"\x00\x01binary",  # not a request line
        b"GET / HTTP/1.1\r\nContent-Length: lots\r\n\r\n",  # a length that is not a number
        b"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # a chunk size that is not hex
        b"GET /" + b"a" * (70 << 10),  # a head that never ends
    ],
)
def test_a_stream_that_is_not_http_turns_the_parser_opaque(stream):
    parser = _RequestParser()
    parser.feed(stream)
    assert parser.opaque
    assert parser.feed(b"GET / HTTP/1.1\r\n\r\n") == []  # and it holds nothing, finds nothing more


def test_moto_through_the_proxy(s3_server, s3_bucket, monkeypatch):
    """Real clients (s3fs, boto3) through a proxy of their own: objects round-trip, requests are counted."""
    import boto3

    from datatools.io import storage

    with SlowProxy(s3_server.port, latency_s=0.002) as proxy:
        s3_environment(monkeypatch, proxy.url)
        data = pattern(300_000)
        storage.location(f"{s3_bucket}/a.bin").write_bytes(data)
        assert storage.location(f"{s3_bucket}/a.bin").read_bytes() == data
        s3 = boto3.client("s3", endpoint_url=proxy.url)
        bucket = s3_bucket.removeprefix("s3://")
        proxy.reset_stats()
        for i in range(3):
            s3.put_object(Bucket=bucket, Key=f"k{i}", Body=data[i:])
            got = s3.get_object(Bucket=bucket, Key=f"k{i}", Range="bytes=10-99")["Body"].read()
            assert got == data[i + 10 : i + 100]
        stats = proxy.stats()
    assert stats.requests == 6  # 3 PUTs and 3 ranged GETs, each counted once
    assert stats.bytes_up >= sum(len(data) - i for i in range(3)) and stats.bytes_down >= 3 * 90
    assert min(stats.latencies_s) >= 0.002 - TIMER_SLACK_S


def test_slow_s3_fixture_gives_a_bucket_behind_its_own_proxy(slow_s3):
    from datatools.io import storage

    url, proxy = slow_s3
    assert proxy.stats().requests == 0  # the bucket's creation is not counted
    proxy.bandwidth_bps = 20e6
    storage.location(f"{url}/x").write_bytes(pattern(1_000_000))
    t0 = time.perf_counter()
    assert storage.location(f"{url}/x").read_bytes() == pattern(1_000_000)
    assert time.perf_counter() - t0 >= 0.04  # 1 MB at 20 MB/s
    stats = proxy.stats()
    assert stats.requests >= 2 and stats.bytes_down >= 1_000_000 and stats.bytes_up >= 1_000_000


def test_slow_gcs_fixture_gives_a_bucket_behind_its_own_proxy(slow_gcs):
    from datatools.io import storage
    from object_storage import SLOW_LATENCY_S

    url, proxy = slow_gcs
    storage.location(f"{url}/x").write_bytes(pattern(200_000))
    assert storage.location(f"{url}/x").read_bytes() == pattern(200_000)
    stats = proxy.stats()
    assert stats.requests >= 2 and stats.bytes_down >= 200_000 and stats.bytes_up >= 200_000
    assert min(stats.latencies_s) >= SLOW_LATENCY_S - TIMER_SLACK_S  # every request paid the latency


def test_a_proxy_that_cannot_listen_says_so(monkeypatch):
    import asyncio

    async def refuse(*args, **kwargs):
        raise OSError("no ports left")

    monkeypatch.setattr(asyncio, "start_server", refuse)
    proxy = SlowProxy(1)
    with pytest.raises(OSError, match="SlowProxy could not listen on 127.0.0.1: no ports left"):
        proxy.start()
    proxy.stop()  # nothing left to stop
