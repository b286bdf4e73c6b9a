"""In CI a test that skips for a missing part fails instead, naming the part.

A developer's `make test` skips what their machine lacks (Chromium, Prometheus,
Alertmanager, MLServer, network namespaces, a cgroup quota) and says why in the
`-ra` summary. CI must not: a setup step that silently stopped installing
Prometheus would otherwise turn the production-window tests into skips and the
run green. `.ci/run` sets `LOADKIT_TEST_REQUIRE_PARTS=1`; under it every skip is
a failure, except a test marked `platform_skip` (what no Linux CI machine lacks
can still be missing on a developer's Mac, e.g. timerfd).
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

REQUIRE_PARTS = "LOADKIT_TEST_REQUIRE_PARTS"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "platform_skip: may skip in CI too (what a developer's non-Linux machine lacks)"
    )


def required() -> bool:
    return os.environ.get(REQUIRE_PARTS, "") not in ("", "0")


def _reason(longrepr: object) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and required()) or hasattr(report, "wasxfail"):
        return
    if item.get_closest_marker("platform_skip") is not None:
        return
    report.outcome = "failed"
    report.longrepr = (
        f"a part this test needs is missing: {_reason(report.longrepr)} "
        f"({REQUIRE_PARTS} is set, as in CI: a skip is a failure)"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, None]:
    """A module skipped whole (`importorskip`, a module-level skip) fails the same way."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and required():
        report.outcome = "failed"
        report.longrepr = (
            f"a part this module needs is missing: {_reason(report.longrepr)} "
            f"({REQUIRE_PARTS} is set, as in CI: a skip is a failure)"
        )
