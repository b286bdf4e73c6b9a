"""`loadkit compare`: configuration differences, number differences, findings that changed."""

from __future__ import annotations

from pathlib import Path

import pytest
from analysis_builder import HOSTILE, make_analysis, make_run

from loadkit.analysis import model as m
from loadkit.report import compare


@pytest.fixture
def two_runs(tmp_path: Path):
    """GIVEN the same scenario with max_queue_delay 2 ms (A) and 8 ms (B)."""
    a = (
        make_run(tmp_path / "delay-2ms", max_queue_delay_us=2000),
        make_analysis(n=120, run_id="delay-2ms"),
    )
    b = (
        make_run(tmp_path / "delay-8ms", max_queue_delay_us=8000),
        make_analysis(
            n=120, run_id="delay-8ms", p99_scale=1.5, cause=m.CAUSE_BATCHING_WINDOW, seed=1
        ),
    )
    return [a, b]


def test_configuration_differences_are_listed(two_runs):
    ctx = compare.build_compare_context(two_runs)
    rows = {r["key"]: r["values"] for r in ctx["config_rows"]}
    key = "model_config.ranker.dynamic_batching.max_queue_delay_microseconds"
    assert rows[key] == ["2000", "8000"]
    assert "scenario.params.rate" not in rows  # identical settings are not listed


def test_numbers_side_by_side_with_their_difference(two_runs):
    ctx = compare.build_compare_context(two_runs)
    p99 = next(r for r in ctx["metrics"] if r["key"] == "p99_ms")
    assert p99["baseline"] == "78.5 ms"
    (cell,) = p99["others"]
    assert cell["value"] == "118 ms"
    assert cell["delta"] == pytest.approx(78.5 * 0.5)
    assert cell["delta_text"] == "+39.2 ms (+50 %)"


def test_findings_that_appeared_and_disappeared(two_runs):
    (change,) = compare.build_compare_context(two_runs)["finding_changes"]
    assert change["appeared"] == ["Batching window"]
    assert change["disappeared"] == ["GPU thermal throttling"]
    assert change["persisted"] == []


def test_overlaid_figures_hold_each_runs_series(two_runs):
    figures = compare.build_compare_context(two_runs)["figures"]
    (_, a), (_, b) = two_runs
    assert [d.values_ms for d in figures["nines"].distributions] == [
        a.nines.corrected_ms,
        b.nines.corrected_ms,
    ]
    assert list(figures["p99"].series.values()) == [
        (a.windows.t_s, a.windows.corrected.p99_ms),
        (b.windows.t_s, b.windows.corrected.p99_ms),
    ]


def test_compare_html_and_markdown_render_and_escape(tmp_path: Path, two_runs):
    hostile = (make_run(tmp_path / "h", hostile=HOSTILE), make_analysis(n=60, hostile=HOSTILE))
    runs = [*two_runs, hostile]
    page = compare.render_html(runs)
    assert HOSTILE not in page and "&lt;/script&gt;" in page
    assert "<script" not in page
    assert page == compare.render_html(runs)
    text = compare.render_markdown(runs)
    assert HOSTILE not in text and "&lt;/script&gt;" in text
    assert "| P99 (corrected) | 78.5 ms | 118 ms | +39.2 ms (+50 %) |" in text


def test_compare_needs_two_runs(two_runs):
    with pytest.raises(ValueError):
        compare.build_compare_context(two_runs[:1])
