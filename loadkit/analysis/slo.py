"""Service-level objectives: `--slo` text, thresholds from three sources, the pass/fail verdict."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from loadkit import percentile_names
from loadkit.analysis.model import OverallStats, SloVerdict, Verdict
from loadkit.errors import UsageError

DEFAULT_SLO: dict[str, float] = {"p99_ms": 50.0, "errors_pct": 0.1}
_SLO_ITEM = re.compile(
    rf"^\s*({percentile_names.PATTERN}|errors)\s*[=<]=?\s*([\d.]+)\s*(ms|s|us|%)?\s*$"
)


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
        name = percentile_names.key(name) or name
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
                and (key == "errors_pct" or percentile_names.key(key.removesuffix("_ms")))
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
            # said as what it counts where arrivals were dropped: the line below the
            # verdict gives errors and dropped apart ("errors: 0.00%  dropped: 4312")
            label = "errors + dropped arrivals" if overall.dropped else name
        else:
            name, unit = key.removesuffix("_ms"), "ms"
            observed = getattr(overall.corrected, f"{name}_ms", None)
            detail = "whole run, coordinated-omission corrected"
            label = name
        passed = None if observed is None else observed <= threshold
        checks.append(SloVerdict(name, threshold, unit, observed, passed, detail, label))
    return _verdict(checks, source)


def step_verdict(
    thresholds: Mapping[str, float],
    source: str,
    overall: OverallStats,
    steps: Mapping[str, Sequence[float | None]],
    step_s: float,
) -> Verdict:
    """A production window's verdict: each latency threshold against every step's value.

    Per-step quantiles from an exporter (a summary, histogram_quantile) cannot be
    merged into a whole-window percentile, so a latency objective is judged where it
    was measured: it fails in any step whose value is above it, and the worst step
    and the share of steps over are said. Errors are judged on the window's totals.
    """
    whole = slo_verdict(thresholds, source, overall)
    checks: list[SloVerdict] = []
    for c in whole.slos:
        values = [v for v in steps.get(c.name, ()) if v is not None]
        if c.unit != "ms" or c.observed is not None or not values:
            checks.append(c)
            continue
        over = sum(v > c.threshold for v in values)
        detail = (
            f"worst {step_s:g} s step of the production window; above the threshold in "
            f"{over}/{len(values)} steps"
        )
        checks.append(replace(c, observed=max(values), passed=over == 0, detail=detail))
    return _verdict(checks, source)


def _verdict(checks: list[SloVerdict], source: str) -> Verdict:
    failed = [c for c in checks if c.passed is False]
    unknown = [c for c in checks if c.passed is None]
    passed = not failed and not unknown
    if failed:
        parts = ", ".join(
            f"{c.label or c.name} {c.observed:.3g}{c.unit} > {c.threshold:g}{c.unit}"
            for c in failed
            if c.observed is not None
        )
        summary = f"FAIL: {parts}"
    elif unknown:
        summary = "FAIL: not measurable: " + ", ".join(c.name for c in unknown)
    else:
        summary = "PASS: " + ", ".join(
            f"{c.label or c.name} {c.observed:.3g}{c.unit} <= {c.threshold:g}{c.unit}"
            for c in checks
            if c.observed is not None
        )
    return Verdict(passed, tuple(checks), source, summary)


__all__ = [
    "DEFAULT_SLO",
    "parse_slo",
    "resolve_slo",
    "slo_verdict",
    "step_verdict",
]
