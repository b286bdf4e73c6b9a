import numpy as np
import pytest

from loadkit.analysis.alerts import alerts
from loadkit.analysis.drift import SoakSignals, soak_drift
from loadkit.analysis.model import LatencySummary, OverallStats
from loadkit.analysis.slo import parse_slo, resolve_slo, slo_verdict
from loadkit.errors import UsageError
from loadkit.testing.synthetic import Burst, RunSpec


def _overall(p99=40.0, errors=0, dropped=0, completed=10_000):
    lat = LatencySummary("corrected", completed, 5.0, 8.0, 10.0, p99, 60.0, 70.0, 6.0)
    return OverallStats(
        60.0,
        completed,
        completed,
        completed - errors,
        errors,
        dropped,
        0,
        100.0 * errors / completed,
        0.0,
        100.0,
        100.0,
        lat,
        lat,
    )


def test_parse_slo_units_and_errors():
    assert parse_slo("p99=50ms,errors=0.1%") == {"p99_ms": 50.0, "errors_pct": 0.1}
    assert parse_slo("p95=0.03s, p50=800us") == {"p95_ms": 30.0, "p50_ms": 0.8}
    assert parse_slo("p99<=50") == {"p99_ms": 50.0}
    # one spelling for users everywhere: --abort-on and capacity accept p99.9 too
    assert parse_slo("p99.9=80ms,P999<=90ms") == {"p999_ms": 90.0}
    assert parse_slo("P99.9=80ms") == {"p999_ms": 80.0}
    with pytest.raises(UsageError):
        parse_slo("p98=5ms")
    with pytest.raises(UsageError):
        parse_slo("errors=3ms")
    with pytest.raises(UsageError):
        parse_slo("p99=5%")


def test_thresholds_command_line_over_scenario_over_default():
    merged, source = resolve_slo({"p99_ms": 30.0}, {"p99_ms": 40.0, "p95_ms": 20.0, "note": "x"})
    assert merged == {"p99_ms": 30.0, "errors_pct": 0.1, "p95_ms": 20.0}
    assert source == "command line+scenario+default"
    assert resolve_slo(None, None) == ({"p99_ms": 50.0, "errors_pct": 0.1}, "default")


def test_verdict_pass_and_fail_per_threshold():
    ok = slo_verdict({"p99_ms": 50.0, "errors_pct": 0.1}, "default", _overall())
    assert ok.passed and all(c.passed for c in ok.slos)
    bad = slo_verdict({"p99_ms": 50.0, "errors_pct": 0.1}, "default", _overall(p99=80.0, errors=20))
    assert not bad.passed
    assert {c.name: c.passed for c in bad.slos} == {"p99": False, "errors": False}
    assert "p99 80ms > 50ms" in bad.summary


def test_dropped_arrivals_count_against_the_error_slo():
    v = slo_verdict({"errors_pct": 0.1}, "default", _overall(dropped=50))
    assert not v.passed and v.slos[0].observed == pytest.approx(100 * 50 / 10_050)


def test_alerts_p99_idle_gpu_and_temperature():
    n = 60
    starts = np.arange(n, dtype=np.int64) * 10**9
    p99 = np.full(n, 20.0)
    p99[10:13] = 120.0
    util = np.full(n, 50.0)
    util[20:55] = 5.0
    temp = np.full(n, 70.0)
    temp[40:44] = [86.0, 91.0, 92.0, 86.0]
    out = {a.name: a for a in alerts(starts, 1.0, p99, util, temp, np.full(n, 100.0))}
    assert out["p99_high"].value == 120.0 and out["p99_high"].severity == "critical"
    assert out["gpu_underutilized"].severity == "warn"
    assert out["gpu_temp_throttling"].value == 92.0
    assert out["gpu_temp_high"].severity == "warn"
    short = alerts(
        starts, 1.0, np.full(n, 10.0), np.where(np.arange(n) < 10, 5.0, 50.0), None, np.full(n, 1.0)
    )
    assert short == []  # 10 s of low utilization is not sustained


def test_temperature_alerts_use_the_devices_own_slowdown_temperature():
    """A GPU that throttles at 87 °C is critical at 88 °C, though under the typical 90."""
    n = 20
    starts = np.arange(n, dtype=np.int64) * 10**9
    temp = np.full(n, 70.0)
    temp[5:8] = [84.0, 88.0, 84.0]
    args = (starts, 1.0, np.full(n, 10.0), None, temp, np.full(n, 100.0))
    own = {a.name: a for a in alerts(*args, np.full(n, 87.0))}
    assert own["gpu_temp_throttling"].value == 88.0
    assert "87 °C, the device's own slowdown temperature" in own["gpu_temp_throttling"].message
    assert own["gpu_temp_high"].value == 88.0  # from 82 °C: within 5 °C of 87
    typical = {a.name: a for a in alerts(*args)}  # not recorded: 90 / 85 as before
    assert "gpu_temp_throttling" not in typical
    assert "a typical GPU's" in typical["gpu_temp_high"].message


def test_burst_recovery_on_a_burst_beyond_capacity(analyze_spec):
    a = analyze_spec(RunSpec(rate_rps=600, bursts=(Burst(30, 45, 2.0),)), "burstcap")
    (r,) = a.recoveries
    assert r.rate == 1200.0
    assert r.pre_burst_p99_ms is not None and r.pre_burst_p99_ms < 30
    assert r.peak_p99_ms is not None and r.peak_p99_ms > 1000
    assert r.recovered and r.recovery_s is not None and 3 <= r.recovery_s <= 20
    assert r.excess_area_ms_s is not None and r.excess_area_ms_s > 1000
    assert r.batch_size_mean_during > r.batch_size_mean_before
    assert r.queue_ms_during > 10 * r.queue_ms_before


def test_saturation_knee_from_steps(analyze_spec):
    spec = RunSpec(duration_s=80, rate_rps=200, steps=((0, 200), (20, 500), (40, 900), (60, 1300)))
    a = analyze_spec(spec, "steps")
    knee = a.knee
    assert knee is not None and knee.found
    assert [round(s.offered_rps or 0, -2) for s in knee.steps] == [200, 500, 900, 1300]
    assert knee.knee_offered_rps == pytest.approx(900, rel=0.1)
    last = knee.steps[-1]
    assert not last.ok and ("achieved" in last.reason or "P99" in last.reason)


def test_soak_drift_projects_memory_exhaustion():
    t = np.arange(0, 3600.0, 1.0)
    rng = np.random.default_rng(0)
    mem = 20e9 + 1e6 * t + rng.normal(0, 1e7, t.size)  # +3.6 GB/h
    p50 = 5.0 + rng.normal(0, 0.1, t.size)
    flat = np.full(t.size, 100.0)

    def signals(n: int) -> SoakSignals:
        return SoakSignals(
            t_s=t[:n],
            window_s=1.0,
            p50_ms=p50[:n],
            throughput_rps=flat[:n],
            offered_rps=flat[:n],
            errors=np.zeros(n),
            completed=flat[:n],
            gpu_mem_used_bytes=mem[:n],
            gpu_mem_total_bytes=80e9,
        )

    soak = soak_drift(signals(t.size))
    assert soak is not None
    trend = {x.metric: x for x in soak.trends}
    gpu = trend["gpu_mem_used_bytes"]
    assert gpu.significant and gpu.slope_per_hour == pytest.approx(3.6e9, rel=0.05)
    assert gpu.hours_to_exhaustion == pytest.approx((80e9 - 23.6e9) / 3.6e9, rel=0.1)
    assert (
        not trend["latency_floor_ms"].significant
        or abs(trend["latency_floor_ms"].slope_per_hour) < 0.5
    )
    assert soak_drift(signals(300)) is None  # too short
