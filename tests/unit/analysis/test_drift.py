"""Drift findings of a soak: a rising series is found, a flat noisy series is not."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadkit.analysis.drift import SoakSignals, robust_trend, soak_drift
from loadkit.analysis.model import Analysis
from loadkit.analysis.pipeline import analyze_run
from loadkit.report import html, markdown
from loadkit.rundir import load_run
from loadkit.testing.synthetic import RunSpec, write_run

GIB = 2**30
MIB = 2**20
HOURS = 2.0
SEEDS = range(8)


def _signals(seed: int = 0, hours: float = HOURS, **overrides: object) -> SoakSignals:
    """A steady 2 h run at 1 s windows: every series flat with realistic noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(0, hours * 3600, 1.0)
    n = t.size
    base: dict[str, object] = {
        "t_s": t,
        "window_s": 1.0,
        "p50_ms": 8.0 + np.abs(rng.normal(0, 0.6, n)),
        "throughput_rps": 1000 + rng.normal(0, 8, n),
        "offered_rps": np.full(n, 1000.0),
        "errors": rng.poisson(0.05, n).astype(float),  # sporadic errors all along
        "completed": np.full(n, 1000.0),
        "gpu_mem_used_bytes": 20 * GIB + rng.normal(0, 40 * MIB, n),
        "gpu_mem_total_bytes": 80.0 * GIB,
        "server_rss_bytes": 3 * GIB + rng.normal(0, 30 * MIB, n),
        "host_memory_bytes": 64.0 * GIB,
        "compute_ms_per_request": 2.0 + rng.normal(0, 0.15, n),
    }
    base.update(overrides)
    return SoakSignals(**base)  # type: ignore[arg-type]


def _drifts(s: SoakSignals) -> dict[str, object]:
    soak = soak_drift(s)
    assert soak is not None
    return {f.drift: f for f in soak.findings}


@pytest.mark.parametrize("seed", SEEDS)
def test_flat_noisy_soak_has_no_drift_finding(seed):
    soak = soak_drift(_signals(seed))
    assert soak is not None
    assert soak.findings == (), [f.summary for f in soak.findings]
    assert soak.summary.startswith("no drift that matters")


def test_short_run_is_not_a_soak():
    assert soak_drift(_signals(hours=0.1)) is None


def test_server_rss_growth_found_with_slope_and_interval():
    t = np.arange(0, HOURS * 3600, 1.0)
    rng = np.random.default_rng(1)
    rss = 3 * GIB + 50 * MIB * t / 3600 + rng.normal(0, 30 * MIB, t.size)  # +50 MiB/h
    found = _drifts(_signals(server_rss_bytes=rss))
    f = found.pop("server_memory_growth")
    assert not found
    ev = {e.name: e.value for e in f.evidence}
    assert ev["slope"] == pytest.approx(50, rel=0.15)  # MiB/h
    assert ev["slope_low"] < 50 < ev["slope_high"]
    assert ev["hours_to_host_memory"] == pytest.approx((64 * 1024 - 3 * 1024 - 100) / 50, rel=0.1)
    assert "MiB/h" in f.summary and f.action


def test_rss_slope_significant_but_immaterial_is_not_a_finding():
    t = np.arange(0, HOURS * 3600, 1.0)
    rss = 3 * GIB + 1 * MIB * t / 3600  # +1 MiB/h, noiseless: significant, 24 MiB a day
    soak = soak_drift(_signals(server_rss_bytes=rss))
    assert soak is not None and soak.findings == ()
    trend = {t.metric: t for t in soak.trends}["server_rss_bytes"]
    assert trend.significant and "immaterial" in soak.summary


def test_gpu_memory_growth_found_and_projects_20pct_free():
    t = np.arange(0, HOURS * 3600, 1.0)
    rng = np.random.default_rng(2)
    # An old model version never released: +2 GiB an hour in steps of 512 MiB.
    used = 20 * GIB + 512 * MIB * np.floor(t / 900) + rng.normal(0, 40 * MIB, t.size)
    found = _drifts(_signals(gpu_mem_used_bytes=used))
    f = found.pop("gpu_memory_growth")
    assert not found
    ev = {e.name: e.value for e in f.evidence}
    assert ev["slope"] == pytest.approx(2048, rel=0.15)
    peak = 20 * 1024 + 512 * 7
    assert ev["hours_to_20pct_free"] == pytest.approx((0.8 * 80 * 1024 - peak) / 2048, rel=0.2)
    assert f.severity == "critical"


def test_gpu_memory_under_20pct_free_at_peak_is_found_without_growth():
    rng = np.random.default_rng(3)
    used = 70 * GIB + rng.normal(0, 40 * MIB, int(HOURS * 3600))
    found = _drifts(_signals(gpu_mem_used_bytes=used))
    assert set(found) == {"gpu_memory_headroom"}
    ev = {e.name: e.value for e in found["gpu_memory_headroom"].evidence}  # type: ignore[attr-defined]
    assert ev["free_at_peak"] == pytest.approx(12.5, abs=0.5)


def test_latency_floor_creep_found():
    t = np.arange(0, HOURS * 3600, 1.0)
    rng = np.random.default_rng(4)
    p50 = 8.0 + 1.5 * t / 3600 + np.abs(rng.normal(0, 0.6, t.size))  # +1.5 ms/h
    found = _drifts(_signals(p50_ms=p50))
    f = found.pop("latency_floor_creep")
    assert not found
    ev = {e.name: e.value for e in f.evidence}
    assert ev["slope"] == pytest.approx(1.5, rel=0.15)
    assert ev["start"] == pytest.approx(8.2, abs=0.3)


def test_latency_floor_with_spikes_but_no_creep_is_not_found():
    rng = np.random.default_rng(5)
    p50 = 8.0 + np.abs(rng.normal(0, 0.6, int(HOURS * 3600)))
    p50[rng.integers(0, p50.size, 300)] += 40.0  # stalls: spikes, not a floor
    p50[-600:] += 20.0  # a bad last 10 minutes: the floor's minute minimum barely moves
    assert "latency_floor_creep" not in _drifts(_signals(p50_ms=p50))


def test_compute_capacity_fall_found():
    t = np.arange(0, HOURS * 3600, 1.0)
    rng = np.random.default_rng(6)
    compute = 2.0 * (1 + 0.1 * t / 3600) + rng.normal(0, 0.15, t.size)  # +10 %/h per request
    found = _drifts(_signals(compute_ms_per_request=compute))
    f = found.pop("capacity_fall")
    assert not found
    ev = {e.name: e.value for e in f.evidence}
    assert ev["start"] == pytest.approx(500, rel=0.1)
    assert ev["slope"] < 0 and ev["slope_high"] < 0


def test_served_share_falling_is_a_capacity_fall():
    t = np.arange(0, HOURS * 3600, 1.0)
    rng = np.random.default_rng(7)
    served = 1000 * (1 - 0.05 * t / 3600) + rng.normal(0, 8, t.size)  # -5 points an hour
    found = _drifts(_signals(throughput_rps=served, compute_ms_per_request=None))
    assert set(found) == {"capacity_fall"}
    assert "served_pct" == found["capacity_fall"].metric  # type: ignore[attr-defined]


def test_errors_that_start_after_hours_are_found_with_onset():
    t = np.arange(0, HOURS * 3600, 1.0)
    rng = np.random.default_rng(8)
    errors = rng.poisson(0.05, t.size).astype(float)
    late = t >= 1.5 * 3600
    errors[late] += rng.poisson(5.0, late.sum())  # 0.5 % from 1.5 h on
    found = _drifts(_signals(errors=errors))
    f = found.pop("errors_onset")
    assert not found
    assert f.onset_s == pytest.approx(1.5 * 3600, abs=120)  # type: ignore[attr-defined]
    ev = {e.name: e.value for e in f.evidence}  # type: ignore[attr-defined]
    assert ev["error_pct_after"] == pytest.approx(0.505, rel=0.1)
    assert "1.5 h" in f.title  # type: ignore[attr-defined]


def test_a_burst_of_errors_that_ends_is_not_an_onset():
    t = np.arange(0, HOURS * 3600, 1.0)
    rng = np.random.default_rng(9)
    errors = rng.poisson(0.05, t.size).astype(float)
    errors[3600:3720] += 50  # two bad minutes in the middle, then gone
    assert "errors_onset" not in _drifts(_signals(errors=errors))


def test_errors_from_the_start_are_not_an_onset():
    rng = np.random.default_rng(10)
    errors = rng.poisson(5.0, int(HOURS * 3600)).astype(float)
    assert "errors_onset" not in _drifts(_signals(errors=errors))


def test_robust_trend_ignores_outliers():
    t = np.arange(0, 3600.0, 1.0)
    y = 100 + 10 * t / 3600
    y[::50] = 1e6  # a sensor glitch every 50 s
    trend = robust_trend("x", "u", t, y)
    assert trend is not None and trend.significant
    assert trend.slope_per_hour == pytest.approx(10, rel=0.05)
    assert robust_trend("x", "u", t[:5], y[:5]) is None


def test_pipeline_reports_server_memory_growth_of_a_soak(tmp_path):
    # GIVEN an 11-minute run whose server RSS grows 400 MiB an hour (host sampled at 1 Hz)
    spec = RunSpec(
        duration_s=660, rate_rps=5, gpu_interval_s=1.0, rss_drift_bytes_per_s=400 * MIB / 3600
    )
    run = load_run(write_run(spec, tmp_path, run_id="leak"))
    # WHEN it is analyzed and reported
    analysis = analyze_run(run)
    # THEN the drift is a finding, in the analysis, the Markdown and the HTML
    assert analysis.soak is not None
    drifts = {f.drift: f for f in analysis.soak.findings}
    assert set(drifts) == {"server_memory_growth"}
    ev = {e.name: e.value for e in drifts["server_memory_growth"].evidence}
    assert ev["slope"] == pytest.approx(400, rel=0.05)
    assert "Server memory grows" in markdown.render(run, analysis)
    assert 'data-drift="server_memory_growth"' in html.render(run, analysis)
    # AND the analysis reads back from JSON with its drift findings
    again = Analysis.from_dict(json.loads(analysis.to_json()))
    assert again.soak is not None and again.soak.findings == analysis.soak.findings
