"""The bound datatools puts on each of its tensorstore requests to object storage (``storage.bounded``, issue 57):
a request unanswered past ``REQUEST_TIMEOUT_S`` is cancelled, and its wait raises a StorageError naming the object,
only while its bucket answers nothing else (a silent endpoint, not one busy with the requests queued before it).
Fake futures with tensorstore's interface: what is counted is which requests were cancelled, not wall time."""

from __future__ import annotations

import asyncio
import errno
import threading
import time

import pytest

from datatools.base.errors import StorageError
from datatools.io import storage


class FakeRequest:
    """A tensorstore-like future: done by :meth:`answer` or by ``cancel()``; callbacks run on completion."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list = []
        self._state: str | None = None

    def add_done_callback(self, callback) -> None:
        with self._lock:
            if self._state is None:
                self._callbacks.append(callback)
                return
        callback(self)

    def _finish(self, state: str) -> bool:
        with self._lock:
            if self._state is not None:
                return False
            self._state, callbacks = state, self._callbacks
        for callback in callbacks:
            callback(self)
        return True

    def answer(self) -> None:
        self._finish("value")

    def cancel(self) -> bool:
        return self._finish("cancelled")

    def cancelled(self) -> bool:
        return self._state == "cancelled"

    def done(self) -> bool:
        return self._state is not None

    def result(self):
        if self._state == "cancelled":
            raise asyncio.CancelledError
        return b"bytes"


@pytest.fixture
def short_bound(monkeypatch):
    monkeypatch.setattr(storage, "REQUEST_TIMEOUT_S", 0.6)
    monkeypatch.setattr(storage, "_WATCH_PERIOD_S", 0.05)
    monkeypatch.setattr(storage, "_WATCH", storage._Watch())


def _wait_for(condition, limit_s: float = 20.0) -> None:
    t0 = time.monotonic()
    while not condition():
        assert time.monotonic() - t0 < limit_s, "never happened"
        time.sleep(0.02)


def test_a_silent_request_is_cancelled_and_named(short_bound):
    url = "s3://bucket-57/store/tokens/c/3"
    waiting = storage.bounded(FakeRequest(), url)
    _wait_for(waiting.done)
    assert waiting.cancelled()
    with pytest.raises(StorageError) as raised:
        storage.result(waiting, url)
    assert raised.value.filename == url and raised.value.errno == errno.ETIMEDOUT
    assert "sent no answer in 0.6 s" in raised.value.strerror


def test_a_request_queued_behind_answered_ones_is_kept_while_its_bucket_answers(short_bound):
    """Requests to the same bucket completing keep a long wait alive (a busy endpoint, 64 ranged reads in flight);
    once the bucket falls silent, it is cancelled; a local path is never bounded."""
    queued = storage.bounded(FakeRequest(), "gs://bucket-57/store/tokens/c/9")
    other_bucket = storage.bounded(FakeRequest(), "gs://another-bucket/x")
    local = storage.bounded(FakeRequest(), "/tmp/store/tokens/c/0")
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3 * storage.REQUEST_TIMEOUT_S:  # the bucket answers every 0.1 s
        storage.bounded(FakeRequest(), "gs://bucket-57/store/tokens/c/1").answer()
        time.sleep(0.1)
    assert not queued.done()  # 3 bounds old, kept: its bucket answers
    _wait_for(other_bucket.done)  # another bucket's answers do not keep it
    _wait_for(queued.done)  # the bucket silent: cancelled
    assert queued.cancelled() and other_bucket.cancelled() and not local.done()
    queued_answered = storage.bounded(FakeRequest(), "gs://bucket-57/a")
    queued_answered.answer()
    assert storage.result(queued_answered, "gs://bucket-57/a") == b"bytes"
