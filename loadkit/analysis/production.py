"""Latency of a production window (`loadkit import --prometheus`) on the analysis grid.

A production run has no HDR histograms: its latency is what the exporters
gave, per step (`telemetry/production_latency.jsonl`): Triton's summary
quantiles, an application histogram's quantiles, or only the mean per request.
These become the run's percentile windows, with the source and the span
behind each value stated; a mean is kept apart (`mean_ms`) and never put
where a percentile goes. Causes that need per-request data (completion gaps,
connection churn) are not assessable from metrics and say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from loadkit.analysis import causes
from loadkit.analysis.align import (
    NS,
    WindowGrid,
    counter_rate_on_grid,
    make_grid,
    numeric,
    reduce_on_grid,
)
from loadkit.analysis.model import CauseCheck, LatencyWindows, OverallStats, StepLatency
from loadkit.rundir import Run

LATENCY_SERIES = "production_latency"
# Quantile over the last minute (Triton's summaries: prometheus-cpp's default max_age).
SUMMARY_SPAN_S = 60.0
NOT_FROM_METRICS = "not assessable from metrics: needs {what}, which only a load test records"
# What a window's latency values are, by `production.latency_source` (the importer's names).
LATENCY_SOURCES = {
    "triton-summary": f"Triton summary quantiles (each over the last {SUMMARY_SPAN_S:g} s)",
    "app-histogram": "the application histogram (histogram_quantile per step)",
    "triton-mean": "the mean per request from Triton's counters (no percentile is known)",
}


@dataclass(frozen=True)
class ProductionLatency:
    grid: WindowGrid
    latency: LatencyWindows
    basis_s: tuple[float, ...]
    notes: tuple[str, ...]


def is_production(run: Run) -> bool:
    return run.info.kind == "production" and run.has_series(LATENCY_SERIES)


def _series(values: np.ndarray) -> tuple[float | None, ...]:
    return tuple(float(v) if np.isfinite(v) else None for v in values)


def production_latency(run: Run, start_ns: int, end_ns: int) -> ProductionLatency:
    """The window's latency per step, and the request count behind each step."""
    info: dict[str, Any] = run.info.production or {}
    step_s = float(info.get("step_s") or 5.0)
    grid = make_grid(start_ns, end_ns, step_s)
    frame = run.series(LATENCY_SERIES)
    t = frame["t_ns"].to_numpy(dtype=np.int64) - int(
        step_s * NS
    )  # a value at t describes [t - step, t)
    source = str(info.get("latency_source") or "")

    def column(name: str) -> np.ndarray:
        values = numeric(frame, name)
        return (
            reduce_on_grid(grid, t, values, "mean")
            if values is not None
            else np.full(grid.n, np.nan)
        )

    counts = np.zeros(grid.n)
    mean = column("mean_ms")
    if run.has_series("triton_stats"):
        triton = run.series("triton_stats")
        model = info.get("model")
        if model is not None and "model" in triton.columns:
            triton = triton[triton["model"] == model].reset_index(drop=True)
        success = numeric(triton, "success_count")
        duration = numeric(triton, "success_ns")
        if success is not None and len(triton):
            read_at = triton["t_ns"].to_numpy(dtype=np.int64)
            rate, _ = counter_rate_on_grid(grid, read_at, success)
            counts = np.nan_to_num(rate) * step_s
            if duration is not None:
                # The mean of each step from the raw counters: exact at the step, where
                # a rate() over the rate window would smear a 2 s slowdown over 6 s.
                ns_rate, _ = counter_rate_on_grid(grid, read_at, duration)
                with np.errstate(invalid="ignore", divide="ignore"):
                    mean = np.where(rate > 0, ns_rate / rate / 1e6, np.nan)
    span_s = (
        SUMMARY_SPAN_S
        if source == "triton-summary"
        else max(step_s, _seconds(info.get("rate_window")))
    )
    basis = tuple(int(round(c * span_s / step_s)) for c in counts)
    latency = LatencyWindows(
        kind="corrected",
        count=tuple(int(round(c)) for c in counts),
        p50_ms=_series(column("p50_ms")),
        p95_ms=_series(column("p95_ms")),
        p99_ms=_series(column("p99_ms")),
        p999_ms=_series(column("p999_ms")),
        max_ms=tuple(None for _ in range(grid.n)),
        basis_count=basis,
        mean_ms=_series(mean),
    )
    notes = _source_notes(info, step_s, span_s)
    return ProductionLatency(grid, latency, tuple(span_s for _ in range(grid.n)), tuple(notes))


def _seconds(text: Any) -> float:
    try:
        return float(str(text).rstrip("s"))
    except ValueError:
        return 0.0


def _source_notes(info: dict[str, Any], step_s: float, span_s: float) -> list[str]:
    """The step, then one line per series: where it came from (the queries as sent)."""
    why = info.get("step_reason")
    chunks = int(info.get("chunks") or 1)
    asked = f"; asked in {chunks} chunks per query" if chunks > 1 else ""
    parts = [
        f"production window from Prometheus {info.get('prometheus')} at a {step_s:g} s step "
        + (f"({why}{asked}; " if why else "(")
        + f"scrape interval {info.get('scrape_interval_s') or 'unknown'} s, rates over "
        f"{info.get('rate_window')}); latency: {info.get('latency_source')}"
        + (f", each value over the last {span_s:g} s" if span_s > step_s else "")
    ]
    for series in info.get("series") or []:
        queries = "; ".join(series.get("queries") or [])
        extra = []
        if series.get("counter_resets"):
            extra.append(f"{series['counter_resets']} counter reset(s), handled")
        if series.get("missing_steps"):
            extra.append(f"{series['missing_steps']} step(s) without a sample (gaps left empty)")
        parts.append(
            f"series {series.get('series')} from {series.get('family')}: {queries}"
            + (f" [{', '.join(extra)}]" if extra else "")
        )
    return parts


def metrics_only(
    registry: Sequence[causes.Cause],
) -> tuple[list[causes.Cause], list[CauseCheck]]:
    """The causes a window of metrics can test, and a not-assessable check (with why) for each
    that needs per-request data (`Cause.per_request`).

    Those are left out of attribution itself, not dropped after it: scored on a host's
    counters (node-exporter's TCP opens, which other clients move too) a churn finding
    ranked the compute residual after it and lowered it to weak, and then vanished from
    the findings, leaving "Ranked after Connection churn" on a finding that named no churn.
    """
    tested = [c for c in registry if c.per_request is None]
    untestable = [
        CauseCheck(c.id, "not_assessable", NOT_FROM_METRICS.format(what=c.per_request))
        for c in registry
        if c.per_request is not None
    ]
    return tested, untestable


def latency_source(run: Run) -> str:
    """What a production window's latency values are, in words."""
    source = (run.info.production or {}).get("latency_source")
    return LATENCY_SOURCES.get(str(source), f"the exporters ({source or 'source not recorded'})")


def step_latency(run: Run, latency: LatencyWindows, step_s: float) -> StepLatency:
    """The median and the worst step of each quantile the window has (and of the mean)."""
    columns = {
        "p50": latency.p50_ms,
        "p95": latency.p95_ms,
        "p99": latency.p99_ms,
        "p999": latency.p999_ms,
        "mean": latency.mean_ms or (),
    }
    median: dict[str, float | None] = {}
    worst: dict[str, float | None] = {}
    for name, values in columns.items():
        known = np.array([v for v in values if v is not None], dtype=float)
        median[name] = float(np.median(known)) if known.size else None
        worst[name] = float(known.max()) if known.size else None
    return StepLatency(latency_source(run), step_s, median, worst)


def with_server_totals(overall: OverallStats, run: Run, grid: WindowGrid) -> OverallStats:
    """Completed, failed and the rate over the window, from Triton's own counters (a
    production window has no load counters); the whole-window percentiles stay unknown:
    quantiles of steps cannot be merged."""
    if not run.has_series("triton_stats"):
        return overall
    triton = run.series("triton_stats")
    model = (run.info.production or {}).get("model")
    if model is not None and "model" in triton.columns:
        triton = triton[triton["model"] == model].reset_index(drop=True)
    t = triton["t_ns"].to_numpy(dtype=np.int64)
    totals = []
    for name in ("success_count", "fail_count"):
        values = numeric(triton, name)
        if values is None or not len(triton):
            totals.append(0)
            continue
        rate, _ = counter_rate_on_grid(grid, t, values)
        totals.append(int(round(float(np.nansum(rate)) * grid.window_s)))
    ok, errors = totals
    completed = ok + errors
    duration = overall.duration_s
    return replace(
        overall,
        ok=ok,
        errors=errors,
        completed=completed,
        error_pct=100.0 * errors / completed if completed else None,
        throughput_rps=ok / duration if duration > 0 else None,
    )
