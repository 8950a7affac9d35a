"""The bound datatools puts on each of its tensorstore requests to object storage (``Location.bounded``, issue 57):
a request unanswered past ``REQUEST_TIMEOUT_S`` is cancelled, and its wait raises a StorageError naming the object,
only while its bucket answers nothing else (a silent endpoint, not one busy with the requests queued before it).
Fake futures with tensorstore's interface and a fake clock the test moves: what is checked is which requests were
cancelled at which clock readings, never how long anything took."""

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


class FakeClock:
    """``storage``'s clock in these tests: ``monotonic()`` reads :attr:`now`, which only the test moves;
    ``sleep()`` counts the watcher's passes (and yields a moment of real time, so the test's thread runs)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.passes = 0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, _seconds: float) -> None:
        self.passes += 1
        time.sleep(0.001)

    def advance(self, seconds: float) -> None:
        """Move the clock, then wait until the watcher has looked at every request at least once since (the pass
        under way may have read the clock before the move: two passes later, one has read it after)."""
        self.now += seconds
        _wait_for(lambda passes=self.passes: self.passes >= passes + 2)


@pytest.fixture
def short_bound(monkeypatch) -> FakeClock:
    clock = FakeClock()
    monkeypatch.setattr(storage, "time", clock)
    monkeypatch.setattr(storage, "REQUEST_TIMEOUT_S", 0.6)
    monkeypatch.setattr(storage, "_WATCH", storage._Watch())
    return clock


def _wait_for(condition, limit_s: float = 60.0) -> None:
    """Until ``condition()``: a did-not-hang bound in real time (the clock of the tests is :class:`FakeClock`)."""
    t0 = time.monotonic()
    while not condition():
        assert time.monotonic() - t0 < limit_s, "never happened"
        time.sleep(0.002)


def test_a_silent_request_is_cancelled_and_named(short_bound):
    url = "s3://bucket-57/store/tokens/c/3"
    waiting = storage.location(url).bounded(FakeRequest())
    short_bound.advance(0.5)
    assert not waiting.done()  # within the bound: waiting
    short_bound.advance(0.2)
    _wait_for(waiting.done)
    assert waiting.cancelled()
    with pytest.raises(StorageError) as raised:
        storage.location(url).result(waiting)
    assert raised.value.filename == url and raised.value.errno == errno.ETIMEDOUT
    assert "sent no answer in 0.6 s" in raised.value.strerror


def test_a_request_queued_behind_answered_ones_is_kept_while_its_bucket_answers(short_bound):
    """Requests to the same bucket completing keep a long wait alive (a busy endpoint, 64 ranged reads in flight);
    once the bucket falls silent, it is cancelled; a local path is never bounded."""
    queued = storage.location("gs://bucket-57/store/tokens/c/9").bounded(FakeRequest())
    other_bucket = storage.location("gs://another-bucket/x").bounded(FakeRequest())
    local = storage.location("/tmp/store/tokens/c/0").bounded(FakeRequest())
    for _ in range(18):  # 3 bounds of the clock, the bucket answering every 0.1 s of it
        short_bound.advance(0.1)
        storage.location("gs://bucket-57/store/tokens/c/1").bounded(FakeRequest()).answer()
    assert not queued.done()  # 3 bounds old, kept: its bucket answers
    assert other_bucket.cancelled()  # another bucket's answers do not keep it
    short_bound.advance(0.5)
    assert not queued.done()  # the bucket's last answer is within the bound
    short_bound.advance(0.2)
    _wait_for(queued.done)  # the bucket silent past the bound: cancelled
    assert queued.cancelled() and other_bucket.cancelled() and not local.done()
    queued_answered = storage.location("gs://bucket-57/a").bounded(FakeRequest())
    queued_answered.answer()
    assert storage.location("gs://bucket-57/a").result(queued_answered) == b"bytes"
