"""Figures: deterministic SVG, panels only where there is data, described in alt text."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure

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


def _panels(spec: plots.Timeline, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Draw a timeline; for each panel drawn (by title, top to bottom) the labels of its lines."""
    figures: list[Figure] = []
    render = plots._render

    def keep(fig: Figure, alt: str) -> plots.Image:
        figures.append(fig)
        return render(fig, alt)

    monkeypatch.setattr(plots, "_render", keep)
    plots.draw(spec)
    (fig,) = figures
    # A panel is a titled axes; its twin axes (second y scale) sit exactly on it.
    titled = [ax for ax in fig.axes if ax.get_title("left")]
    panels: dict[str, list[str]] = {ax.get_title("left"): [] for ax in titled}
    for ax in fig.axes:
        owner = [p for p in titled if p.get_position().bounds == ax.get_position().bounds]
        if not owner:
            continue  # a colour bar
        labels = panels[owner[0].get_title("left")]
        labels += ["heatmap"] * len(ax.get_images())
        labels += [str(line.get_label()) for line in ax.get_lines()]
    return panels


def test_panels_appear_only_for_data_present(monkeypatch: pytest.MonkeyPatch):
    # GIVEN latency and rate only: one panel, the latency one
    bare = _panels(_timeline(), monkeypatch)
    assert bare == {
        "Latency percentiles (corrected) and request rate": [
            "P99",
            "SLO (P99)",
            "offered rate",
            "achieved rate",
        ]
    }
    # GIVEN GPU, thermal, CPU and batching data too: a panel for each, each with its data
    full = _panels(
        _timeline(
            gpu_util_pct=[50.0] * 20,
            sm_clock_mhz=[1980.0] * 20,
            temp_c=[70.0] * 20,
            cpu_busiest_core_pct=[40.0] * 20,
            batch_sizes=(1, 2, 4),
            batch_executions=[[1] * 20, [2] * 20, [0] * 20],
            queue_ms=[1.0] * 20,
        ),
        monkeypatch,
    )
    assert full == {
        "Latency percentiles (corrected) and request rate": bare[
            "Latency percentiles (corrected) and request rate"
        ],
        "GPU utilization and SM clock": ["utilization (%)", "SM clock (MHz)"],
        "GPU temperature and power": ["temperature (°C)"],
        "CPU per core and cgroup throttling": ["busiest core (%)"],
        "Batch-size distribution over time, with queue and compute time": [
            "heatmap",
            "queue (ms)",
        ],
    }


def test_nines_axis_places_percentiles_by_their_nines():
    assert plots._nines_x(90.0) == 1.0
    assert round(plots._nines_x(99.9), 9) == 3.0
    spec = plots.NinesPlot(
        [plots.Distribution("corrected", (50.0, 99.0, 100.0), (5.0, None, 80.0))], slo_p99_ms=50.0
    )
    assert "corrected" in plots.draw(spec).alt
