"""Windowed percentiles from merged HDR interval histograms (never averaged percentiles).

The 1 s histograms of every process and request name that start in a window
are added into one histogram and the percentiles are read from it. A window
with fewer than `MIN_REQUESTS_FOR_P99` requests cannot carry a meaningful P99
(it would be the window's maximum), so its percentiles come from the merged
histogram of a centered `WIDEN_TO_S` span instead, and `basis_s` says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from hdrh.histogram import HdrHistogram

from loadkit.analysis.align import WindowGrid
from loadkit.analysis.model import LatencySummary, LatencyWindows, NinesDistribution
from loadkit.rundir import IntervalHistogram, new_histogram

MIN_REQUESTS_FOR_P99 = 100
WIDEN_TO_S = 5.0
WINDOW_PERCENTILES = {"p50": 50.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}
NINES = (50.0, 90.0, 99.0, 99.9, 99.99, 99.999, 100.0)
US_PER_MS = 1000.0


def histograms_by_window(
    intervals: Sequence[IntervalHistogram], grid: WindowGrid, kind: str
) -> list[HdrHistogram | None]:
    """One merged histogram per window for a latency kind (None where nothing completed)."""
    out: list[HdrHistogram | None] = [None] * grid.n
    for interval in intervals:
        if interval.kind != kind:
            continue
        w = grid.index_of(interval.start_ns)
        if w < 0:
            continue
        target = out[w]
        if target is None:
            target = out[w] = new_histogram()
        target.add(interval.histogram)
    return out


def merge(histograms: Sequence[HdrHistogram | None]) -> HdrHistogram:
    total = new_histogram()
    for h in histograms:
        if h is not None:
            total.add(h)
    return total


def _percentiles_ms(hist: HdrHistogram, percentiles: Sequence[float]) -> list[float | None]:
    if hist.get_total_count() == 0:
        return [None] * len(percentiles)
    values = hist.get_percentile_to_value_dict(list(percentiles))
    return [values[p] / US_PER_MS for p in percentiles]


@dataclass(frozen=True)
class WindowPercentiles:
    """Percentiles of one kind on the grid, and the span each one was read from."""

    latency: LatencyWindows
    basis_s: tuple[float, ...]


def window_percentiles(
    histograms: Sequence[HdrHistogram | None],
    grid: WindowGrid,
    kind: str,
    min_requests: int = MIN_REQUESTS_FOR_P99,
    widen_to_s: float = WIDEN_TO_S,
) -> WindowPercentiles:
    """P50/P95/P99/P99.9/max per window; thin windows read from a centered wider span."""
    counts = [0 if h is None else int(h.get_total_count()) for h in histograms]
    half = max(0, int(round(widen_to_s / grid.window_s)) // 2)
    columns: dict[str, list[float | None]] = {name: [] for name in WINDOW_PERCENTILES}
    max_ms: list[float | None] = []
    basis_count: list[int] = []
    basis_s: list[float] = []
    for i, hist in enumerate(histograms):
        span = 1
        basis = hist
        if hist is not None and 0 < counts[i] < min_requests and half > 0:
            lo, hi = max(0, i - half), min(grid.n, i + half + 1)
            basis = merge(histograms[lo:hi])
            span = hi - lo
        if basis is None or basis.get_total_count() == 0:
            for name in columns:
                columns[name].append(None)
            max_ms.append(None)
            basis_count.append(0)
            basis_s.append(grid.window_s)
            continue
        values = _percentiles_ms(basis, list(WINDOW_PERCENTILES.values()))
        for name, value in zip(columns, values, strict=True):
            columns[name].append(value)
        # The window's own maximum, not the span's: a max is meaningful at any count.
        own = hist if hist is not None else basis
        max_ms.append(own.get_max_value() / US_PER_MS)
        basis_count.append(int(basis.get_total_count()))
        basis_s.append(span * grid.window_s)
    latency = LatencyWindows(
        kind=kind,
        count=tuple(counts),
        p50_ms=tuple(columns["p50"]),
        p95_ms=tuple(columns["p95"]),
        p99_ms=tuple(columns["p99"]),
        p999_ms=tuple(columns["p999"]),
        max_ms=tuple(max_ms),
        basis_count=tuple(basis_count),
    )
    return WindowPercentiles(latency, tuple(basis_s))


def choose_window_s(
    counts_per_second: Sequence[int], min_requests: int = MIN_REQUESTS_FOR_P99
) -> float:
    """1 s, or WIDEN_TO_S when the typical busy 1 s window is too thin for a P99."""
    busy = [c for c in counts_per_second if c > 0]
    if not busy:
        return 1.0
    return 1.0 if float(np.median(busy)) >= min_requests else WIDEN_TO_S


def summarize(hist: HdrHistogram, kind: str) -> LatencySummary:
    """Whole-run percentiles of one latency kind."""
    p50, p90, p95, p99, p999 = _percentiles_ms(hist, [50.0, 90.0, 95.0, 99.0, 99.9])
    count = int(hist.get_total_count())
    return LatencySummary(
        kind=kind,
        count=count,
        p50_ms=p50,
        p90_ms=p90,
        p95_ms=p95,
        p99_ms=p99,
        p999_ms=p999,
        max_ms=hist.get_max_value() / US_PER_MS if count else None,
        mean_ms=hist.get_mean_value() / US_PER_MS if count else None,
    )


def nines(corrected: HdrHistogram, service: HdrHistogram) -> NinesDistribution:
    """The whole run's latency at 50, 90, 99, 99.9, ... 100 percentiles."""
    return NinesDistribution(
        percentiles=NINES,
        corrected_ms=tuple(_percentiles_ms(corrected, NINES)),
        service_ms=tuple(_percentiles_ms(service, NINES)),
    )
