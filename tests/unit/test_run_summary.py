"""`loadkit run`'s closing lines: keys in the percentile vocabulary, spoken as people read them."""

from __future__ import annotations

from pathlib import Path

from loadkit.load.summary import summarize_run
from loadkit.testing.synthetic import RunSpec, write_run


def test_summary_keys_are_the_vocabularys_and_its_text_says_p99_9(tmp_path: Path) -> None:
    run_dir = write_run(RunSpec(duration_s=10, rate_rps=50), tmp_path)
    summary = summarize_run(run_dir)
    # the same key live.py, the Prometheus endpoint and analysis.json use (was "p99.9")
    assert list(summary.corrected_ms) == ["p50", "p99", "p999", "max"]
    assert list(summary.service_ms) == ["p50", "p99", "p999", "max"]
    corrected = next(line for line in summary.text().splitlines() if "corrected" in line)
    assert " p99.9 " in corrected and "p999" not in corrected


def test_a_generator_behind_schedule_is_one_line_in_the_summary_analyze_and_the_report(
    tmp_path: Path,
) -> None:
    import io
    import json

    from loadkit.analysis import analyze_run
    from loadkit.commands.analyze import print_summary
    from loadkit.report.context import build_context
    from loadkit.rundir import load_run

    # GIVEN a run whose Locust process was at a full core for its second half
    run_dir = write_run(RunSpec(duration_s=20, rate_rps=50), tmp_path)
    for path in (run_dir / "load").glob("*.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        start = min(r["t_ns"] for r in rows)
        for r in rows:
            r["generator_cpu_pct"] = 99.0 if r["t_ns"] - start >= 10 * 10**9 else 40.0
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # WHEN the run is summarized, analyzed and reported
    summary = summarize_run(run_dir).text().splitlines()
    run = load_run(run_dir)
    analysis = analyze_run(run)
    printed = io.StringIO()
    print_summary(analysis, printed)
    context = build_context(run, analysis)
    # THEN each says it in one line, the same words, with the way out
    said = [line for line in summary if "could not keep its schedule" in line]
    assert len(said) == 1 and "--workers N" in said[0]
    line = said[0].split("generator ", 1)[1]
    assert [a["message"] for a in context["alerts"] if a["name"] == "generator_behind"] == [line]
    assert printed.getvalue().count("could not keep its schedule") == 1
    assert f"alert [warn]: {line}\n" in printed.getvalue()


def test_a_run_that_kept_its_schedule_says_nothing_about_the_generator(tmp_path: Path) -> None:
    run_dir = write_run(RunSpec(duration_s=10, rate_rps=50), tmp_path)
    assert summarize_run(run_dir).generator is None
    assert "schedule" not in summarize_run(run_dir).text()
