"""The values the report asked of the analysis (REQUESTS R1-R5) reach it from a real analysis."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from loadkit.analysis import analyze_run
from loadkit.report import compare
from loadkit.report.context import build_context
from loadkit.report.plots import AlignedPlot
from loadkit.rundir import load_run
from loadkit.testing.synthetic import FaultWindow, demo_spec, write_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    """GIVEN the demo story with a cgroup quota, and the same run with a slower model."""
    root: Path = tmp_path_factory.mktemp("runs")
    spec = replace(demo_spec(1), cgroup_quotas=(FaultWindow(70, 78, 1.0),))
    out = []
    for run_id, s in (
        ("demo", spec),
        ("slower", replace(spec, seed=2, compute_us_per_batch=4000.0)),
    ):
        run = load_run(write_run(s, root, run_id=run_id))
        out.append((run, analyze_run(run)))
    return out


def test_report_draws_aligned_signal_phases_intervals_and_cores(runs):
    run, analysis = runs[0]
    ctx = build_context(run, analysis)
    card = next(c for c in ctx["findings"] if c["cause"] == "gpu_clock_thermal")
    assert isinstance(card["figure"], AlignedPlot)
    assert card["figure"].signal_label == "SM clock (MHz)" and card["figure"].latency_ms
    figures = ctx["figures"]
    assert set(figures["batch_phases"].share_by_phase) == {"steady", "burst", "recovery"}
    kinds = {span.kind for span in figures["timeline"].spans}
    assert {"throttle", "cgroup", "fault"} <= kinds
    assert len(figures["timeline"].cpu_per_core_pct) == 8


def test_compare_report_judges_differences_against_noise(runs):
    ctx = compare.build_compare_context(runs)
    rows = {r["key"]: r["others"][0] for r in ctx["metrics"]}
    assert rows["p99_ms"]["exceeds_noise"] is True and rows["p99_ms"]["direction"] == "worse"
    assert rows["offered_rps"]["exceeds_noise"] is False
    assert rows["p99_ms"]["noise_text"] != "n/a"
    assert ctx["summaries"] and "beyond run-to-run noise" in ctx["summaries"][0]
