"""``NODEROLE_TEST_FORBID_SKIPS=1``: a skipped test fails instead (CI sets it).

The tests of real components (systemd booted in namespaces, Debian's OpenRC, node_exporter,
promtool and logrotate unpacked from their packages, openssl, Graphviz, valgrind) skip
themselves on a machine that lacks one, so that a laptop can run the suite. CI must not: a CI
machine missing a tool would be green without having run them. Loaded by tests/conftest.py; a
plugin module of its own so that its test can load it into a separate pytest run
(``-p tests.skips``).
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

__all__ = ["FORBID", "pytest_runtest_makereport"]

FORBID = "NODEROLE_TEST_FORBID_SKIPS"
"""The environment variable; any non-empty value other than ``0`` forbids skips."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    if os.environ.get(FORBID, "") in ("", "0"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (
        f"skipped, but {FORBID} is set (CI runs every test): {reason}. Install what it needs."
    )
