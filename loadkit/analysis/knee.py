"""Saturation knee: the highest load step that was sustainable (a step scenario's answer)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

from loadkit.analysis.latency_counts import LatencyCounts
from loadkit.analysis.model import SaturationKnee, StepResult
from loadkit.analysis.percentiles import merge

KNEE_ACHIEVED_SHARE = 0.97
KNEE_SETTLE_WINDOWS = 2


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


__all__ = ["saturation_knee"]
