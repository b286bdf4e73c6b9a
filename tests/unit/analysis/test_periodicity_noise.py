"""Periods on a busy host: small off-phase spikes, stalls without percentiles, the run's period."""

import numpy as np

from loadkit.analysis.align import NS
from loadkit.analysis.episodes import find_episodes
from loadkit.analysis.model import Periodicity
from loadkit.analysis.periodicity import (
    _onsets_for,
    detect_periodicity,
    largest_spikes,
    run_period,
)

T0 = 1_700_000_000 * NS


def _detect(values):
    starts = T0 + np.arange(len(values), dtype=np.int64) * NS
    vals = [None if v is None or np.isnan(v) else float(v) for v in values]
    episodes, _ = find_episodes(vals, starts, 1.0, T0, "p99")
    return detect_periodicity(vals, 1.0, episodes, "p99")


def _spiky(n=75, period=9.0, first=11, height=200.0, seed=0):
    rng = np.random.default_rng(seed)
    values = 8.0 + rng.normal(0, 0.4, n)
    t = float(first)
    while t + 2 < n:
        s = int(round(t))
        values[s : s + 2] = height
        t += period
    return values


def test_small_off_phase_spikes_do_not_hide_a_sawtooth_of_big_ones():
    # GIVEN big spikes every 9 s and four one-window blips (one slow request) between them
    values = _spiky()
    for s in (16, 25, 42, 61):
        values[s] = 25.0
    # THEN the fold on the big spikes alone confirms the period
    result = _detect(values)
    assert result.periodic, result.reason
    assert abs(result.period_s - 9.0) / 9.0 < 0.05
    assert "largest spikes" in (result.reason or "")


def test_same_size_random_spikes_are_still_not_periodic():
    rng = np.random.default_rng(11)
    values = 8.0 + rng.normal(0, 0.4, 90)
    for s in sorted(rng.choice(np.arange(5, 85), 8, replace=False)):
        values[s] = 200.0 * rng.uniform(0.8, 1.2)
    assert not _detect(values).periodic


def test_largest_spikes_need_a_size_gap_and_enough_members():
    onsets = np.arange(8, dtype=float) * 9
    sizes = np.array([5.0, 5.1, 0.5, 5.2, 0.6, 5.0, 4.9, 0.4])
    assert largest_spikes(onsets, sizes).tolist() == [0.0, 9.0, 27.0, 45.0, 54.0]
    assert largest_spikes(onsets[:4], sizes[:4]) is None  # too few to test
    assert largest_spikes(onsets, None) is None


def test_a_stall_spike_starts_where_its_empty_windows_start():
    # GIVEN stalls every 9 s whose first window completes nothing (no percentile)
    values = _spiky(first=11)
    values[:5] = np.nan  # the warm-up left out: not a spike start
    for s in (11, 20, 29, 38, 47, 56, 65):
        values[s] = np.nan
    onsets, sizes = _onsets_for(list(values), 1.0, 9.0, np.array([]))
    # THEN each spike starts at its empty window, not at the late completions after it
    assert onsets.tolist() == [11.0, 20.0, 29.0, 38.0, 47.0, 56.0, 65.0]
    assert sizes is not None and len(sizes) == len(onsets)


def test_run_period_falls_back_to_the_most_significant_other_percentile():
    p99 = Periodicity(percentile="p99", periodic=False, reason="not phase-locked")
    p95 = Periodicity(percentile="p95", periodic=True, period_s=9.1, p_value=0.002)
    p50 = Periodicity(percentile="p50", periodic=True, period_s=9.0, p_value=0.0003)
    assert run_period([p99, p95, p50], "p99") is p50
    own = Periodicity(percentile="p99", periodic=True, period_s=9.2, p_value=0.004)
    assert run_period([own, p50], "p99") is own
    assert run_period([p99], "p99") is None
