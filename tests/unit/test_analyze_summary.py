"""`loadkit analyze`'s summary, the first screen a newcomer reads: the period in one line, where
the target and its telemetry were in one line, the notes in a few, and what the verdict counts."""

import dataclasses
import io
from pathlib import Path
from types import SimpleNamespace

import pytest

from loadkit.analysis import analyze_run
from loadkit.analysis.model import Alert, Analysis, Periodicity, SeriesPlace, TargetPlace
from loadkit.analysis.places import placement_lines
from loadkit.analysis.slo import slo_verdict
from loadkit.commands.analyze import NOTE_LINES, _period_phrase, print_summary
from loadkit.rundir import load_run
from loadkit.testing.synthetic import RunSpec, demo_spec, write_run


def _analysis(*periods: Periodicity) -> SimpleNamespace:
    by = {p.percentile: p for p in periods}
    return SimpleNamespace(periodicity_for=by.get)


def test_p99_not_periodic_but_p95_is_says_both_in_one_short_line():
    rejected = tuple(f"{p:.1f} s: spike onsets not phase-locked" for p in (9.7, 9.2, 2.7, 3.5))
    p99 = Periodicity(
        "p99",
        False,
        reason="no period confirmed; closest 9.7 s, onsets not phase-locked (p=0.02)",
        rejected=rejected,
    )
    p95 = Periodicity("p95", True, period_s=10.0, jitter_s=0.3, p_value=3e-5, cycles=9)
    text = _period_phrase(_analysis(p99, p95))
    assert text == (
        "; the P95 spikes repeat every 10.0 s (P99's own: no period confirmed; "
        "closest 9.7 s, onsets not phase-locked (p=0.02))"
    )
    assert "9.2" not in text and "\n" not in text


def test_a_periodic_p99_keeps_its_numbers():
    p99 = Periodicity("p99", True, period_s=10.0, jitter_s=0.3, p_value=3e-5, cycles=9)
    assert _period_phrase(_analysis(p99)) == (
        ", periodic every 10.0 s (jitter 0.3 s, 9 cycles, p=3e-05)"
    )


# --- the first screen: one placement line, a few note lines, one line per alert ---------


@pytest.fixture(scope="module")
def analysis(tmp_path_factory: pytest.TempPathFactory) -> Analysis:
    run_dir = write_run(RunSpec(duration_s=30, rate_rps=150), tmp_path_factory.mktemp("run"))
    return analyze_run(load_run(run_dir))


def _here(name: str, host: str = "vm", **kw: object) -> SeriesPlace:
    return SeriesPlace(name, "server", host, True, file=f"telemetry/{name}.jsonl", **kw)  # type: ignore[arg-type]


def _summary(a: Analysis, verbose: bool = False) -> list[str]:
    out = io.StringIO()
    print_summary(a, out, verbose=verbose)
    return out.getvalue().splitlines()


def test_a_target_and_telemetry_all_on_this_machine_is_said_once(analysis: Analysis) -> None:
    run = dataclasses.replace(
        analysis.run,
        target_location=TargetPlace(True, "--server-pid", "vm", "127.0.0.1"),
        sources=(_here("gpu"), _here("host", parts={"process": "server"}), _here("triton_stats")),
    )
    assert placement_lines(run) == [
        "target and telemetry: this machine (vm): gpu, host, triton_stats"
    ]
    # a series from another machine, or a target elsewhere: both lines, as before
    elsewhere = dataclasses.replace(run, sources=(_here("gpu", host="gpu-box"), _here("host")))
    assert [line.split(":")[0] for line in placement_lines(elsewhere)] == ["target", "telemetry"]
    remote = dataclasses.replace(run, target_location=TargetPlace(False, "address", "gpu-box"))
    assert len(placement_lines(remote)) == 2


def test_notes_fit_in_a_few_lines_and_verbose_lists_every_one(analysis: Analysis) -> None:
    # GIVEN an analysis with many notes, some of them long accounts of where data came from
    notes = (
        "telemetry/gpu.jsonl: torn last line skipped",
        *(f"no source{i} telemetry: causes that need it are not assessable" for i in range(9)),
        "series triton_stats from triton: " + "; ".join(f"metric_{i}{{job=x}}" for i in range(30)),
        "the first 8 s (warm-up) are left out of spike detection",
    )
    a = dataclasses.replace(analysis, notes=notes)
    # WHEN it is summarized
    lines = [x for x in _summary(a) if x.startswith("note: ")]
    # THEN the notes take at most NOTE_LINES lines: what is not assessable grouped in one,
    # the damaged file and the warm-up first, and a count of the rest with where to see them
    assert len(lines) <= NOTE_LINES
    assert lines[0].startswith("note: not assessable here: ")
    assert "torn last line" in lines[1] and "warm-up" in lines[1]
    hidden = sum(n not in lines[1] for n in notes)
    # ... and the command that lists the rest, with this run's path (it works when pasted)
    command = f"`loadkit analyze {a.run.path} --verbose`"
    assert lines[-1].endswith(f"; {hidden} more notes: {command}"), lines
    # AND --verbose prints every note, and every cause not assessed with its reason
    verbose = [x.removeprefix("note: ") for x in _summary(a, verbose=True)]
    assert all(n in verbose for n in notes)
    unassessable = [c for c in a.causes_checked if c.status == "not_assessable"]
    assert unassessable and all(f"{c.cause}: {c.reason}" in verbose for c in unassessable)


def test_a_warning_said_by_a_critical_alert_on_the_same_value_is_not_repeated(
    analysis: Analysis,
) -> None:
    hot = Alert(
        "gpu_temp_throttling",
        "critical",
        "GPU temperature reached 97 °C (>= 87 °C)",
        value=97.0,
        unit="°C",
    )
    near = Alert(
        "gpu_temp_high", "warn", "GPU temperature reached 97 °C (>= 82 °C)", value=97.0, unit="°C"
    )
    idle = Alert("gpu_underutilized", "warn", "GPU utilization 5% (< 20%)", value=5.0, unit="%")
    a = dataclasses.replace(analysis, alerts=(hot, near, idle))
    alerts = [x for x in _summary(a) if x.startswith("alert ")]
    assert alerts == [f"alert [critical]: {hot.message}", f"alert [warn]: {idle.message}"]
    assert len([x for x in _summary(a, verbose=True) if x.startswith("alert ")]) == 3


def test_the_verdict_names_dropped_arrivals_when_it_counts_them(analysis: Analysis) -> None:
    dropped = dataclasses.replace(analysis.overall, dropped=4312, errors=0)
    verdict = slo_verdict({"errors_pct": 1.0}, "command line", dropped)
    assert verdict.summary.startswith("FAIL: errors + dropped arrivals ")
    clean = slo_verdict({"errors_pct": 1.0}, "command line", analysis.overall)
    assert clean.summary == "PASS: errors 0% <= 1%"


def test_the_first_finding_has_its_evidence_and_action_and_the_others_a_line_each(
    tmp_path: Path,
) -> None:
    # GIVEN four findings
    demo = analyze_run(load_run(write_run(demo_spec(), tmp_path)))
    assert demo.findings
    first = demo.findings[0]
    more = [dataclasses.replace(first, title=f"Other cause {k}") for k in range(3)]
    a = dataclasses.replace(demo, findings=(first, *more))
    lines = _summary(a)
    # THEN the first finding's evidence and action are printed, and the second and third
    # take a line each; the fourth is left to --verbose (and to analysis.json, the report)
    assert sum(line.startswith("    evidence: ") for line in lines) == 1
    assert sum(line.startswith("    action: ") for line in lines) == 1
    assert [line.split("]")[0] for line in lines if line.startswith(" ") and ". [" in line[:6]] == [
        f" {k}. [{first.confidence}" for k in (1, 2, 3)
    ]
    verbose = _summary(a, verbose=True)
    assert sum(line.startswith("    evidence: ") for line in verbose) == 4
