"""Verdicts and figures: SLO pass/fail, alerts, burst recovery, saturation knee (soak drift: drift.py)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from loadkit.analysis.episodes import hot_runs
from loadkit.analysis.latency_counts import LatencyCounts
from loadkit.analysis.model import (
    Alert,
    BurstRecovery,
    OverallStats,
    SaturationKnee,
    SloVerdict,
    StepResult,
    Verdict,
)
from loadkit.analysis.percentiles import merge
from loadkit.errors import UsageError

DEFAULT_SLO: dict[str, float] = {"p99_ms": 50.0, "errors_pct": 0.1}
P99_ALERT_MS = 80.0
GPU_IDLE_PCT = 20.0
GPU_IDLE_SUSTAINED_S = 30.0
TEMP_WARN_C = 85.0
TEMP_CRITICAL_C = 90.0
RECOVERY_SPAN_S = 5.0  # P99 is judged over 5 s
RECOVERY_HOLD_S = 10.0  # and must stay in band this long
PRE_BURST_S = 30.0
KNEE_ACHIEVED_SHARE = 0.97
KNEE_SETTLE_WINDOWS = 2
PERCENTILE_KEYS = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}

_SLO_ITEM = re.compile(r"^\s*(p50|p90|p95|p99|p999|errors)\s*[=<]=?\s*([\d.]+)\s*(ms|s|us|%)?\s*$")


def parse_slo(text: str) -> dict[str, float]:
    """`p99=50ms,errors=0.1%` -> {"p99_ms": 50.0, "errors_pct": 0.1}."""
    out: dict[str, float] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        m = _SLO_ITEM.match(item.lower())
        if not m:
            raise UsageError(
                f"cannot read SLO item {item.strip()!r}",
                hint="use e.g. --slo p99=50ms,p95=30ms,errors=0.1%",
            )
        name, value, unit = m.group(1), float(m.group(2)), m.group(3)
        if name == "errors":
            if unit not in (None, "%"):
                raise UsageError(f"error-rate SLO must be a percentage, got {item.strip()!r}")
            out["errors_pct"] = value
        else:
            if unit == "%":
                raise UsageError(
                    f"latency SLO needs a time unit, got {item.strip()!r}", hint="e.g. p99=50ms"
                )
            factor = {"s": 1000.0, "us": 0.001}.get(unit or "ms", 1.0)
            out[f"{name}_ms"] = value * factor
    return out


def resolve_slo(
    command_line: Mapping[str, float] | None, manifest_slo: Mapping[str, Any] | None
) -> tuple[dict[str, float], str]:
    """Thresholds: defaults, overridden by the scenario's (manifest), overridden by the command line."""
    merged: dict[str, float] = dict(DEFAULT_SLO)
    sources = {key: "default" for key in merged}
    for origin, given in (("scenario", manifest_slo), ("command line", command_line)):
        for key, value in (given or {}).items():
            if (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and (key == "errors_pct" or key.removesuffix("_ms") in PERCENTILE_KEYS)
            ):
                merged[key] = float(value)
                sources[key] = origin
    order = ("command line", "scenario", "default")
    used = [o for o in order if o in sources.values()]
    return merged, "+".join(used)


def slo_verdict(thresholds: Mapping[str, float], source: str, overall: OverallStats) -> Verdict:
    """Pass/fail per threshold (whole run, corrected latency) and overall."""
    checks: list[SloVerdict] = []
    for key, threshold in thresholds.items():
        if key == "errors_pct":
            denom = overall.completed + overall.dropped
            observed = 100.0 * (overall.errors + overall.dropped) / denom if denom else None
            detail = "errors + dropped arrivals, of completed + dropped"
            name, unit = "errors", "%"
        else:
            name, unit = key.removesuffix("_ms"), "ms"
            observed = getattr(overall.corrected, f"{name}_ms", None)
            detail = "whole run, coordinated-omission corrected"
        passed = None if observed is None else observed <= threshold
        checks.append(SloVerdict(name, threshold, unit, observed, passed, detail))
    failed = [c for c in checks if c.passed is False]
    unknown = [c for c in checks if c.passed is None]
    passed = not failed and not unknown
    if failed:
        parts = ", ".join(
            f"{c.name} {c.observed:.3g}{c.unit} > {c.threshold:g}{c.unit}"
            for c in failed
            if c.observed is not None
        )
        summary = f"FAIL: {parts}"
    elif unknown:
        summary = "FAIL: not measurable: " + ", ".join(c.name for c in unknown)
    else:
        summary = "PASS: " + ", ".join(
            f"{c.name} {c.observed:.3g}{c.unit} <= {c.threshold:g}{c.unit}"
            for c in checks
            if c.observed is not None
        )
    return Verdict(passed, tuple(checks), source, summary)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(first, last + 1) window index of each run of True."""
    return hot_runs(mask, merge_gap=0)


def _alert(
    name: str,
    severity: str,
    what: str,
    runs: list[tuple[int, int]],
    values: np.ndarray,
    starts_ns: np.ndarray,
    window_s: float,
    unit: str,
    peak_fn: str = "max",
) -> Alert:
    """One alert for all the spans where a condition held: first start, last end, worst value."""
    window_ns = int(round(window_s * 1e9))
    picked = np.concatenate([values[a:b] for a, b in runs])
    worst = float(np.nanmax(picked) if peak_fn == "max" else np.nanmean(picked))
    total_s = sum(b - a for a, b in runs) * window_s
    times = f"{len(runs)} times, " if len(runs) > 1 else ""
    message = f"{what.format(value=worst)} ({times}{total_s:.0f} s in all)"
    return Alert(
        name,
        severity,
        message,
        int(starts_ns[runs[0][0]]),
        int(starts_ns[runs[-1][1] - 1]) + window_ns,
        worst,
        unit,
    )


def alerts(
    starts_ns: np.ndarray,
    window_s: float,
    p99_ms: np.ndarray,
    gpu_util_pct: np.ndarray | None,
    gpu_temp_c: np.ndarray | None,
    offered_rps: np.ndarray,
) -> list[Alert]:
    """P99 above 80 ms, GPU idle under load for 30 s or more, GPU hot (85 °C) or throttling hot (90 °C)."""
    out: list[Alert] = []

    def add(
        name: str,
        severity: str,
        what: str,
        flag: np.ndarray,
        values: np.ndarray,
        unit: str,
        min_windows: int = 1,
        peak_fn: str = "max",
    ) -> None:
        runs = [(a, b) for a, b in _runs(flag) if b - a >= min_windows]
        if runs:
            out.append(
                _alert(name, severity, what, runs, values, starts_ns, window_s, unit, peak_fn)
            )

    add(
        "p99_high",
        "critical",
        f"P99 reached {{value:.0f}} ms (> {P99_ALERT_MS:.0f} ms)",
        np.nan_to_num(p99_ms, nan=0.0) > P99_ALERT_MS,
        p99_ms,
        "ms",
    )
    if gpu_util_pct is not None and not np.all(np.isnan(gpu_util_pct)):
        low = (np.nan_to_num(gpu_util_pct, nan=100.0) < GPU_IDLE_PCT) & (
            np.nan_to_num(offered_rps) > 0
        )
        add(
            "gpu_underutilized",
            "warn",
            f"GPU utilization {{value:.0f}}% (< {GPU_IDLE_PCT:.0f}%) sustained under load",
            low,
            gpu_util_pct,
            "%",
            max(1, int(round(GPU_IDLE_SUSTAINED_S / window_s))),
            "mean",
        )
    if gpu_temp_c is not None and not np.all(np.isnan(gpu_temp_c)):
        temp = np.nan_to_num(gpu_temp_c, nan=0.0)
        add(
            "gpu_temp_throttling",
            "critical",
            f"GPU temperature reached {{value:.0f}} °C (> {TEMP_CRITICAL_C:.0f} °C, throttling range)",
            temp > TEMP_CRITICAL_C,
            gpu_temp_c,
            "°C",
        )
        add(
            "gpu_temp_high",
            "warn",
            f"GPU temperature reached {{value:.0f}} °C (> {TEMP_WARN_C:.0f} °C)",
            temp > TEMP_WARN_C,
            gpu_temp_c,
            "°C",
        )
    out.sort(key=lambda a: (a.severity != "critical", a.start_ns or 0))
    return out


def rolling_p99(
    histograms: Sequence[LatencyCounts | None], window_s: float, span_s: float = RECOVERY_SPAN_S
) -> np.ndarray:
    """P99 over the trailing `span_s` at each window, from merged histograms."""
    k = max(1, int(round(span_s / window_s)))
    out = np.full(len(histograms), np.nan)
    for i in range(len(histograms)):
        merged = merge(histograms[max(0, i - k + 1) : i + 1])
        if merged.get_total_count():
            out[i] = merged.get_value_at_percentile(99.0) / 1000.0
    return out


@dataclass(frozen=True)
class BurstPhase:
    start_ns: int
    end_ns: int | None
    rate: float | None


def burst_recovery(
    burst: BurstPhase,
    starts_ns: np.ndarray,
    window_s: float,
    p99_ms: np.ndarray,
    p99_5s_ms: np.ndarray,
    batch_mean: np.ndarray | None,
    queue_ms: np.ndarray | None,
) -> BurstRecovery:
    """Pre-burst band, then the first time after the burst that P99 (5 s) stays in it for 10 s."""
    n = len(starts_ns)
    window_ns = int(round(window_s * 1e9))
    i_start = int(np.searchsorted(starts_ns, burst.start_ns, side="right")) - 1
    i_start = max(0, i_start)
    end_ns = burst.end_ns if burst.end_ns is not None else int(starts_ns[-1]) + window_ns
    i_end = min(n, int(np.searchsorted(starts_ns, end_ns, side="left")))
    pre_lo = max(0, i_start - int(round(PRE_BURST_S / window_s)))
    pre = p99_5s_ms[pre_lo:i_start]
    pre = pre[~np.isnan(pre)]
    before = np.zeros(n, dtype=bool)
    before[pre_lo:i_start] = True
    during = np.zeros(n, dtype=bool)
    during[i_start:i_end] = True

    def mean_of(values: np.ndarray | None, mask: np.ndarray) -> float | None:
        if values is None:
            return None
        sel = values[mask]
        sel = sel[~np.isnan(sel)]
        return float(sel.mean()) if sel.size else None

    extras = {
        "batch_size_mean_before": mean_of(batch_mean, before),
        "batch_size_mean_during": mean_of(batch_mean, during),
        "queue_ms_before": mean_of(queue_ms, before),
        "queue_ms_during": mean_of(queue_ms, during),
    }
    if pre.size < 3:
        return BurstRecovery(
            burst.start_ns,
            burst.end_ns,
            burst.rate,
            None,
            None,
            False,
            None,
            None,
            None,
            None,
            None,
            detail="too little data before the burst for a band",
            **extras,
        )
    median = float(np.median(pre))
    # The upper decile, not median + k·MAD: before the burst P99 may already
    # have a sawtooth (5 s windows with and without a spike), whose MAD is
    # inflated by the two levels; "recovered" means back to what it was then.
    band = max(float(np.quantile(pre, 0.9)) * 1.1, 1.2 * median)
    hold = max(1, int(round(RECOVERY_HOLD_S / window_s)))
    within = np.nan_to_num(p99_5s_ms, nan=np.inf) <= band
    recovered_at: int | None = None
    for i in range(i_end, n - hold + 1):
        if within[i : i + hold].all():
            recovered_at = i
            break
    last = recovered_at if recovered_at is not None else n
    seg = p99_ms[i_start : max(last, i_start + 1)]
    peak = float(np.nanmax(seg)) if seg.size and not np.all(np.isnan(seg)) else None
    area = float(np.nansum(np.clip(seg - median, 0, None)) * window_s) if seg.size else None
    if recovered_at is None:
        return BurstRecovery(
            burst.start_ns,
            burst.end_ns,
            burst.rate,
            median,
            band,
            False,
            None,
            None,
            peak,
            None if peak is None else peak - median,
            area,
            detail=f"P99 (5 s) did not stay under {band:.1f} ms for {RECOVERY_HOLD_S:.0f} s before the run ended",
            **extras,
        )
    rec_ns = int(starts_ns[recovered_at])
    recovery_s = max(0.0, (rec_ns - end_ns) / 1e9)
    return BurstRecovery(
        burst.start_ns,
        burst.end_ns,
        burst.rate,
        median,
        band,
        True,
        recovery_s,
        rec_ns,
        peak,
        None if peak is None else peak - median,
        area,
        detail=f"P99 (5 s) back under {band:.1f} ms and held {RECOVERY_HOLD_S:.0f} s, {recovery_s:.0f} s after the burst ended",
        **extras,
    )


def saturation_knee(
    steps: Sequence[tuple[int, float | None]],
    end_ns: int,
    starts_ns: np.ndarray,
    window_s: float,
    histograms: Sequence[LatencyCounts | None],
    offered_rps: np.ndarray,
    throughput_rps: np.ndarray,
    errors_per_s: np.ndarray,
    in_flight: np.ndarray,
    p99_slo_ms: float,
    errors_slo_pct: float,
) -> SaturationKnee:
    """Highest step with achieved >= 97 % of offered, P99 within SLO, errors low, queue not growing."""
    results: list[StepResult] = []
    bounds = [s for s, _ in steps] + [end_ns]
    for (start, rate), stop in zip(steps, bounds[1:], strict=True):
        idx = np.nonzero((starts_ns >= start) & (starts_ns < stop))[0]
        idx = idx[KNEE_SETTLE_WINDOWS:] if idx.size > KNEE_SETTLE_WINDOWS + 2 else idx
        if idx.size == 0:
            continue
        offered = (
            float(np.nanmean(offered_rps[idx])) if not np.all(np.isnan(offered_rps[idx])) else rate
        )
        achieved = (
            float(np.nanmean(throughput_rps[idx]))
            if not np.all(np.isnan(throughput_rps[idx]))
            else None
        )
        hist = merge([histograms[i] for i in idx])
        p99 = hist.get_value_at_percentile(99.0) / 1000.0 if hist.get_total_count() else None
        errs = float(np.nansum(errors_per_s[idx]))
        total = float(np.nansum(throughput_rps[idx])) + errs
        err_pct = 100.0 * errs / total if total else None
        growing = False
        flight = in_flight[idx]
        ok_f = ~np.isnan(flight)
        if ok_f.sum() >= 3:
            slope = stats.theilslopes(flight[ok_f], idx[ok_f] * window_s)[0]
            growing = bool(
                slope * ok_f.sum() * window_s > max(5.0, 0.5 * float(np.nanmedian(flight)))
            )
        reasons = []
        if offered and achieved is not None and achieved < KNEE_ACHIEVED_SHARE * offered:
            reasons.append(f"achieved {achieved:.0f} < 97% of offered {offered:.0f} req/s")
        if p99 is None or p99 > p99_slo_ms:
            reasons.append(
                f"P99 {p99:.1f} ms > {p99_slo_ms:g} ms" if p99 is not None else "no latency data"
            )
        if err_pct is not None and err_pct > errors_slo_pct:
            reasons.append(f"errors {err_pct:.2f}% > {errors_slo_pct:g}%")
        if growing:
            reasons.append("in-flight requests growing")
        results.append(
            StepResult(
                int(start),
                int(stop),
                offered,
                achieved,
                p99,
                err_pct,
                growing,
                not reasons,
                "; ".join(reasons) or "sustainable",
            )
        )
    good = [r for r in results if r.ok]
    if not results:
        return SaturationKnee(False, None, None, (), "no load steps with data")
    if not good:
        return SaturationKnee(False, None, None, tuple(results), "no step was sustainable")
    knee = max(good, key=lambda r: r.offered_rps or 0.0)
    first_bad = next(
        (r for r in results if not r.ok and (r.offered_rps or 0) > (knee.offered_rps or 0)), None
    )
    reason = f"highest sustainable step {knee.offered_rps:.0f} req/s"
    if first_bad is not None:
        reason += f"; above it: {first_bad.reason}"
    return SaturationKnee(True, knee.offered_rps, knee.achieved_rps, tuple(results), reason)


__all__ = [
    "DEFAULT_SLO",
    "BurstPhase",
    "alerts",
    "burst_recovery",
    "parse_slo",
    "resolve_slo",
    "rolling_p99",
    "saturation_knee",
    "slo_verdict",
]
