from math import nan

import numpy as np
import pytest

from loadkit.analysis.align import NS
from loadkit.analysis.episodes import (
    MIN_SCALE_MS,
    _floor_windows,
    baseline_windows_for,
    find_episodes,
    hot_runs,
    iterative_baseline,
    robust_baseline,
)

T0 = 1_700_000_000 * NS


def _find(values, **kw):
    starts = T0 + np.arange(len(values), dtype=np.int64) * NS
    return find_episodes(list(values), starts, 1.0, T0, "p99", **kw)


def test_flat_series_with_mad_zero_has_a_finite_scale_and_no_episodes():
    values = [10.0] * 120
    baseline = robust_baseline(np.array(values))
    assert np.all(baseline.scale >= MIN_SCALE_MS) and np.all(np.isfinite(baseline.scale))
    assert baseline.scale[0] == 0.5  # 5 % of the median wins over MAD = 0
    episodes, _ = _find(values)
    assert episodes == []


def test_flat_series_with_one_spike_finds_it_with_start_peak_and_excess():
    values = [10.0] * 120
    values[50:53] = [25.0, 40.0, 22.0]
    (ep,), _ = _find(values)
    assert ep.episode_id == "p99#1" and ep.start_s == 50.0 and ep.duration_s == 3.0
    assert ep.peak_ms == 40.0 and ep.baseline_ms == 10.0 and ep.excess_ms == 30.0
    assert ep.excess_area_ms_s == 15.0 + 30.0 + 12.0
    assert ep.peak_ns == T0 + 51 * NS and ep.end_ns == T0 + 53 * NS


def test_small_bumps_in_noise_are_not_episodes():
    rng = np.random.default_rng(3)
    values = 10 + rng.normal(0, 0.5, 300)
    episodes, _ = _find(values)
    assert episodes == []


def test_gaps_and_short_dips_merge_into_one_episode():
    values = [10.0] * 100
    values[40:43] = [30.0] * 3
    values[43] = np.nan  # no data in one window
    values[44:46] = [30.0] * 2
    (ep,), _ = _find(values)
    assert ep.start_s == 40.0 and ep.windows == 6


def test_separate_episodes_stay_separate():
    values = [10.0] * 100
    values[20:22] = [30.0, 30.0]
    values[60:62] = [30.0, 30.0]
    episodes, _ = _find(values)
    assert [e.start_s for e in episodes] == [20.0, 60.0]
    assert [e.episode_id for e in episodes] == ["p99#1", "p99#2"]


def test_episode_edges_extend_to_where_the_rise_began():
    values = [10.0] * 100
    values[30:35] = [12.5, 30.0, 30.0, 30.0, 12.5]  # shoulders at 1.25x
    (ep,), _ = _find(values)
    assert ep.start_s == 30.0 and ep.duration_s == 5.0


def test_long_elevation_and_frequent_spikes_do_not_lift_the_baseline():
    # A 22 s plateau plus 4-of-15 s spikes fill about half of every 61 s window.
    values = np.full(120, 10.0)
    values[30:52] = 200.0
    for start in range(5, 120, 15):
        values[start : start + 4] = np.maximum(values[start : start + 4], 20.0)
    episodes, baseline = _find(values)
    assert baseline.median[40] < 12.0
    starts = [e.start_s for e in episodes]
    assert 30.0 in starts or any(
        s <= 30 < s + e.duration_s for s, e in zip(starts, episodes, strict=True)
    )
    assert len(episodes) >= 6


def test_hot_runs_merge_gap():
    hot = np.array([1, 1, 0, 1, 0, 0, 1], dtype=bool)
    assert hot_runs(hot, merge_gap=1) == [(0, 4), (6, 7)]
    assert hot_runs(hot, merge_gap=0) == [(0, 2), (3, 4), (6, 7)]


@pytest.mark.parametrize("window", [601, 61, 15, 13])
def test_vectorized_quiet_mad_equals_pandas_rolling_apply(window):
    import pandas as pd

    from loadkit.analysis.episodes import _mad, _rolling_quiet_mad

    rng = np.random.default_rng(window)
    v = rng.lognormal(2.0, 0.4, 2000)
    v[rng.integers(0, v.size, 400)] = np.nan
    v[700:760] = np.nan  # a gap longer than the window: no data nearby
    v[rng.integers(0, v.size, 100)] *= 5  # one-sided spikes
    min_periods = max(1, window // 4)
    expected = np.array(
        pd.Series(v).rolling(window, center=True, min_periods=min_periods).apply(_mad, raw=True)
    )
    got = _rolling_quiet_mad(v, window, min_periods)
    half = window // 2
    full = slice(half, v.size - half)  # every full centered window (edges: the caller's)
    np.testing.assert_allclose(got[full], expected[full], rtol=1e-12, atol=1e-12, equal_nan=True)
    if window < 60:  # a window inside the gap has no data: NaN
        assert np.isnan(got[700:760]).any()


def test_strided_quiet_mad_of_a_wide_window_stays_close_to_the_exact_one():
    from loadkit.analysis.episodes import MAD_STEPS_PER_WINDOW, _rolling_quiet_mad

    rng = np.random.default_rng(7)
    window = 1025
    v = rng.lognormal(2.0, 0.4, 4_000) * (1 + 0.5 * np.sin(np.arange(4_000) / 1000))
    v[rng.integers(0, v.size, 500)] = np.nan
    exact = _rolling_quiet_mad(v, window, window // 4)
    strided = _rolling_quiet_mad(v, window, window // 4, stride=window // MAD_STEPS_PER_WINDOW)
    full = slice(window // 2, v.size - window // 2)
    assert np.isnan(strided[full]).sum() == np.isnan(exact[full]).sum() == 0
    # The window moved by under 1/64 of itself: the MAD changed by under 10 % (6 % here).
    np.testing.assert_allclose(strided[full], exact[full], rtol=0.1)
    assert not np.array_equal(strided[full], exact[full])  # it is strided, not exact


# The demo's P99 (ms per 1 s window) from a quiet-host run in which the baseline collapsed.
DEMO_P99_MS = [
    nan,
    87.2,
    76.2,
    15.1,
    14.1,
    19.0,
    26.2,
    42.6,
    16.3,
    14.7,
    16.2,
    15.1,
    18.4,
    29.6,
    41.8,
    42.0,
    40.7,
    38.8,
    19.3,
    15.2,
    17.6,
    19.2,
    42.1,
    41.0,
    45.2,
    44.0,
    45.7,
    43.7,
    25.7,
    26.8,
    32.4,
    28.3,
    30.7,
    47.9,
    54.3,
    53.9,
    75.3,
    58.0,
    33.5,
    37.3,
    40.7,
    40.0,
    35.9,
    58.0,
    68.7,
    64.9,
    50.3,
    51.6,
    30.9,
    33.0,
    35.2,
    35.3,
    30.1,
    39.8,
    43.4,
    42.6,
    43.5,
    41.9,
    22.8,
    22.4,
    15.0,
    16.0,
    16.3,
    36.8,
    47.2,
    41.9,
    42.1,
    38.7,
    14.0,
    19.6,
    19.5,
    15.9,
    19.3,
    15.4,
    44.5,
    44.1,
    45.7,
    43.7,
    14.1,
    14.2,
    20.3,
    16.1,
    19.9,
    34.9,
    45.0,
    45.9,
    42.1,
    38.8,
    20.3,
    22.4,
    22.1,
    nan,
    nan,
    nan,
    nan,
]


def test_a_wide_sawtooth_beside_a_burst_keeps_its_baseline_and_its_episodes() -> None:
    # GIVEN the demo's P99: spikes 4 windows in every 10 (the throttled GPU's duty cycle)
    # and a 30 s burst plateau between them; each re-estimation keeps fewer quiet windows,
    # until some 61-window span had too few for a median and the baseline came back NaN
    v = np.array(DEMO_P99_MS)
    # WHEN episodes are found THEN the baseline exists wherever there is data
    baseline, _ = iterative_baseline(v, baseline_windows_for(1.0))
    assert not np.any(np.isnan(baseline.median) & ~np.isnan(v))
    # AND the spikes after the burst are episodes
    found, _ = find_episodes(DEMO_P99_MS, T0 + np.arange(len(v)) * NS, 1.0, T0, "p99")
    late = [e for e in found if e.start_s >= 60]
    assert len(late) >= 3, [(e.start_s, e.duration_s) for e in found]


def test_spikes_that_fill_most_windows_are_found_against_the_floor() -> None:
    # GIVEN bursts whose backlog keeps P99 at 0.5-2 s for 6 of every 8 windows, over a
    # 15-20 ms floor (the floor is a quarter of the windows: every quantile up to the
    # median sits on the spikes)
    rng = np.random.default_rng(3)
    values = []
    for _ in range(8):
        values += list(rng.uniform(15.0, 20.0, 2)) + [500.0, 1200.0, 1900.0, 1500.0, 900, 500]
    # WHEN the episodes are found
    episodes, baseline = _find(values)
    # THEN the baseline is the floor and every burst is an episode of its own
    assert float(np.nanmax(baseline.median)) < 25.0
    assert len(episodes) == 8
    assert all(e.peak_ms >= 1500.0 for e in episodes)


@pytest.mark.parametrize("seed", range(8))
def test_a_noisy_series_without_spikes_does_not_take_the_floor_path(seed: int) -> None:
    # A latency percentile's noise (lognormal, 30 % spread) never falls to a third of
    # its median in a sizeable share of windows (nor does one with a few spikes): the
    # baseline is found from all windows, as before.
    rng = np.random.default_rng(seed)
    values = 12.0 * rng.lognormal(0.0, 0.3, 300)
    assert _floor_windows(values) is None
    values[::10] *= 20.0  # a 10 % share of big spikes
    assert _floor_windows(values) is None


def test_a_plateau_held_half_the_time_is_found_against_the_level_below_its_gap() -> None:
    # GIVEN a quota held for half of every period: P99 on a 14-19 ms plateau in half
    # of the windows, 5.5-7 ms in the rest, nothing in between (the quiet level sits
    # above a third of the median, and the quiet side of the median is the plateau's)
    rng = np.random.default_rng(5)
    values: list[float] = []
    for _ in range(8):
        values += list(rng.uniform(14.0, 19.0, 2)) + list(rng.uniform(5.5, 7.0, 2))
    # WHEN the episodes are found
    episodes, baseline = _find(values)
    # THEN the baseline is the quiet level and every plateau is an episode
    assert float(np.nanmax(baseline.median)) < 7.0
    assert len(episodes) == 8


@pytest.mark.parametrize("seed", range(8))
def test_a_wide_noisy_series_has_no_gap_to_take_as_a_floor(seed: int) -> None:
    # Skewed noise as wide as a P99 over 40 requests a window (a factor of 4 from the
    # lowest to the highest window) fills the range between its levels: no floor.
    rng = np.random.default_rng(seed)
    values = 3.0 * rng.lognormal(0.0, 0.4, 60)
    assert _floor_windows(values) is None
