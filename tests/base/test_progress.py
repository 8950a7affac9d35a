"""Progress: documents, tokens and bytes with rates and an ETA; plain lines every few seconds off a terminal
(issue 21, defect 10)."""

from __future__ import annotations

import io
import re
import time

from rich.console import Console

from datatools.base.progress import count_progress, job_progress


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
