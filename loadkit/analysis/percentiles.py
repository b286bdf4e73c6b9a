"""Windowed percentiles from merged HDR interval histograms (never averaged percentiles).

The 1 s histograms of every process and request name that start in a window
are added into one histogram and the percentiles are read from it. A window
with fewer than `MIN_REQUESTS_FOR_P99` requests cannot carry a meaningful P99
(it would be the window's maximum), so its percentiles come from the merged
histogram of a centered `WIDEN_TO_S` span instead, and `basis_s` says so.

Interval histograms are read once, as a stream (`collect_intervals`), into
compact `LatencyCounts` merged per kind and start time; windows of any grid
are built from those, so an hour at 2,000 requests/s never holds more than
one decoded `HdrHistogram` at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from loadkit import percentile_names
from loadkit.analysis.align import WindowGrid
from loadkit.analysis.latency_counts import (
    Histogram,
    LatencyCounts,
    as_counts,
    merge_counts,
)
from loadkit.analysis.model import LatencySummary, LatencyWindows, NinesDistribution
from loadkit.rundir import IntervalHistogram

MIN_REQUESTS_FOR_P99 = 100
WIDEN_TO_S = 5.0
WINDOW_PERCENTILES = {name: percentile_names.PERCENTILES[name] for name in percentile_names.WINDOW}
NINES = (50.0, 90.0, 99.0, 99.9, 99.99, 99.999, 100.0)
US_PER_MS = 1000.0


@dataclass
class IntervalCounts:
    """A run's interval histograms, compacted and merged per latency kind and start time."""

    by_kind: dict[str, dict[int, LatencyCounts]] = field(default_factory=dict)
    first_start_ns: int | None = None
    last_end_ns: int | None = None
    intervals: int = 0  # histograms read


def collect_intervals(intervals: Iterable[IntervalHistogram[Histogram]]) -> IntervalCounts:
    """Read interval histograms one at a time (e.g. `Run.iter_latency_intervals()`), keep their counts.

    Read with `decode=LatencyCounts.decode`, no `HdrHistogram` is ever built.

    Histograms of several processes (or request names) that start at the same
    time are merged: every window of any grid is a sum of these.
    """
    parts: dict[str, dict[int, list[LatencyCounts]]] = {}
    out = IntervalCounts()
    for interval in intervals:
        out.intervals += 1
        if out.first_start_ns is None or interval.start_ns < out.first_start_ns:
            out.first_start_ns = interval.start_ns
        if out.last_end_ns is None or interval.end_ns > out.last_end_ns:
            out.last_end_ns = interval.end_ns
        by_start = parts.setdefault(interval.kind, {})
        by_start.setdefault(interval.start_ns, []).append(as_counts(interval.histogram))
    for kind, by_start in parts.items():
        out.by_kind[kind] = {start: merge_counts(p) for start, p in by_start.items()}
    return out


def histograms_by_window(
    intervals: IntervalCounts | Iterable[IntervalHistogram], grid: WindowGrid, kind: str
) -> list[LatencyCounts | None]:
    """One merged histogram per window for a latency kind (None where nothing completed)."""
    if not isinstance(intervals, IntervalCounts):
        intervals = collect_intervals(intervals)
    by_start = intervals.by_kind.get(kind, {})
    parts: list[list[LatencyCounts] | None] = [None] * grid.n
    if by_start:
        starts = np.fromiter(by_start, dtype=np.int64, count=len(by_start))
        for w, counts in zip(grid.index(starts).tolist(), by_start.values(), strict=True):
            if w < 0:
                continue
            window = parts[w]
            if window is None:
                parts[w] = [counts]
            else:
                window.append(counts)
    return [None if p is None else merge_counts(p) for p in parts]


def merge(histograms: Iterable[Histogram | None]) -> LatencyCounts:
    """All counts of `histograms` in one histogram (`HdrHistogram`s or `LatencyCounts`)."""
    return merge_counts(histograms)


def _percentiles_ms(hist: Histogram, percentiles: Sequence[float]) -> list[float | None]:
    counts = as_counts(hist)
    if counts.total == 0:
        return [None] * len(percentiles)
    return [v / US_PER_MS for v in counts.percentiles_us(percentiles)]


@dataclass(frozen=True)
class WindowPercentiles:
    """Percentiles of one kind on the grid, and the span each one was read from."""

    latency: LatencyWindows
    basis_s: tuple[float, ...]


def window_percentiles(
    histograms: Sequence[LatencyCounts | None],
    grid: WindowGrid,
    kind: str,
    min_requests: int = MIN_REQUESTS_FOR_P99,
    widen_to_s: float = WIDEN_TO_S,
) -> WindowPercentiles:
    """P50/P95/P99/P99.9/max per window; thin windows read from a centered wider span."""
    counts = [0 if h is None else h.total for h in histograms]
    half = max(0, int(round(widen_to_s / grid.window_s)) // 2)
    columns: dict[str, list[float | None]] = {name: [] for name in WINDOW_PERCENTILES}
    max_ms: list[float | None] = []
    basis_count: list[int] = []
    basis_s: list[float] = []
    percentiles = list(WINDOW_PERCENTILES.values())
    for i, hist in enumerate(histograms):
        span = 1
        basis = hist
        basis_total = counts[i]
        if hist is not None and 0 < counts[i] < min_requests and half > 0:
            lo, hi = max(0, i - half), min(grid.n, i + half + 1)
            basis = merge_counts(histograms[lo:hi])
            basis_total = basis.total
            span = hi - lo
        if basis is None or basis_total == 0:
            for name in columns:
                columns[name].append(None)
            max_ms.append(None)
            basis_count.append(0)
            basis_s.append(grid.window_s)
            continue
        values = basis.percentiles_us(percentiles)
        for name, value in zip(columns, values, strict=True):
            columns[name].append(value / US_PER_MS)
        # The window's own maximum, not the span's: a max is meaningful at any count.
        own = hist if hist is not None else basis
        max_ms.append(own.max_us() / US_PER_MS)
        basis_count.append(basis_total)
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
    """The fewest whole seconds whose typical window holds a P99's worth of requests.

    As narrow as the rate allows (60/s: 2 s, 40/s: 3 s), never wider than
    WIDEN_TO_S: a window far wider than a fault leaves no unaffected windows to
    compare it with, so a 0.3 s stall every 7 s at 60/s would look like the baseline.
    """
    busy = [c for c in counts_per_second if c > 0]
    if not busy:
        return 1.0
    typical = float(np.median(busy))
    return float(min(WIDEN_TO_S, max(1.0, np.ceil(min_requests / typical))))


def summarize(hist: Histogram, kind: str) -> LatencySummary:
    """Whole-run percentiles of one latency kind."""
    counts = as_counts(hist)
    p50, p90, p95, p99, p999 = _percentiles_ms(counts, [50.0, 90.0, 95.0, 99.0, 99.9])
    count = counts.total
    return LatencySummary(
        kind=kind,
        count=count,
        p50_ms=p50,
        p90_ms=p90,
        p95_ms=p95,
        p99_ms=p99,
        p999_ms=p999,
        max_ms=counts.max_us() / US_PER_MS if count else None,
        mean_ms=counts.mean_us() / US_PER_MS if count else None,
    )


def nines(corrected: Histogram, service: Histogram) -> NinesDistribution:
    """The whole run's latency at 50, 90, 99, 99.9, ... 100 percentiles."""
    return NinesDistribution(
        percentiles=NINES,
        corrected_ms=tuple(_percentiles_ms(corrected, NINES)),
        service_ms=tuple(_percentiles_ms(service, NINES)),
    )
