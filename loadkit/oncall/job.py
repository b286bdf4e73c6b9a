"""The analysis of one incident, in a child process: `python -m loadkit.oncall.job SPEC.json`.

A child so that a deadline can stop it (a thread cannot be killed) and so that
an analysis that runs out of memory takes nothing else down. It imports the
window from Prometheus into `.next/run/`, swaps it in as `run/`, analyzes it,
writes `analysis.json` (the incident's and the run's) and `report.html`, and
last `result.json`: the summary the receiver posts. Exit 0, or 2 with one
line on stderr (the worker keeps it as the incident's error). Each step is one
line on stderr first, so that an analysis stopped at its deadline says where it
stood ("importing ... from http://prometheus:9090").
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from loadkit.analysis.model import Analysis
from loadkit.analysis.periodicity import run_period
from loadkit.analysis.pipeline import analyze_run
from loadkit.oncall.incidents import ANALYSIS_FILE, REPORT_FILE, RUN_DIR, without_credentials
from loadkit.production_window import import_window, parse_selectors
from loadkit.report import formats
from loadkit.rundir import load_run
from loadkit.rundir.atomic import write_atomic
from loadkit.rundir.layout import ANALYSIS_FILE as RUN_ANALYSIS_FILE
from loadkit.telemetry.prometheus.client import PrometheusClient

RESULT_FILE = "result.json"
NEXT_DIR = ".next"  # the window is imported here (as run/), then swapped in


def _step(text: str) -> None:
    """One line on stderr (job.log), any URL's credentials taken out."""
    print(without_credentials(text), file=sys.stderr)


def _iso(ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ns / 1e9))


def summarize(analysis: Analysis) -> dict[str, Any]:
    """What a receiver gets and the index shows: verdict, first finding, period, episodes."""
    top = analysis.findings[0] if analysis.findings else None
    period = run_period(analysis.periodicity, analysis.primary or "p99")
    return {
        "verdict": analysis.verdict.summary,
        "passed": analysis.verdict.passed,
        "headline": analysis.headline,
        "finding": None
        if top is None
        else {
            "cause": top.cause,
            "title": top.title,
            "confidence": top.confidence,
            "summary": top.summary,
            "action": top.action,
        },
        "period_s": None if period is None else period.period_s,
        "episodes": len(analysis.episodes),
    }


def _swap_in(folder: Path) -> Path:
    """.next/run -> run, the previous run removed (a re-analysis covers the longer window)."""
    run, old = folder / RUN_DIR, folder / f".{RUN_DIR}.old"
    shutil.rmtree(old, ignore_errors=True)
    if run.exists():
        run.rename(old)
    (folder / NEXT_DIR / RUN_DIR).rename(run)
    shutil.rmtree(old, ignore_errors=True)
    return run


def run_job(spec: dict[str, Any]) -> dict[str, Any]:
    folder = Path(spec["incident_dir"])
    shutil.rmtree(folder / NEXT_DIR, ignore_errors=True)
    token = spec.get("prometheus_token_file")
    client = PrometheusClient(
        spec["prometheus"],
        token=Path(token).read_text(encoding="utf-8").strip() if token else None,
    )
    start_ns, end_ns = int(spec["start_ns"]), int(spec["end_ns"])
    _step(f"importing {_iso(start_ns)} .. {_iso(end_ns)} from Prometheus at {client.base_url}")
    imported = import_window(
        client,
        start_ns,
        end_ns,
        parse_selectors(spec.get("selectors", [])),
        folder / NEXT_DIR,
        RUN_DIR,
        model=spec.get("model"),
        step_s=spec.get("step_s"),
        command_line=["loadkit", "oncall", f"incident {folder.name}"],
    )
    _step(imported.summary)
    run_path = _swap_in(folder)
    _step("analyzing the window")
    run = load_run(run_path)
    analysis = analyze_run(run)
    analysis.save(run_path / RUN_ANALYSIS_FILE)
    analysis.save(folder / ANALYSIS_FILE)
    _step("writing the report")
    html = formats.get("html").load().render_report(run, analysis, None)
    write_atomic(folder / REPORT_FILE, html)
    result = summarize(analysis)
    write_atomic(folder / RESULT_FILE, json.dumps(result) + "\n")
    return result


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    try:
        run_job(spec)
    except Exception as exc:  # noqa: BLE001 - one line for the incident, whatever it was
        message = str(exc).splitlines()[0] if str(exc) else ""
        _step(f"{type(exc).__name__}: {message}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
