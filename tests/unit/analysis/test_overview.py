"""A long run's minute overview: percentiles of merged minutes, and full-resolution zooms."""

from __future__ import annotations

import numpy as np
import pytest

from loadkit.analysis import overview as overview_module
from loadkit.analysis.percentiles import collect_intervals, merge
from loadkit.analysis.pipeline import analyze_run
from loadkit.report import html
from loadkit.report.context import build_context
from loadkit.rundir import load_run
from loadkit.testing.synthetic import RunSpec, periodic_clock_drops, write_run

NS = 1_000_000_000


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory):
    # GIVEN a 4-minute run with a thermal throttle every 30 s, and "long" meaning > 60 s
    mp = pytest.MonkeyPatch()
    mp.setattr(overview_module, "OVERVIEW_AFTER_S", 60.0)
    drops = periodic_clock_drops(30.0, 4.0, first_s=20.0, until_s=230.0)
    spec = RunSpec(duration_s=240, rate_rps=110, clock_drops=drops)
    run = load_run(write_run(spec, tmp_path_factory.mktemp("long"), run_id="long"))
    try:
        yield run, analyze_run(run)
    finally:
        mp.undo()


def test_overview_has_minute_percentiles_from_merged_histograms(long_run):
    run, analysis = long_run
    o = analysis.overview
    assert o is not None and o.window_s == 60.0
    assert o.t_s == (0.0, 60.0, 120.0, 180.0)
    # THEN each minute's P99 is the P99 of that minute's merged interval histograms
    intervals = collect_intervals(run.iter_latency_intervals())
    start = analysis.run.start_ns
    for k, p99 in enumerate(o.corrected.p99_ms):
        lo, hi = start + k * 60 * NS, start + (k + 1) * 60 * NS
        minute = [h for t, h in intervals.by_kind["corrected"].items() if lo <= t < hi]
        assert p99 == pytest.approx(merge(minute).get_value_at_percentile(99.0) / 1000.0)
    # AND throughput is the mean of the minute's windows
    w = np.array([np.nan if v is None else v for v in analysis.windows.throughput_rps])
    assert o.throughput_rps[1] == pytest.approx(np.nanmean(w[60:120]))


def test_report_draws_the_overview_and_zooms_into_the_largest_episodes(long_run):
    run, analysis = long_run
    ctx = build_context(run, analysis)
    assert list(ctx["figures"]["timeline"].t_s) == [0.0, 60.0, 120.0, 180.0]
    zooms = ctx["zooms"]
    assert 1 <= len(zooms) <= 3
    episodes = {e.episode_id: e for e in analysis.episodes_for("p99")}
    for z in zooms:
        figure = ctx["figures"][z["name"]]
        e = episodes[z["episode"]]
        # full resolution: every window within two minutes of the episode
        assert figure.t_s == [
            t for t in analysis.windows.t_s if e.start_s - 120 <= t < e.start_s + e.duration_s + 120
        ]
    page = html.render(run, analysis)
    assert page.count('id="zoom-') == len(zooms)


def test_short_runs_have_no_overview(analyze_spec):
    assert analyze_spec(RunSpec(duration_s=30, rate_rps=120)).overview is None
