"""The streaming analysis reads the same numbers as merging the library's HdrHistograms.

The reference here is the analysis as it was before `LatencyCounts`: every
interval histogram of a window added into a `new_histogram()`, percentiles
from `get_percentile_to_value_dict`, thin windows read from a centered span.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from loadkit.analysis import analyze_run
from loadkit.analysis.align import make_grid
from loadkit.analysis.drift import _blocks
from loadkit.analysis.percentiles import (
    MIN_REQUESTS_FOR_P99,
    WIDEN_TO_S,
    WINDOW_PERCENTILES,
    collect_intervals,
    histograms_by_window,
    window_percentiles,
)
from loadkit.analysis.pipeline import REQUEST_SAMPLE_COLUMNS
from loadkit.analysis.recovery import rolling_p99
from loadkit.analysis.telemetry import align_request_samples
from loadkit.rundir import Run, load_run, new_histogram
from loadkit.testing.synthetic import FaultWindow, RunSpec, write_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("scale")
    churn = (FaultWindow(20, 30, 0.5),)
    return {
        # two Locust processes (two logs, same seconds), 1 s windows, connection churn
        "busy": write_run(
            RunSpec(duration_s=40, rate_rps=300, processes=2, churns=churn), root, "busy"
        ),
        # 1 s windows around MIN_REQUESTS_FOR_P99: thin ones read from a wider span
        "thin": write_run(RunSpec(duration_s=30, rate_rps=100, processes=2), root, "thin"),
        # 5 s windows
        "sparse": write_run(RunSpec(duration_s=60, rate_rps=15), root, "sparse"),
    }


def _reference_windows(run: Run, grid, kind: str) -> list:
    windows: list = [None] * grid.n
    for interval in run.latency_intervals:
        w = grid.index_of(interval.start_ns)
        if interval.kind != kind or w < 0:
            continue
        if windows[w] is None:
            windows[w] = new_histogram()
        windows[w].add(interval.histogram)
    return windows


def _reference_percentiles(windows: list, grid) -> dict[str, list]:
    half = int(round(WIDEN_TO_S / grid.window_s)) // 2
    out: dict[str, list] = {name: [] for name in [*WINDOW_PERCENTILES, "max", "basis"]}
    for i, hist in enumerate(windows):
        basis = hist
        if hist is not None and 0 < hist.get_total_count() < MIN_REQUESTS_FOR_P99 and half:
            basis = new_histogram()
            for h in windows[max(0, i - half) : i + half + 1]:
                if h is not None:
                    basis.add(h)
        if basis is None or basis.get_total_count() == 0:
            for name in out:
                out[name].append(None)
            continue
        values = basis.get_percentile_to_value_dict(list(WINDOW_PERCENTILES.values()))
        for name, p in WINDOW_PERCENTILES.items():
            out[name].append(values[p] / 1000.0)
        out["max"].append((hist or basis).get_max_value() / 1000.0)
        out["basis"].append(basis.get_total_count())
    return out


@pytest.mark.parametrize(
    "name,window_s", [("busy", 1.0), ("busy", 5.0), ("thin", 1.0), ("sparse", 5.0)]
)
def test_windows_equal_merged_library_histograms(runs, name, window_s):
    run = load_run(runs[name])
    intervals = collect_intervals(run.iter_latency_intervals())
    assert intervals.intervals == len(run.latency_intervals)
    grid = make_grid(run.start_ns, run.manifest["end_ns"], window_s)
    for kind in ("corrected", "service"):
        ours = histograms_by_window(intervals, grid, kind)
        reference = _reference_windows(run, grid, kind)
        assert [h is None for h in ours] == [h is None for h in reference]
        wp = window_percentiles(ours, grid, kind).latency
        expected = _reference_percentiles(reference, grid)
        assert wp.count == tuple(0 if h is None else h.get_total_count() for h in reference)
        for pct in WINDOW_PERCENTILES:
            assert wp.percentile(pct) == tuple(expected[pct])
        assert wp.max_ms == tuple(expected["max"])
        assert [b or None for b in wp.basis_count] == expected["basis"]
        if name == "thin":
            assert any(b and b > c for b, c in zip(wp.basis_count, wp.count, strict=True))
        # the trailing 5 s P99 of burst recovery
        k = max(1, int(round(5.0 / window_s)))
        rolled = []
        for i in range(grid.n):
            merged = new_histogram()
            for h in reference[max(0, i - k + 1) : i + 1]:
                if h is not None:
                    merged.add(h)
            count = merged.get_total_count()
            rolled.append(merged.get_value_at_percentile(99.0) / 1000.0 if count else np.nan)
        np.testing.assert_array_equal(rolling_p99(ours, window_s), np.array(rolled))


def test_analysis_reads_only_the_request_sample_columns_it_uses(runs):
    # If align_request_samples starts reading another column, REQUEST_SAMPLE_COLUMNS must grow.
    run = load_run(runs["busy"])
    grid = make_grid(run.start_ns, run.manifest["end_ns"], 1.0)
    full = align_request_samples(run.request_samples, grid)
    projected_frame = load_run(runs["busy"]).request_sample_columns(REQUEST_SAMPLE_COLUMNS)
    projected = align_request_samples(projected_frame, grid)
    assert full is not None and projected is not None
    assert np.nanmax(full.new_connection_frac) > 0  # the churn is in the sample
    np.testing.assert_array_equal(full.new_connection_frac, projected.new_connection_frac)
    assert (full.first_request_ms, full.reused_request_ms, full.samples) == (
        projected.first_request_ms,
        projected.reused_request_ms,
        projected.samples,
    )
    assert list(projected_frame.columns) == list(REQUEST_SAMPLE_COLUMNS)
    pd.testing.assert_frame_equal(
        projected_frame, run.request_samples[list(REQUEST_SAMPLE_COLUMNS)]
    )


def test_whole_run_numbers_equal_the_library_merge(runs):
    run = load_run(runs["busy"])
    analysis = analyze_run(run)
    grid = make_grid(run.start_ns, run.manifest["end_ns"], analysis.window_s)
    total = new_histogram()
    for hist in _reference_windows(run, grid, "corrected"):
        if hist is not None:
            total.add(hist)
    overall = analysis.overall.corrected
    assert overall.count == total.get_total_count()
    assert overall.p99_ms == total.get_value_at_percentile(99.0) / 1000.0
    assert overall.max_ms == total.get_max_value() / 1000.0
    assert overall.mean_ms == total.get_mean_value() / 1000.0
    assert analysis.nines.corrected_ms[-1] == total.get_value_at_percentile(100.0) / 1000.0


def test_long_trends_are_thinned_to_medians_short_ones_are_not():
    x = np.arange(5000, dtype=float)
    y = 2.0 * x + np.random.default_rng(0).normal(0, 5, x.size)
    same_y, same_x = _blocks(y[:3000], x[:3000], 3600)
    assert same_y is not None and np.array_equal(same_y, y[:3000]) and same_x.size == 3000
    thin_y, thin_x = _blocks(y, x, 1000)
    assert thin_y.size == thin_x.size == 1000
    assert thin_x[0] == np.median(x[:5]) and thin_y[-1] == np.median(y[-5:])
    slope = np.polyfit(thin_x, thin_y, 1)[0]
    assert abs(slope - 2.0) < 0.01
    # a length that does not divide evenly keeps every point
    odd_y, odd_x = _blocks(y[:4001], x[:4001], 1000)
    assert odd_x.size == 801 and odd_x[-1] == x[4000] and odd_y[-1] == y[4000]
