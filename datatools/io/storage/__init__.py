"""Object storage (``s3://``, ``gs://``) and local paths behind one small API: the one module that knows URL schemes.

Files go through fsspec (``s3fs``, ``gcsfs``: the ``cloud`` extra), arrays through tensorstore's kvstore drivers
(in S3 with the environment's keys, a format probe's read and a listing of keys too: fsspec's first request there
costs ~1.2 s of imports and set-up), local paths through ``open`` and :mod:`atomic`; credentials and endpoints only
from each ecosystem's standard environment. An unreachable or silent endpoint, a missing bucket or missing
credentials raise :class:`StorageError` (naming the URL, exit 1) in under 30 s; a missing object is a
``FileNotFoundError``. An object is written in one (atomic) PUT; nothing here lists or deletes outside its prefix.

One public surface: :func:`location` parses a place once into a :class:`Location`, and its methods do the rest
(``join``, ``open``, ``read_bytes``, ``exists``, ``write_text``, ``bounded``, ...); the module's functions are
private (``tests/test_architecture.py``, ``test_storage_has_one_surface``).
"""

from __future__ import annotations

import asyncio
import errno
import io
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path, PurePath
from types import ModuleType
from typing import TYPE_CHECKING, BinaryIO, NotRequired, Protocol, TypedDict, TypeVar, cast
from urllib.parse import urlsplit

from datatools.base.errors import StorageError
from datatools.base.install import missing
from datatools.io.storage import atomic
from datatools.io.storage.paths import display, resolved

if TYPE_CHECKING:
    import tensorstore as ts
    from _typeshed import WriteableBuffer
    from fsspec import AbstractFileSystem  # untyped (no py.typed): what it names, for readers
    from google.auth.credentials import Credentials

SCHEMES = {"s3": "s3", "gs": "gcs", "gcs": "gcs"}  # URL scheme -> fsspec protocol / tensorstore driver
CONNECT_TIMEOUT_S = 5.0  # a TCP connection to an endpoint; more is a dead or unreachable endpoint
READ_TIMEOUT_S = 4.0  # seconds without a byte of an answer: a silent endpoint (S3 answers in well under 1 s)
S3_ATTEMPTS = 3  # botocore attempts per request (s3fs asks twice on a timeout: 4 x 4 s + backoff ~ 19 s)
READ_BLOCK = 8 << 20  # bytes one remote read fetches (fsspec block size)
# tensorstore: 4 attempts, 1.75 s of delays in all (a closed port fails in ~2 s, a silent endpoint in ~26 s)
TS_RETRIES: dict[str, int | str] = {"max_retries": 3, "initial_delay": "250ms", "max_delay": "2s"}
TS_LOW_SPEED_S = 6.0  # tensorstore (curl): seconds under 1 byte/s before a request is aborted (and retried)
TS_CURL_ENV = {  # tensorstore's HTTP client (curl) reads these once, at its first request; a spec cannot set them
    "TENSORSTORE_CURL_CONNECT_TIMEOUT_SECONDS": str(int(CONNECT_TIMEOUT_S)),
    # under 1 byte/s this long: abort. Longer than botocore's: a busy server may hold a ranged read's first byte
    # behind the other 63 in flight for seconds; 4 attempts of 6 s still fail a silent endpoint in < 30 s
    "TENSORSTORE_CURL_LOW_SPEED_TIME_SECONDS": str(int(TS_LOW_SPEED_S)),
    "TENSORSTORE_CURL_LOW_SPEED_LIMIT_BYTES": "1",
}

T = TypeVar("T")


class _FileInfo(TypedDict):
    """What :meth:`Location.info` finds at a place: ``type`` ``"file"`` or ``"directory"``, ``size`` in bytes, and
    ``version``, the content version: ``(mtime_ns, bytes)`` of a local file, ``(ETag or generation, bytes)`` of an
    object (a cache key: a rewritten file has another)."""

    type: str
    size: int
    version: tuple[int | str, int]


class _KvStoreSpec(TypedDict):
    """A tensorstore kvstore spec (JSON) of a local directory or a key prefix in a bucket (see
    :func:`_kvstore_spec`): ``path`` is the directory, or the prefix ending in ``/`` (``""`` at a bucket's root)."""

    driver: str
    path: str
    bucket: NotRequired[str]
    endpoint: NotRequired[str]
    aws_region: NotRequired[str]
    aws_credentials: NotRequired[dict[str, str]]
    s3_request_retries: NotRequired[dict[str, int | str]]
    gcs_request_retries: NotRequired[dict[str, int | str]]


for _name in ("gcsfs", "s3fs", "fsspec", "aiobotocore", "botocore"):  # their failures reach users as our one line
    logging.getLogger(_name).addHandler(logging.NullHandler())


# --------------------------------------------------------------------------- URLs


def _is_url(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an ``s3://`` or ``gs://`` URL (also as a ``Path``: ``Path("s3://b/k")`` is ``s3:/b/k``)."""
    return _split(path) is not None


def _split(path: str | os.PathLike[str]) -> tuple[str, str, str] | None:
    """``(protocol, bucket, key)`` of an ``s3://`` or ``gs://`` URL (a ``Path`` of one too), None for a local
    path."""
    text = os.fspath(path)
    if not isinstance(text, str):  # bytes
        return None
    scheme, sep, rest = text.partition(":/")
    if not sep or scheme.lower() not in SCHEMES:
        return None
    if rest.startswith("/"):
        rest = rest[1:]
    elif not isinstance(path, PurePath):  # "s3:/b/k" typed as text is a local name, not a URL
        return None
    bucket, _, key = rest.partition("/")
    return SCHEMES[scheme.lower()], bucket, key.strip("/")


def _split_url(url: str | os.PathLike[str]) -> tuple[str, str, str]:
    """``(protocol, bucket, key)`` of a URL: protocol ``s3`` or ``gcs``; ValueError naming it if it is not one."""
    parts = _split(url)
    if parts is None:
        raise ValueError(f"{os.fspath(url)}: not an s3:// or gs:// URL")
    if not parts[1]:
        raise ValueError(f"{os.fspath(url)}: the URL names no bucket")
    return parts


def _url_of(path: str | os.PathLike[str]) -> str:
    """The canonical text of a path: ``s3://bucket/key`` / ``gs://bucket/key`` for URLs, the path otherwise."""
    parts = _split(path)
    if parts is None:
        return os.fspath(path)
    proto, bucket, key = parts
    return f"{'s3' if proto == 's3' else 'gs'}://{bucket}/{key}".rstrip("/")


def _join(base: str | os.PathLike[str], *names: str) -> str | Path:
    """``base / name / ...``: a URL string for a URL, a ``Path`` otherwise."""
    if _is_url(base):
        return "/".join([_url_of(base).rstrip("/"), *(n.strip("/") for n in names)])
    return Path(base).joinpath(*names)


def _name_of(path: str | os.PathLike[str]) -> str:
    """The last component (the file name) of a path or URL."""
    return _url_of(path).rstrip("/").rsplit("/", 1)[-1] if _is_url(path) else Path(path).name


def location(path: str | os.PathLike[str]) -> Location:
    """``path`` (a local path or an ``s3://`` / ``gs://`` URL) parsed once: see :class:`Location`."""
    if isinstance(path, Location):
        return path
    parts = _split(path)
    if parts is None:
        return Location(os.fspath(path), "file")
    return Location(_url_of(path), parts[0])


@dataclass(frozen=True)
class Location:
    """A file or directory, local or in object storage, parsed once (:func:`location`). What differs between the
    two is said by what the place can do (:attr:`can_memory_map`, ...), never by "is it a URL".

    Attributes:
      text: the canonical text (``s3://bucket/key``, ``gs://bucket/key``), or the local path as given.
      protocol: ``file``, ``s3`` or ``gcs``.
    """

    text: str
    protocol: str = "file"

    def __fspath__(self) -> str:
        return self.text

    def __str__(self) -> str:
        return self.text

    @property
    def can_memory_map(self) -> bool:
        """A local file: memory-mapped, not read into memory."""
        return self.protocol == "file"

    @property
    def has_directories(self) -> bool:
        """A file system: real directories and links (object storage has key prefixes)."""
        return self.protocol == "file"

    @property
    def renames_atomically(self) -> bool:
        """One rename puts a finished directory in place (a local file system; object storage has none)."""
        return self.protocol == "file"

    @property
    def reads_are_requests(self) -> bool:
        """Every read is a round trip over the network: reading ahead and ranged reads pay off."""
        return self.protocol != "file"

    @property
    def path(self) -> str | Path:
        """What libraries and messages take: a ``Path`` for a local place, the URL text for an object."""
        return Path(self.text) if self.protocol == "file" else self.text

    @property
    def local_path(self) -> Path:
        """The local file (for memory-mapping: see :attr:`can_memory_map`); ValueError for an object."""
        if self.protocol != "file":
            raise ValueError(f"{self.text}: an object in storage, not a local file")
        return Path(self.text)

    @property
    def name(self) -> str:
        return _name_of(self.text) if self.protocol != "file" else Path(self.text).name

    @property
    def display(self) -> str:
        return display(self.path)

    @property
    def identity(self) -> str:
        """One text for one file however it was named: the real path (links resolved), or the URL."""
        return os.path.realpath(self.text) if self.protocol == "file" else self.text

    def stamp(self) -> dict[str, str | int | tuple[int | str, int] | None]:
        """This file's content version (a job's fingerprint): path, bytes, and mtime or ETag / generation."""
        if self.protocol == "file":
            st = os.stat(self.text)
            return {"path": display(resolved(self.text)), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}
        got = _info(self)
        return {"path": self.text, "bytes": got["size"] if got else 0, "version": got["version"] if got else None}

    def join(self, *names: str) -> Location:
        return location(_join(self, *names))

    def open(self, *, block_size: int = READ_BLOCK) -> BinaryIO:
        return _open_file(self, block_size=block_size)

    def read_bytes(self, limit: int | None = None, *, max_bytes: int | None = None) -> bytes:
        return _read_bytes(self, limit, max_bytes=max_bytes)

    def read_bytes_if_any(self, *, max_bytes: int | None = None) -> bytes | None:
        """The whole file, None when there is none (nothing, or a directory): a probe that is its own read (in a
        bucket one request, not a request for the size and then one for the bytes; a miss is not checked for a
        missing bucket, which the caller's next read names)."""
        return _read_bytes_if_any(self, max_bytes=max_bytes)

    def info(self) -> _FileInfo | None:
        return _info(self)

    def exists(self) -> bool:
        return _info(self) is not None

    def is_file(self) -> bool:
        return _is_file(self)

    def is_dir(self) -> bool:
        return _is_dir(self)

    def size(self) -> int:
        return _size(self)

    def list(self) -> list[str]:
        return _list_files(self)

    def file_sizes(self) -> dict[str, int]:
        return _file_sizes(self)

    def keys(self) -> set[str]:
        """The relative keys of every file under this directory (a key prefix), from one listing."""
        return _keys(self)

    def write_with(self, write: Callable[[BinaryIO], object]) -> None:
        _write_with(self, write)

    def write_bytes(self, data: bytes) -> None:
        _write_bytes(self, data)

    def write_text(self, text: str) -> None:
        _write_text(self, text)

    def remove(self) -> None:
        _remove(self)

    def remove_tree(self) -> int:
        return _remove_tree(self)

    def kvstore_spec(self) -> _KvStoreSpec:
        return _kvstore_spec(self)

    def filesystem(self) -> tuple[AbstractFileSystem, str]:
        """``(fsspec filesystem, path inside it)``: for what this module does not wrap (tests, benchmarks)."""
        return _filesystem(self)

    @property
    def bucket(self) -> str:
        """The bucket of an object's URL; ValueError for a local path (or a URL naming no bucket)."""
        return _split_url(self.text)[1]

    @property
    def key(self) -> str:
        """The key of an object's URL inside its bucket (``""`` at the bucket's root); ValueError for a local path."""
        return _split_url(self.text)[2]

    def bounded(self, future: ts.Future[T]) -> ts.Future[T]:
        """``future`` (a tensorstore future of a request to this object) cancelled past :data:`REQUEST_TIMEOUT_S`
        with no answer from its bucket; a local path's future as it is. Wait for it with :meth:`result`."""
        return _bounded(future, self)

    def result(self, future: ts.Future[T]) -> T:
        """``future.result()`` of a :meth:`bounded` future: a cancelled request raises :meth:`timeout_error`, a
        failure of the storage an ``OSError`` naming this place; anything else as it is."""
        return _result(future, self)

    def timeout_error(self) -> StorageError:
        """The StorageError of a request to this object cancelled by :meth:`bounded`: named, exit 1."""
        return _timeout_error(self)


# --------------------------------------------------------------------------- environment and filesystems


def _configure_environment() -> None:
    """Set tensorstore's HTTP timeouts (:data:`TS_CURL_ENV`) and what a GCS emulator needs, keeping user values."""
    for name, value in TS_CURL_ENV.items():
        os.environ.setdefault(name, value)
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator:
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")  # gcsfs hung on an emulator without it
        os.environ.setdefault("TENSORSTORE_GCS_HTTP_URL", _with_scheme(emulator))
        os.environ.setdefault("GOOGLE_AUTH_TOKEN_FOR_TESTING", "emulator")  # an emulator checks no token


def _with_scheme(host: str) -> str:
    return host if "://" in host else f"http://{host}"


def _region() -> str | None:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")


def _s3_endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")


def _endpoint_of(protocol: str) -> str:
    """The endpoint requests go to, for messages and probes."""
    if protocol == "s3":
        return _s3_endpoint() or "AWS S3"
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    return _with_scheme(emulator) if emulator else "https://storage.googleapis.com"


def _filesystem(path: str | os.PathLike[str]) -> tuple[AbstractFileSystem, str]:
    """``(fsspec filesystem, path inside it)`` for a URL or a local path, from the current environment (part of
    fsspec's instance cache key); listing caches off, so another process's writes are seen at once."""
    import fsspec

    if not _is_url(path):
        return fsspec.filesystem("file"), str(resolved(path))
    proto, bucket, key = _split_url(path)
    _configure_environment()
    inner = f"{bucket}/{key}" if key else bucket
    if proto == "s3":
        s3fs = _import("s3fs", path)
        client: dict[str, str | None] = {"region_name": _region()} if _region() else {}
        if endpoint := _s3_endpoint():
            client["endpoint_url"] = endpoint
        creds: dict[str, str | None] = {}
        if os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
            creds = {
                "key": os.environ["AWS_ACCESS_KEY_ID"],
                "secret": os.environ["AWS_SECRET_ACCESS_KEY"],
                "token": os.environ.get("AWS_SESSION_TOKEN"),
            }
        fs = s3fs.S3FileSystem(
            use_listings_cache=False,
            client_kwargs=client,
            **creds,
            config_kwargs={
                "connect_timeout": CONNECT_TIMEOUT_S,
                "read_timeout": READ_TIMEOUT_S,
                "retries": {"max_attempts": S3_ATTEMPTS, "mode": "standard"},
            },
        )
        fs.retries = 1  # s3fs's own loop (5 tries of botocore's 3, with sleeps) off: botocore retries the same
        return fs, inner
    gcsfs = _import("gcsfs", path)
    import aiohttp

    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    _probe(_endpoint_of("gcs"), path)
    timeout = aiohttp.ClientTimeout(sock_connect=CONNECT_TIMEOUT_S, sock_read=READ_TIMEOUT_S)
    auth = (
        {"token": "anon", "endpoint_url": _with_scheme(emulator)} if emulator else {"token": _google_credentials(path)}
    )
    return gcsfs.GCSFileSystem(**auth, cache_timeout=0, requests_timeout=timeout), inner


def _import(module: str, url: str | os.PathLike[str]) -> ModuleType:
    """``import module`` (``s3fs``, ``gcsfs``: the ``cloud`` extra), or the error saying to install it for ``url``."""
    try:
        return __import__(module)
    except ModuleNotFoundError as exc:  # the cloud extra: the environment, exit status 1
        if (exc.name or "").split(".")[0] != module:
            raise
        raise missing(module, f"{_url_of(url)}: reading {_url_of(url).split(':')[0]}:// URLs") from None


_reachable: set[str] = set()


def _probe(endpoint: str, url: str | os.PathLike[str]) -> None:
    """Fail in seconds when ``endpoint`` takes no TCP connection, or sends no HTTP status line (any status) within
    :data:`READ_TIMEOUT_S` of a ``HEAD /``; once per endpoint and process."""
    if endpoint in _reachable:
        return
    import http.client

    parts = urlsplit(endpoint)
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise StorageError(
            errno.ECONNREFUSED, f"cannot reach the storage endpoint {endpoint} ({exc.strerror or exc})", _url_of(url)
        ) from None
    kind = http.client.HTTPSConnection if https else http.client.HTTPConnection
    conn = kind(parts.hostname or "", port, timeout=READ_TIMEOUT_S)
    try:
        conn.request("HEAD", "/")
        conn.getresponse().close()
    except TimeoutError:
        raise StorageError(
            errno.ETIMEDOUT,
            f"the storage endpoint {endpoint} took the connection but sent no answer in {READ_TIMEOUT_S:g} s",
            _url_of(url),
        ) from None
    except (OSError, http.client.HTTPException):
        pass  # it answered, if not with HTTP we understand: the client's own request will say more
    finally:
        conn.close()
    _reachable.add(endpoint)


def _google_credentials(url: str | os.PathLike[str]) -> Credentials:
    """Application default credentials, or a StorageError naming the URL and how to provide them."""
    import google.auth
    import google.auth.exceptions

    try:
        credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/devstorage.read_write"])
    except google.auth.exceptions.GoogleAuthError as exc:
        raise StorageError(
            errno.EACCES,
            f"no Google credentials ({str(exc).splitlines()[0][:160]}); set "
            "GOOGLE_APPLICATION_CREDENTIALS or run 'gcloud auth application-default login'",
            _url_of(url),
        ) from None
    return credentials


def _kvstore_spec(path: str | os.PathLike[str]) -> _KvStoreSpec:
    """The tensorstore kvstore spec of a directory (a key prefix) or a local path (resolved: tensorstore rejects
    ``..``). Remote: bounded retries (:data:`TS_RETRIES`) and curl timeouts (:data:`TS_CURL_ENV`), failing fast."""
    if not _is_url(path):
        return {"driver": "file", "path": str(resolved(path))}
    proto, bucket, key = _split_url(path)
    _configure_environment()
    prefix = f"{key}/" if key else ""
    if proto == "s3":
        spec: _KvStoreSpec = {
            "driver": "s3",
            "bucket": bucket,
            "path": prefix,
            "s3_request_retries": dict(TS_RETRIES),
        }
        if endpoint := _s3_endpoint():
            spec["endpoint"] = endpoint
        if region := _region():
            spec["aws_region"] = region
        if os.environ.get("AWS_ACCESS_KEY_ID"):
            spec["aws_credentials"] = {"type": "environment"}
        return spec
    return {"driver": "gcs", "bucket": bucket, "path": prefix, "gcs_request_retries": dict(TS_RETRIES)}


# --------------------------------------------------------------------------- a bound on every tensorstore request

REQUEST_TIMEOUT_S = 25.0  # a tensorstore request to object storage unanswered this long, while no other request to
# its bucket completed in that time either (a silent endpoint, not a busy one), is cancelled: its wait raises a
# StorageError naming the URL. tensorstore reads its curl timeouts (TS_CURL_ENV) once per process, at its first HTTP
# request: in a process that made one before datatools set them (a trainer that opened a checkpoint first), requests
# have no timeout at all. This bound is datatools' own, per request, whatever the process did before.
_WATCH_PERIOD_S = 0.25


class _Cancellable(Protocol):
    """A pending request (a tensorstore future) that can be cancelled: what :class:`_Watch` keeps of one."""

    def cancel(self) -> bool:
        """Cancel the request; whether it was still pending."""
        ...


class _Watch:
    """The tensorstore futures of requests to object storage still pending, and when each bucket last answered."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: dict[int, tuple[_Cancellable, str, str, float]] = {}  # id -> (future, url, bucket, issued)
        self.answered: dict[str, float] = {}  # bucket -> time a request to it last completed
        self.thread: threading.Thread | None = None

    def add(self, future: ts.Future[T], url: str, bucket: str) -> None:
        """Watch ``future``, a request to ``url`` in ``bucket`` (``s3://b``), until it completes or is cancelled."""
        key = id(future)
        with self.lock:
            self.pending[key] = (future, url, bucket, time.monotonic())
            if self.thread is None:
                self.thread = threading.Thread(target=self.run, name="datatools-request-deadlines", daemon=True)
                self.thread.start()

        # on tensorstore's thread (or at once): never under our lock while cancelling
        def done(f: ts.Future[T]) -> None:
            with self.lock:
                entry = self.pending.pop(key, None)
                if entry is not None and not f.cancelled():
                    self.answered[bucket] = time.monotonic()

        future.add_done_callback(done)

    def run(self) -> None:
        """Cancel, every :data:`_WATCH_PERIOD_S`, the requests pending past :data:`REQUEST_TIMEOUT_S` whose bucket
        answered nothing in that time either (the watch thread; runs as long as the process)."""
        while True:
            time.sleep(_WATCH_PERIOD_S)
            now, bound = time.monotonic(), REQUEST_TIMEOUT_S
            with self.lock:
                late = [
                    (key, f, url)
                    for key, (f, url, bucket, issued) in self.pending.items()
                    if now - issued > bound and now - self.answered.get(bucket, 0.0) > bound
                ]
                for key, _, _ in late:
                    self.pending.pop(key, None)
            for _, f, _ in late:  # outside the lock: cancelling runs the future's callbacks here
                f.cancel()


_WATCH = _Watch()


def _bounded(future: ts.Future[T], where: str | os.PathLike[str]) -> ts.Future[T]:
    """``future`` (a tensorstore future of a request to the object at ``where``) cancelled past
    :data:`REQUEST_TIMEOUT_S` with no answer from its bucket; a local path's future is returned as it is. Wait for it
    with :func:`_result` (or turn its ``CancelledError`` into the StorageError with :func:`_timeout_error`)."""
    parts = _split(where)
    if parts is not None:
        _WATCH.add(future, _url_of(where), f"{parts[0]}://{parts[1]}")
    return future


def _timeout_error(where: str | os.PathLike[str]) -> StorageError:
    """The StorageError of a request to ``where`` cancelled by :func:`_bounded`: named, exit 1."""
    proto = _split_url(where)[0]
    return StorageError(
        errno.ETIMEDOUT,
        f"the storage endpoint {_endpoint_of(proto)} sent no answer in {REQUEST_TIMEOUT_S:g} s (request cancelled)",
        _url_of(where),
    )


def _result(future: ts.Future[T], where: str | os.PathLike[str]) -> T:
    """``future.result()`` of a :func:`_bounded` future: a cancelled request raises :func:`_timeout_error`; a failure
    of the storage (tensorstore's ``ValueError`` of an unavailable endpoint, retries exhausted) an ``OSError`` naming
    ``where``; anything else as it is."""
    try:
        return future.result()
    except asyncio.CancelledError:
        raise _timeout_error(where) from None
    except ValueError as exc:
        from datatools.io.storage.io_errors import as_os_error

        err = as_os_error(exc, _url_of(where)) if _is_url(where) else None
        if err is None:
            raise
        raise err from None


# --------------------------------------------------------------------------- errors


@contextmanager
def _storage_errors(path: str | os.PathLike[str], *, bucket_check: bool = True) -> Iterator[None]:
    """Turn a remote library's failure into :class:`StorageError` / ``FileNotFoundError`` naming the URL (local
    paths pass through: their ``OSError`` names the file). ``bucket_check``: a missing object is first checked for a
    missing bucket (one more request)."""
    if not _is_url(path):
        yield
        return
    try:
        yield
    except StorageError:
        raise
    except FileNotFoundError:
        # a missing bucket is a StorageError (exit 1), a missing object a FileNotFoundError (bad input)
        missing = _no_bucket(path) if bucket_check else None
        raise missing or FileNotFoundError(errno.ENOENT, "no such file or directory", _url_of(path)) from None
    except Exception as exc:  # noqa: BLE001 -- each library has its own classes; classified by name below
        mapped = _classify(path, exc)
        if mapped is None:
            raise
        raise mapped from None


def _classify(path: str | os.PathLike[str], exc: BaseException) -> OSError | None:
    """A remote library's failure for ``path`` as the :class:`StorageError` it is (no credentials, access denied, a
    silent or unreachable endpoint, another ``OSError``), or None (not the environment's: left to the caller)."""
    url, proto = _url_of(path), _split_url(path)[0]
    name = type(exc).__name__
    text = str(exc).splitlines()[0][:200] if str(exc) else name
    if name in ("NoCredentialsError", "PartialCredentialsError", "DefaultCredentialsError", "RefreshError"):
        how = (
            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile)"
            if proto == "s3"
            else "set GOOGLE_APPLICATION_CREDENTIALS or run 'gcloud auth application-default login'"
        )
        return StorageError(errno.EACCES, f"no credentials for {_endpoint_of(proto)} ({text}); {how}", url)
    if (
        isinstance(exc, PermissionError)
        or "Forbidden" in text
        or "AccessDenied" in text
        or "InvalidAccessKey" in text
        or "SignatureDoesNotMatch" in text
    ):
        return StorageError(errno.EACCES, f"access denied by {_endpoint_of(proto)} ({text})", url)
    if name in ("ReadTimeoutError", "ServerTimeoutError", "FSTimeoutError") or (
        isinstance(exc, TimeoutError) and not isinstance(exc, ConnectionError)
    ):
        return StorageError(
            errno.ETIMEDOUT,
            f"the storage endpoint {_endpoint_of(proto)} sent no answer in {READ_TIMEOUT_S:g} s ({text})",
            url,
        )
    if name in (
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ConnectionClosedError",
        "ClientConnectorError",
        "ServerDisconnectedError",
    ) or isinstance(exc, (ConnectionError, TimeoutError, socket.gaierror)):
        return StorageError(
            errno.ECONNREFUSED, f"cannot reach the storage endpoint {_endpoint_of(proto)} ({text})", url
        )
    if isinstance(exc, OSError):
        return StorageError(exc.errno or errno.EIO, f"{text} ({_endpoint_of(proto)})", url)
    return None


def _no_bucket(path: str | os.PathLike[str]) -> StorageError | None:
    """The StorageError of a missing bucket, None when the bucket exists (or refuses listing: not called missing)."""
    proto, bucket, _ = _split_url(path)
    fs, _ = _filesystem(f"{'s3' if proto == 's3' else 'gs'}://{bucket}")
    try:
        fs.info(bucket)
        return None
    except FileNotFoundError:
        return StorageError(errno.ENXIO, f"no bucket {bucket!r} at {_endpoint_of(proto)}", _url_of(path))
    except Exception:  # noqa: BLE001 -- the bucket may exist and refuse listing: do not call it missing
        return None


# --------------------------------------------------------------------------- reading


def _open_file(path: str | os.PathLike[str], *, block_size: int = READ_BLOCK) -> BinaryIO:
    """A binary file for reading: ``open`` for a local path; for a URL an fsspec file fetching ``block_size`` bytes
    a request with read-ahead (a couple of blocks in memory)."""
    if not _is_url(path):
        return open(path, "rb")
    with _storage_errors(path):
        fs, inner = _filesystem(path)
        f = fs.open(inner, "rb", block_size=block_size, cache_type="readahead")
    # typeshed declares BinaryIO only on the concrete buffered classes, never on RawIOBase subclasses: the file has
    # every method a BinaryIO reader calls (read, readinto, readline, seek, tell, close, name).
    return cast(BinaryIO, _NamedFile(f, _url_of(path)))


class _RemoteFile(Protocol):
    """What :class:`_NamedFile` calls of an fsspec file opened for reading (fsspec is untyped). Bytes, offsets and
    sizes in bytes."""

    size: int

    def read(self, length: int = -1) -> bytes:
        """At most ``length`` bytes (all the rest when negative) from the position on."""
        ...

    def readline(self) -> bytes:
        """The bytes up to and including the next newline."""
        ...

    def seek(self, loc: int, whence: int = 0) -> int:
        """Move to ``loc`` (from the start, the position or the end by ``whence``); the new position."""
        ...

    def tell(self) -> int:
        """The position."""
        ...

    def close(self) -> None:
        """Close the file."""
        ...


class _NamedFile(io.RawIOBase):
    """An fsspec file whose failures name the URL (pyarrow and numpy read through it)."""

    def __init__(self, f: _RemoteFile, url: str) -> None:
        super().__init__()
        self._f, self.name = f, url

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        with _storage_errors(self.name):
            return self._f.read(size)

    def readline(self, size: int | None = -1) -> bytes:
        with _storage_errors(self.name):
            return self._f.readline() if size is None or size < 0 else super().readline(size)

    def readinto(self, b: WriteableBuffer) -> int:
        view = memoryview(b).cast("B")  # a buffer of any item size, filled byte by byte
        data = self.read(view.nbytes)
        view[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        return self.read(-1)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    @property
    def size(self) -> int:
        return self._f.size

    def close(self) -> None:
        if not self.closed:
            self._f.close()
        super().close()


MAX_METADATA_BYTES = 64 << 20  # a manifest, a plan header, a ledger: ~90 bytes a chunk record, 700k records


def _read_bytes_if_any(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> bytes | None:
    if _tensorstore_reads(path):
        try:  # a failure, or too many bytes, is read again through fsspec: it names it
            data = _read_object_if_any(path)
        except (ValueError, OSError) as exc:
            _raise_if_silent(exc)
        else:
            if data is None or max_bytes is None or len(data) <= max_bytes:
                return data
    try:
        return _read_bytes(path, max_bytes=max_bytes, bucket_check=False)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):  # no file there
        return None


def _raise_if_silent(exc: ValueError | OSError) -> None:
    """Raise ``exc`` when it says the endpoint sent nothing (ETIMEDOUT): a tensorstore probe's other failures are
    tried again through fsspec, which names them, but after silence fsspec would wait as long again (a silent
    endpoint failed a pretokenize's input probe after 41 s, against the 30 s every client keeps)."""
    if isinstance(exc, OSError) and exc.errno == errno.ETIMEDOUT:
        raise exc


def _tensorstore_reads(path: str | os.PathLike[str]) -> bool:
    """Whether a probe's read and a listing of ``path`` go through tensorstore's kvstore, not fsspec: in S3 with the
    environment's keys. fsspec's first request there costs ~1.2 s on 2 cores (importing s3fs, aiobotocore, botocore,
    and the client's set-up: most of a Levanter cache's open at +100 ms) that tensorstore, which the arrays' reads use
    anyway, does not. Not without the keys: tensorstore's S3 driver then walks a credential chain that logs each of
    its failures to stderr (a missing-credentials error became 7 lines); not in GCS: its driver logs its choice of
    credentials on first use (a line before a table's output)."""
    parts = _split(path)
    return parts is not None and parts[0] == "s3" and bool(os.environ.get("AWS_ACCESS_KEY_ID"))


def _read_object_if_any(url: str | os.PathLike[str]) -> bytes | None:
    """An object's bytes through tensorstore's kvstore (one GET), None when there is none (a key prefix, a missing
    bucket: the caller's next read names it). Read whole: tensorstore refuses a byte range past an object's end."""
    import tensorstore as ts

    proto, bucket, key = _split_url(url)
    if not key:
        return None
    parent, _, name = key.rpartition("/")
    kv = ts.KvStore.open(_kvstore_spec(f"{proto}://{bucket}/{parent}".rstrip("/"))).result()
    got = _result(_bounded(kv.read(name), url), url)
    return bytes(got.value) if got.state == "value" else None


def _read_bytes(
    path: str | os.PathLike[str], limit: int | None = None, *, max_bytes: int | None = None, bucket_check: bool = True
) -> bytes:
    """The whole file (its first ``limit`` bytes when given). ValueError naming it when it holds more than
    ``max_bytes`` (at most ``max_bytes + 1`` read), or is a device (a link to ``/dev/zero``: a whole read never
    ends). ``bucket_check``: see :func:`_storage_errors`."""
    want = limit if limit is not None else (None if max_bytes is None else max_bytes + 1)
    if not _is_url(path):
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if limit is None and (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)):
                raise ValueError(f"{display(path)}: a device, not a file (a link to one?)")
            data = f.read() if want is None else f.read(want)
    else:
        with _storage_errors(path, bucket_check=bucket_check):
            fs, inner = _filesystem(path)
            data = fs.cat_file(inner) if want is None else fs.cat_file(inner, start=0, end=want)
    if limit is None and max_bytes is not None and len(data) > max_bytes:
        raise ValueError(f"{display(path)}: larger than {max_bytes:,} bytes: not a file of this kind (corrupt?)")
    return data


def _info(path: str | os.PathLike[str]) -> _FileInfo | None:
    """``{"type": "file" | "directory", "size": bytes, "version": ...}``, None when nothing is there (a URL is a
    directory when objects exist under it)."""
    if not _is_url(path):
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        kind = "directory" if os.path.isdir(path) else "file"
        return {"type": kind, "size": st.st_size, "version": (st.st_mtime_ns, st.st_size)}
    with _storage_errors(path):
        fs, inner = _filesystem(path)
        try:
            got = fs.info(inner)
        except FileNotFoundError:
            if missing := _no_bucket(path):
                raise missing from None
            return None
    kind = "directory" if got.get("type") == "directory" else "file"
    version = (
        got.get("ETag") or got.get("etag") or got.get("generation") or got.get("LastModified") or got.get("updated")
    )
    return {"type": kind, "size": int(got.get("size") or 0), "version": (str(version), int(got.get("size") or 0))}


def _is_file(path: str | os.PathLike[str]) -> bool:
    got = _info(path)
    return got is not None and got["type"] == "file"


def _is_dir(path: str | os.PathLike[str]) -> bool:
    got = _info(path)
    return got is not None and got["type"] == "directory"


def _size(path: str | os.PathLike[str]) -> int:
    """Bytes of a file; FileNotFoundError naming it when there is none."""
    if not _is_url(path):
        return os.path.getsize(path)
    got = _info(path)
    if got is None or got["type"] != "file":
        raise FileNotFoundError(errno.ENOENT, "no such file", _url_of(path))
    return got["size"]


def _list_files(path: str | os.PathLike[str]) -> list[str]:
    """Every file under the directory (URL: key prefix ``path/``, never the rest of the bucket) ``path``,
    recursively, sorted, as paths/URLs."""
    if not _is_url(path):
        return sorted(str(Path(root) / f) for root, _, files in os.walk(Path(path)) for f in files)
    base = _url_of(path).rstrip("/")
    with _storage_errors(path):
        fs, inner = _filesystem(path)
        found = fs.find(inner.rstrip("/") + "/" if _split_url(path)[2] else inner)
    prefix = inner.rstrip("/") + "/"
    return sorted(f"{base}/{k[len(prefix) :]}" for k in found if k.startswith(prefix) and not k.endswith("/"))


def _file_sizes(path: str | os.PathLike[str]) -> dict[str, int]:
    """``{relative key: bytes}`` of every file under the directory (URL: key prefix) ``path``, from one listing."""
    if not _is_url(path):
        base = os.fspath(path)
        files = (os.path.join(root, n) for root, _, names in os.walk(base) for n in names)
        return {os.path.relpath(f, base).replace(os.sep, "/"): os.path.getsize(f) for f in files}
    with _storage_errors(path):
        fs, inner = _filesystem(path)
        found = fs.find(inner.rstrip("/") + "/", detail=True)
    prefix = inner.rstrip("/") + "/"
    return {k[len(prefix) :]: int(v.get("size") or 0) for k, v in found.items() if k.startswith(prefix)}


def _keys(path: str | os.PathLike[str]) -> set[str]:
    """The relative keys of every file under the directory (URL: key prefix) ``path``, from one listing (through
    tensorstore where :func:`_tensorstore_reads`; a failure but silence is listed again through fsspec, which names
    it)."""
    if _tensorstore_reads(path):
        import tensorstore as ts

        try:
            kv = ts.KvStore.open(_kvstore_spec(path)).result()
            return {k.decode() for k in _result(_bounded(kv.list(), path), path)}
        except (ValueError, OSError) as exc:
            _raise_if_silent(exc)
    return set(_file_sizes(path))


# --------------------------------------------------------------------------- writing


def _write_with(path: str | os.PathLike[str], write: Callable[[BinaryIO], object]) -> None:
    """Write ``path`` so no reader sees it half-written: locally a temporary file and a rename
    (:func:`~datatools.io.storage.atomic.atomic_write_with`), remotely one (atomic) PUT of the whole bytes."""
    if not _is_url(path):
        atomic.atomic_write_with(path, write)
        return
    buf = io.BytesIO()
    write(buf)
    with _storage_errors(path):
        fs, inner = _filesystem(path)
        fs.pipe_file(inner, buf.getvalue())


def _write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to a path or URL atomically (see :func:`_write_with`)."""
    _write_with(path, lambda f: f.write(data))


def _write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write UTF-8 ``text`` to a path or URL atomically."""
    _write_bytes(path, text.encode())


def _remove(path: str | os.PathLike[str]) -> None:
    """Delete one file or object if it is there."""
    if not _is_url(path):
        Path(path).unlink(missing_ok=True)
        return
    with _storage_errors(path):
        fs, inner = _filesystem(path)
        with suppress(FileNotFoundError):
            fs.rm_file(inner)


def _remove_tree(path: str | os.PathLike[str]) -> int:
    """Delete every file under the directory (URL: key prefix) ``path``; returns how many. Remotely the keys
    :func:`_list_files` finds, one by one: never a prefix-wide delete (an emulator ignoring prefixes would empty the
    bucket)."""
    if not _is_url(path):
        import shutil

        count = sum(len(files) for _, _, files in os.walk(Path(path)))
        if os.path.isdir(path):
            shutil.rmtree(path)
        return count
    files = _list_files(path)
    with _storage_errors(path):
        fs, _ = _filesystem(path)
        for f in files:
            with suppress(FileNotFoundError):
                fs.rm_file(_filesystem(f)[1])
    return len(files)
