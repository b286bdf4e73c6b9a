"""What a report says, before it is written as HTML, Markdown or JSON.

`build_context(run, analysis)` picks and labels the analysis values each
reporter shows and builds the figure specs (plain numbers, not yet drawn).
It computes nothing: every number comes from the `Analysis` or the manifest;
this layer only chooses, orders, converts units and words. Reporter tests
assert on this dict, so what a report shows can be checked without parsing
HTML.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from loadkit import __version__, percentile_names
from loadkit.analysis import causes
from loadkit.analysis.model import (
    STRETCHES,
    Analysis,
    Finding,
    LatencyWindows,
    Overview,
    SeriesPlace,
    SpikeEpisode,
    TelemetryWindows,
    WindowSeries,
)
from loadkit.analysis.places import (
    placement_lines,
    series_places,
    target_place,
    target_sentence,
    where,
)
from loadkit.report import formatting as fmt
from loadkit.report.plots import (
    AlignedPlot,
    BatchPhasePlot,
    CapacityPlot,
    Distribution,
    NinesPlot,
    Span,
    Timeline,
)
from loadkit.rundir import Run
from loadkit.rundir.schema import Gpu, Manifest

PERCENTILES = tuple((name, percentile_names.label(name)) for name in percentile_names.WINDOW)
MEAN_LABEL = "mean (not a percentile)"
EPISODE_IDS_SHOWN = 12


def build_context(run: Run, analysis: Analysis) -> dict[str, Any]:
    """Everything a report shows about one run, as plain values and figure specs."""
    return {
        "run_id": analysis.run.run_id,
        "title": _title(analysis, run.info),
        "latency_note": _latency_note(analysis, run.info),
        "simulated": analysis.run.simulated or analysis.run.gpu_kind == "simulated",
        "status": analysis.run.status,
        "abort": _abort(analysis),
        "verdict": _verdict(analysis),
        "numbers": _numbers(analysis),
        "error_kinds": [
            {
                "kind": kind,
                "count": n,
                "text": fmt.count(n),
                "messages": list(analysis.overall.error_messages.get(kind, [])),
            }
            for kind, n in sorted(
                analysis.overall.error_kinds.items(), key=lambda kv: (-kv[1], kv[0])
            )
        ],
        "headline": analysis.headline,
        "story": _story(analysis),
        "alerts": [
            {"severity": a.severity, "name": a.name, "message": a.message} for a in analysis.alerts
        ],
        "findings": [_finding(f, analysis) for f in analysis.findings],
        "causes_checked": [
            {"cause": c.cause, "status": c.status, "reason": c.reason}
            for c in analysis.causes_checked
        ],
        "episodes": [_episode(e) for e in _sorted_episodes(analysis.episodes)],
        "periodicity": [_periodicity(p) for p in analysis.periodicity],
        "recoveries": _recoveries(analysis),
        "knee": _knee(analysis),
        "capacity": _capacity(analysis),
        "soak": _soak(analysis),
        "metadata": _metadata(run, analysis),
        # Which machine each timeline comes from (empty: no telemetry, or an old analysis).
        "places": _places(analysis),
        "model_configs": _model_configs(run),
        "notes": _notes(run, analysis),
        "figures": _figures(analysis),
        "overview_window_s": analysis.overview.window_s if analysis.overview else None,
        "zooms": [{k: v for k, v in z.items() if k != "figure"} for z in _zooms(analysis)],
        "report_version": __version__,
    }


# --- top of the report -------------------------------------------------------


def _abort(analysis: Analysis) -> dict[str, Any] | None:
    """Why the run stopped early, when it did (an --abort-on condition or Ctrl-C)."""
    abort = analysis.run.abort
    if abort is None:
        return None
    at = f" at {fmt.seconds(abort.t_s)}" if abort.t_s is not None else ""
    if abort.by == "condition":
        text = f"Load stopped{at} by --abort-on {abort.condition}: {abort.message}"
    else:
        text = f"Run interrupted{at} (Ctrl-C or SIGTERM); what was recorded is kept."
    return {"by": abort.by, "condition": abort.condition, "t_s": abort.t_s, "text": text}


def _latency_note(analysis: Analysis, manifest: Manifest) -> str:
    """What the latency numbers are: corrected for a load test; for a production window,
    the exporter they came from (docs/oncall.md)."""
    if analysis.run.kind != "production":
        return (
            "Latency percentiles are corrected for coordinated omission "
            "(measured from the intended send time)."
        )
    production = manifest.production or {}
    latency = analysis.overall.step_latency
    source = latency.source if latency is not None else "the exporters"
    return (
        f"Production window from Prometheus at a {production.get('step_s')} s step: "
        f"latency from {source}, "
        "measured by the server (no client or network time, not corrected for "
        "coordinated omission). Every series' source is in the notes."
    )


def _title(analysis: Analysis, manifest: Manifest) -> str:
    if analysis.run.kind == "production":
        return f"Production window: {analysis.run.model or 'Triton'} (from Prometheus)"
    scenario = analysis.run.scenario or (manifest.scenario and manifest.scenario.name)
    model = analysis.run.model
    parts = [p for p in (scenario, model) if p]
    what = " on ".join(str(p) for p in parts) if parts else analysis.run.kind
    return f"Load test: {what}"


def slo_threshold(analysis: Analysis, name: str) -> float | None:
    """The threshold of one SLO (e.g. "p99"), for reference lines in plots."""
    for slo in analysis.verdict.slos:
        if slo.name == name:
            return slo.threshold
    return None


def _verdict(analysis: Analysis) -> dict[str, Any]:
    v = analysis.verdict
    rows = []
    for slo in v.slos:
        label = percentile_names.label(slo.name)
        observed = fmt.with_unit(slo.observed, slo.unit)
        threshold = fmt.with_unit(slo.threshold, slo.unit)
        state = "n/a" if slo.passed is None else ("pass" if slo.passed else "fail")
        rows.append(
            {
                "name": slo.name,
                "label": label,
                "threshold": slo.threshold,
                "unit": slo.unit,
                "observed": slo.observed,
                "passed": slo.passed,
                "state": state,
                "text": f"{label} ≤ {threshold}: observed {observed}",
                "threshold_text": f"≤ {threshold}",
                "observed_text": observed,
                "detail": slo.detail,
            }
        )
    return {
        "passed": v.passed,
        "state": "pass" if v.passed else "fail",
        "word": "PASS" if v.passed else "FAIL",
        "sentence": v.summary,
        "source": v.source,
        "slos": rows,
    }


def _numbers(analysis: Analysis) -> list[dict[str, Any]]:
    """The headline numbers, in the order the reader scans them."""
    o = analysis.overall
    c = o.corrected
    rows: list[tuple[str, str, float | int | None, str, str]] = [
        ("offered_rps", "Offered rate", o.offered_rps, fmt.rate(o.offered_rps), ""),
        ("achieved_rps", "Achieved rate", o.throughput_rps, fmt.rate(o.throughput_rps), ""),
        ("p50_ms", "P50", c.p50_ms, fmt.ms(c.p50_ms), "corrected"),
        ("p95_ms", "P95", c.p95_ms, fmt.ms(c.p95_ms), "corrected"),
        ("p99_ms", "P99", c.p99_ms, fmt.ms(c.p99_ms), "corrected"),
        ("p999_ms", "P99.9", c.p999_ms, fmt.ms(c.p999_ms), "corrected"),
        (
            "errors",
            "Errors",
            o.errors,
            fmt.count(o.errors),
            f"{fmt.pct(o.error_pct)} of completed",
        ),
        (
            "dropped",
            "Dropped",
            o.dropped,
            fmt.count(o.dropped),
            f"{fmt.pct(o.dropped_pct)} of offered",
        ),
    ]
    return [
        {"key": key, "label": label, "value": value, "text": text, "note": note}
        for key, label, value, text, note in rows
    ]


def _story(analysis: Analysis) -> list[str]:
    """Two or three sentences of what happened, worded from the analysis's own numbers."""
    sentences = [analysis.headline] if analysis.headline else []
    p99_episodes = analysis.episodes_for("p99")
    periodic = next(
        (
            p
            for p in (analysis.periodicity_for(name) for name in ("p99", "p999", "p95", "p50"))
            if p is not None and p.periodic and p.period_s
        ),
        None,
    )
    if periodic is not None:
        label = dict(PERCENTILES).get(periodic.percentile, periodic.percentile)
        ids = {e.episode_id for e in analysis.episodes_for(periodic.percentile)}
        cause = next((f.title for f in analysis.findings if ids & set(f.episodes)), None)
        because = f", explained by {cause}" if cause else ""
        sentences.append(
            f"{label} spiked every {fmt.seconds(periodic.period_s)} ({len(ids)} episodes){because}."
        )
    if p99_episodes and (periodic is None or periodic.percentile != "p99"):
        sentences.append(
            f"P99 had {len(p99_episodes)} spike episode(s)"
            + (", not periodic." if periodic is None else ".")
        )
    for rec in analysis.recoveries[:2]:
        burst = f"the burst to {fmt.rate(rec.rate)}" if rec.rate else "the burst"
        if rec.recovered and rec.recovery_s is not None:
            sentences.append(
                f"After {burst}, P99 peaked at {fmt.ms(rec.peak_p99_ms)} and recovered "
                f"in {fmt.seconds(rec.recovery_s)}."
            )
        else:
            sentences.append(
                f"After {burst}, P99 peaked at {fmt.ms(rec.peak_p99_ms)} and did not "
                "recover before the run ended."
            )
    if analysis.run.simulated or analysis.run.gpu_kind == "simulated":
        sentences.append("GPU telemetry in this run is simulated.")
    return sentences


# --- findings and tables -------------------------------------------------------


def _finding(finding: Finding, analysis: Analysis) -> dict[str, Any]:
    by_id = {e.episode_id: e for e in analysis.episodes}
    shown = list(finding.episodes[:EPISODE_IDS_SHOWN])
    aligned = finding.aligned
    figure = None
    if aligned is not None:
        figure = AlignedPlot(
            offsets_s=aligned.offsets_s,
            mean=aligned.mean,
            signal_label=aligned.label,
            low=aligned.low,
            high=aligned.high,
            baseline=aligned.baseline,
            latency_ms=aligned.p99_ms,
        )
    return {
        "cause": finding.cause,
        "title": finding.title,
        "confidence": finding.confidence,
        "summary": finding.summary,
        "action": finding.action,
        "evidence": [
            {
                "name": ev.name,
                "label": ev.name.replace("_", " "),
                "value": ev.value,
                "unit": ev.unit,
                "text": fmt.with_unit(ev.value, ev.unit),
                "note": ev.note,
            }
            for ev in finding.evidence
        ],
        "stats": [
            # Failed requests are counted, not tested against spike episodes.
            ("share of the run", fmt.fraction_pct(finding.coincidence)),
            ("baseline share of failed requests", fmt.fraction_pct(finding.baseline_rate)),
        ]
        if causes.is_error(finding.cause)
        else [
            ("episodes explained", f"{len(finding.episodes)} of {finding.episodes_total}"),
            ("signature in episodes", fmt.fraction_pct(finding.coincidence)),
            (f"signature in {STRETCHES}", fmt.fraction_pct(finding.baseline_rate)),
            ("lift", "n/a" if finding.lift is None else f"{fmt.sig(finding.lift)}×"),
            ("p-value (vs those stretches)", fmt.p_value(finding.p_value)),
            ("effect size (Cliff's δ)", fmt.sig(finding.cliffs_delta, 2)),
            ("lag (cause − episode start)", fmt.seconds(finding.lag_s)),
        ],
        "episodes": list(finding.episodes),
        "episodes_shown": [
            {
                "id": eid,
                "at": fmt.clock(by_id[eid].start_s) if eid in by_id else "",
                "peak": fmt.ms(by_id[eid].peak_ms) if eid in by_id else "",
            }
            for eid in shown
        ],
        "episodes_more": max(0, len(finding.episodes) - len(shown)),
        "figure": figure,
    }


BREAKDOWN_LABELS = {
    "generator_lag": "generator lag",
    "client_network": "client + network",
    "server_queue": "server queue",
    "server_compute": "server compute",
    "server_data_movement": "data movement",
    "server_side": "server side",
}


def _sorted_episodes(episodes: Sequence[SpikeEpisode]) -> list[SpikeEpisode]:
    order = {p: i for i, (p, _) in enumerate(PERCENTILES)}
    return sorted(episodes, key=lambda e: (order.get(e.percentile, 9), e.start_ns))


def _episode(e: SpikeEpisode) -> dict[str, Any]:
    return {
        "id": e.episode_id,
        "percentile": dict(PERCENTILES).get(e.percentile, e.percentile),
        "start": fmt.clock(e.start_s),
        "start_s": e.start_s,
        "duration": fmt.seconds(e.duration_s),
        "duration_s": e.duration_s,
        "peak": fmt.ms(e.peak_ms),
        "peak_ms": e.peak_ms,
        "baseline": fmt.ms(e.baseline_ms),
        "baseline_ms": e.baseline_ms,
        "ratio": f"{fmt.sig(e.peak_ratio, 2)}×",
        "causes": list(e.causes),
        # where the time went: the latency part that grew most (analysis breakdown)
        "grew": (
            f"{BREAKDOWN_LABELS.get(e.grew, e.grew)} +{fmt.ms(e.grew_ms)}"
            if e.grew and e.grew_ms is not None
            else ""
        ),
    }


def _periodicity(p: Any) -> dict[str, Any]:
    return {
        "percentile": dict(PERCENTILES).get(p.percentile, p.percentile),
        "periodic": p.periodic,
        "period": fmt.seconds(p.period_s),
        "period_s": p.period_s,
        "jitter": fmt.seconds(p.jitter_s),
        "strength": fmt.sig(p.strength, 2),
        "p_value": fmt.p_value(p.p_value),
        "cycles": fmt.sig(p.cycles, 2),
        "reason": p.reason,
        "rejected": list(p.rejected),
    }


def _to_run_s(analysis: Analysis, t_ns: int | None) -> float | None:
    """A wall-clock time as seconds on the run's timeline (a unit conversion)."""
    w = analysis.windows
    if t_ns is None or not w.t_ns:
        return None
    return w.t_s[0] + (t_ns - w.t_ns[0]) / 1e9


def _recoveries(analysis: Analysis) -> list[dict[str, Any]]:
    out = []
    for r in analysis.recoveries:
        out.append(
            {
                "at": fmt.clock(_to_run_s(analysis, r.burst_start_ns)),
                "rate": fmt.rate(r.rate),
                "pre_p99": fmt.ms(r.pre_burst_p99_ms),
                "band": fmt.ms(r.band_upper_ms),
                "peak_p99": fmt.ms(r.peak_p99_ms),
                "recovered": r.recovered,
                "recovery": fmt.seconds(r.recovery_s) if r.recovered else "not recovered",
                "recovery_s": r.recovery_s,
                "batch": f"{fmt.sig(r.batch_size_mean_before)} → {fmt.sig(r.batch_size_mean_during)}",
                "queue": f"{fmt.ms(r.queue_ms_before)} → {fmt.ms(r.queue_ms_during)}",
                "detail": r.detail,
            }
        )
    return out


def _capacity(analysis: Analysis) -> dict[str, Any] | None:
    c = analysis.capacity
    if c is None:
        return None
    p = c.prediction
    return {
        "answer": c.answer,
        "rate": fmt.rate(c.rate_rps),
        "low": fmt.rate(c.low_rps),
        "high": fmt.rate(c.high_rps),
        "limited_by": c.limited_by,
        "evidence": c.limited_by_evidence,
        "generator_limited": c.generator_limited,
        "replicas": c.replicas,
        "replicas_low": c.replicas_low,
        "peak": fmt.rate(c.peak_rps),
        "headroom": fmt.pct(None if c.headroom is None else 100.0 * c.headroom),
        "assumption": c.scale_out_assumption,
        "predicted": fmt.rate(p.rps) if p is not None else None,
        "prediction_basis": p.basis if p is not None else None,
        "gap": fmt.pct(c.gap_pct) if c.gap_pct is not None else None,
        "percentile": c.slo_percentile.upper(),
        "probes": [
            {
                "n": pr.index + 1,
                "rate": fmt.rate(pr.rate_rps),
                "trial": pr.trial,
                "achieved": fmt.rate(pr.achieved_rps),
                "goodput": fmt.rate(pr.goodput_rps),
                "latency": fmt.ms(pr.corrected_ms),
                "errors": fmt.pct(pr.errors_pct),
                "dropped": pr.dropped,
                "windows": pr.windows,
                "stable": pr.stable,
                "passed": pr.passed,
                "why": "; ".join(pr.reasons) or "within the SLO",
            }
            for pr in c.probes
        ],
    }


def _capacity_figure(analysis: Analysis) -> CapacityPlot | None:
    c = analysis.capacity
    if c is None or not c.probes:
        return None
    return CapacityPlot(
        rates=[p.rate_rps for p in c.probes],
        latency_ms=[p.corrected_ms for p in c.probes],
        goodput_rps=[p.goodput_rps for p in c.probes],
        passed=[p.passed for p in c.probes],
        slo_ms=c.slo_ms,
        percentile=c.slo_percentile.upper(),
        capacity_rps=c.rate_rps,
    )


def _knee(analysis: Analysis) -> dict[str, Any] | None:
    k = analysis.knee
    if k is None:
        return None
    return {
        "found": k.found,
        "offered": fmt.rate(k.knee_offered_rps),
        "achieved": fmt.rate(k.knee_achieved_rps),
        "reason": k.reason,
        "steps": [
            {
                "offered": fmt.rate(s.offered_rps),
                "achieved": fmt.rate(s.achieved_rps),
                "p99": fmt.ms(s.p99_ms),
                "errors": fmt.pct(s.error_pct),
                "queue_growing": s.queue_growing,
                "ok": s.ok,
                "reason": s.reason,
            }
            for s in k.steps
        ],
    }


def _soak(analysis: Analysis) -> dict[str, Any] | None:
    s = analysis.soak
    if s is None:
        return None
    return {
        "duration": fmt.seconds(s.duration_s),
        "summary": s.summary,
        "trends": [
            {
                "metric": t.metric,
                "slope": f"{fmt.with_unit(t.slope_per_hour, t.unit)}/h",
                "interval": (
                    f"{fmt.with_unit(t.slope_low_per_hour, t.unit)} … "
                    f"{fmt.with_unit(t.slope_high_per_hour, t.unit)}"
                ),
                "start": fmt.with_unit(t.start_value, t.unit),
                "end": fmt.with_unit(t.end_value, t.unit),
                "exhaustion": fmt.sig(t.hours_to_exhaustion) + " h"
                if t.hours_to_exhaustion is not None
                else "n/a",
                "significant": t.significant,
                "detail": t.detail,
            }
            for t in s.trends
        ],
        "findings": [
            {
                "drift": f.drift,
                "title": f.title,
                "severity": f.severity,
                "summary": f.summary,
                "action": f.action,
                "evidence": [
                    {
                        "label": ev.name.replace("_", " "),
                        "text": fmt.with_unit(ev.value, ev.unit),
                        "note": ev.note,
                    }
                    for ev in f.evidence
                ],
            }
            for f in s.findings
        ],
    }


# --- metadata -----------------------------------------------------------------


def _kv(params: Mapping[str, Any] | None) -> str:
    if not params:
        return "none"
    return ", ".join(f"{k}={_plain(v)}" for k, v in params.items())


def _plain(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _metadata(run: Run, analysis: Analysis) -> list[dict[str, str]]:
    """Label/value rows: what ran, where, with what; every value is a plain string."""
    info = run.info
    host, gpu, server = info.environment.host, info.environment.gpu, info.environment.server
    scenario, target = info.scenario, info.target
    rows: list[tuple[str, str]] = [
        ("Run", f"{analysis.run.run_id} ({analysis.run.status}, {analysis.run.kind})"),
        ("Started", fmt.utc(analysis.run.start_ns)),
        ("Duration", fmt.seconds(analysis.run.duration_s)),
        ("Scenario", str((scenario and scenario.name) or analysis.run.scenario or "none")),
        ("Scenario file", str((scenario and scenario.path) or "n/a")),
        ("Parameters", _kv(scenario.params if scenario else None)),
        ("Command line", shlex.join(info.command_line) or "n/a"),
        (
            "Target",
            f"{(target and target.url) or analysis.run.target_url or 'n/a'} "
            f"({(target and target.protocol) or 'n/a'}"
            f"{', embedded' if target and target.embedded else ''})",
        ),
        ("Model", str((target and target.model) or analysis.run.model or "n/a")),
        ("SLO", f"{_kv(info.slo)} (thresholds from {analysis.verdict.source})"),
        ("Analysis window", fmt.seconds(analysis.window_s)),
    ]
    if server.name or server.version:
        rows.append(("Server", f"{server.name or 'n/a'} {server.version or ''}".strip()))
    rows.append(
        (
            "Host",
            f"{host.hostname or 'n/a'}: {host.raw.get('os', 'n/a')}, "
            f"{host.raw.get('cpu_model', 'n/a')}, {host.cores_logical or '?'} logical cores, "
            f"{fmt.size_bytes(host.memory_bytes)} memory, "
            f"governor {host.raw.get('governor', 'n/a')}, Python {host.raw.get('python', 'n/a')}",
        )
    )
    rows.append(("GPU", _gpu_text(gpu, analysis.run.gpu_kind)))
    # Which machine each timeline comes from: analysis.json's, or (an analysis written
    # before places were) the manifest's as the analysis would have read them.
    places = analysis.run.sources or series_places(info)
    location = analysis.run.target_location or target_place(info)
    rows.append(("Target location", target_sentence(location).removeprefix("target: ")))
    if info.sources:
        rows.append(
            (
                "Telemetry sources",
                "; ".join(
                    f"{s.name} every "
                    + ("n/a" if s.interval_s is None else f"{s.interval_s:g}")
                    + " s"
                    + (f", sampled on {where(p)}" if p is not None else "")
                    + (" (simulated)" if s.simulated else "")
                    + (f" [{s.warning}]" if s.warning else "")
                    for s, p in zip(info.sources, _aligned(places, len(info.sources)), strict=True)
                ),
            )
        )
    rows.append(
        (
            "loadkit",
            f"recorded with {analysis.run.loadkit_version or 'n/a'}, analyzed with "
            f"{analysis.run.analyzed_with}, report by {__version__}",
        )
    )
    return [{"label": label, "value": value} for label, value in rows]


def _places(analysis: Analysis) -> list[str]:
    return placement_lines(analysis.run)


def _aligned(places: Sequence[SeriesPlace], n: int) -> list[SeriesPlace | None]:
    """One place per manifest source (the analysis lists them in the manifest's order)."""
    return list(places) if len(places) == n else [None] * n


def _gpu_text(gpu: Gpu, gpu_kind: str) -> str:
    kind = gpu.kind or gpu_kind
    if kind == "none":
        return "none recorded"
    devices = gpu.devices
    described = [
        f"#{d.get('index', '?')} {d.get('name', 'unknown')}, driver {d.get('driver', 'n/a')}, "
        f"CUDA {d.get('cuda', 'n/a')}, power limit {fmt.sig(d.get('power_limit_w'))} W, "
        f"max SM clock {fmt.sig(d.get('sm_clock_max_mhz'))} MHz"
        for d in devices
    ]
    text = "; ".join(described) or "no device details"
    return f"simulated ({text})" if kind == "simulated" else text


def _model_configs(run: Run) -> list[dict[str, str]]:
    models = run.info.environment.server.models
    return [
        {"name": str(name), "config": json.dumps(cfg, indent=2, sort_keys=True, default=str)}
        for name, cfg in sorted(models.items())
    ]


def _notes(run: Run, analysis: Analysis) -> list[str]:
    notes = list(run.info.notes)
    notes += list(analysis.notes)
    seen: set[str] = set()
    return [n for n in notes if not (n in seen or seen.add(n))]  # type: ignore[func-returns-value]


# --- figures -----------------------------------------------------------------


def _spans(analysis: Analysis) -> list[Span]:
    spans: list[Span] = []
    # One recovery per burst, as the analysis paired the phase events; open at the end: to the end.
    for rec in analysis.recoveries:
        start = _to_run_s(analysis, rec.burst_start_ns)
        end = _to_run_s(analysis, rec.burst_end_ns)
        if start is not None:
            last = analysis.windows.t_s[-1] + analysis.window_s
            spans.append(Span(start, end if end is not None else last, "burst"))
    for rec in analysis.recoveries:
        end = _to_run_s(analysis, rec.burst_end_ns)
        back = _to_run_s(analysis, rec.recovered_at_ns)
        if rec.recovered and end is not None and back is not None and back > end:
            spans.append(Span(end, back, "recovery"))
    for e in analysis.episodes_for("p99"):
        spans.append(Span(e.start_s, e.start_s + e.duration_s, "episode"))
    for interval in analysis.intervals:
        kind = str(interval.kind)
        if kind.startswith("gpu"):
            spans.append(Span(interval.start_s, interval.end_s, "throttle"))
        elif kind.startswith("cgroup"):
            spans.append(Span(interval.start_s, interval.end_s, "cgroup"))
        elif kind.startswith("fault"):
            spans.append(Span(interval.start_s, interval.end_s, "fault"))
    return spans


# Episodes drawn at full resolution beside a long run's minute overview, and the
# seconds of context on either side of each.
ZOOM_EPISODES = 3
ZOOM_MARGIN_S = 120.0


def _overview_timeline(analysis: Analysis) -> Timeline | None:
    """The whole of a long run at minute resolution (analysis.overview), or None."""
    o = analysis.overview
    if o is None:
        return None
    return _timeline_of(analysis, o.t_s, o.corrected, o, o)


def _timeline_of(
    analysis: Analysis,
    t_s: Sequence[float],
    latency: LatencyWindows,
    load: WindowSeries | Overview,
    tel: TelemetryWindows | Overview,
    **more: Any,
) -> Timeline:
    """A timeline at one resolution (the windows, or the overview's minutes) from its series."""
    latency_ms = {label: latency.percentile(name) for name, label in PERCENTILES}
    if getattr(latency, "mean_ms", ()):  # a production window's mean: never a percentile
        latency_ms[MEAN_LABEL] = latency.mean_ms
    return Timeline(
        t_s=t_s,
        latency_ms=latency_ms,
        slo_p99_ms=slo_threshold(analysis, "p99"),
        offered_rps=load.offered_rps,
        achieved_rps=load.throughput_rps,
        spans=_spans(analysis),
        gpu_util_pct=tel.gpu_util_pct,
        sm_clock_mhz=tel.gpu_sm_clock_mhz,
        sm_clock_max_mhz=tel.gpu_sm_clock_max_mhz,
        temp_c=tel.gpu_temp_c,
        power_w=tel.gpu_power_w,
        power_limit_w=tel.gpu_power_limit_w,
        gpu_simulated=analysis.run.gpu_kind == "simulated",
        cpu_busiest_core_pct=tel.cpu_core_max_pct,
        cpu_mean_pct=tel.cpu_mean_pct,
        cgroup_throttled_pct=tel.cgroup_throttled_pct,
        queue_ms=tel.queue_ms_per_request,
        compute_ms=tel.compute_ms_per_request,
        **more,
    )


def _zoom(full: Timeline, lo_s: float, hi_s: float) -> Timeline:
    """The windows of `full` between two times (a selection: nothing is recomputed)."""
    keep = [i for i, t in enumerate(full.t_s) if lo_s <= t < hi_s]

    def cut(values: Any) -> Any:
        if values is None:
            return None
        return [values[i] for i in keep]

    return Timeline(
        t_s=cut(full.t_s),
        latency_ms={k: cut(v) for k, v in full.latency_ms.items()},
        slo_p99_ms=full.slo_p99_ms,
        offered_rps=cut(full.offered_rps),
        achieved_rps=cut(full.achieved_rps),
        spans=[s for s in full.spans if s.end_s > lo_s and s.start_s < hi_s],
        gpu_util_pct=cut(full.gpu_util_pct),
        sm_clock_mhz=cut(full.sm_clock_mhz),
        sm_clock_max_mhz=cut(full.sm_clock_max_mhz),
        temp_c=cut(full.temp_c),
        power_w=cut(full.power_w),
        power_limit_w=cut(full.power_limit_w),
        gpu_simulated=full.gpu_simulated,
        cpu_per_core_pct=[cut(core) for core in full.cpu_per_core_pct]
        if full.cpu_per_core_pct
        else None,
        cpu_busiest_core_pct=cut(full.cpu_busiest_core_pct),
        cpu_mean_pct=cut(full.cpu_mean_pct),
        cgroup_throttled_pct=cut(full.cgroup_throttled_pct),
        batch_sizes=full.batch_sizes,
        batch_executions=[cut(row) for row in full.batch_executions]
        if full.batch_executions
        else None,
        queue_ms=cut(full.queue_ms),
        compute_ms=cut(full.compute_ms),
    )


def _zooms(analysis: Analysis) -> list[dict[str, Any]]:
    """Full-resolution timelines around a long run's largest P99 episodes."""
    if analysis.overview is None:
        return []
    full = _timeline(analysis)
    largest = sorted(analysis.episodes_for("p99"), key=lambda e: -(e.peak_ms or 0.0))
    out = []
    for i, e in enumerate(sorted(largest[:ZOOM_EPISODES], key=lambda e: e.start_s), start=1):
        out.append(
            {
                "name": f"zoom_{i}",
                "episode": e.episode_id,
                "at": fmt.clock(e.start_s),
                "peak": fmt.ms(e.peak_ms),
                "figure": _zoom(
                    full, e.start_s - ZOOM_MARGIN_S, e.start_s + e.duration_s + ZOOM_MARGIN_S
                ),
            }
        )
    return out


def _timeline(analysis: Analysis) -> Timeline:
    w = analysis.windows
    tel = analysis.telemetry
    batch = tel.batch_sizes
    batch_by_size = None
    if batch is not None and batch.counts and batch.sizes:
        # counts[window][size] -> [size][window]: the heatmap's rows are sizes.
        batch_by_size = [list(col) for col in zip(*batch.counts, strict=True)]
    return _timeline_of(
        analysis,
        w.t_s,
        w.corrected,
        w,
        tel,
        cpu_per_core_pct=tel.cpu_per_core_pct,
        batch_sizes=tuple(batch.sizes) if batch is not None else (),
        batch_executions=batch_by_size,
    )


def _batch_phases(analysis: Analysis) -> BatchPhasePlot | None:
    phases = analysis.batch_by_phase
    if not phases:
        return None
    sizes = tuple(phases[0].sizes)
    return BatchPhasePlot(sizes=sizes, share_by_phase={p.phase: tuple(p.share) for p in phases})


def _figures(analysis: Analysis) -> dict[str, Any]:
    n = analysis.nines
    zooms = {z["name"]: z["figure"] for z in _zooms(analysis)}
    return {
        "timeline": _overview_timeline(analysis) or _timeline(analysis),
        **zooms,
        "nines": NinesPlot(
            distributions=[
                Distribution("corrected (from intended send)", n.percentiles, n.corrected_ms),
                Distribution("service time (from actual send)", n.percentiles, n.service_ms),
            ],
            slo_p99_ms=slo_threshold(analysis, "p99"),
        ),
        "batch_phases": _batch_phases(analysis),
        "capacity": _capacity_figure(analysis),
    }
