"""Atomic writes never replace what is not a regular file (``--json /dev/null`` once replaced the device node)."""

from __future__ import annotations

import os
import stat
import threading

from datatools.io import storage


def test_a_fifo_destination_is_written_into_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    storage.location(fifo).write_text('{"ok": 1}\n')
    reader.join(timeout=30)
    assert got == [b'{"ok": 1}\n']
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still a FIFO, not a regular file renamed over it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temporary file left


def test_a_regular_file_is_still_replaced_atomically(tmp_path):
    f = tmp_path / "r.json"
    f.write_text("old")
    storage.location(f).write_text("new")
    assert f.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
