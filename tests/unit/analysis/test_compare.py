"""Run-to-run comparison: differences judged against noise estimated within the runs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from loadkit.analysis.compare import (
    PooledPercentile,
    batches_of,
    compare_analyses,
    jackknife_variance,
    leave_one_out,
)
from loadkit.analysis.model import LatencyWindows
from loadkit.testing.synthetic import RunSpec, demo_spec

QUIET = RunSpec(rate_rps=200, seed=1)
LATENCY = ("p50_ms", "p95_ms", "p99_ms", "p999_ms", "service_p99_ms")


def _by_name(comparison):
    return {d.name: d for d in comparison.metrics}


def test_pooled_percentile_of_identical_windows_is_their_percentile():
    lat = LatencyWindows(
        kind="corrected",
        count=(100, 100, 300, 0),
        p50_ms=(5.0, 5.0, 5.0, None),
        p95_ms=(8.0, 8.0, 8.0, None),
        p99_ms=(10.0, 10.0, 10.0, None),
        p999_ms=(15.0, 15.0, 15.0, None),
        max_ms=(20.0, 20.0, 20.0, None),
        basis_count=(100, 100, 300, 0),
    )
    parts = [np.array([0, 1]), np.array([2, 3])]
    keep = np.ones(2, dtype=bool)
    assert PooledPercentile(lat, parts, 0.99).value(keep) == pytest.approx(10.0)
    assert PooledPercentile(lat, parts, 0.5).value(keep) == pytest.approx(5.0)
    assert PooledPercentile(lat, parts, 0.97).value(keep) == pytest.approx(9.0)  # interpolated
    loo = leave_one_out(PooledPercentile(lat, parts, 0.99), 2)
    assert loo == pytest.approx([10.0, 10.0]) and jackknife_variance(loo) == 0.0


def test_batches_are_contiguous_and_need_five_windows_each():
    assert batches_of(9) == []
    parts = batches_of(103)
    assert len(parts) == 10 and np.concatenate(parts).tolist() == list(range(103))
    assert len(batches_of(12)) == 2


def test_a_run_against_itself_differs_by_nothing(analyze_spec):
    a = analyze_spec(QUIET, "quiet")
    c = compare_analyses(a, a)
    for d in c.metrics:
        assert d.delta == 0 and d.exceeds_noise is False and d.paired and d.batches == 10
        assert d.better is None
    assert c.findings_appeared == () and c.findings_disappeared == ()
    assert "no headline number differs" in c.summary


def test_another_seed_of_the_same_scenario_is_within_noise(analyze_spec):
    a = analyze_spec(demo_spec(1), "demo-1")
    b = analyze_spec(demo_spec(2), "demo-2")
    found = _by_name(compare_analyses(a, b))
    for name in (*LATENCY, "offered_rps", "throughput_rps"):
        d = found[name]
        assert d.noise is not None and d.noise > 0
        assert d.exceeds_noise is False, d


def test_a_slower_model_exceeds_noise_and_is_worse(analyze_spec):
    a = analyze_spec(QUIET, "quiet")
    b = analyze_spec(replace(QUIET, seed=2, compute_us_per_batch=4500.0), "slower")
    c = compare_analyses(a, b)
    found = _by_name(c)
    for name in ("p50_ms", "p95_ms", "p99_ms"):
        assert found[name].delta > 0 and found[name].exceeds_noise is True
        assert found[name].better is False
    # The offered rate was the same: its difference stays within noise.
    assert found["offered_rps"].exceeds_noise is False and found["offered_rps"].better is None
    assert "P99" in c.summary and "worse" in c.summary
    assert found["p99_ms"].delta == pytest.approx(
        b.overall.corrected.p99_ms - a.overall.corrected.p99_ms
    )
    assert found["p99_ms"].delta_pct == pytest.approx(
        100 * found["p99_ms"].delta / a.overall.corrected.p99_ms
    )


def test_a_higher_offered_rate_is_beyond_noise(analyze_spec):
    a = analyze_spec(QUIET, "quiet")
    b = analyze_spec(replace(QUIET, seed=2, rate_rps=240), "faster")
    found = _by_name(compare_analyses(a, b))
    assert found["offered_rps"].exceeds_noise is True
    assert found["throughput_rps"].exceeds_noise is True and found["throughput_rps"].better


def test_runs_of_different_length_are_compared_unpaired_and_short_runs_have_no_noise(
    analyze_spec,
):
    a = analyze_spec(QUIET, "quiet")
    longer = analyze_spec(replace(QUIET, seed=3, duration_s=150.0), "longer")
    d = _by_name(compare_analyses(a, longer))["p99_ms"]
    assert d.paired is False and d.noise is not None and d.exceeds_noise is not None
    tiny = analyze_spec(replace(QUIET, duration_s=8.0), "tiny")
    c = compare_analyses(tiny, tiny)
    assert all(m.noise is None and m.exceeds_noise is None for m in c.metrics)
    assert "too short" in c.summary
