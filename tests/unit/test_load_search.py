"""The capacity search's pure parts: the order of probes, stability, and the steered shape."""

from __future__ import annotations

from pathlib import Path

from loadkit.load.generator.arrivals import arrival_times
from loadkit.load.search import Bracket, SearchSettings, stable
from loadkit.load.shapes import RateSchedule, Steered


def _settings(**kw: object) -> SearchSettings:
    base: dict[str, object] = dict(
        slo_percentile="p99",
        slo_ms=50.0,
        errors_pct=0.1,
        start_rps=10.0,
        max_rps=1000.0,
        max_duration_s=600.0,
    )
    base.update(kw)
    return SearchSettings(**base)  # type: ignore[arg-type]


def _search(capacity: float, settings: SearchSettings) -> list[float]:
    bracket = Bracket(settings)
    rates = []
    while (step := bracket.next_rate()) is not None:
        rate, _trial = step
        rates.append(rate)
        bracket.record(rate, rate <= capacity)
        assert len(rates) < 50
    return rates


def test_ramp_then_bisection_stops_within_the_resolution() -> None:
    settings = _settings(resolution=0.05)
    rates = _search(137.0, settings)
    assert rates[:5] == [10, 20, 40, 80, 160]  # geometric ramp until the first failure
    bracket = Bracket(settings)
    for r in rates:
        bracket.record(r, r <= 137.0)
    assert bracket.low is not None and bracket.high is not None
    assert bracket.low <= 137.0 < bracket.high
    assert bracket.high - bracket.low <= 0.05 * bracket.low


def test_a_first_probe_that_fails_ramps_down() -> None:
    rates = _search(3.0, _settings(start_rps=10.0, resolution=0.1))
    assert rates[:3] == [10.0, 5.0, 2.5]


def test_capacity_above_max_rate_stops_at_it() -> None:
    rates = _search(5000.0, _settings(max_rps=100.0))
    assert rates[-1] == 100.0 and max(rates) == 100.0


def test_trials_repeat_both_ends_and_a_failed_retrial_lowers_the_bracket() -> None:
    settings = _settings(resolution=0.1, trials=3)
    bracket = Bracket(settings)
    outcomes = {}
    while (step := bracket.next_rate()) is not None:
        rate, trial = step
        # flaky at 70: passes twice, then fails
        passed = rate < 70 or (rate == 70 and trial < 3)
        outcomes.setdefault(rate, []).append(passed)
        bracket.record(rate, passed)
    assert bracket.low is not None and bracket.low < 70 <= (bracket.high or 0)
    assert len(outcomes[bracket.low]) == 3  # the answer passed every trial


def test_stable_needs_three_windows_within_10_percent_or_one_side_of_the_slo() -> None:
    assert stable([100.0, 104.0, 97.0])
    assert not stable([100.0, 140.0, 90.0])
    assert stable([10.0, 30.0, 20.0], slo=50.0)  # all within the SLO: the verdict is the same
    assert not stable([40.0, 60.0, 45.0], slo=50.0)
    assert stable([5.0, 50.0, 100.0, 101.0, 99.0])  # the last three count


def test_steered_shape_follows_its_schedule_and_ends_where_it_says(tmp_path: Path) -> None:
    path = tmp_path / "schedule.jsonl"
    shape = Steered(schedule_path=str(path), max_rate=100.0, duration_s=60.0, idle_rate=2.0)
    assert shape.rate_at(1.0) == 2.0 and shape.end_s() == 60.0  # idle before any change
    RateSchedule.append(path, 2.0, 20.0)
    RateSchedule.append(path, 4.0, 500.0)  # above max_rate: capped
    RateSchedule.append(path, 6.0, None)
    shape._schedule._checked = float("-inf")  # re-read now (the shape re-reads every 50 ms)
    assert shape.rate_at(3.0) == 20.0
    assert shape.rate_at(5.0) == 100.0
    assert shape.rate_at(6.5) == 0.0 and shape.end_s() == 6.0
    times = list(arrival_times(shape))
    assert max(times) < 6.0
    counts = [sum(1 for t in times if i <= t < i + 1) for i in range(6)]
    assert counts == [2, 2, 20, 20, 100, 100]


def test_a_slow_backlog_counts_as_growing_and_noise_does_not() -> None:
    from loadkit.load.search import backlog_growing

    # 25 req/s offered, served at about 24.4: +0.6 requests per second for 15 s
    slow = [round(1 + 0.6 * i) for i in range(15)]
    assert backlog_growing(slow, 25.0)
    assert not backlog_growing([1, 0, 2, 1, 1, 0, 2, 1, 0, 1, 2, 1, 1, 0, 1], 25.0)
    # at 1,000 req/s a queue of 50 +- 10 is noise, 20 more per second (2 %) is not
    assert not backlog_growing([50, 60, 42, 55, 48, 58, 45, 52, 61, 44], 1000.0)
    assert backlog_growing([50 + 20 * i for i in range(10)], 1000.0)


def test_requests_that_waited_for_a_free_user_are_the_generators_limit() -> None:
    from loadkit.load.search import Probe, generator_limited

    # GIVEN one user busy 20 ms per request at 50 req/s: nothing dropped, the scheduler
    # on time, but arrivals waited for the user (corrected P50 312 ms) while the server
    # answered as at low load (service P50 22 ms, P99 24 ms)
    probe = Probe(index=4, rate_rps=52.5, trial=1, start_ns=0, measure_start_ns=0)
    probe.p50_ms, probe.service_p50_ms, probe.service_ms = 312.0, 22.0, 24.0
    probe.corrected_ms, probe.lag_max_ms, probe.dropped = 461.0, 3.0, 0
    settings = _settings(slo_ms=500.0)
    assert generator_limited(probe, settings, baseline_service_p50_ms=22.5)
    # ... and not when the server itself slowed (a saturated server, a small pool)
    probe.service_p50_ms = 180.0
    assert not generator_limited(probe, settings, baseline_service_p50_ms=22.5)
