"""The client suites never skip: a check that cannot run (a trainer or a tool missing, a counter that read
nothing, a ``pytest.skip`` anywhere, an ``importorskip`` of a module, a ``skipif``, an ``xfail``) fails with its
reason (issue 57). ``make test-clients`` and ``make test-clients-levanter`` run the real trainers so that their
checks run: a skipped check there would report success for something that was never tried."""

from __future__ import annotations

import pytest


def _reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    """The skip's reason as pytest recorded it (``(file, line, "Skipped: reason")``), or the xfail's."""
    if getattr(report, "wasxfail", None) is not None:
        return f"xfail ({report.wasxfail or 'no reason given'})"
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _failed(report: pytest.CollectReport | pytest.TestReport) -> None:
    report.longrepr = f"a client check cannot skip; it could not run: {_reason(report)}"
    report.outcome = "failed"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.skipped:  # an xfail that failed is a skip with wasxfail
        _failed(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    outcome = yield
    report = outcome.get_result()
    if report.skipped:  # a module-level importorskip or pytest.skip(allow_module_level=True)
        _failed(report)
