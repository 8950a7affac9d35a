"""Progress: documents, tokens and bytes with rates and an ETA; plain lines every few seconds off a terminal
(issue 21, defect 10)."""

from __future__ import annotations

import io
import re
import time
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from datatools.base.progress import (
    FIRST_LINE_S,
    _EtaColumn,
    activity,
    count_progress,
    doing,
    eta_seconds,
    job_progress,
    say,
)


def console(terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=terminal, width=200), out


def test_off_a_terminal_a_job_prints_plain_lines_with_documents_bytes_rates_and_eta():
    con, out = console(False)
    with job_progress(4, done=1, total_bytes=4_000_000, done_bytes=1_000_000, interval_s=0.05, console=con) as bar:
        bar.advance(1500, 300_000, nbytes=1_000_000)
        time.sleep(0.3)
        bar.advance(500, 100_000, nbytes=1_000_000)
        time.sleep(0.2)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3, lines  # one every interval, while the job runs
    assert all(line.startswith("tokenizing: ") for line in lines)
    last = lines[-1]
    assert "3/4 shards" in last and "2,000 documents (" in last and "400.0k tokens" in last
    assert "3.0 MB of 4.0 MB" in last
    assert re.search(r"ETA \d+:\d\d:\d\d", last) and "elapsed 0:00:00" in last
    assert "\x1b[" not in out.getvalue()  # no terminal codes in a log


def test_a_job_shorter_than_the_interval_prints_nothing_off_a_terminal():
    con, out = console(False)
    with job_progress(2, console=con) as bar:
        bar.advance(10, 100)
    assert out.getvalue() == "" and (bar.docs, bar.tokens, bar.shards) == (10, 100, 1)


def test_the_eta_follows_bytes_done():
    """Half the bytes done in t seconds leaves about t seconds (the ETA is linear in what is left)."""
    con, _ = console(False)
    with job_progress(1, total_bytes=1000, console=con, interval_s=60) as bar:
        bar.t0 -= 100.0  # as if started 100 s ago
        bar.advance(1, 1, shards=0, nbytes=500)
        eta = re.search(r"ETA (\d+):(\d\d):(\d\d)", bar.status())
    h, m, s = map(int, eta.groups())
    assert abs(3600 * h + 60 * m + s - 100) <= 1


def test_on_a_terminal_the_bar_shows_documents_and_bytes():
    con, out = console(True)
    with job_progress(3, total_bytes=3_000, console=con) as bar:
        bar.advance(7, 70, nbytes=1_000)
        con.file.flush()
        time.sleep(0.2)
    assert "7 documents" in out.getvalue() and "1.0 kB of 3.0 kB" in out.getvalue()


def test_count_progress_off_a_terminal_counts_bytes_with_eta():
    con, out = console(False)
    with count_progress(con, 2_000_000, "reading lengths", unit="bytes", interval_s=0.05) as advance:
        advance(500_000)
        time.sleep(0.2)
    line = out.getvalue().splitlines()[-1]
    assert line.startswith("reading lengths: 500.0 kB of 2.0 MB (") and "ETA " in line


@settings(max_examples=200, deadline=None)
@given(
    st.floats(0, 1e9),
    st.floats(0, 1e9),
    st.floats(0, 1e6),
    st.floats(0, 1e6),
)
def test_the_eta_is_the_measured_rate_never_below_the_time_since_the_count_moved(done, total, elapsed, still):
    """ETA = what is left at the rate of all the work done so far, floored by the time since the count last moved
    (work in flight that long is not about to finish) and by 1 s while anything is left."""
    eta = eta_seconds(done, total, elapsed, still)
    if done <= 0 or not total or elapsed <= 0:
        assert eta is None  # no rate yet: "ETA -", never a guess
        return
    left = max(total - done, 0)
    if left == 0:
        assert eta == 0
        return
    assert eta >= still and eta >= 1.0
    assert eta == max(left * elapsed / done, still, 1.0)


def eta_of(line: str) -> int:
    h, m, s = map(int, re.search(r"ETA (\d+):(\d\d):(\d\d)", line).groups())
    return 3600 * h + 60 * m + s


def test_a_stalled_job_never_shows_an_eta_below_the_time_it_has_been_stalled():
    """The bug: 2 small shards done in 2 s, then 40 s on the next with nothing counted: 'ETA 1 s' for 40 s."""
    con, _ = console(False)
    with job_progress(6, console=con, interval_s=60) as bar:
        bar.t0 -= 42.0  # started 42 s ago
        bar.advance(10, 100, shards=2)
        bar.moved -= 40.0  # ... and the count last moved 40 s ago
        assert eta_of(bar.status()) >= 40
        bar.advance(10, 100, shards=1)  # the count moves: the rate of all the work done so far
        assert abs(eta_of(bar.status()) - 3 * 42 / 3) <= 1


def test_on_a_terminal_the_eta_grows_while_nothing_moves():
    column = _EtaColumn()
    task = SimpleNamespace(id=1, completed=2.0, total=6.0, elapsed=2.0)
    first = eta_of(column.render(task).plain)  # 4 left at 1 a second
    assert first == 4
    column._moved[1] = (2.0, column._moved[1][1] - 30.0)  # as if last moved 30 s ago
    task.elapsed = 32.0
    assert eta_of(column.render(task).plain) >= 64  # 4 left at 2 in 32 s; never below the 30 s stalled


def test_a_command_says_what_it_is_doing_within_a_quarter_second_and_bars_take_over():
    """Off a terminal: the step's first line once it has lasted FIRST_LINE_S, a line per step that lasts, none
    while a bar is shown, none after doing(None)."""
    con, out = console(False)
    with activity("datatools x", console=con, interval_s=60):
        doing("listing s3://bucket/data")
        time.sleep(FIRST_LINE_S + 0.3)
        first = out.getvalue().splitlines()
        assert first and first[0].startswith("datatools x: listing s3://bucket/data (elapsed 0:00:0")
        with count_progress(con, 10, "batches", interval_s=60) as advance:
            advance(3)
            time.sleep(FIRST_LINE_S + 0.3)
        lines = out.getvalue().splitlines()
        assert lines[1].startswith("batches: 3/10") and len(lines) == 2  # the bar's line, not the activity's
        doing("planning 3,000 documents")
        time.sleep(FIRST_LINE_S + 0.3)
        assert out.getvalue().splitlines()[2].startswith("datatools x: planning 3,000 documents (elapsed")
        doing(None)
        time.sleep(FIRST_LINE_S + 0.3)
    assert len(out.getvalue().splitlines()) == 3
    doing("outside any activity")  # nothing to update: no error, nothing printed
    assert len(out.getvalue().splitlines()) == 3


def test_quick_work_prints_nothing():
    con, out = console(False)
    with activity("datatools x", console=con):
        doing("listing")
    assert out.getvalue() == ""


def test_a_finding_said_while_the_spinner_runs_gets_a_line_of_its_own():
    """Issue 58: a message printed while the live line ran shared the terminal line with its spinner (another
    console wrote over it). said through the activity's console, it is a line of its own above the spinner."""
    con, out = console(True)
    with activity("datatools x", console=con):
        doing("tokenizing")
        time.sleep(FIRST_LINE_S + 0.3)  # the spinner is up
        say("tokenizer tok.json (sha256 0123)")
        time.sleep(0.3)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", out.getvalue())  # cursor moves and erasures: line breaks
    lines = [ln for ln in text.replace("\r", "\n").split("\n") if "tokenizer tok.json" in ln]
    assert lines and all(ln.strip() == "tokenizer tok.json (sha256 0123)" for ln in lines), lines
    assert "datatools x: tokenizing" in text  # the spinner was shown


def test_on_an_80_column_terminal_the_job_bar_keeps_its_eta():
    """Issue 58: pretokenize's bar at 80 columns showed its counts and cut the ETA off; the counts give way now."""
    out = io.StringIO()
    con = Console(file=out, force_terminal=True, width=80)
    with job_progress(400, total_bytes=3_000_000_000, console=con) as bar:
        bar.advance(70_000, 700_000_000, nbytes=1_000_000_000, shards=100)
        time.sleep(0.3)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())  # colours off, then cursor moves as line breaks
    lines = [ln for ln in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", text).replace("\r", "\n").split("\n") if ln]
    shown = [ln for ln in lines if "shards" in ln]
    assert shown and all("tokenizing" in ln and "ETA " in ln and len(ln) <= 80 for ln in shown), shown
