"""Shapes and the arrival scheduler: pure functions, no processes."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from loadkit.errors import UsageError
from loadkit.load.generator.arrivals import arrival_times, counts_per_second
from loadkit.load.shapes import (
    Burst,
    Constant,
    PeriodicBursts,
    Ramp,
    Sine,
    Steps,
    TraceReplay,
    Truncated,
    integral,
)


def test_constant_rate_and_bounds():
    s = Constant(rate=50, duration_s=10)
    assert s.rate_at(0) == 50 and s.rate_at(9.99) == 50
    assert s.rate_at(10) == 0 and s.rate_at(-1) == 0
    assert s.peak_rate() == 50


def test_burst_timeline_and_phases():
    s = Burst(base_rate=100, multiplier=2, steady_s=5, rise_s=10, hold_s=5, fall_s=10, recover_s=5)
    assert s.duration_s == 35
    assert s.rate_at(4.9) == 100
    assert s.rate_at(10) == pytest.approx(150)  # halfway up the rise
    assert s.rate_at(15.0) == 200 and s.rate_at(19.9) == 200
    assert s.rate_at(25) == pytest.approx(150)
    assert s.rate_at(30) == 100
    names = [(p.t_s, p.name) for p in s.phases()]
    assert names == [(5, "burst-start"), (15, "burst-peak"), (20, "burst-fall"), (30, "burst-end")]
    assert s.peak_rate() == pytest.approx(200)


def test_burst_with_instant_edges():
    s = Burst(base_rate=10, multiplier=3, steady_s=1, rise_s=0, hold_s=1, fall_s=0, recover_s=1)
    assert [s.rate_at(t) for t in (0.5, 1.0, 1.5, 2.0, 2.5)] == [10, 30, 30, 10, 10]


def test_periodic_bursts_square_wave_and_phases():
    s = PeriodicBursts(base_rate=10, multiplier=4, period_s=5, duty=0.2, duration_s=12)
    assert s.rate_at(0.5) == 40 and s.rate_at(1.5) == 10 and s.rate_at(5.2) == 40
    starts = [p.t_s for p in s.phases() if p.name == "burst-start"]
    assert starts == [0, 5, 10]


def test_steps_and_ramp_and_sine():
    st = Steps(start_rate=10, step_rate=20, step_s=2, steps=3)
    assert st.duration_s == 6 and [st.rate_at(t) for t in (1, 3, 5)] == [10, 30, 50]
    assert [p.attrs["rate"] for p in st.phases()] == [10, 30, 50]
    r = Ramp(start_rate=0, end_rate=100, duration_s=10)
    assert r.rate_at(5) == pytest.approx(50)
    sn = Sine(mean_rate=100, amplitude=0.5, period_s=20, duration_s=40)
    assert sn.rate_at(5) == pytest.approx(150)
    assert [p.name for p in sn.phases()][:2] == ["peak", "trough"]


def test_invalid_parameters_are_usage_errors():
    with pytest.raises(UsageError):
        Constant(rate=-1, duration_s=1)
    with pytest.raises(UsageError):
        PeriodicBursts(base_rate=1, multiplier=2, period_s=5, duty=1.5, duration_s=10)


@pytest.mark.parametrize(
    "shape",
    [
        Constant(rate=200, duration_s=5),
        Ramp(start_rate=0, end_rate=300, duration_s=6),
        Burst(base_rate=100, multiplier=2, steady_s=2, rise_s=3, hold_s=2, fall_s=1, recover_s=2),
        PeriodicBursts(base_rate=50, multiplier=3, period_s=2, duty=0.25, duration_s=6),
        Sine(mean_rate=80, amplitude=0.7, period_s=4, duration_s=8),
    ],
    ids=lambda s: type(s).__name__,
)
def test_constant_spacing_counts_match_integral_each_second(shape):
    counts = counts_per_second(arrival_times(shape), shape.duration_s)
    for second, count in enumerate(counts):
        expected = integral(shape, second, min(second + 1, shape.duration_s))
        assert abs(count - expected) <= 1.01, (second, count, expected)


def test_poisson_is_seeded_reproducible_and_unbiased():
    shape = Constant(rate=500, duration_s=20)
    a = list(arrival_times(shape, spacing="poisson", seed=7))
    b = list(arrival_times(shape, spacing="poisson", seed=7))
    c = list(arrival_times(shape, spacing="poisson", seed=8))
    assert a == b and a != c
    # 10000 expected; Poisson sd 100 -> 5 sd bound
    assert abs(len(a) - 10_000) < 500
    gaps = [y - x for x, y in itertools.pairwise(a)]
    cv = (sum((g - 0.002) ** 2 for g in gaps) / len(gaps)) ** 0.5 / 0.002
    assert 0.9 < cv < 1.1  # exponential gaps: coefficient of variation 1


def test_worker_split_is_a_partition_of_the_single_sequence():
    shape = Burst(base_rate=50, multiplier=2, steady_s=1, rise_s=1, hold_s=1, fall_s=1, recover_s=1)
    whole = list(arrival_times(shape, spacing="poisson", seed=3))
    parts = [
        list(arrival_times(shape, spacing="poisson", seed=3, worker_index=i, worker_count=3))
        for i in range(3)
    ]
    assert sorted(itertools.chain(*parts)) == whole
    assert all(abs(len(p) - len(whole) / 3) <= 1 for p in parts)


def test_arrivals_are_ascending_and_inside_the_run():
    shape = Sine(mean_rate=300, amplitude=1.0, period_s=3, duration_s=6)
    times = list(arrival_times(shape, spacing="poisson", seed=1))
    assert times == sorted(times) and 0 <= times[0] and times[-1] < 6


def test_trace_of_rates_with_time_scaling(tmp_path: Path):
    path = tmp_path / "rates.csv"
    path.write_text("t_s,rate\n0,10\n1,20\n2,30\n3,40\n")
    s = TraceReplay.from_csv(path, time_scale=2.0)
    assert s.duration_s == 2.0
    # twice as fast: each original second is half a second, so the rate doubles
    assert s.rate_at(0.1) == 20 and s.rate_at(0.6) == 40 and s.rate_at(1.9) == 80
    assert sum(counts_per_second(arrival_times(s), s.duration_s)) == 100


def test_trace_of_timestamps_replays_exact_requests(tmp_path: Path):
    path = tmp_path / "ts.csv"
    base = 1_700_000_000_000_000_000
    path.write_text("timestamp\n" + "\n".join(str(base + i * 250_000_000) for i in range(8)))
    s = TraceReplay.from_csv(path, time_scale=2.0)
    assert list(arrival_times(s)) == [i * 0.125 for i in range(8)]
    assert s.rate_at(0.5) == 8.0
    with pytest.raises(UsageError):
        TraceReplay.from_csv(path, rate_scale=2.0)


def test_trace_without_known_column_is_usage_error(tmp_path: Path):
    path = tmp_path / "bad.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(UsageError, match="no 'rate' or 'timestamp'"):
        TraceReplay.from_csv(path)


def test_truncated_cuts_and_extends():
    inner = Constant(rate=10, duration_s=5)
    assert Truncated(inner, 3).duration_s == 3 and Truncated(inner, 3).rate_at(3.5) == 0
    assert Truncated(inner, 8).rate_at(7) == 10
    burst = Burst(base_rate=1, steady_s=1, rise_s=1, hold_s=1, fall_s=1, recover_s=1)
    assert [p.name for p in Truncated(burst, 2.5).phases()] == ["burst-start", "burst-peak"]
