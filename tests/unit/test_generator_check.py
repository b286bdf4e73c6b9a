"""One rule says whether the load generator kept its schedule (loadkit.rundir.generator_check)."""

from __future__ import annotations

import pandas as pd

from loadkit.rundir.generator_check import ADVICE, schedule_shortfall


def _load(
    seconds: int = 60, names: tuple[str, ...] = ("infer",), **per_second: list
) -> pd.DataFrame:
    rows = []
    for i in range(seconds):
        for name in names:
            row = {"t_ns": i * 10**9, "process": "local", "name": name, "dropped": 0}
            row["dispatch_lag_max_ms"] = 0.4
            row["generator_cpu_pct"] = 35.0
            for key, values in per_second.items():
                row[key] = values[i]
            rows.append(row)
    return pd.DataFrame(rows)


def test_a_run_that_kept_its_schedule_has_no_shortfall() -> None:
    assert schedule_shortfall(_load()) is None
    assert schedule_shortfall(pd.DataFrame()) is None


def test_one_late_second_in_a_minute_is_not_a_shortfall_but_six_are() -> None:
    # GIVEN a GC pause: one second with the scheduler 40 ms late
    lag = [0.4] * 60
    lag[30] = 40.0
    assert schedule_shortfall(_load(dispatch_lag_max_ms=lag)) is None
    # WHEN the scheduler is late in 6 of 60 seconds (10 %)
    for i in range(40, 45):
        lag[i] = 25.0
    shortfall = schedule_shortfall(_load(dispatch_lag_max_ms=lag))
    # THEN one line says how late, in how many seconds, and what to do
    assert shortfall is not None
    assert (shortfall.late_s, shortfall.seconds, shortfall.worst_lag_ms) == (6, 60, 40.0)
    line = shortfall.line()
    assert "\n" not in line
    assert "late in 6 of 60 s (worst 40 ms)" in line and line.endswith(ADVICE)
    assert "--workers" in line


def test_any_dropped_arrival_is_a_shortfall() -> None:
    dropped = [0] * 60
    dropped[59] = 3
    shortfall = schedule_shortfall(_load(dropped=dropped))
    assert shortfall is not None and shortfall.dropped == 3
    assert shortfall.line().startswith("the load generator could not keep its schedule (3 arrivals")


def test_a_locust_process_at_a_full_core_is_a_shortfall_counted_once_per_second() -> None:
    cpu = [35.0] * 30 + [99.0] * 30
    shortfall = schedule_shortfall(_load(names=("a", "b"), generator_cpu_pct=cpu))
    assert shortfall is not None
    assert (shortfall.busy_s, shortfall.seconds) == (30, 60)  # two names, one process-second
    assert "Locust at >= 90 % of a core in 30 of 60 s" in shortfall.line()


def test_rows_without_lag_or_cpu_count_as_on_time() -> None:
    # closed model, or a run recorded before generator_cpu_pct
    load = _load().drop(columns=["dispatch_lag_max_ms", "generator_cpu_pct"])
    assert schedule_shortfall(load) is None
