"""`datatools warm`: what it compiled, in how long, and a failed part as one line, exit 1 (the work itself:
tests/pipeline/test_compile_ahead.py)."""

from __future__ import annotations

from conftest import without_progress
from datatools.cli import main
from datatools.pipeline import compile_ahead


def test_warm_says_its_parts_and_seconds(monkeypatch, capsys):
    calls = []

    def warm(parts=None, jobs=None, done=None):
        calls.append(jobs)
        for part in compile_ahead.PARTS:
            done(part)
        return compile_ahead.WarmReport(
            list(compile_ahead.PARTS), jobs or 2, 3.5, {p: 1.0 for p in compile_ahead.PARTS}
        )

    monkeypatch.setattr(compile_ahead, "warm", warm)
    assert main(["warm", "--jobs", "3"]) == 0
    out = capsys.readouterr().out
    assert calls == [3]
    assert "compiled datatools' kernels in 3.5 s (5 parts, 3 at a time: streaming 1.0 s" in out


def test_a_failed_part_is_one_line_exit_1(monkeypatch, capsys):
    failed = compile_ahead.WarmReport(["planned"], 1, 1.0, {"planned": 1.0}, {"planned": "ValueError: boom"})
    monkeypatch.setattr(compile_ahead, "warm", lambda parts=None, jobs=None, done=None: failed)
    assert main(["warm"]) == 1
    err = without_progress(capsys.readouterr().err)
    assert err.count("\n") == 1 and "part planned failed: ValueError: boom" in err, err
