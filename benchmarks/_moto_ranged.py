"""moto's S3 server, with ranged GETs that read only their range (for the benchmarks; run as ``moto_server``).

moto 5 reads a whole object for every GET and then slices the range asked for: on a Levanter cache, whose shards
are objects of ~250 MB, that bounds moto at ~7 ranged GETs/s on this machine, so a benchmark measured moto, not the
reader. S3 and GCS serve a range without reading the rest of the object; here a GET that carries a plain
``bytes=a-b`` range gets a value that reads those bytes from the stored object when sliced. Everything else is
moto's own code path (headers, errors, the range parsing in ``_handle_range_header``).

Usage::

    python benchmarks/_moto_ranged.py -H 127.0.0.1 -p PORT
"""

from __future__ import annotations

import re
import threading

from moto.s3 import models, responses
from moto.server import main

_ranged = threading.local()
_RANGE = re.compile(r"bytes=\d+-\d*$")


class _RangeReader:
    """An object's value that reads only the slice taken of it (``len`` and ``[a:b]``, what a ranged GET uses)."""

    def __init__(self, key: models.FakeKey):
        self.key = key

    def __len__(self) -> int:
        return int(self.key.size)

    def __bool__(self) -> bool:
        return self.key.size > 0

    def __getitem__(self, part: slice) -> bytes:
        begin, end, _ = part.indices(len(self))
        with self.key.lock:
            self.key._value_buffer.seek(begin)
            return self.key._value_buffer.read(max(0, end - begin))


_whole_value = models.FakeKey.value


def _value(key: models.FakeKey):
    if getattr(_ranged, "on", False):
        return _RangeReader(key)
    return _whole_value.fget(key)


models.FakeKey.value = property(_value, _whole_value.fset)  # type: ignore[method-assign, assignment]
_get_object = responses.S3Response.get_object


def _get_object_ranged(self):
    _ranged.on = bool(_RANGE.match(self.headers.get("range", "") or ""))
    try:
        return _get_object(self)
    finally:
        _ranged.on = False


responses.S3Response.get_object = _get_object_ranged  # type: ignore[method-assign]

if __name__ == "__main__":
    main()
