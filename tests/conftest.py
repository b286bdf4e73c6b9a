"""How `make test` splits the suite between pytest-xdist workers (docs/testing.md).

`make test` runs two passes:
1. `-n 4 --dist loadfile --no-loadscope-reorder -m "not quiet_host"`: each test
   module goes whole to one worker, so a module-scoped Triton starts once and its
   tests keep their order, while the other workers run other modules. Four workers
   on two cores: most of an integration test is waiting (a server starting,
   seconds of load at a fixed rate), and with four the cores were still idle 29 %
   of pass 1. Five saturated them (12 % idle), and the production-window test then
   rightly found CPU saturation in its spikes (docs/testing.md).
2. `-m quiet_host`, serial: the tests whose story needs the machine to itself.
   The full demo's P99 sawtooth is found by phase-locking onsets 10 s apart; beside
   two other load tests its onsets slipped and the period went unconfirmed
   (p=0.022, measured in session 15). Mark a test `quiet_host` only for that kind
   of reason, and say it beside the mark.

Plain `pytest` runs everything serially, as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# In CI a skip for a missing part is a failure (tests/missing_parts.py).
# LOADKIT_TEST_TIMELINE=FILE records when each test ran on which worker (tests/timeline.py).
pytest_plugins = ["tests.missing_parts", "tests.timeline"]

INTEGRATION = Path(__file__).parent / "integration"
# A scheduling hint, not a rule: xdist hands out modules in collection order, so
# the longest go first and the short ones fill in at the end (the longest
# processing time first heuristic). A stale entry costs time, never a result.
# Only with `--no-loadscope-reorder` (Makefile): by default xdist re-sorts the
# modules by their number of tests, and this order was ignored until session 21.
SLOWEST_FIRST = (  # measured in session 21 (module's seconds in pass 1, fresh clone)
    "test_capacity",  # 110
    "test_own_model",  # 109
    "test_load_generation",  # 96
    "test_sweep",  # 88
    "test_fault_matrix",  # 87
    "test_tune",  # 86
    "test_remote_server",  # 79 (its pass-1 part)
    "test_prometheus_import",  # 75
    "test_distributed",  # 70
    "test_production_compute_slowdown",  # 67
    "test_oncall",  # 64 (alone, session 21)
    "test_telemetry",  # 62
    "test_agent",  # 49
    "test_lifeline",  # 44
    "test_live_metrics",  # 28
    "test_locust_web_ui",  # 22
    "test_target",  # 21
    "test_mlserver",  # 18
    "test_run_guard",  # 18
    "test_scrape",  # 16
)


# The unit modules that take longest in pass 1 (seconds measured in session 22, under
# pass 1's contention), ahead of the other unit modules: handed out last, a 28 s module
# kept one worker busy after the others had finished.
SLOWEST_UNITS = (
    "test_oncall_lifecycle",  # 28
    "analysis/test_attribution",  # 16
    "analysis/test_sides",  # 14
    "report/test_report_html",  # 12
    "telemetry/test_prometheus_import",  # 12
    "analysis/test_causes",  # 11
    "analysis/test_overview",  # 10
    "analysis/test_attribution_strength",  # 9
    "report/test_report_commands",  # 9
    "analysis/test_pipeline",  # 8
)
UNIT = Path(__file__).parent / "unit"


def _order(item: pytest.Item) -> int:
    path = Path(str(item.path))
    if path.parent == INTEGRATION:
        if path.stem in SLOWEST_FIRST:
            return SLOWEST_FIRST.index(path.stem)
        return len(SLOWEST_FIRST)
    # unit tests last: the longest first, then many short files fill the gaps
    unit = path.relative_to(UNIT).with_suffix("").as_posix() if path.is_relative_to(UNIT) else ""
    if unit in SLOWEST_UNITS:
        return len(SLOWEST_FIRST) + 1 + SLOWEST_UNITS.index(unit)
    return len(SLOWEST_FIRST) + 1 + len(SLOWEST_UNITS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_order)  # stable: a module's tests keep their order
