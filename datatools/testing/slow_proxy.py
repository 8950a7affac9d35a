"""A latency- and bandwidth-shaping TCP proxy for object-storage servers on loopback: a far bucket, on one machine.

A loopback server (moto's S3 server, a GCS emulator) answers in microseconds, hiding a loader that reads one
request at a time. :class:`SlowProxy` delays every HTTP request by ``latency_s`` (keep-alive ones too), caps each
connection's responses at ``bandwidth_bps``, and counts requests, bytes, connections and latencies. It parses
just enough HTTP/1.1 to find where requests start (bytes pass unchanged) and is not the bottleneck (~1.3 GB/s with
32 connections on 2 cores).

    with SlowProxy(moto_port, latency_s=0.03, bandwidth_bps=50e6) as proxy:
        os.environ["AWS_ENDPOINT_URL"] = proxy.url
        ...
        print(proxy.stats().requests, proxy.stats().bytes_down)
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import threading
import time
from dataclasses import dataclass

READ_SIZE = 256 << 10  # bytes read from a socket at a time (256 KiB: ~1 GB/s through the proxy on loopback)
LATENCIES_KEPT = 100_000  # request latencies kept for the quantiles (the most recent ones)
DRAIN_TIMEOUT_S = 60.0  # how long an answer may still flow after its client stopped sending
SLICE_S = 0.01  # a rate-capped connection sends slices of ~10 ms of its rate, each when its time comes
MIN_SLICE = 4096  # bytes
MAX_LINE = 64 << 10  # bytes: a request head, chunk-size line or trailer longer than this is not HTTP to us
START_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ProxyStats:
    """What passed through the proxy since its start or the last :meth:`SlowProxy.reset_stats`: HTTP requests,
    bytes client -> server (counted as they arrive) and server -> client (as they are sent), client connections,
    and the seconds from each request's first byte to its answer's (``latency_s`` included; the most recent
    :data:`LATENCIES_KEPT`)."""

    requests: int
    bytes_up: int
    bytes_down: int
    connections: int
    latencies_s: tuple[float, ...]
    methods: tuple[tuple[str, int], ...] = ()  # (HTTP method, requests), by method

    def count(self, method: str) -> int:
        """Requests of ``method`` (``"HEAD"``: asking an object's size)."""
        return dict(self.methods).get(method, 0)

    def latency_quantiles(self) -> tuple[float, float]:
        """(p50, p99) of the request latencies in seconds; NaN when none."""
        if not self.latencies_s:
            return float("nan"), float("nan")
        ordered = sorted(self.latencies_s)

        def pick(q: float) -> float:
            return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]

        return pick(0.5), pick(0.99)


class _RequestParser:
    """Finds request boundaries in a client -> server HTTP/1.1 byte stream (heads, Content-Length and chunked
    bodies): :meth:`feed` returns the offsets in the fed data where new requests start. A stream that is not
    HTTP/1.1 as we read it turns the parser ``opaque``: it finds no more requests and holds no bytes."""

    def __init__(self) -> None:
        self._state = "head"  # head | body | chunk-size | chunk-data | trailer | opaque
        self._buf = b""  # the part of a head, chunk-size line or trailer not yet complete
        self._left = 0  # body or chunk bytes still to come

    @property
    def opaque(self) -> bool:
        return self._state == "opaque"

    def feed(self, data: bytes) -> list[int]:
        starts: list[int] = []
        try:
            self._feed(data, starts)
        except ValueError:  # not HTTP as we know it: stop looking for requests on this stream
            self._state, self._buf = "opaque", b""
        return starts

    def _feed(self, data: bytes, starts: list[int]) -> None:
        i, n = 0, len(data)
        while i < n:
            if self._state == "opaque":
                return
            if self._state == "head":
                if not self._buf:
                    if data[i : i + 1] in (b"\r", b"\n"):  # a stray CRLF between requests
                        i += 1
                        continue
                    if not 65 <= data[i] <= 90:  # a request line starts with a method: GET, PUT, HEAD, ...
                        raise ValueError(f"a request starting with byte {data[i]}")
                    starts.append(i)
                head, i = self._until(data, i, b"\r\n\r\n")
                if head is None:
                    return
                self._start_body(head)
            elif self._state in ("body", "chunk-data"):
                take = min(self._left, n - i)
                i += take
                self._left -= take
                if not self._left:
                    self._state = "head" if self._state == "body" else "chunk-size"
            else:  # chunk-size or trailer
                line, i = self._until(data, i, b"\r\n")
                if line is None:
                    return
                if self._state == "trailer":
                    if not line:
                        self._state = "head"
                    continue
                size = int(line.split(b";")[0].strip() or b"0", 16)  # ValueError: not a chunk size
                if size:
                    self._state, self._left = "chunk-data", size + 2  # the data and its CRLF
                else:
                    self._state = "trailer"

    def _until(self, data: bytes, i: int, mark: bytes) -> tuple[bytes | None, int]:
        """(the held bytes and ``data[i:]`` up to ``mark``, left out; the index past it), or (None, len(data)) with
        them held for the next feed when ``mark`` has not come yet (too long a head or line is not HTTP)."""
        joined = self._buf + data[i:]
        end = joined.find(mark)
        if end < 0:
            if len(joined) > MAX_LINE:
                raise ValueError(f"an HTTP line or head over {MAX_LINE} bytes")
            self._buf = joined
            return None, len(data)
        i += end + len(mark) - len(self._buf)
        self._buf = b""
        return joined[:end], i

    def _start_body(self, head: bytes) -> None:
        length, chunked = 0, False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value.strip() or b"0")  # ValueError: not a length
                if length < 0:
                    raise ValueError(f"Content-Length {length}")
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if chunked:
            self._state = "chunk-size"
        elif length:
            self._state, self._left = "body", length
        else:
            self._state = "head"


class _Counters:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.requests = self.bytes_up = self.bytes_down = self.connections = 0
        self.latencies: collections.deque[float] = collections.deque(maxlen=LATENCIES_KEPT)
        self.methods: collections.Counter[str] = collections.Counter()


class SlowProxy:
    """A TCP proxy on 127.0.0.1 in front of ``host:upstream_port`` delaying each request ``latency_s`` seconds
    and capping each connection's download at ``bandwidth_bps`` bytes/s (None: no cap); every ``tail_every``-th
    request (0: none) waits ``tail_s`` more (a latency tail: 100 and 1.0 put 1% of requests 1 s late); all settable
    while running."""

    def __init__(
        self,
        upstream_port: int,
        *,
        latency_s: float = 0.0,
        bandwidth_bps: float | None = None,
        host: str = "127.0.0.1",
    ):
        if latency_s < 0:
            raise ValueError(f"latency_s must be >= 0, got {latency_s}")
        if bandwidth_bps is not None and bandwidth_bps <= 0:
            raise ValueError(f"bandwidth_bps must be > 0 or None, got {bandwidth_bps}")
        self.upstream_port, self.host = int(upstream_port), host
        self.latency_s, self.bandwidth_bps = float(latency_s), bandwidth_bps
        self.tail_every, self.tail_s = 0, 0.0
        self.port = 0
        self._counters = _Counters()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``: the endpoint to give clients (AWS_ENDPOINT_URL, STORAGE_EMULATOR_HOST)."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> SlowProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> SlowProxy:
        """Listen on a free port of 127.0.0.1 (``port``, ``url``), serving from a daemon thread."""
        if self._thread is not None:
            return self
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
                self.port = self._server.sockets[0].getsockname()[1]
            except BaseException as exc:  # noqa: BLE001  (reported to start())
                failure.append(exc)
                loop.close()
                return
            finally:
                ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name=f"SlowProxy->{self.upstream_port}", daemon=True)
        self._thread.start()
        if not ready.wait(START_TIMEOUT_S) or failure:
            self.stop()
            raise OSError(f"SlowProxy could not listen on 127.0.0.1: {failure[0] if failure else 'timed out'}")
        return self

    def stop(self) -> None:
        """Close the listener and every connection, and end the thread (at most ~10 s; idempotent)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if not loop.is_closed():  # it started serving

            async def shutdown() -> None:
                if self._server is not None:
                    self._server.close()
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for task in tasks:
                    task.cancel()
                if tasks:
                    await asyncio.wait(tasks, timeout=2)

            with contextlib.suppress(RuntimeError, TimeoutError, concurrent.futures.TimeoutError):
                asyncio.run_coroutine_threadsafe(shutdown(), loop).result(5)
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        self._loop = self._thread = self._server = None

    def stats(self) -> ProxyStats:
        """A snapshot of the counters (see :class:`ProxyStats`)."""
        c = self._counters
        with c.lock:
            methods = tuple(sorted(c.methods.items()))
            return ProxyStats(c.requests, c.bytes_up, c.bytes_down, c.connections, tuple(c.latencies), methods)

    def reset_stats(self) -> None:
        """Zero the counters (connections already open keep being counted from here on)."""
        with self._counters.lock:
            self._counters.reset()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        """One client connection: a connection to the server, and a task for each direction."""
        c = self._counters
        with c.lock:
            c.connections += 1
        server_writer = None
        tasks: list[asyncio.Future[None]] = []
        try:
            server_reader, server_writer = await asyncio.open_connection(self.host, self.upstream_port)
            # start times of the requests forwarded and not yet answered: HTTP/1.1 clients send a request on a
            # connection once the previous answer is in, so the next bytes from the server answer the oldest
            waiting: collections.deque[float] = collections.deque()
            up = asyncio.ensure_future(self._client_to_server(client_reader, server_writer, waiting))
            down = asyncio.ensure_future(self._server_to_client(server_reader, client_writer, waiting))
            tasks = [up, down]
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if up.done() and not down.done():  # the client finished sending: let the answer come back
                await asyncio.wait([down], timeout=DRAIN_TIMEOUT_S)
        except (OSError, asyncio.CancelledError):  # the server refused, or stop(): close both ends
            pass
        finally:
            for task in tasks:
                task.cancel()
            for writer in (server_writer, client_writer):
                if writer is not None:
                    with contextlib.suppress(Exception):
                        writer.close()

    async def _client_to_server(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, waiting: collections.deque[float]
    ) -> None:
        """Forward the client's bytes; hold each request ``latency_s`` before its first byte goes on."""
        parser, c = _RequestParser(), self._counters
        with contextlib.suppress(OSError):
            while data := await reader.read(READ_SIZE):
                now = time.perf_counter()
                with c.lock:  # counted as they arrive: a snapshot never has fewer than the server got
                    c.bytes_up += len(data)
                at = 0
                for start in parser.feed(data):
                    if start > at:
                        writer.write(data[at:start])
                    with c.lock:
                        c.requests += 1
                        c.methods[data[start : start + 8].split(b" ", 1)[0].decode("ascii", "replace")] += 1
                        n = c.requests
                    latency = self.latency_s
                    if self.tail_every and n % self.tail_every == 0:
                        latency += self.tail_s
                    if latency > 0:
                        await writer.drain()
                        await asyncio.sleep(latency)
                    waiting.append(now)
                    at = start
                writer.write(data[at:])
                await writer.drain()
            writer.write_eof()

    async def _server_to_client(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, waiting: collections.deque[float]
    ) -> None:
        """Forward the server's bytes at no more than ``bandwidth_bps`` (paced in slices of ~10 ms)."""
        c = self._counters
        next_free = time.perf_counter()  # when this connection may send its next byte (the rate cap)
        with contextlib.suppress(OSError):
            while data := await reader.read(READ_SIZE):
                now = time.perf_counter()
                if waiting:
                    started = waiting.popleft()
                    with c.lock:
                        c.latencies.append(now - started)
                view, at = memoryview(data), 0
                while at < len(view):
                    rate = self.bandwidth_bps
                    size = len(view) - at if not rate else max(MIN_SLICE, int(rate * SLICE_S))
                    piece = view[at : at + size]
                    if rate:
                        now = time.perf_counter()
                        if next_free - now > 0.0005:
                            await asyncio.sleep(next_free - now)
                        next_free = max(next_free, now) + len(piece) / rate
                    with c.lock:  # counted before they go: a snapshot never has fewer than the client got
                        c.bytes_down += len(piece)
                    writer.write(piece)
                    await writer.drain()
                    at += len(piece)
            writer.write_eof()
