"""End to end: synthetic run directory -> reader -> analyze_run -> analysis.json / CLI."""

import json

import pytest

from loadkit.analysis import analyze_run
from loadkit.cli import main
from loadkit.errors import EXIT_SLO_FAILED
from loadkit.rundir import load_run
from loadkit.testing.synthetic import RunSpec, demo_spec, write_run


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_demo_story_thermal_sawtooth_burst_and_recovery(analyze_spec, seed):
    a = analyze_spec(demo_spec(seed), "demo")
    # Periodic P99 spikes, attributed to thermal throttling, with their period.
    period = a.periodicity_for("p99")
    assert period is not None and period.periodic, period
    assert abs(period.period_s - 15.0) < 1.0 and period.cycles >= 5
    top = a.findings[0]
    assert top.cause == "gpu_clock_thermal" and top.confidence == "strong"
    assert "every 15 s" in a.headline and "thermal" in a.headline
    # The 2x burst: bigger batches and longer queue, and how long P99 took to settle.
    (burst,) = a.recoveries
    assert burst.batch_size_mean_during > 1.5 * burst.batch_size_mean_before
    assert burst.queue_ms_during > burst.queue_ms_before
    assert burst.recovered and burst.recovery_s is not None and burst.recovery_s < 15
    assert [m.name for m in a.phases] == ["burst-start", "burst-end"]
    assert a.window_s == 1.0 and a.run.gpu_kind == "simulated" and a.run.simulated


def test_thin_run_widens_its_windows_as_far_as_a_p99_needs_and_says_so(analyze_spec):
    a = analyze_spec(RunSpec(rate_rps=40, duration_s=120), "thin")
    assert a.window_s == 3.0 and len(a.windows.t_ns) == 40
    assert any("widened to 3 s" in n for n in a.notes)
    assert a.episodes_for("p999") == ()
    assert "not assessed" in a.periodicity_for("p999").reason


def test_counter_resets_and_telemetry_gaps_do_not_make_spikes(analyze_spec):
    a = analyze_spec(
        RunSpec(rate_rps=200, counter_reset_s=45, telemetry_gaps=((50, 55),)), "resets"
    )
    assert a.findings == ()
    assert any("counter reset" in n for n in a.notes)
    queue = a.telemetry.queue_ms_per_request
    assert all(q is None or 0 < q < 10 for q in queue)  # a reset never turns into a negative rate
    assert queue[52] is None  # the gap stays a gap
    assert a.telemetry.gpu_temp_c[52] is None


def test_killed_run_is_analyzed_with_a_note(tmp_path):
    path = write_run(RunSpec(rate_rps=200, duration_s=30, status="running"), tmp_path, "killed")
    a = analyze_run(load_run(path))
    assert a.run.status == "running"
    assert any("did not finish" in n for n in a.notes)
    assert a.overall.completed > 0


def test_cli_writes_analysis_json_and_gates_on_slo(tmp_path, capsys):
    path = write_run(RunSpec(rate_rps=200, duration_s=30), tmp_path, "cli")
    assert main(["analyze", str(path)]) == 0
    out = capsys.readouterr().out
    assert "verdict: PASS" in out and "analysis.json" in out
    data = json.loads((path / "analysis.json").read_text())
    assert data["schema_version"] == 1 and data["verdict"]["passed"] is True
    assert main(["analyze", str(path), "--slo", "p99=1ms", "--fail-on-slo"]) == EXIT_SLO_FAILED
    err = capsys.readouterr().err
    assert "ERROR: run failed its SLO" in err
    assert main(["analyze", str(path), "--slo", "p99=1ms"]) == 0  # without the flag: report only
    capsys.readouterr()
    assert main(["analyze", str(path), "--json", "--no-write"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["run_id"] == "cli"
    assert main(["analyze", str(path), "--slo", "p99=fast"]) == 2
    assert main(["analyze", str(tmp_path / "missing")]) == 4


def test_scenario_slo_in_manifest_is_used(analyze_spec):
    a = analyze_spec(RunSpec(rate_rps=200, duration_s=30, slo={"p99_ms": 1.0}), "slo")
    assert not a.verdict.passed and a.verdict.source == "scenario+default"


def test_stages_run_alone(tmp_path):
    """align -> detect -> attribute -> judge: each a function of the stages before it."""
    from loadkit.analysis import pipeline
    from loadkit.testing.synthetic import FaultWindow

    spec = RunSpec(rate_rps=150, duration_s=30, stalls=(FaultWindow(18.2, 19.5),))
    run = load_run(write_run(spec, tmp_path, "stages"))
    aligned = pipeline.align(run)
    assert aligned.window_s == 1.0 and aligned.grid.n == len(aligned.windows.t_s) == 30
    assert aligned.gpu is not None and aligned.telemetry.gpu_temp_c is not None
    detected = pipeline.detect(aligned)
    assert detected.primary == "p99" and detected.episodes_for_primary
    attributed = pipeline.attribute(aligned, detected)
    assert [e.episode_id for e in attributed.episodes] == [e.episode_id for e in detected.episodes]
    assert attributed.attribution.findings[0].cause == "process_stall"
    judged = pipeline.judge(aligned, detected, attributed)
    assert judged.episodes == attributed.episodes and judged.phases == detected.phases
    assert "Process stall" in judged.headline
    assert judged.notes[: len(aligned.notes)] == aligned.notes


def _episodes(pct: str, count: int) -> list:
    from loadkit.analysis.model import SpikeEpisode

    return [
        SpikeEpisode(f"{pct}#{i}", pct, "corrected", i, i + 1, i, 1, i, 9, 3, 6, 6, 3, 5, 1)
        for i in range(count)
    ]


def test_the_primary_percentile_is_the_highest_unless_a_lower_one_is_the_periodic_pattern() -> None:
    from loadkit.analysis.model import Periodicity
    from loadkit.analysis.pipeline import primary_percentile

    p50_periodic = [Periodicity("p50", True, period_s=8.5), Periodicity("p99", False)]
    # P99 has episodes: it is the primary, P99 first ...
    assert primary_percentile(_episodes("p99", 5) + _episodes("p50", 4), ()) == "p99"
    assert primary_percentile(_episodes("p95", 2) + _episodes("p50", 6), ()) == "p95"
    # ... unless its stray episodes are fewer than a lower percentile's periodic ones
    # (a GPU throttled every 8 s lifts P50 in every cycle, P99 once)
    assert primary_percentile(_episodes("p99", 1) + _episodes("p50", 6), p50_periodic) == "p50"
    # a periodic P99 stays the primary, and more P99 episodes than P50's keep it too
    p99_periodic = [Periodicity("p99", True, period_s=8.5), Periodicity("p50", True, period_s=8.5)]
    assert primary_percentile(_episodes("p99", 5) + _episodes("p50", 6), p99_periodic) == "p99"
    assert primary_percentile(_episodes("p99", 7) + _episodes("p50", 6), p50_periodic) == "p99"
    assert primary_percentile([], p50_periodic) == "p99"


def _headline(findings: list, period_s: float | None = 3.0) -> str:
    from loadkit.analysis.attribution import rank_findings
    from loadkit.analysis.model import Verdict
    from loadkit.analysis.pipeline import headline

    failed = Verdict(False, (), "default", "")
    return headline(failed, rank_findings(findings), period_s, "p99")


def test_spikes_no_cause_explains_above_weak_lead_the_headline_before_a_standing_condition():
    from tests.unit.analysis.test_attribution import _finding

    # GIVEN 3 P99 spike episodes, a weak lead in 2 of them and a strong standing condition
    lead = _finding("cpu_saturation", "weak", ("p99#1", "p99#2"))
    standing = _finding("batching_window", "strong", ())
    # THEN the headline speaks of the spikes, left open, and names the standing one after
    assert _headline([lead, standing]) == (
        "FAIL. 3 P99 spike episodes every 3 s, no cause above weak; the likeliest: "
        "cpu_saturation (weak) in 2 of them; standing condition: batching_window (strong)."
    )
    # ... and says so where no finding explains any of them
    assert _headline([standing], None) == (
        "FAIL. 3 P99 spike episodes, no cause found; standing condition: batching_window (strong)."
    )


def test_a_moderate_cause_of_the_spikes_or_a_run_without_spikes_keeps_its_headline():
    from dataclasses import replace

    from tests.unit.analysis.test_attribution import _finding

    standing = _finding("batching_window", "strong", ())
    spikes = _finding("cpu_saturation", "moderate", ("p99#1", "p99#2"))
    # a moderate cause of the spikes leads, as before
    assert _headline([standing, spikes]) == (
        "FAIL. cpu_saturation (moderate) explains 2 P99 spike episodes every 3 s."
    )
    # no spike episodes at all: the standing condition is what raised every request
    calm = replace(standing, episodes_total=0)
    assert (
        _headline([calm], None) == "FAIL. batching_window (strong) explains a standing condition."
    )


def test_a_run_s_unexplained_spike_leads_its_headline_before_its_batching_window(analyze_spec):
    from loadkit.testing.synthetic import FaultWindow

    # GIVEN a 20 ms batching window (standing, strong) and the model slowing 3x once: one
    # P99 spike episode whose only lead is the residual, weak for a single episode
    spec = RunSpec(
        rate_rps=150,
        max_queue_delay_us=20000,
        max_batch_size=32,
        model_slowdowns=(FaultWindow(40, 44, 3.0),),
    )
    a = analyze_spec(spec, "batching-and-one-spike")
    assert a.findings[0].cause == "batching_window", a.findings  # the list keeps its order
    # THEN the headline speaks of the spike first, and of the batching window after
    assert a.headline.split(". ", 1)[1] == (
        "1 P99 spike episode, no cause above weak; the likeliest: Unexplained compute slowdown "
        "(weak) in it; standing condition: Batching window too long for the load (strong)."
    ), a.headline
