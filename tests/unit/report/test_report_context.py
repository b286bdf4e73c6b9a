"""The data a report is built from: exactly the analysis's numbers, chosen and labelled."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from analysis_builder import make_analysis, make_run

from loadkit.analysis.model import AlignedSignal
from loadkit.report.context import build_context
from loadkit.report.plots import AlignedPlot, Span


def test_verdict_and_headline_numbers_come_from_the_analysis(synthetic):
    run, analysis = synthetic
    ctx = build_context(run, analysis)

    assert ctx["verdict"]["passed"] is False
    assert ctx["verdict"]["word"] == "FAIL"
    assert ctx["verdict"]["sentence"] == analysis.verdict.summary
    p99 = next(s for s in ctx["verdict"]["slos"] if s["name"] == "p99")
    assert (p99["threshold"], p99["observed"], p99["state"]) == (50.0, 78.5, "fail")

    numbers = {n["key"]: n["value"] for n in ctx["numbers"]}
    o = analysis.overall
    assert numbers == {
        "offered_rps": o.offered_rps,
        "achieved_rps": o.throughput_rps,
        "p50_ms": o.corrected.p50_ms,
        "p95_ms": o.corrected.p95_ms,
        "p99_ms": o.corrected.p99_ms,
        "p999_ms": o.corrected.p999_ms,
        "errors": o.errors,
        "dropped": o.dropped,
    }
    texts = {n["key"]: n["text"] for n in ctx["numbers"]}
    assert texts["p99_ms"] == "78.5 ms"
    assert texts["offered_rps"] == "102 req/s"


def test_story_says_what_happened_in_the_analysis_words(synthetic):
    run, analysis = synthetic
    story = build_context(run, analysis)["story"]
    assert story[0] == analysis.headline
    assert "every 30 s" in story[1] and "20 episodes" in story[1]
    assert "recovered in 6.0 s" in story[2]
    assert "simulated" in story[3]


def test_timeline_plots_the_analysis_series_unchanged(synthetic):
    run, analysis = synthetic
    timeline = build_context(run, analysis)["figures"]["timeline"]
    w, tel = analysis.windows, analysis.telemetry

    assert timeline.t_s == w.t_s
    assert timeline.latency_ms == {
        "P50": w.corrected.p50_ms,
        "P95": w.corrected.p95_ms,
        "P99": w.corrected.p99_ms,
        "P99.9": w.corrected.p999_ms,
    }
    assert timeline.offered_rps == w.offered_rps and timeline.achieved_rps == w.throughput_rps
    assert timeline.slo_p99_ms == 50.0
    assert timeline.sm_clock_mhz == tel.gpu_sm_clock_mhz
    assert timeline.sm_clock_max_mhz == tel.gpu_sm_clock_max_mhz
    assert timeline.queue_ms == tel.queue_ms_per_request
    assert timeline.compute_ms == tel.compute_ms_per_request
    assert timeline.gpu_simulated is True
    # The heatmap shows the execution counts as given, one row per batch size.
    assert tel.batch_sizes is not None
    assert timeline.batch_sizes == tel.batch_sizes.sizes
    assert len(timeline.batch_executions) == len(tel.batch_sizes.sizes)
    assert [row[7] for row in tel.batch_sizes.counts] == list(timeline.batch_executions[7])


def test_timeline_shades_bursts_recoveries_and_p99_episodes(synthetic):
    run, analysis = synthetic
    spans = build_context(run, analysis)["figures"]["timeline"].spans
    assert Span(300.0, 310.0, "burst") in spans
    assert Span(310.0, 316.0, "recovery") in spans
    episodes = [s for s in spans if s.kind == "episode"]
    assert len(episodes) == len(analysis.episodes_for("p99"))
    assert episodes[1] == Span(30.0, 33.0, "episode")


def test_absent_telemetry_leaves_its_panels_out(tmp_path: Path):
    analysis = make_analysis(n=60)
    bare = dataclasses.replace(analysis, telemetry=type(analysis.telemetry)())
    timeline = build_context(make_run(tmp_path / "r"), bare)["figures"]["timeline"]
    assert timeline.gpu_util_pct is None and timeline.sm_clock_mhz is None
    assert timeline.batch_executions is None and timeline.batch_sizes == ()


def test_nines_plot_shows_corrected_against_service(synthetic):
    run, analysis = synthetic
    nines = build_context(run, analysis)["figures"]["nines"]
    corrected, service = nines.distributions
    assert corrected.percentiles == analysis.nines.percentiles
    assert corrected.values_ms == analysis.nines.corrected_ms
    assert service.values_ms == analysis.nines.service_ms
    assert nines.slo_p99_ms == 50.0


def test_finding_card_carries_evidence_episodes_and_action(synthetic):
    run, analysis = synthetic
    (card,) = build_context(run, analysis)["findings"]
    finding = analysis.findings[0]
    assert card["title"] == finding.title and card["action"] == finding.action
    assert [(e["name"], e["value"], e["unit"]) for e in card["evidence"]] == [
        (e.name, e.value, e.unit) for e in finding.evidence
    ]
    assert [e["text"] for e in card["evidence"]] == ["1,200 MHz", "1,980 MHz", "97 %"]
    assert card["episodes"] == list(finding.episodes)
    assert card["episodes_shown"][1] == {"id": "p99#2", "at": "0:30", "peak": "82.0 ms"}
    assert card["episodes_more"] == len(finding.episodes) - 12
    assert dict(card["stats"])["p-value (vs those stretches)"] == "< 0.0001"
    # No episode-aligned signal in this analysis: no plot rather than an invented one.
    assert card["figure"] is None


def test_finding_plot_uses_the_aligned_signal_when_the_analysis_has_one(synthetic):
    run, analysis = synthetic

    aligned = AlignedSignal(
        signal="telemetry.gpu_sm_clock_mhz",
        label="SM clock (MHz)",
        offsets_s=(-1.0, 0.0, 1.0),
        mean=(1980.0, 1200.0, 1300.0),
        baseline=1980.0,
    )
    finding = analysis.findings[0]
    object.__setattr__(finding, "aligned", aligned)
    figure = build_context(run, analysis)["findings"][0]["figure"]
    assert isinstance(figure, AlignedPlot)
    assert figure.mean == (1980.0, 1200.0, 1300.0) and figure.baseline == 1980.0


def test_metadata_names_scenario_command_target_host_and_gpu(synthetic):
    run, analysis = synthetic
    ctx = build_context(run, analysis)
    meta = {row["label"]: row["value"] for row in ctx["metadata"]}
    assert meta["Scenario"] == "burst"
    assert meta["Parameters"] == "rate=100, burst=2.0, label=burst"
    assert meta["Command line"].startswith("loadkit run scenarios/burst.py --rate 100")
    assert meta["Model"] == "ranker"
    assert meta["GPU"].startswith("simulated (#0 Simulated H100")
    assert "Xeon" in meta["Host"] and "2 logical cores" in meta["Host"]
    assert "analyzed with 0.1.0" in meta["loadkit"]
    assert ctx["model_configs"][0]["name"] == "ranker"
    assert '"max_queue_delay_microseconds": 2000' in ctx["model_configs"][0]["config"]
    assert "GPU telemetry is simulated" in ctx["notes"]


def test_requested_analysis_fields_are_drawn_when_present(synthetic):
    """Fields asked of the analysis (REQUESTS R2-R4) reach the figures once they exist."""
    run, analysis = synthetic

    @dataclasses.dataclass(frozen=True)
    class PhaseHistogram:
        phase: str
        sizes: tuple[int, ...]
        share: tuple[float, ...]

    @dataclasses.dataclass(frozen=True)
    class Interval:
        kind: str
        start_s: float
        end_s: float

    per_core = ((10.0,) * 600, (90.0,) * 600)
    object.__setattr__(
        analysis,
        "batch_by_phase",
        (PhaseHistogram("steady", (1, 2), (0.7, 0.3)), PhaseHistogram("burst", (1, 2), (0.2, 0.8))),
    )
    object.__setattr__(
        analysis,
        "intervals",
        (Interval("gpu_thermal", 3.0, 6.0), Interval("cgroup_throttled", 7.0, 9.0)),
    )
    object.__setattr__(analysis.telemetry, "cpu_per_core_pct", per_core)

    figures = build_context(run, analysis)["figures"]
    assert figures["batch_phases"].share_by_phase == {"steady": (0.7, 0.3), "burst": (0.2, 0.8)}
    assert Span(3.0, 6.0, "throttle") in figures["timeline"].spans
    assert Span(7.0, 9.0, "cgroup") in figures["timeline"].spans
    assert figures["timeline"].cpu_per_core_pct == per_core
