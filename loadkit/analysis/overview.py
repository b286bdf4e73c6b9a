"""The whole of a long run at minute resolution, for timelines a report can afford.

A 24 h run has 86,400 one-second windows; drawn as they are, its timeline
alone is tens of megabytes of SVG. Past `OVERVIEW_AFTER_S` the analysis adds
an `Overview`: per-minute latency percentiles from the minute's merged HDR
histograms (never averaged percentiles), per-minute throughput, and telemetry
as means (maxima for the busiest core and temperature) of the minute's
windows. Full resolution stays in `WindowSeries`, for episodes.
"""

from __future__ import annotations

import numpy as np

from loadkit.analysis.align import make_grid
from loadkit.analysis.model import Overview, Series, TelemetryWindows, WindowSeries
from loadkit.analysis.percentiles import IntervalCounts, histograms_by_window, window_percentiles

OVERVIEW_AFTER_S = 2 * 3600.0
OVERVIEW_WINDOW_S = 60.0


def _array(values: Series | None) -> np.ndarray | None:
    if values is None:
        return None
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def _reduce(values: Series | None, per: int, n: int, how: str = "mean") -> Series | None:
    """Consecutive `per` windows into one value each (mean or max), `n` values."""
    a = _array(values)
    if a is None:
        return None
    pad = n * per - len(a)
    a = np.concatenate([a, np.full(max(0, pad), np.nan)])[: n * per].reshape(n, per)
    with np.errstate(all="ignore"):
        has = ~np.all(np.isnan(a), axis=1)
        out = np.full(n, np.nan)
        if has.any():
            fn = np.nanmax if how == "max" else np.nanmean
            out[has] = fn(a[has], axis=1)
    return tuple(None if not np.isfinite(v) else float(v) for v in out)


def build_overview(
    intervals: IntervalCounts,
    start_ns: int,
    end_ns: int,
    windows: WindowSeries,
    telemetry: TelemetryWindows,
) -> Overview | None:
    """Minute-resolution series of a run longer than OVERVIEW_AFTER_S; None for shorter runs."""
    if (end_ns - start_ns) / 1e9 <= OVERVIEW_AFTER_S or windows.window_s >= OVERVIEW_WINDOW_S:
        return None
    grid = make_grid(start_ns, end_ns, OVERVIEW_WINDOW_S)
    latency = window_percentiles(
        histograms_by_window(intervals, grid, "corrected"), grid, "corrected"
    )
    per = max(1, int(round(OVERVIEW_WINDOW_S / windows.window_s)))
    n = grid.n
    tel = telemetry
    return Overview(
        window_s=OVERVIEW_WINDOW_S,
        t_s=tuple(float(t) for t in grid.starts_s),
        corrected=latency.latency,
        throughput_rps=_reduce(windows.throughput_rps, per, n) or (),
        offered_rps=_reduce(windows.offered_rps, per, n) or (),
        gpu_util_pct=_reduce(tel.gpu_util_pct, per, n),
        gpu_sm_clock_mhz=_reduce(tel.gpu_sm_clock_mhz, per, n),
        gpu_sm_clock_max_mhz=_reduce(tel.gpu_sm_clock_max_mhz, per, n),
        gpu_temp_c=_reduce(tel.gpu_temp_c, per, n, "max"),
        gpu_power_w=_reduce(tel.gpu_power_w, per, n),
        gpu_power_limit_w=_reduce(tel.gpu_power_limit_w, per, n),
        cpu_core_max_pct=_reduce(tel.cpu_core_max_pct, per, n, "max"),
        cpu_mean_pct=_reduce(tel.cpu_mean_pct, per, n),
        cgroup_throttled_pct=_reduce(tel.cgroup_throttled_pct, per, n),
        queue_ms_per_request=_reduce(tel.queue_ms_per_request, per, n),
        compute_ms_per_request=_reduce(tel.compute_ms_per_request, per, n),
    )


__all__ = ["OVERVIEW_AFTER_S", "OVERVIEW_WINDOW_S", "build_overview"]
