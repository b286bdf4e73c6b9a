"""Figures: deterministic SVG, panels only where there is data, described in alt text."""

from __future__ import annotations

from loadkit.report import plots


def _timeline(**extra) -> plots.Timeline:
    t = [float(i) for i in range(20)]
    return plots.Timeline(
        t_s=t,
        latency_ms={"P99": [20.0 + (i % 5) for i in range(20)]},
        slo_p99_ms=50.0,
        offered_rps=[100.0] * 20,
        achieved_rps=[99.0] * 10 + [None] * 10,
        spans=[plots.Span(5.0, 8.0, "episode"), plots.Span(10.0, 12.0, "burst")],
        **extra,
    )


def test_svg_is_deterministic_and_undated():
    first = plots.draw(_timeline())
    assert first.svg == plots.draw(_timeline()).svg
    assert "<dc:date>" not in first.svg
    assert first.data_uri.startswith("data:image/svg+xml;base64,")


def test_panels_appear_only_for_data_present():
    bare = plots.draw(_timeline())
    assert "latency" in bare.alt and "GPU" not in bare.alt and "batch" not in bare.alt
    full = plots.draw(
        _timeline(
            gpu_util_pct=[50.0] * 20,
            sm_clock_mhz=[1980.0] * 20,
            temp_c=[70.0] * 20,
            cpu_busiest_core_pct=[40.0] * 20,
            batch_sizes=(1, 2, 4),
            batch_executions=[[1] * 20, [2] * 20, [0] * 20],
            queue_ms=[1.0] * 20,
        )
    )
    for words in ("GPU utilization", "temperature", "busiest core", "batch-size distribution"):
        assert words in full.alt


def test_nines_axis_places_percentiles_by_their_nines():
    assert plots._nines_x(90.0) == 1.0
    assert round(plots._nines_x(99.9), 9) == 3.0
    spec = plots.NinesPlot(
        [plots.Distribution("corrected", (50.0, 99.0, 100.0), (5.0, None, 80.0))], slo_p99_ms=50.0
    )
    assert "corrected" in plots.draw(spec).alt
