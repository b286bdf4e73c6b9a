"""The JSON report: a small, stable summary for dashboards and pipelines.

Keys are documented in docs/reports.md and only ever added to; a consumer can
rely on every key listed there. `report_schema` changes only if a key is
removed or changes meaning. For everything else, read `analysis.json`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loadkit import __version__
from loadkit.analysis.model import (
    Analysis,
    CapacityResult,
    Finding,
    OverallStats,
    Verdict,
    to_jsonable,
)
from loadkit.rundir import Run

# History:
#   1 (loadkit 0.1.0): first version.
REPORT_SCHEMA = 1


class JsonReporter:
    """`render(run, analysis, html_path=None) -> str`: a pure function of its inputs."""

    output_file_extension = "json"

    def render(self, run: Run, analysis: Analysis, html_path: str | None = None) -> str:
        doc = build_document(run, analysis, html_path)
        return json.dumps(to_jsonable(doc), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    def render_report(self, run: Run, analysis: Analysis, html_report: Path | None) -> str:
        path = str(html_report.resolve()) if html_report is not None else None
        return self.render(run, analysis, html_path=path)


def build_document(run: Run, analysis: Analysis, html_path: str | None = None) -> dict[str, Any]:
    """The report as plain data (numbers stay numbers; units are in the key names)."""
    a = analysis
    return {
        "report_schema": REPORT_SCHEMA,
        "generator": f"loadkit {__version__}",
        "run": _run_block(run, a),
        "verdict": _verdict_block(a.verdict),
        "headline": a.headline,
        "numbers": _numbers_block(a.overall),
        "findings": [_finding_block(f) for f in a.findings],
        "episodes": [
            {
                "id": e.episode_id,
                "percentile": e.percentile,
                "start_ns": e.start_ns,
                "start_s": e.start_s,
                "duration_s": e.duration_s,
                "peak_ms": e.peak_ms,
                "baseline_ms": e.baseline_ms,
                "causes": list(e.causes),
            }
            for e in a.episodes
        ],
        "periodicity": [
            {
                "percentile": p.percentile,
                "periodic": p.periodic,
                "period_s": p.period_s,
                "jitter_s": p.jitter_s,
            }
            for p in a.periodicity
        ],
        "recoveries": [
            {
                "burst_start_ns": r.burst_start_ns,
                "rate": r.rate,
                "recovered": r.recovered,
                "recovery_s": r.recovery_s,
                "peak_p99_ms": r.peak_p99_ms,
            }
            for r in a.recoveries
        ],
        "alerts": [
            {"name": al.name, "severity": al.severity, "message": al.message} for al in a.alerts
        ],
        "knee": None
        if a.knee is None
        else {
            "found": a.knee.found,
            "offered_rps": a.knee.knee_offered_rps,
            "achieved_rps": a.knee.knee_achieved_rps,
        },
        "capacity": _capacity_block(a.capacity),
        "html_report": html_path,
    }


def _run_block(run: Run, a: Analysis) -> dict[str, Any]:
    """What was run, where and how: enough to tell two reports' runs apart without the run dir."""
    return {
        "run_id": a.run.run_id,
        "status": a.run.status,
        "abort": to_jsonable(a.run.abort),
        "kind": a.run.kind,
        "scenario": a.run.scenario,
        "scenario_params": run.info.scenario.params if run.info.scenario else {},
        "model": a.run.model,
        "target_url": a.run.target_url,
        "start_ns": a.run.start_ns,
        "end_ns": a.run.end_ns,
        "duration_s": a.run.duration_s,
        "gpu_kind": a.run.gpu_kind,
        "simulated": a.run.simulated,
        "target_location": to_jsonable(a.run.target_location),
        "sources": to_jsonable(a.run.sources),
        "loadkit_version": a.run.loadkit_version,
        "window_s": a.window_s,
    }


def _verdict_block(verdict: Verdict) -> dict[str, Any]:
    """Pass/fail with each SLO's threshold beside what was observed, for CI gates."""
    return {
        "passed": verdict.passed,
        "summary": verdict.summary,
        "source": verdict.source,
        "slos": [
            {
                "name": v.name,
                "threshold": v.threshold,
                "unit": v.unit,
                "observed": v.observed,
                "passed": v.passed,
            }
            for v in verdict.slos
        ],
    }


def _numbers_block(o: OverallStats) -> dict[str, Any]:
    """The whole-run counts and percentiles a dashboard plots, flat, units in the key names."""
    c = o.corrected
    s = o.service
    return {
        "duration_s": o.duration_s,
        "offered_rps": o.offered_rps,
        "achieved_rps": o.throughput_rps,
        "requests_offered": o.offered,
        "requests_completed": o.completed,
        "requests_ok": o.ok,
        "errors": o.errors,
        "error_pct": o.error_pct,
        "dropped": o.dropped,
        "dropped_pct": o.dropped_pct,
        "error_kinds": dict(o.error_kinds),
        "error_messages": {k: list(v) for k, v in o.error_messages.items()},
        "p50_ms": c.p50_ms,
        "p90_ms": c.p90_ms,
        "p95_ms": c.p95_ms,
        "p99_ms": c.p99_ms,
        "p999_ms": c.p999_ms,
        "max_ms": c.max_ms,
        "service_p50_ms": s.p50_ms,
        "service_p99_ms": s.p99_ms,
        "service_p999_ms": s.p999_ms,
    }


def _finding_block(f: Finding) -> dict[str, Any]:
    """One attributed cause with its statistics and evidence, so a pipeline can act on it."""
    return {
        "cause": f.cause,
        "title": f.title,
        "confidence": f.confidence,
        "summary": f.summary,
        "action": f.action,
        "episodes": list(f.episodes),
        "episodes_total": f.episodes_total,
        "coincidence": f.coincidence,
        "baseline_rate": f.baseline_rate,
        "lift": f.lift,
        "p_value": f.p_value,
        "lag_s": f.lag_s,
        "evidence": [
            {"name": e.name, "value": e.value, "unit": e.unit, "note": e.note} for e in f.evidence
        ],
    }


def _capacity_block(capacity: CapacityResult | None) -> dict[str, Any] | None:
    """The capacity search's answer, present only for `loadkit capacity` runs."""
    if capacity is None:
        return None
    return {
        "rate_rps": capacity.rate_rps,
        "low_rps": capacity.low_rps,
        "high_rps": capacity.high_rps,
        "limited_by": capacity.limited_by,
        "replicas": capacity.replicas,
        "answer": capacity.answer,
    }


def render(run: Run, analysis: Analysis, html_path: str | None = None) -> str:
    return JsonReporter().render(run, analysis, html_path)
