"""Soak drift: robust trends over a long run, and the drift findings that matter before launch.

A soak asks whether the service would still hold after a day in production.
Each resource or symptom becomes a trend: a Theil-Sen slope with a 99 %
confidence interval over block medians of the run (blocks keep the points
roughly independent, which the interval assumes, and keep Theil-Sen's n^2
pairs small). A trend becomes a finding only when it is significant (the
interval excludes zero), visible (the change over the run exceeds the noise
around the line) and material (at this rate it matters within a day), so a
noisy flat series is never reported as a leak.

Findings: server memory (RSS) grows, GPU memory grows or leaves under 20 %
free at peak, the latency floor creeps up, throughput capacity falls, errors
start after some hours (a change point in the error counts, then the slope
of the error rate after it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from loadkit.analysis.model import DriftFinding, DriftTrend, Evidence, SoakDrift

SOAK_MIN_S = 600.0
CONFIDENCE = 0.99
# Theil-Sen takes every pair of points; the series are first reduced to at most this
# many medians of consecutive windows (a 24 h run at 1 s windows: blocks of 6 minutes).
TREND_MAX_POINTS = 240
DAY_H = 24.0
MIB = 2**20

# Material change per day (at the measured slope), per finding.
RSS_MATERIAL_SHARE = 0.10  # of the starting RSS
RSS_MATERIAL_BYTES = 64 * MIB
GPU_MEM_MATERIAL_SHARE = 0.05  # of the GPU's memory
GPU_MEM_MATERIAL_BYTES = 256 * MIB
GPU_FREE_AT_PEAK_SHARE = 0.20  # the seeds: OOM at traffic peaks under 20 % free
FLOOR_MATERIAL_SHARE = 0.20  # of the starting floor
FLOOR_MATERIAL_MS = 1.0
CAPACITY_MATERIAL_SHARE = 0.10  # of the starting capacity

# Errors that start: before the change point at most this share of the typical (median)
# minute's rate after it, enough errors after it, and the split far beyond chance.
ERRORS_MIN_ONSET_S = 600.0
ERRORS_MIN_AFTER = 20
ERRORS_BEFORE_SHARE = 0.1
ERRORS_MIN_Z = 5.0


@dataclass(frozen=True)
class SoakSignals:
    """Per-window series of a run (one value per window of the grid; NaN where unknown)."""

    t_s: np.ndarray  # window start, seconds from the run start
    window_s: float
    p50_ms: np.ndarray  # corrected P50
    throughput_rps: np.ndarray
    offered_rps: np.ndarray
    errors: np.ndarray  # failed completions per window
    completed: np.ndarray  # ok + errors per window
    gpu_mem_used_bytes: np.ndarray | None = None
    gpu_mem_total_bytes: float | None = None
    server_rss_bytes: np.ndarray | None = None
    host_memory_bytes: float | None = None
    compute_ms_per_request: np.ndarray | None = None  # Triton: amortized compute per request


def _blocks(y: np.ndarray, x: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """(y, x) as is up to `max_points`; beyond, medians of runs of consecutive points."""
    if len(y) <= max_points:
        return y, x
    per = -(-len(y) // max_points)
    pad = -len(y) % per
    rows = len(y) // per + (1 if pad else 0)
    yy = np.concatenate([y, np.full(pad, np.nan)]).reshape(rows, per)
    xx = np.concatenate([x, np.full(pad, np.nan)]).reshape(rows, per)
    return np.nanmedian(yy, axis=1), np.nanmedian(xx, axis=1)


@dataclass(frozen=True)
class _Fit:
    trend: DriftTrend
    change: float  # slope x the span of the data (in the metric's unit)
    noise: float  # robust spread of the points around the line
    span_h: float


def _autocorrelation_inflation(residuals: np.ndarray, confidence: float) -> float:
    """How much wider the interval is for the effective number of points than for n.

    n_eff = n / (1 + 2 (r1 + r2 + ...)), the residuals' autocorrelations summed up to
    the first that is not positive (a slow wander under fast noise has a small r1 but
    a long tail of them). sqrt(n / n_eff) for the variance, and Student's t at
    n_eff - 2 degrees of freedom instead of the normal quantile, since few effective
    points make the normal approximation too narrow.
    """
    n = len(residuals)
    r = residuals - residuals.mean()
    denom = float(np.dot(r, r))
    if n < 3 or denom <= 0:
        return 1.0
    tau = 1.0
    for lag in range(1, n // 2):
        rho = float(np.dot(r[:-lag], r[lag:])) / denom
        if rho <= 0:
            break
        tau += 2 * rho
    if tau == 1.0:
        return 1.0
    n_eff = max(3.0, n / tau)
    q = 0.5 + confidence / 2
    t_ratio = float(stats.t.ppf(q, n_eff - 2) / stats.norm.ppf(q))
    return float(np.sqrt(n / n_eff)) * max(1.0, t_ratio)


def robust_trend(
    metric: str,
    unit: str,
    t_s: np.ndarray,
    values: np.ndarray | None,
    limit: float | None = None,
    confidence: float = CONFIDENCE,
) -> DriftTrend | None:
    """Theil-Sen slope per hour with its confidence interval; None with under 10 points."""
    fit = _fit(metric, unit, t_s, values, limit, confidence)
    return fit.trend if fit else None


def _fit(
    metric: str,
    unit: str,
    t_s: np.ndarray,
    values: np.ndarray | None,
    limit: float | None,
    confidence: float = CONFIDENCE,
) -> _Fit | None:
    if values is None:
        return None
    values = np.asarray(values, dtype=float)
    ok = np.isfinite(values)
    if ok.sum() < 10:
        return None
    y, hours = _blocks(values[ok], np.asarray(t_s, dtype=float)[ok] / 3600.0, TREND_MAX_POINTS)
    slope, intercept, low, high = stats.theilslopes(y, hours, confidence)
    residuals = y - (intercept + slope * hours)
    noise = float(1.4826 * np.median(np.abs(residuals - np.median(residuals))))
    # Theil-Sen's interval assumes independent points; a series that wanders slowly
    # (autocorrelated residuals) has fewer independent points than it has blocks, so
    # the interval is widened to the effective sample size (the correction trend tests
    # make for autocorrelation).
    inflate = _autocorrelation_inflation(residuals, confidence)
    low, high = slope - (slope - low) * inflate, slope + (high - slope) * inflate
    tenth = max(3, len(y) // 10)
    start, end = float(np.median(y[:tenth])), float(np.median(y[-tenth:]))
    significant = bool(low > 0 or high < 0)
    tte = None
    if limit is not None and significant and slope > 0 and end < limit:
        tte = float((limit - end) / slope)
    detail = f"{slope:+.3g} {unit}/h ({confidence:.0%} {low:+.3g}..{high:+.3g})"
    if tte is not None:
        detail += f"; reaches {limit:.3g} {unit} in {tte:.1f} h"
    trend = DriftTrend(
        metric,
        unit,
        float(slope),
        float(low),
        float(high),
        start,
        end,
        limit,
        tte,
        significant,
        detail,
    )
    span_h = float(hours[-1] - hours[0])
    return _Fit(trend, float(slope) * span_h, noise, span_h)


def _rising(fit: _Fit | None, material_per_day: float) -> bool:
    """Significant, beyond the noise over the run, and material within a day."""
    if fit is None or not fit.trend.significant:
        return False
    slope = fit.trend.slope_per_hour or 0.0
    return slope > 0 and fit.change > fit.noise and slope * DAY_H >= material_per_day


def _falling(fit: _Fit | None, material_per_day: float) -> bool:
    if fit is None or not fit.trend.significant:
        return False
    slope = fit.trend.slope_per_hour or 0.0
    return slope < 0 and -fit.change > fit.noise and -slope * DAY_H >= material_per_day


def _trend_evidence(fit: _Fit, unit: str, scale: float = 1.0) -> tuple[Evidence, ...]:
    t = fit.trend
    s = t.slope_per_hour or 0.0

    def v(x: float | None) -> float | None:
        return None if x is None else x / scale

    return (
        Evidence("slope", v(s), f"{unit}/h", "Theil-Sen, robust to outliers"),
        Evidence("slope_low", v(t.slope_low_per_hour), f"{unit}/h", f"{CONFIDENCE:.0%} interval"),
        Evidence("slope_high", v(t.slope_high_per_hour), f"{unit}/h", f"{CONFIDENCE:.0%} interval"),
        Evidence("start", v(t.start_value), unit, "median of the first tenth of the run"),
        Evidence("end", v(t.end_value), unit, "median of the last tenth of the run"),
        Evidence("change_over_run", v(fit.change), unit, f"slope x {fit.span_h:.2g} h"),
        Evidence("noise", v(fit.noise), unit, "robust spread around the line"),
        Evidence("per_day", v(s * DAY_H), unit, "at this slope"),
    )


def _minute_floor(t_s: np.ndarray, p50_ms: np.ndarray, window_s: float) -> tuple[np.ndarray, ...]:
    """The latency floor: the lowest window P50 in each minute."""
    per = max(1, int(round(60.0 / window_s)))
    n = len(p50_ms) // per * per
    if n == 0:
        return np.array([]), np.array([])
    chunks = p50_ms[:n].reshape(-1, per)
    has = ~np.all(np.isnan(chunks), axis=1)
    floors = np.full(len(chunks), np.nan)
    floors[has] = np.nanmin(chunks[has], axis=1)
    return t_s[:n:per], floors


def _rss_finding(fit: _Fit | None, host_memory: float | None) -> DriftFinding | None:
    if fit is None:
        return None
    start = fit.trend.start_value or 0.0
    if not _rising(fit, max(RSS_MATERIAL_SHARE * start, RSS_MATERIAL_BYTES)):
        return None
    t = fit.trend
    slope = t.slope_per_hour or 0.0
    evidence = _trend_evidence(fit, "MiB", MIB)
    tail = ""
    if t.hours_to_exhaustion is not None:
        evidence += (Evidence("hours_to_host_memory", t.hours_to_exhaustion, "h"),)
        tail = f"; at this rate it fills the host's memory in {t.hours_to_exhaustion:.0f} h"
    return DriftFinding(
        drift="server_memory_growth",
        title="Server memory grows",
        severity="critical"
        if t.hours_to_exhaustion is not None and t.hours_to_exhaustion < 7 * DAY_H
        else "warn",
        summary=(
            f"The server's RSS grows {slope / MIB:+.1f} MiB/h ({CONFIDENCE:.0%} interval "
            f"{(t.slope_low_per_hour or 0) / MIB:+.1f}..{(t.slope_high_per_hour or 0) / MIB:+.1f}), "
            f"from {start / MIB:.0f} to {(t.end_value or 0) / MIB:.0f} MiB{tail}."
        ),
        action=(
            "Look for a leak in the server process: a cache or a per-request buffer that is "
            "never freed (custom or Python backends, response caches, per-connection state); "
            "rerun longer to see whether it levels off, and set a memory limit with an alert "
            "before launch."
        ),
        evidence=evidence,
        metric=t.metric,
    )


def _gpu_findings(
    fit: _Fit | None, used: np.ndarray | None, total: float | None
) -> list[DriftFinding]:
    out: list[DriftFinding] = []
    if fit is None or used is None:
        return out
    t = fit.trend
    slope = t.slope_per_hour or 0.0
    material = (
        max(GPU_MEM_MATERIAL_SHARE * total, GPU_MEM_MATERIAL_BYTES)
        if total
        else max(0.1 * (t.start_value or 0.0), GPU_MEM_MATERIAL_BYTES)
    )
    peak = float(np.nanmax(used)) if np.isfinite(used).any() else None
    free_share = None if peak is None or not total else max(0.0, 1.0 - peak / total)
    action = (
        "Check that unloaded or replaced model versions release their memory (version "
        "policy, explicit model control), that no framework cache grows without bound "
        "(allocator caches, per-shape workspaces), and keep at least 20 % of GPU memory "
        "free at peak traffic: below that, OOM errors come at the peaks."
    )
    if _rising(fit, material):
        evidence = _trend_evidence(fit, "MiB", MIB)
        tail = ""
        soon = False
        if total and slope > 0:
            to_80 = (total * (1 - GPU_FREE_AT_PEAK_SHARE) - (peak or 0.0)) / slope
            soon = to_80 < 7 * DAY_H
            if to_80 > 0:
                evidence += (Evidence("hours_to_20pct_free", to_80, "h", "at peak"),)
                tail = f"; under 20 % free at peak in {to_80:.0f} h"
            else:
                tail = "; already under 20 % free at peak"
        out.append(
            DriftFinding(
                drift="gpu_memory_growth",
                title="GPU memory grows",
                severity="critical" if soon else "warn",
                summary=(
                    f"GPU memory in use grows {slope / MIB:+.0f} MiB/h ({CONFIDENCE:.0%} "
                    f"interval {(t.slope_low_per_hour or 0) / MIB:+.0f}.."
                    f"{(t.slope_high_per_hour or 0) / MIB:+.0f}), from "
                    f"{(t.start_value or 0) / MIB:.0f} to {(t.end_value or 0) / MIB:.0f} MiB{tail}."
                ),
                action=action,
                evidence=evidence,
                metric=t.metric,
            )
        )
    if free_share is not None and free_share < GPU_FREE_AT_PEAK_SHARE and total:
        out.append(
            DriftFinding(
                drift="gpu_memory_headroom",
                title="Under 20 % of GPU memory free at peak",
                severity="critical",
                summary=(
                    f"At its peak the run used {(peak or 0.0) / MIB:.0f} of {total / MIB:.0f} MiB of GPU "
                    f"memory ({free_share:.0%} free); traffic peaks in production risk "
                    "out-of-memory errors."
                ),
                action=action,
                evidence=(
                    Evidence("peak_used", (peak or 0) / MIB, "MiB"),
                    Evidence("total", total / MIB, "MiB"),
                    Evidence("free_at_peak", 100 * free_share, "%"),
                ),
                metric=t.metric,
            )
        )
    return out


def _floor_finding(fit: _Fit | None) -> DriftFinding | None:
    if fit is None:
        return None
    t = fit.trend
    start = t.start_value or 0.0
    if not _rising(fit, max(FLOOR_MATERIAL_SHARE * start, FLOOR_MATERIAL_MS)):
        return None
    slope = t.slope_per_hour or 0.0
    return DriftFinding(
        drift="latency_floor_creep",
        title="Latency floor creeps up",
        severity="warn",
        summary=(
            f"The fastest minute of P50 rises {slope:+.2f} ms/h ({CONFIDENCE:.0%} interval "
            f"{t.slope_low_per_hour or 0:+.2f}..{t.slope_high_per_hour or 0:+.2f}), from "
            f"{start:.2f} to {t.end_value or 0:.2f} ms: even the quiet moments get slower."
        ),
        action=(
            "Something accumulates with time rather than load: growing in-memory state "
            "(caches, sessions, queues), garbage-collection pressure, memory fragmentation "
            "or a background task; compare the server's compute time per request at the "
            "start and the end, and restart-test whether a restart resets the floor."
        ),
        evidence=_trend_evidence(fit, "ms"),
        metric=t.metric,
    )


def _capacity_finding(fit: _Fit | None, share: _Fit | None) -> DriftFinding | None:
    """Requests per compute-second of the model falls, or the share of offered load served does."""
    compute = fit is not None and _falling(
        fit, CAPACITY_MATERIAL_SHARE * (fit.trend.start_value or 0.0)
    )
    served = share is not None and _falling(share, 100 * CAPACITY_MATERIAL_SHARE)
    if not compute and not served:
        return None
    used = fit if compute else share
    assert used is not None
    t = used.trend
    slope = t.slope_per_hour or 0.0
    if compute:
        what = (
            f"The model serves {slope:+.1f} requests per compute-second per hour "
            f"({CONFIDENCE:.0%} interval {t.slope_low_per_hour or 0:+.1f}.."
            f"{t.slope_high_per_hour or 0:+.1f}), from {t.start_value or 0:.0f} to "
            f"{t.end_value or 0:.0f}: the same traffic needs more of the server as time goes on."
        )
        unit = "req/compute-s"
    else:
        what = (
            f"The share of offered load served falls {slope:+.2f} points/h "
            f"({CONFIDENCE:.0%} interval {t.slope_low_per_hour or 0:+.2f}.."
            f"{t.slope_high_per_hour or 0:+.2f}), from {t.start_value or 0:.1f} % to "
            f"{t.end_value or 0:.1f} %."
        )
        unit = "%"
    return DriftFinding(
        drift="capacity_fall",
        title="Throughput capacity falls",
        severity="warn",
        summary=what,
        action=(
            "Capacity that falls with time at a steady load points at the server, not the "
            "traffic: GPU clocks settling lower (heat), memory fragmentation, growing "
            "per-request work (state, caches); size for the end-of-soak capacity, not the "
            "first hour's, and find what grows."
        ),
        evidence=_trend_evidence(used, unit),
        metric=t.metric,
    )


def _errors_onset(
    t_s: np.ndarray, errors: np.ndarray, completed: np.ndarray, window_s: float
) -> DriftFinding | None:
    """Errors that start after a while and stay: the best split of per-minute error counts."""
    per = max(1, int(round(60.0 / window_s)))
    n = len(errors) // per * per
    if n < 3 * per:
        return None
    e = np.nan_to_num(errors[:n]).reshape(-1, per).sum(axis=1)
    c = np.nan_to_num(completed[:n]).reshape(-1, per).sum(axis=1)
    minutes = t_s[:n:per]
    total_e, total_c = e.sum(), c.sum()
    if total_e < ERRORS_MIN_AFTER or total_c <= 0:
        return None
    ce, cc = np.cumsum(e)[:-1], np.cumsum(c)[:-1]
    # Binomial log-likelihood of a rate change at each minute boundary.
    with np.errstate(divide="ignore", invalid="ignore"):
        p1 = np.where(cc > 0, ce / cc, 0.0)
        p2 = np.where(total_c - cc > 0, (total_e - ce) / (total_c - cc), 0.0)

        def ll(k: np.ndarray, n_: np.ndarray, p: np.ndarray) -> np.ndarray:
            return np.nan_to_num(k * np.log(p)) + np.nan_to_num((n_ - k) * np.log1p(-p))

        gain = ll(ce, cc, p1) + ll(total_e - ce, total_c - cc, p2)
    gain = np.where(p2 > p1, gain, -np.inf)
    k = int(np.argmax(gain)) + 1  # first minute after the change
    onset_s = float(minutes[k])
    before_e, before_c = float(e[:k].sum()), float(c[:k].sum())
    after_e, after_c = float(e[k:].sum()), float(c[k:].sum())
    if before_c <= 0 or after_c <= 0 or onset_s < ERRORS_MIN_ONSET_S:
        return None
    r1, r2 = before_e / before_c, after_e / after_c
    pooled = (before_e + after_e) / (before_c + after_c)
    se = np.sqrt(pooled * (1 - pooled) * (1 / before_c + 1 / after_c))
    z = (r2 - r1) / se if se > 0 else 0.0
    persistent = float(np.mean(e[k:] > 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(c[k:] > 0, 100 * e[k:] / c[k:], np.nan)
    # The typical minute after the onset, not the total: a burst that ends is no onset.
    typical = float(np.nanmedian(pct)) / 100 if np.isfinite(pct).any() else 0.0
    if (
        after_e < ERRORS_MIN_AFTER
        or typical <= 0
        or r1 > ERRORS_BEFORE_SHARE * typical
        or z < ERRORS_MIN_Z
    ):
        return None
    after = robust_trend("error_pct_after_onset", "%", minutes[k:], pct)
    evidence = [
        Evidence("onset", onset_s / 3600, "h", "from the run start"),
        Evidence("errors_before", before_e, "errors"),
        Evidence("error_pct_before", 100 * r1, "%"),
        Evidence("errors_after", after_e, "errors"),
        Evidence("error_pct_after", 100 * r2, "%"),
        Evidence("error_pct_typical_minute_after", 100 * typical, "%", "median minute"),
        Evidence("minutes_with_errors_after", 100 * persistent, "%"),
        Evidence("z", float(z), "", "two-proportion test of the split"),
    ]
    trend_text = ""
    if after is not None:
        evidence += [
            Evidence("slope_after", after.slope_per_hour, "%/h", "Theil-Sen after the onset"),
            Evidence("slope_after_low", after.slope_low_per_hour, "%/h"),
            Evidence("slope_after_high", after.slope_high_per_hour, "%/h"),
        ]
        if after.significant and (after.slope_per_hour or 0) > 0:
            trend_text = f", and growing {after.slope_per_hour:+.2g} points/h"
    return DriftFinding(
        drift="errors_onset",
        title=f"Errors start after {onset_s / 3600:.1f} h",
        severity="critical",
        summary=(
            f"Errors begin {onset_s / 3600:.1f} h into the run: {100 * r1:.3g} % before, "
            f"{100 * r2:.3g} % after ({after_e:.0f} errors, in {persistent:.0%} of the "
            f"minutes since){trend_text}."
        ),
        action=(
            "Something runs out after hours rather than under load: look in the server's "
            "logs around the onset for out-of-memory, file-descriptor or connection limits, "
            "expiring credentials or certificates, full disks or log rotation; a short test "
            "never reaches this."
        ),
        evidence=tuple(evidence),
        metric="error_pct",
        onset_s=onset_s,
    )


def soak_drift(s: SoakSignals) -> SoakDrift | None:
    """Trends and drift findings of a run of at least 10 minutes; None for shorter runs."""
    t_s = np.asarray(s.t_s, dtype=float)
    duration = float(t_s[-1] + s.window_s) if len(t_s) else 0.0
    if duration < SOAK_MIN_S:
        return None
    gpu = _fit("gpu_mem_used_bytes", "bytes", t_s, s.gpu_mem_used_bytes, s.gpu_mem_total_bytes)
    rss = _fit("server_rss_bytes", "bytes", t_s, s.server_rss_bytes, s.host_memory_bytes)
    floor_t, floors = _minute_floor(t_s, np.asarray(s.p50_ms, dtype=float), s.window_s)
    floor = _fit("latency_floor_ms", "ms", floor_t, floors, None)
    capacity = None
    if s.compute_ms_per_request is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            per_s = np.where(
                s.compute_ms_per_request > 0, 1000.0 / s.compute_ms_per_request, np.nan
            )
        capacity = _fit("compute_capacity_rps", "req/compute-s", t_s, per_s, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        served_pct = np.where(
            np.nan_to_num(s.offered_rps) > 0, 100.0 * s.throughput_rps / s.offered_rps, np.nan
        )
    served = _fit("served_pct", "%", t_s, served_pct, None)
    trends = tuple(f.trend for f in (gpu, rss, floor, capacity, served) if f is not None)

    findings: list[DriftFinding] = []
    findings += _gpu_findings(gpu, s.gpu_mem_used_bytes, s.gpu_mem_total_bytes)
    for found in (
        _rss_finding(rss, s.host_memory_bytes),
        _floor_finding(floor),
        _capacity_finding(capacity, served),
        _errors_onset(t_s, np.asarray(s.errors, float), np.asarray(s.completed, float), s.window_s),
    ):
        if found is not None:
            findings.append(found)
    findings.sort(key=lambda f: f.severity != "critical")
    if findings:
        summary = "; ".join(f.title for f in findings)
    else:
        growing = [t for t in trends if t.significant]
        summary = "no drift that matters within a day" + (
            " (significant but immaterial: " + ", ".join(t.metric for t in growing) + ")"
            if growing
            else ""
        )
    return SoakDrift(duration, trends, summary, tuple(findings))


__all__ = ["SOAK_MIN_S", "SoakSignals", "robust_trend", "soak_drift"]
