import numpy as np

from loadkit.analysis.align import NS, make_grid
from loadkit.analysis.percentiles import (
    MIN_REQUESTS_FOR_P99,
    choose_window_s,
    histograms_by_window,
    merge,
    window_percentiles,
)
from loadkit.rundir import IntervalHistogram, new_histogram

T0 = 1_700_000_000 * NS


def _interval(second: int, values_us, kind="corrected", source="a"):
    h = new_histogram()
    for v in values_us:
        h.record_value(int(v))
    return IntervalHistogram(
        T0 + second * NS, T0 + (second + 1) * NS, f"{kind}:infer", kind, "infer", h, source
    )


def test_percentiles_come_from_merged_histograms_never_averaged():
    # Two processes in the same second: one fast, one slow.
    fast = _interval(0, [1000] * 990)
    slow = _interval(0, [100_000] * 10, source="b")
    grid = make_grid(T0, T0 + NS, 1.0)
    wp = window_percentiles(
        histograms_by_window([fast, slow], grid, "corrected"), grid, "corrected"
    )
    # The P99 of the union is the fast value; the P99.9 is slow. Averaging P99s would give ~50 ms.
    assert abs(wp.latency.p99_ms[0] - 1.0) < 0.01
    assert abs(wp.latency.p999_ms[0] - 100.0) < 0.1
    assert wp.latency.count == (1000,)


def test_kinds_are_kept_apart_and_empty_windows_are_none():
    grid = make_grid(T0, T0 + 3 * NS, 1.0)
    intervals = [_interval(0, [2000] * 200), _interval(0, [500] * 200, kind="service")]
    corrected = window_percentiles(
        histograms_by_window(intervals, grid, "corrected"), grid, "corrected"
    )
    service = window_percentiles(histograms_by_window(intervals, grid, "service"), grid, "service")
    assert abs(corrected.latency.p50_ms[0] - 2.0) < 0.01
    assert abs(service.latency.p50_ms[0] - 0.5) < 0.01
    assert corrected.latency.p99_ms[1:] == (None, None)
    assert corrected.latency.count[1:] == (0, 0)


def test_thin_window_reads_its_percentiles_from_a_wider_span():
    grid = make_grid(T0, T0 + 5 * NS, 1.0)
    intervals = [_interval(s, [1000] * 200) for s in (0, 1, 3, 4)] + [_interval(2, [50_000] * 5)]
    wp = window_percentiles(histograms_by_window(intervals, grid, "corrected"), grid, "corrected")
    assert wp.basis_s[2] == 5.0 and wp.basis_s[0] == 1.0
    assert wp.latency.basis_count[2] == 805
    assert abs(wp.latency.p50_ms[2] - 1.0) < 0.01  # not the 5 slow requests alone
    assert abs(wp.latency.max_ms[2] - 50.0) < 0.1  # but its own max is kept


def test_window_widens_only_as_far_as_the_typical_second_needs():
    assert choose_window_s([MIN_REQUESTS_FOR_P99 * 2] * 10) == 1.0
    assert choose_window_s([60] * 10 + [0] * 5) == 2.0
    assert choose_window_s([40] * 10 + [0] * 5) == 3.0
    assert choose_window_s([5] * 10) == 5.0
    assert choose_window_s([]) == 1.0


def test_merge_ignores_missing_windows():
    h = merge([None, _interval(0, [1000] * 3).histogram, None])
    assert h.get_total_count() == 3
    assert np.isclose(h.get_value_at_percentile(50) / 1000, 1.0, atol=0.01)
