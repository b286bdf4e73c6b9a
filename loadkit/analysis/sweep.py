"""A configuration sweep's comparison: each point's numbers, the batch-size rules, a recommendation.

`loadkit sweep` runs the same test at each server configuration (or takes
runs the user made, `--from-runs`); this module turns each point's analysis
into the numbers the comparison shows (corrected P50/P95/P99, throughput or
capacity, batch-size distribution, queue vs compute, SLO verdict, findings),
evaluates the two batch-size rules of thumb per configuration, and picks the
recommended configuration with its evidence. `sweep.json` is its output.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from loadkit.analysis.latency_counts import LatencyCounts
from loadkit.analysis.model import Analysis
from loadkit.analysis.percentiles import collect_intervals, merge, summarize
from loadkit.rundir import Run

SWEEP_FILE = "sweep.json"
SWEEP_VERSION = 1
SMALL_BATCHES = 2  # batches of 1 to 2 ...
SMALL_SHARE = 0.8  # ... in 80 % of executions: the window is useless
PINNED_SHARE = 0.5  # half the executions at max_batch_size: raise it
WARMUP_S = 5.0  # each point's first seconds (a model just reloaded, connections opening)


def batch_distribution(analysis: Analysis) -> dict[str, int]:
    """Executions per batch size over the whole run (Triton's statistics)."""
    matrix = analysis.telemetry.batch_sizes
    if matrix is None:
        return {}
    totals = np.nansum(np.asarray(matrix.counts, dtype=float), axis=0) if matrix.counts else []
    return {str(size): int(n) for size, n in zip(matrix.sizes, totals, strict=False) if n > 0}


def _mean(values: Sequence[float | None] | None) -> float | None:
    if not values:
        return None
    arr = np.asarray([math.nan if v is None else v for v in values], dtype=float)
    return None if np.all(np.isnan(arr)) else float(np.nanmean(arr))


def batch_rules(
    distribution: Mapping[str, int], max_batch_size: int | None, max_queue_delay_us: int | None
) -> list[dict[str, str]]:
    """The two rules of thumb for a batching configuration, with the numbers behind them."""
    total = sum(distribution.values())
    if not total:
        return []
    rules = []
    small = sum(n for size, n in distribution.items() if int(size) <= SMALL_BATCHES) / total
    if small >= SMALL_SHARE and (max_queue_delay_us or 0) > 0:
        rules.append(
            {
                "rule": "window useless",
                "detail": f"{small:.0%} of batches held 1-{SMALL_BATCHES} requests with a "
                f"{max_queue_delay_us} us window: it adds latency and forms no batches at "
                "this load; shorten it or set it to 0",
            }
        )
    if max_batch_size:
        pinned = distribution.get(str(max_batch_size), 0) / total
        if pinned >= PINNED_SHARE:
            rules.append(
                {
                    "rule": "raise max_batch_size",
                    "detail": f"{pinned:.0%} of batches were full ({max_batch_size}): "
                    "larger batches would serve more per execution",
                }
            )
    return rules


def steady_numbers(run: Run, warmup_s: float = WARMUP_S) -> dict[str, float | None]:
    """Corrected percentiles and rates after the first `warmup_s` seconds of the run.

    A point starts on a model the repository API just loaded: its first
    executions (and connections) are slower, and in a short point they would
    decide its P99. Intervals that start before the warm-up ends are left out.
    """
    intervals = collect_intervals(run.iter_latency_intervals(LatencyCounts.decode))
    first = intervals.first_start_ns
    if first is None:
        return {}
    cut = first + round(warmup_s * 1e9)
    corrected = intervals.by_kind.get("corrected", {})
    kept = [h for t, h in corrected.items() if t >= cut]
    if not kept:  # a run shorter than its warm-up: judge all of it
        kept, cut = list(corrected.values()), first
    summary = summarize(merge(kept), "corrected")
    load = run.load_intervals
    rates: dict[str, float | None] = {"throughput_rps": None, "offered_rps": None}
    if not load.empty and "t_ns" in load.columns:
        steady = load[load["t_ns"] >= cut]
        sending = steady.groupby("t_ns")["offered"].sum()
        # whole seconds of load: not the drain, nor the part-second the load ended in
        full = sending[sending >= 0.5 * float(sending[sending > 0].median() or 0.0)]
        steady = steady[steady["t_ns"].isin(full[full > 0].index)]
        seconds = steady["t_ns"].nunique()
        if seconds:
            rates["throughput_rps"] = float(steady["ok"].sum()) / seconds
            rates["offered_rps"] = float(steady["offered"].sum()) / seconds
    return {
        "p50_ms": summary.p50_ms,
        "p95_ms": summary.p95_ms,
        "p99_ms": summary.p99_ms,
        "warmup_s": (cut - first) / 1e9,
        **rates,
    }


def point_numbers(analysis: Analysis, steady: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What the comparison shows about one configuration's run (`steady`: after the warm-up)."""
    o = analysis.overall
    t = analysis.telemetry
    steady = steady or {}
    p99 = steady.get("p99_ms", o.corrected.p99_ms)
    thresholds = {v.name: v.threshold for v in analysis.verdict.slos}
    observed = {
        "p50": steady.get("p50_ms", o.corrected.p50_ms),
        "p95": steady.get("p95_ms", o.corrected.p95_ms),
        "p99": p99,
    }
    checks = [
        observed[name] is not None and observed[name] <= limit
        for name, limit in thresholds.items()
        if name in observed
    ]
    errors_ok = all(v.passed is not False for v in analysis.verdict.slos if v.name == "errors")
    slo_passed = bool(checks) and all(checks) and errors_ok
    slo = ", ".join(
        f"{name} {observed[name]:.1f} ms {'<=' if observed[name] <= limit else '>'} {limit:g} ms"
        for name, limit in thresholds.items()
        if name in observed and observed[name] is not None
    )
    numbers: dict[str, Any] = {
        "p50_ms": observed["p50"],
        "p95_ms": observed["p95"],
        "p99_ms": p99,
        "warmup_s": steady.get("warmup_s"),
        "run_p99_ms": o.corrected.p99_ms,
        "throughput_rps": steady.get("throughput_rps", o.throughput_rps),
        "offered_rps": steady.get("offered_rps", o.offered_rps),
        "error_pct": o.error_pct,
        "dropped": o.dropped,
        "batch_sizes": batch_distribution(analysis),
        "batch_size_mean": _mean(t.batch_size_mean),
        "queue_ms": _mean(t.queue_ms_per_request),
        "compute_ms": _mean(t.compute_ms_per_request),
        "slo_passed": slo_passed,
        "slo": ("PASS: " if slo_passed else "FAIL: ") + (slo or analysis.verdict.summary),
        "findings": [
            {"cause": f.cause, "title": f.title, "confidence": f.confidence, "summary": f.summary}
            for f in analysis.findings
        ],
        "capacity_rps": analysis.capacity.rate_rps if analysis.capacity is not None else None,
        # passes at low, fails at high; a search cut short (by --max-duration) leaves a wide
        # bracket and its capacity is a lower bound
        "capacity_bracket": (
            [analysis.capacity.low_rps, analysis.capacity.high_rps]
            if analysis.capacity is not None
            else None
        ),
        "capacity_cut_short": analysis.capacity.stopped_by
        if analysis.capacity is not None
        else None,
    }
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v)
        for k, v in numbers.items()
    }


def recommend(points: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The most capacity within the SLO (capacity runs), else the lowest P99 among the
    configurations that met the SLO (ties: more throughput); if none met it, the lowest P99."""
    measured = [p for p in points if p.get("numbers") and p.get("status") == "measured"]
    if not measured:
        return None
    with_capacity = [p for p in measured if p["numbers"].get("capacity_rps") is not None]
    if with_capacity:
        best = max(with_capacity, key=lambda p: p["numbers"]["capacity_rps"])
        why = (
            f"the most capacity within the SLO: {best['numbers']['capacity_rps']:.1f} req/s "
            + _versus(best, with_capacity, "capacity_rps", "req/s")
        )
        short = [p["label"] for p in with_capacity if p["numbers"].get("capacity_cut_short")]
        if short:
            why += (
                f"; {len(short)} of {len(with_capacity)} searches were cut short by their "
                "--max-duration (their capacity is a lower bound: give them longer)"
            )
        return {"label": best["label"], "settings": best["settings"], "why": why}
    passing = [p for p in measured if p["numbers"].get("slo_passed")]
    pool = passing or measured

    def key(p: Mapping[str, Any]) -> tuple[float, float]:
        n = p["numbers"]
        p99 = n.get("p99_ms")
        return (p99 if p99 is not None else math.inf, -(n.get("throughput_rps") or 0.0))

    best = min(pool, key=key)
    p99 = best["numbers"].get("p99_ms")
    why = (
        (
            "the lowest P99 of the configurations that met the SLO"
            if passing
            else "no configuration met the SLO; the lowest P99"
        )
        + (f": {p99:.1f} ms " if p99 is not None else " ")
        + _versus(best, pool, "p99_ms", "ms")
    )
    rules = best.get("rules") or []
    if rules:
        why += "; but " + "; ".join(r["rule"] for r in rules)
    return {"label": best["label"], "settings": best["settings"], "why": why.strip()}


def _versus(best: Mapping[str, Any], pool: Sequence[Mapping[str, Any]], key: str, unit: str) -> str:
    others = [
        f"{p['label']} {p['numbers'][key]:.1f} {unit}"
        for p in pool
        if p is not best and p["numbers"].get(key) is not None
    ]
    return f"(vs {', '.join(others)})" if others else ""


__all__ = [
    "SWEEP_FILE",
    "SWEEP_VERSION",
    "batch_distribution",
    "batch_rules",
    "point_numbers",
    "recommend",
    "steady_numbers",
]
