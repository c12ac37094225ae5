"""Under CI a skipped test fails (a pytest plugin, registered by tests/conftest.py).

Every test here skips only for something missing on the machine: a real peer, root for a
network namespace, IPv6 loopback, a recent enough kubectl. CI must have it all rather than
pass with less tested, so when ``CI`` is set (to anything but empty, ``0``, ``false`` or
``no``) a skip is reported as a failure that gives the skip's reason. Expected failures
(``xfail``) are left as they are.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest


def under_ci(environ: dict[str, str] | None = None) -> bool:
    value = (os.environ if environ is None else environ).get("CI", "")
    return value.strip().lower() not in ("", "0", "false", "no")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, object, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and not hasattr(report, "wasxfail") and under_ci():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, which must run every test: {reason}"
