"""Run-to-run comparison: does a headline number differ by more than the runs' own noise?

`compare_analyses(baseline, other)` puts each headline number of two analyses
side by side and estimates the noise of their difference from the variation
**within** the runs, by a **grouped (delete-a-batch) jackknife**: each run's
windows are cut into `BATCHES` (10) contiguous batches of at least
`MIN_BATCH_WINDOWS` (5) windows (fewer than 2 batches: no estimate), and each
number is recomputed with one batch left out, the way the whole-run number is
computed:

- percentiles: pooled over all requests of the kept windows, from the mixture
  of their latency distributions (each window's CDF linear between its P50,
  P95, P99, P99.9 and max, weighted by its requests). A pooled tail percentile
  is not a mean of batches, so leaving batches out of the pooled number (rather
  than averaging batch percentiles) is what tracks it;
- rates: means of window rates; errors and drops: ratios of totals.

- **paired** (same window size, lengths within 10 %: runs of one scenario): the
  same batch is left out of both runs and the jackknife is of the difference, so
  the traffic shape (bursts, steps, warm-up at the same seconds) cancels. A
  change everywhere whose size varies (worst during a burst) widens that spread,
  so a difference also **exceeds noise when each batch on its own moved the same
  way** as the whole run (≥ 6 batches: a two-sided sign test at p ≤ 0.031);
- **unpaired** (otherwise): the two runs' jackknife variances add (Welch dof).

noise = t(0.975, dof) · sqrt(variance), at least 0.1 % of the larger number (HDR
histograms keep 3 significant figures). Contiguous batches keep the serial
correlation of load tests (spikes, sawtooth) inside a batch, where a per-window
bootstrap would be far too narrow. This is within-run noise only: about one
number in twenty reads as beyond noise by chance, and runs on different days
also differ by machine state, so "within noise" is good evidence of no change
and a small "beyond noise" is a lead to confirm with a repeat run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from loadkit import percentile_names
from loadkit.analysis.model import Analysis, LatencyWindows, Series

BATCHES = 10
MIN_BATCH_WINDOWS = 5
CONFIDENCE = 0.95
SIGN_TEST_MIN_BATCHES = 6  # all of >= 6 paired batches one way: two-sided p <= 0.031
RESOLUTION = 0.001  # relative: HDR histograms with 3 significant figures
MAX_GRID_POINTS = 4000  # latency points a pooled CDF is evaluated at
METHOD = (
    f"grouped jackknife: windows cut into up to {BATCHES} contiguous batches "
    f"(≥ {MIN_BATCH_WINDOWS} windows each), each number recomputed with one batch left "
    f"out; noise is the {100 * CONFIDENCE:.0f} % t half-width of the difference, paired "
    "on the same timeline when the runs share one (then every batch moving the same way "
    "also counts), else the two runs' variances added (Welch)"
)

# Known points of a window's latency distribution: (LatencyWindows field, cumulative share).
WINDOW_QUANTILES = tuple(
    (f"{name}_ms", percentile_names.quantile(name)) for name in percentile_names.WINDOW
)


@dataclass(frozen=True)
class MetricDelta:
    """One headline number of two runs, their difference and the noise of that difference."""

    name: str  # "p50_ms", "p99_ms", "throughput_rps", "error_pct", ...
    unit: str  # "ms", "req/s", "%"
    baseline: float | None
    other: float | None
    delta: float | None  # other - baseline
    delta_pct: float | None  # 100 * delta / baseline
    noise: float | None  # 95 % half-width of the difference (same unit), None: not estimable
    exceeds_noise: bool | None  # |delta| > noise, or every paired batch moved the same way
    better: bool | None  # direction-aware (lower latency is better); None: no direction
    paired: bool = False  # noise from batch-by-batch differences on the same timeline
    batches: int = 0  # batches behind the estimate (the fewer of the two runs if unpaired)
    same_direction: bool = False  # paired: every batch moved the way the whole run did


@dataclass(frozen=True)
class Comparison:
    """Two runs' headline numbers against run-to-run noise, and how their findings changed."""

    baseline_run: str
    other_run: str
    metrics: tuple[MetricDelta, ...]
    findings_appeared: tuple[str, ...]  # cause ids in `other` only
    findings_disappeared: tuple[str, ...]  # cause ids in `baseline` only
    summary: str
    method: str = METHOD


def _arr(series: Series | None) -> np.ndarray:
    if series is None:
        return np.zeros(0)
    return np.array([np.nan if v is None else float(v) for v in series], dtype=float)


# --- the headline numbers over any set of batches ---------------------------------


class BatchTotals:
    """Per-batch totals of one number, so it can be recomputed over any set of batches."""

    def value(self, keep: np.ndarray) -> float | None:  # keep: bool per batch
        raise NotImplementedError


class PooledPercentile(BatchTotals):
    """A percentile of all requests of the kept batches, from each window's known percentiles.

    Each window's CDF is linear between (0 ms, 0), its P50, P95, P99, P99.9 and
    (max, 1); the CDF of a set of windows is their mixture weighted by requests.
    """

    def __init__(self, lat: LatencyWindows, parts: Sequence[np.ndarray], share: float) -> None:
        self.share = share
        counts = np.array(lat.count, dtype=float)
        knots: list[tuple[int, np.ndarray, np.ndarray, float]] = []
        for j, part in enumerate(parts):
            for i in part:
                if i >= len(counts) or counts[i] <= 0:
                    continue
                xs, fs = [0.0], [0.0]
                for name, q in (*WINDOW_QUANTILES, ("max_ms", 1.0)):
                    v = getattr(lat, name)[i]
                    if v is not None and math.isfinite(v):
                        xs.append(max(float(v), xs[-1]))
                        fs.append(q)
                if len(xs) > 1:
                    knots.append((j, np.array(xs), np.array(fs), counts[i]))
        grid = np.unique(np.concatenate([x for _, x, _, _ in knots])) if knots else np.zeros(1)
        if grid.size > MAX_GRID_POINTS:  # keep it cheap for long runs: log-spaced points
            top = float(grid[-1])
            low = float(grid[grid > 0][0]) if (grid > 0).any() else top
            grid = np.concatenate([[0.0], np.geomspace(low, max(top, low), MAX_GRID_POINTS)])
        self.grid = grid
        self.cdf_sums = np.zeros((len(parts), grid.size))
        self.counts = np.zeros(len(parts))
        for j, x, f, c in knots:
            self.cdf_sums[j] += c * np.interp(grid, x, f)
            self.counts[j] += c

    def value(self, keep: np.ndarray) -> float | None:
        total = float(self.counts[keep].sum())
        if total <= 0:
            return None
        cdf = np.maximum.accumulate(self.cdf_sums[keep].sum(axis=0) / total)
        return float(np.interp(self.share, cdf, self.grid))


class RatioOfTotals(BatchTotals):
    """Σ numerator / Σ denominator over the kept batches (x `scale`); windows missing either skipped."""

    def __init__(
        self, num: np.ndarray, den: np.ndarray, parts: Sequence[np.ndarray], scale: float
    ) -> None:
        ok = np.isfinite(num) & np.isfinite(den)
        self.num = np.array([float(num[p][ok[p]].sum()) for p in parts])
        self.den = np.array([float(den[p][ok[p]].sum()) for p in parts])
        self.scale = scale

    def value(self, keep: np.ndarray) -> float | None:
        den = float(self.den[keep].sum())
        return self.scale * float(self.num[keep].sum()) / den if den > 0 else None


def _per_s(series: Series, parts: Sequence[np.ndarray]) -> BatchTotals:
    """Mean of a per-window rate over the windows that have it."""
    values = _arr(series)
    return RatioOfTotals(values, np.where(np.isfinite(values), 1.0, np.nan), parts, 1.0)


def _percentile(kind: str, share: float) -> Callable[[Analysis, Sequence[np.ndarray]], BatchTotals]:
    return lambda a, parts: PooledPercentile(a.windows.latency(kind), parts, share)


def _errors(a: Analysis, parts: Sequence[np.ndarray]) -> BatchTotals:
    errors = _arr(a.windows.errors_per_s)
    return RatioOfTotals(errors, _arr(a.windows.throughput_rps) + errors, parts, 100.0)


def _dropped(a: Analysis, parts: Sequence[np.ndarray]) -> BatchTotals:
    return RatioOfTotals(_arr(a.windows.dropped_per_s), _arr(a.windows.offered_rps), parts, 100.0)


Totals = Callable[[Analysis, Sequence[np.ndarray]], BatchTotals]

# (name, unit, whole-run number, its per-batch totals, lower is better)
METRICS: tuple[tuple[str, str, Callable[[Analysis], float | None], Totals, bool | None], ...] = (
    ("p50_ms", "ms", lambda a: a.overall.corrected.p50_ms, _percentile("corrected", 0.5), True),
    ("p95_ms", "ms", lambda a: a.overall.corrected.p95_ms, _percentile("corrected", 0.95), True),
    ("p99_ms", "ms", lambda a: a.overall.corrected.p99_ms, _percentile("corrected", 0.99), True),
    ("p999_ms", "ms", lambda a: a.overall.corrected.p999_ms, _percentile("corrected", 0.999), True),
    ("service_p99_ms", "ms", lambda a: a.overall.service.p99_ms, _percentile("service", 0.99), True),
    ("offered_rps", "req/s", lambda a: a.overall.offered_rps, lambda a, p: _per_s(a.windows.offered_rps, p), None),
    ("throughput_rps", "req/s", lambda a: a.overall.throughput_rps, lambda a, p: _per_s(a.windows.throughput_rps, p), False),
    ("error_pct", "%", lambda a: a.overall.error_pct, _errors, True),
    ("dropped_pct", "%", lambda a: a.overall.dropped_pct, _dropped, True),
)  # fmt: skip

LABELS = {
    "p50_ms": "P50",
    "p95_ms": "P95",
    "p99_ms": "P99",
    "p999_ms": "P99.9",
    "service_p99_ms": "service-time P99",
    "offered_rps": "offered rate",
    "throughput_rps": "achieved rate",
    "error_pct": "errors",
    "dropped_pct": "dropped arrivals",
}


# --- noise -------------------------------------------------------------------------


def batches_of(n: int) -> list[np.ndarray]:
    """Contiguous batches of windows 0..n-1 (none when fewer than 2 batches fit)."""
    k = min(BATCHES, n // MIN_BATCH_WINDOWS)
    return list(np.array_split(np.arange(n), k)) if k >= 2 else []


def same_timeline(baseline: Analysis, other: Analysis) -> int:
    """Windows the two runs share by position (same window size, lengths within 10 %), else 0.

    Runs of one scenario put their bursts, steps and warm-up at the same seconds,
    so their windows can be paired and the traffic shape cancels in the difference.
    """
    if baseline.window_s != other.window_s:
        return 0
    n_a, n_b = len(baseline.windows.t_ns), len(other.windows.t_ns)
    if min(n_a, n_b) < 0.9 * max(n_a, n_b):
        return 0
    return min(n_a, n_b)


def leave_one_out(totals: BatchTotals, k: int) -> np.ndarray:
    """The number recomputed without each batch in turn (NaN where it cannot be)."""
    out = np.full(k, np.nan)
    for j in range(k):
        keep = np.ones(k, dtype=bool)
        keep[j] = False
        v = totals.value(keep)
        out[j] = np.nan if v is None else v
    return out


def each_batch(totals: BatchTotals, k: int) -> np.ndarray:
    """The number over each batch alone (NaN where the batch has no data)."""
    out = np.full(k, np.nan)
    for j in range(k):
        v = totals.value(np.arange(k) == j)
        out[j] = np.nan if v is None else v
    return out


def jackknife_variance(replicates: np.ndarray) -> float | None:
    """Delete-a-batch (grouped) jackknife variance: (k-1)/k Σ (θ_(j) - mean)²."""
    r = replicates[np.isfinite(replicates)]
    if r.size < 2:
        return None
    return float((r.size - 1) / r.size * np.sum((r - r.mean()) ** 2))


def _t(dof: float) -> float:
    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, max(dof, 1.0)))


def _number(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def compare_metric(
    name: str,
    unit: str,
    read: Callable[[Analysis], float | None],
    totals: Totals,
    lower_better: bool | None,
    baseline: Analysis,
    other: Analysis,
) -> MetricDelta:
    a, b = _number(read(baseline)), _number(read(other))
    delta = b - a if a is not None and b is not None else None
    delta_pct = 100.0 * delta / a if delta is not None and a else None
    floor = RESOLUTION * max(abs(a or 0.0), abs(b or 0.0))
    shared = same_timeline(baseline, other)
    variance: float | None = None
    dof = 1.0
    same_direction = False
    if shared:
        parts = batches_of(shared)
        k = len(parts)
        if k:
            ta, tb = totals(baseline, parts), totals(other, parts)
            # The same batch left out of both runs: the shape they share cancels.
            variance = jackknife_variance(leave_one_out(tb, k) - leave_one_out(ta, k))
            diffs = each_batch(tb, k) - each_batch(ta, k)
            diffs = diffs[np.isfinite(diffs)]
            same_direction = bool(
                delta
                and diffs.size >= SIGN_TEST_MIN_BATCHES
                and np.all(np.sign(diffs) == np.sign(delta))
            )
        batches = k
        dof = k - 1.0
    else:
        parts_a = batches_of(len(baseline.windows.t_ns))
        parts_b = batches_of(len(other.windows.t_ns))
        batches = min(len(parts_a), len(parts_b))
        if batches:
            va = jackknife_variance(leave_one_out(totals(baseline, parts_a), len(parts_a)))
            vb = jackknife_variance(leave_one_out(totals(other, parts_b), len(parts_b)))
            if va is not None and vb is not None:
                variance = va + vb
                denom = va**2 / (len(parts_a) - 1) + vb**2 / (len(parts_b) - 1)
                dof = variance**2 / denom if denom > 0 else batches - 1.0
    noise = None
    if delta is not None and variance is not None:
        noise = max(_t(dof) * math.sqrt(variance), floor)
    exceeds = None if noise is None or delta is None else abs(delta) > noise or same_direction
    better = None
    if lower_better is not None and delta:
        better = (delta < 0) == lower_better
    return MetricDelta(
        name=name,
        unit=unit,
        baseline=a,
        other=b,
        delta=delta,
        delta_pct=delta_pct,
        noise=noise,
        exceeds_noise=exceeds,
        better=better,
        paired=bool(shared),
        batches=batches,
        same_direction=same_direction,
    )


def _summary(
    baseline: Analysis,
    other: Analysis,
    metrics: tuple[MetricDelta, ...],
    appeared: tuple[str, ...],
    disappeared: tuple[str, ...],
) -> str:
    beyond = []
    for d in metrics:
        if d.exceeds_noise and d.delta is not None:
            change = f"{d.delta_pct:+.0f} %" if d.delta_pct is not None else f"{d.delta:+.3g}"
            way = "" if d.better is None else (", better" if d.better else ", worse")
            beyond.append(f"{LABELS.get(d.name, d.name)} {change}{way}")
    head = f"{other.run.run_id} against {baseline.run.run_id}: "
    if beyond:
        text = head + "beyond run-to-run noise: " + "; ".join(beyond) + "."
    elif any(d.exceeds_noise is not None for d in metrics):
        text = head + "no headline number differs beyond run-to-run noise."
    else:
        text = head + "runs too short to estimate run-to-run noise."
    changes = []
    if appeared:
        changes.append("findings appeared: " + ", ".join(appeared))
    if disappeared:
        changes.append("findings disappeared: " + ", ".join(disappeared))
    if changes:
        text += " " + "; ".join(changes).capitalize() + "."
    return text


def compare_analyses(baseline: Analysis, other: Analysis) -> Comparison:
    """`other` against `baseline`: each headline number, its difference and whether it exceeds noise."""
    metrics = tuple(
        compare_metric(name, unit, read, totals, lower, baseline, other)
        for name, unit, read, totals, lower in METRICS
    )
    base_causes = [f.cause for f in baseline.findings]
    other_causes = [f.cause for f in other.findings]
    appeared = tuple(c for c in other_causes if c not in base_causes)
    disappeared = tuple(c for c in base_causes if c not in other_causes)
    return Comparison(
        baseline_run=baseline.run.run_id,
        other_run=other.run.run_id,
        metrics=metrics,
        findings_appeared=appeared,
        findings_disappeared=disappeared,
        summary=_summary(baseline, other, metrics, appeared, disappeared),
    )


__all__ = [
    "METHOD",
    "Comparison",
    "MetricDelta",
    "PooledPercentile",
    "RatioOfTotals",
    "batches_of",
    "compare_analyses",
    "each_batch",
    "jackknife_variance",
    "leave_one_out",
    "same_timeline",
]
