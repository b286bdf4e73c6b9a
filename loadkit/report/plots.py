"""Figures for the reports: numbers in, one self-contained image out.

Nothing here computes a statistic: every value drawn was computed by the
analysis. These functions only choose axes, colours and labels. Output is SVG
(vector, sharp when printed; text drawn as glyph outlines, so a report looks
the same on a machine without matplotlib's fonts), made deterministic by a
fixed hash salt and no date in the metadata, so the same analysis always gives
the same bytes.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import matplotlib

matplotlib.use("Agg")  # no display, no GUI toolkit: reports are rendered headless

from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator  # noqa: E402

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
BLACK = "#000000"
ORANGE = "#E69F00"
SKY = "#56B4E9"
GREEN = "#009E73"
YELLOW = "#F0E442"
BLUE = "#0072B2"
VERMILLION = "#D55E00"
PURPLE = "#CC79A7"
GREY = "#777777"

SERIES_COLORS = (BLUE, VERMILLION, GREEN, PURPLE, ORANGE, SKY, BLACK)
# Line styles so that series stay apart on a black-and-white printout.
SERIES_STYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1)), (0, (1, 1)), (0, (8, 2)))

SPAN_STYLES: dict[str, tuple[str, float, str]] = {
    # kind: (colour, alpha, legend label)
    "burst": (ORANGE, 0.18, "burst phase"),
    "recovery": (YELLOW, 0.25, "recovery"),
    "episode": (VERMILLION, 0.18, "spike episode"),
    "throttle": (PURPLE, 0.22, "throttle interval"),
    "cgroup": (PURPLE, 0.22, "cgroup throttled"),
    "fault": (GREY, 0.15, "injected fault"),
}

_RC: Any = {
    "svg.hashsalt": "loadkit-report",
    "svg.fonttype": "path",
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.grid": True,
    "grid.color": "#dddddd",
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "path.simplify": True,
    "image.interpolation": "nearest",
}


@dataclass(frozen=True)
class Image:
    """A rendered figure: SVG text plus the alternative text that describes it."""

    svg: str
    alt: str

    @property
    def data_uri(self) -> str:
        """The image as a `data:` URI (an <img> cannot run scripts, whatever it holds)."""
        encoded = base64.b64encode(self.svg.encode("utf-8")).decode("ascii")
        return f"data:image/svg+xml;base64,{encoded}"

    @property
    def size_bytes(self) -> int:
        return len(self.svg.encode("utf-8"))


@dataclass(frozen=True)
class Span:
    """A shaded interval on the time axis, in seconds since the start of the run."""

    start_s: float
    end_s: float
    kind: str  # a key of SPAN_STYLES


@dataclass(frozen=True)
class Timeline:
    """Everything the timeline panels can show; a panel is drawn only if it has data.

    All series are per analysis window and share `t_s` (window start, seconds since
    the start of the run). Missing values are None or NaN and leave a gap.
    """

    t_s: Sequence[float]
    latency_ms: Mapping[str, Sequence[float | None]] = field(default_factory=dict)
    slo_p99_ms: float | None = None
    offered_rps: Sequence[float | None] | None = None
    achieved_rps: Sequence[float | None] | None = None
    spans: Sequence[Span] = ()
    gpu_util_pct: Sequence[float | None] | None = None
    sm_clock_mhz: Sequence[float | None] | None = None
    sm_clock_max_mhz: Sequence[float | None] | None = None
    temp_c: Sequence[float | None] | None = None
    power_w: Sequence[float | None] | None = None
    power_limit_w: Sequence[float | None] | None = None
    gpu_simulated: bool = False
    cpu_per_core_pct: Sequence[Sequence[float | None]] | None = None  # [core][window]
    cpu_busiest_core_pct: Sequence[float | None] | None = None
    cpu_mean_pct: Sequence[float | None] | None = None
    cgroup_throttled_pct: Sequence[float | None] | None = None
    batch_sizes: Sequence[int] = ()
    batch_executions: Sequence[Sequence[float | None]] | None = None  # [size][window]
    queue_ms: Sequence[float | None] | None = None
    compute_ms: Sequence[float | None] | None = None


def _nums(values: Sequence[float | None] | None) -> list[float]:
    """None -> NaN so matplotlib leaves a gap (a conversion, not a statistic)."""
    return [math.nan if v is None else float(v) for v in (values or [])]


def _has(values: Sequence[float | None] | None) -> bool:
    return bool(values) and any(v is not None and not math.isnan(float(v)) for v in values or [])


def _format_clock(seconds: float, _pos: object = None) -> str:
    s = int(round(seconds))
    sign = "-" if s < 0 else ""
    s = abs(s)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{sign}{h}:{m:02d}:{sec:02d}" if h else f"{sign}{m}:{sec:02d}"


def _time_locator() -> MaxNLocator:
    """Ticks at whole 10 s / 15 s / 30 s / 1 min / 10 min steps, not at 8:20."""
    return MaxNLocator(nbins=12, steps=[1, 1.5, 3, 6, 10])


def _render(fig: Figure, alt: str) -> Image:
    buf = io.StringIO()
    with matplotlib.rc_context(_RC):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return Image(svg=buf.getvalue(), alt=alt)


def _new_figure(width_in: float, height_in: float) -> Figure:
    return Figure(figsize=(width_in, height_in), layout="constrained", dpi=100)


def _shade(ax: Axes, spans: Sequence[Span], kinds: Sequence[str]) -> list[Patch]:
    """Shade spans of the given kinds; return legend handles for the kinds present."""
    seen: list[str] = []
    for span in spans:
        if span.kind not in kinds or span.kind not in SPAN_STYLES:
            continue
        colour, alpha, _ = SPAN_STYLES[span.kind]
        ax.axvspan(span.start_s, span.end_s, color=colour, alpha=alpha, lw=0, zorder=0)
        if span.kind not in seen:
            seen.append(span.kind)
    return [
        Patch(facecolor=SPAN_STYLES[k][0], alpha=SPAN_STYLES[k][1] + 0.2, label=SPAN_STYLES[k][2])
        for k in seen
    ]


def _legend(
    ax: Axes,
    extra_axes: Sequence[Axes] = (),
    patches: Sequence[Patch] = (),
    inside: str | None = None,
) -> None:
    handles, labels = ax.get_legend_handles_labels()
    for other in extra_axes:
        h, lbl = other.get_legend_handles_labels()
        handles += h
        labels += lbl
    handles += list(patches)
    labels += [str(p.get_label()) for p in patches]
    if handles and inside:
        ax.legend(handles, labels, loc=cast(Any, inside), fontsize=7)
    elif handles:
        # Above the plot area, right of the title: never covers data.
        ax.legend(
            handles,
            labels,
            loc="lower right",
            bbox_to_anchor=(1.0, 1.0),
            ncols=min(len(handles), 5),
            fontsize=7,
            borderaxespad=0.2,
        )


def timeline_figure(data: Timeline) -> Image:
    """Stacked panels on one shared time axis: latency and rate, GPU, CPU, batching."""
    with matplotlib.rc_context(_RC):
        return _timeline(data)


def _timeline(data: Timeline) -> Image:
    t = [float(x) for x in data.t_s]
    panels: list[str] = ["latency"]
    if _has(data.gpu_util_pct) or _has(data.sm_clock_mhz):
        panels.append("gpu")
    if _has(data.temp_c) or _has(data.power_w):
        panels.append("thermal")
    if (
        data.cpu_per_core_pct
        or _has(data.cpu_busiest_core_pct)
        or _has(data.cpu_mean_pct)
        or _has(data.cgroup_throttled_pct)
    ):
        panels.append("cpu")
    if data.batch_executions or _has(data.queue_ms) or _has(data.compute_ms):
        panels.append("batch")
    heights = {"latency": 3.2, "gpu": 2.0, "thermal": 1.8, "cpu": 2.0, "batch": 2.2}
    fig = _new_figure(11, sum(heights[p] for p in panels) + 0.4)
    axes = fig.subplots(
        len(panels),
        1,
        sharex=True,
        squeeze=False,
        gridspec_kw={"height_ratios": [heights[p] for p in panels]},
    )[:, 0]
    x_end = t[-1] + (t[1] - t[0] if len(t) > 1 else 1.0) if t else 1.0
    described: list[str] = []
    for ax, panel in zip(axes, panels, strict=True):
        ax.set_xlim(t[0] if t else 0.0, x_end)
        if panel == "latency":
            described.append(_latency_panel(ax, t, data))
        elif panel == "gpu":
            described.append(_gpu_panel(ax, t, data))
        elif panel == "thermal":
            described.append(_thermal_panel(ax, t, data))
        elif panel == "cpu":
            described.append(_cpu_panel(fig, ax, t, x_end, data))
        else:
            described.append(_batch_panel(fig, ax, t, x_end, data))
    axes[-1].xaxis.set_major_locator(_time_locator())
    axes[-1].xaxis.set_major_formatter(FuncFormatter(_format_clock))
    axes[-1].set_xlabel("time since start of run (m:ss)")
    alt = "Timeline on one shared time axis: " + "; ".join(described) + "."
    return _render(fig, alt)


def _latency_panel(ax: Axes, t: list[float], data: Timeline) -> str:
    ax.set_title("Latency percentiles (corrected) and request rate")
    for i, (name, values) in enumerate(data.latency_ms.items()):
        ax.plot(
            t,
            _nums(values),
            color=SERIES_COLORS[i % len(SERIES_COLORS)],
            linestyle=SERIES_STYLES[i % len(SERIES_STYLES)],
            lw=1.1,
            label=name,
            drawstyle="steps-post",
        )
    if data.slo_p99_ms is not None:
        ax.axhline(data.slo_p99_ms, color=BLACK, lw=1.2, ls=(0, (6, 3)), label="SLO (P99)")
    ax.set_ylabel("latency (ms)")
    ax.set_ylim(bottom=0)
    rate_ax = ax.twinx()
    rate_ax.grid(False)
    if _has(data.offered_rps):
        rate_ax.plot(t, _nums(data.offered_rps), color=GREY, lw=0.9, ls=":", label="offered rate")
    if _has(data.achieved_rps):
        rate_ax.plot(t, _nums(data.achieved_rps), color=GREEN, lw=0.9, label="achieved rate")
    rate_ax.set_ylabel("requests/s")
    rate_ax.set_ylim(bottom=0)
    patches = _shade(ax, data.spans, ("burst", "recovery", "episode", "fault"))
    _legend(ax, [rate_ax], patches)
    ax.set_zorder(rate_ax.get_zorder() + 1)
    ax.patch.set_visible(False)
    names = ", ".join(data.latency_ms) or "no latency data"
    return f"latency ({names}) with offered and achieved request rate, bursts and spikes shaded"


def _gpu_panel(ax: Axes, t: list[float], data: Timeline) -> str:
    title = "GPU utilization and SM clock" + (" (simulated GPU)" if data.gpu_simulated else "")
    ax.set_title(title)
    if _has(data.gpu_util_pct):
        ax.plot(t, _nums(data.gpu_util_pct), color=BLUE, lw=1.0, label="utilization (%)")
    ax.set_ylabel("utilization (%)")
    ax.set_ylim(0, 105)
    clock_ax = ax.twinx()
    clock_ax.grid(False)
    if _has(data.sm_clock_mhz):
        clock_ax.plot(
            t, _nums(data.sm_clock_mhz), color=VERMILLION, lw=1.0, ls="--", label="SM clock (MHz)"
        )
    if _has(data.sm_clock_max_mhz):
        clock_ax.plot(
            t, _nums(data.sm_clock_max_mhz), color=VERMILLION, lw=0.8, ls=":", label="SM clock max"
        )
    clock_ax.set_ylim(bottom=0)
    clock_ax.set_ylabel("SM clock (MHz)")
    patches = _shade(ax, data.spans, ("throttle",))
    _legend(ax, [clock_ax], patches)
    return "GPU utilization and SM clock against its maximum, throttle intervals shaded"


def _thermal_panel(ax: Axes, t: list[float], data: Timeline) -> str:
    ax.set_title("GPU temperature and power" + (" (simulated GPU)" if data.gpu_simulated else ""))
    if _has(data.temp_c):
        ax.plot(t, _nums(data.temp_c), color=ORANGE, lw=1.0, label="temperature (°C)")
    ax.set_ylabel("temperature (°C)")
    power_ax = ax.twinx()
    power_ax.grid(False)
    if _has(data.power_w):
        power_ax.plot(t, _nums(data.power_w), color=BLUE, lw=1.0, ls="--", label="power (W)")
    if _has(data.power_limit_w):
        power_ax.plot(t, _nums(data.power_limit_w), color=BLUE, lw=0.8, ls=":", label="power limit")
    power_ax.set_ylabel("power (W)")
    patches = _shade(ax, data.spans, ("throttle",))
    _legend(ax, [power_ax], patches)
    return "GPU temperature and power, throttle intervals shaded"


def _heatmap(
    fig: Figure,
    ax: Axes,
    matrix: Sequence[Sequence[float | None]],
    x0: float,
    x1: float,
    cmap: str,
    vmax: float | None,
    label: str,
) -> None:
    rows = [_nums(row) for row in matrix]
    im = ax.imshow(
        rows,
        aspect="auto",
        origin="lower",
        extent=(x0, x1, -0.5, len(rows) - 0.5),
        cmap=cmap,
        vmin=0.0,
        vmax=vmax,
        interpolation="nearest",
        zorder=1,
    )
    bar = fig.colorbar(im, ax=ax, pad=0.01, fraction=0.02, aspect=12)
    bar.set_label(label, fontsize=7)
    bar.ax.tick_params(labelsize=7)


def _cpu_panel(fig: Figure, ax: Axes, t: list[float], x_end: float, data: Timeline) -> str:
    ax.set_title("CPU per core and cgroup throttling")
    parts = []
    if data.cpu_per_core_pct:
        _heatmap(fig, ax, data.cpu_per_core_pct, t[0], x_end, "cividis", 100.0, "CPU busy (%)")
        ax.set_ylabel("core")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=6))
        ax.grid(False)
        parts.append("per-core CPU busy as a heatmap")
    else:
        if _has(data.cpu_busiest_core_pct):
            ax.plot(
                t, _nums(data.cpu_busiest_core_pct), color=BLUE, lw=1.0, label="busiest core (%)"
            )
            parts.append("busiest core")
        if _has(data.cpu_mean_pct):
            ax.plot(
                t, _nums(data.cpu_mean_pct), color=SKY, lw=1.0, ls="--", label="mean of cores (%)"
            )
            parts.append("mean CPU")
        ax.set_ylabel("CPU busy (%)")
        ax.set_ylim(0, 105)
    throttle_ax = ax.twinx()
    throttle_ax.grid(False)
    if _has(data.cgroup_throttled_pct):
        throttle_ax.plot(
            t,
            _nums(data.cgroup_throttled_pct),
            color=VERMILLION,
            lw=1.2,
            label="cgroup periods throttled (%)",
        )
        parts.append("share of cgroup periods throttled")
    throttle_ax.set_ylabel("throttled (%)")
    throttle_ax.set_ylim(0, 105)
    patches = _shade(ax, data.spans, ("cgroup",))
    _legend(throttle_ax, [ax], patches)
    return " and ".join(parts) or "CPU"


def _batch_panel(fig: Figure, ax: Axes, t: list[float], x_end: float, data: Timeline) -> str:
    ax.set_title("Batch-size distribution over time, with queue and compute time")
    if data.batch_executions:
        _heatmap(fig, ax, data.batch_executions, t[0], x_end, "Blues", None, "executions")
        ax.set_ylabel("batch size")
        sizes = list(data.batch_sizes)
        step = max(1, len(sizes) // 6)
        ax.set_yticks(range(0, len(sizes), step), [str(s) for s in sizes[::step]])
        ax.grid(False)
    time_ax = ax.twinx()
    time_ax.grid(False)
    if _has(data.queue_ms):
        time_ax.plot(t, _nums(data.queue_ms), color=VERMILLION, lw=1.1, label="queue (ms)")
    if _has(data.compute_ms):
        time_ax.plot(t, _nums(data.compute_ms), color=BLACK, lw=1.0, ls="--", label="compute (ms)")
    time_ax.set_ylabel("per request (ms)")
    time_ax.set_ylim(bottom=0)
    _legend(time_ax)
    return "batch-size distribution heatmap with queue and compute time per request"


# --- nines ------------------------------------------------------------------

NINES_TICKS = (50.0, 90.0, 99.0, 99.9, 99.99, 99.999, 99.9999)


def _plain_number(value: float, _pos: object = None) -> str:
    """Log-axis tick labels as 20, 50, 100 rather than 2×10¹."""
    return f"{value:g}"


def _nines_x(percentile: float) -> float:
    """Position on a "nines" axis: 90 -> 1, 99 -> 2, 99.9 -> 3 (an axis transform)."""
    remaining = max(1.0 - percentile / 100.0, 1e-7)
    return -math.log10(remaining)


@dataclass(frozen=True)
class Distribution:
    """One latency distribution: percentiles (0..100) and their values in ms."""

    label: str
    percentiles: Sequence[float]
    values_ms: Sequence[float | None]


@dataclass(frozen=True)
class NinesPlot:
    """Several latency distributions on one nines axis."""

    distributions: Sequence[Distribution]
    slo_p99_ms: float | None = None
    title: str = "Latency distribution (percentile axis)"


def nines_figure(spec: NinesPlot) -> Image:
    """Latency against percentile on a nines axis, several distributions overlaid."""
    distributions, slo_p99_ms, title = spec.distributions, spec.slo_p99_ms, spec.title
    with matplotlib.rc_context(_RC):
        fig = _new_figure(7.5, 3.6)
        ax = fig.subplots()
        finite = sorted({p for d in distributions for p in d.percentiles if p < 100.0})
        top = _nines_x(finite[-1]) if finite else _nines_x(99.0)
        max_x = top + 0.5  # the maximum (P100) sits half a nine right of the last percentile
        for i, dist in enumerate(distributions):
            points = [
                (max_x if p >= 100.0 else _nines_x(p), float(v))
                for p, v in zip(dist.percentiles, dist.values_ms, strict=True)
                if v is not None and math.isfinite(float(v)) and float(v) > 0
            ]
            ax.plot(
                [x for x, _ in points],
                [y for _, y in points],
                color=SERIES_COLORS[i % len(SERIES_COLORS)],
                linestyle=SERIES_STYLES[i % len(SERIES_STYLES)],
                marker="o",
                ms=3,
                lw=1.4,
                label=dist.label,
            )
        if slo_p99_ms is not None:
            ax.plot([_nines_x(99.0)], [slo_p99_ms], "D", color=BLACK, ms=6, label="SLO (P99)")
        ticks = [p for p in NINES_TICKS if _nines_x(p) <= top + 1e-9]
        has_max = any(p >= 100.0 for d in distributions for p in d.percentiles)
        positions = [_nines_x(p) for p in ticks] + ([max_x] if has_max else [])
        tick_labels = [f"P{p:g}" for p in ticks] + (["max"] if has_max else [])
        ax.set_xticks(positions, tick_labels)
        first = _nines_x(finite[0]) if finite else 0.0
        ax.set_xlim(first - 0.15, (max_x if has_max else top) + 0.15)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(_plain_number))
        ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
        ax.yaxis.set_minor_formatter(FuncFormatter(_plain_number))
        ax.set_xlabel("percentile")
        ax.set_ylabel("latency (ms, log scale)")
        ax.set_title(title)
        _legend(ax, inside="upper left")
        labels = ", ".join(d.label for d in distributions)
        return _render(fig, f"{title}: latency against percentile for {labels}.")


# --- batch sizes per phase -------------------------------------------------


@dataclass(frozen=True)
class BatchPhasePlot:
    """Share of executions (0..1) at each batch size, per phase."""

    sizes: Sequence[int]
    share_by_phase: Mapping[str, Sequence[float | None]]


def batch_phase_figure(spec: BatchPhasePlot) -> Image:
    """Grouped bars: the share of executions at each batch size, one group per phase."""
    sizes, share_by_phase = spec.sizes, spec.share_by_phase
    with matplotlib.rc_context(_RC):
        fig = _new_figure(7.5, 3.0)
        ax = fig.subplots()
        n = max(len(share_by_phase), 1)
        width = 0.8 / n
        hatches = ("", "//", "..", "xx", "\\\\")
        for i, (phase, shares) in enumerate(share_by_phase.items()):
            xs = [k + (i - (n - 1) / 2) * width for k in range(len(sizes))]
            ax.bar(
                xs,
                [0.0 if v is None else 100.0 * float(v) for v in shares],
                width=width,
                color=SERIES_COLORS[i % len(SERIES_COLORS)],
                hatch=hatches[i % len(hatches)],
                edgecolor="white",
                lw=0.3,
                label=phase,
            )
        step = max(1, len(sizes) // 16)
        ax.set_xticks(range(0, len(sizes), step), [str(s) for s in list(sizes)[::step]])
        ax.set_xlabel("batch size")
        ax.set_ylabel("share of executions (%)")
        ax.set_title("Batch-size histogram per phase")
        _legend(ax)
        phases = ", ".join(share_by_phase) or "no phases"
        return _render(fig, f"Batch-size histogram per phase ({phases}).")


# --- findings ----------------------------------------------------------------


@dataclass(frozen=True)
class AlignedPlot:
    """A cause's signal averaged over the episodes it explains, aligned at episode start."""

    offsets_s: Sequence[float]
    mean: Sequence[float | None]
    signal_label: str
    low: Sequence[float | None] | None = None
    high: Sequence[float | None] | None = None
    baseline: float | None = None
    latency_ms: Sequence[float | None] | None = None


def aligned_signal_figure(spec: AlignedPlot) -> Image:
    """A finding's small plot: the cause's signal averaged over its episodes, aligned at t=0."""
    offsets_s, mean, signal_label = spec.offsets_s, spec.mean, spec.signal_label
    low, high, baseline, latency_ms = spec.low, spec.high, spec.baseline, spec.latency_ms
    with matplotlib.rc_context(_RC):
        fig = _new_figure(4.6, 2.2)
        ax = fig.subplots()
        xs = [float(x) for x in offsets_s]
        if low is not None and high is not None:
            ax.fill_between(
                xs, _nums(low), _nums(high), color=BLUE, alpha=0.18, lw=0, label="spread"
            )
        ax.plot(xs, _nums(mean), color=BLUE, lw=1.5, label=signal_label)
        if baseline is not None:
            ax.axhline(baseline, color=GREY, lw=0.9, ls=":", label="baseline")
        ax.axvline(0.0, color=BLACK, lw=0.8)
        ax.set_xlabel("seconds from episode start")
        ax.set_ylabel(signal_label, fontsize=8)
        extra = []
        if _has(latency_ms):
            lat_ax = ax.twinx()
            lat_ax.grid(False)
            lat_ax.plot(xs, _nums(latency_ms), color=VERMILLION, lw=1.0, ls="--", label="P99 (ms)")
            lat_ax.set_ylabel("P99 (ms)", fontsize=8)
            extra.append(lat_ax)
        _legend(ax, extra)
        return _render(fig, f"Episode-aligned average of {signal_label} around the episode start.")


# --- comparison --------------------------------------------------------------


@dataclass(frozen=True)
class OverlayPlot:
    """One metric from several runs: label -> (seconds since start, values)."""

    series: Mapping[str, tuple[Sequence[float], Sequence[float | None]]]
    ylabel: str
    title: str
    slo: float | None = None


def overlay_timeline_figure(spec: OverlayPlot) -> Image:
    """One metric from several runs over time since each run's start, overlaid."""
    series, ylabel, title, slo = spec.series, spec.ylabel, spec.title, spec.slo
    with matplotlib.rc_context(_RC):
        fig = _new_figure(11, 3.0)
        ax = fig.subplots()
        for i, (label, (t, values)) in enumerate(series.items()):
            ax.plot(
                [float(x) for x in t],
                _nums(values),
                color=SERIES_COLORS[i % len(SERIES_COLORS)],
                linestyle=SERIES_STYLES[i % len(SERIES_STYLES)],
                lw=1.1,
                label=label,
                drawstyle="steps-post",
            )
        if slo is not None:
            ax.axhline(slo, color=BLACK, lw=1.2, ls=(0, (6, 3)), label="SLO")
        ax.set_ylim(bottom=0)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.xaxis.set_major_locator(_time_locator())
        ax.xaxis.set_major_formatter(FuncFormatter(_format_clock))
        ax.set_xlabel("time since start of run (m:ss)")
        _legend(ax)
        return _render(fig, f"{title}, runs overlaid: {', '.join(series)}.")


# --- capacity search ---------------------------------------------------------


@dataclass(frozen=True)
class CapacityPlot:
    """Per probe: offered rate, corrected latency at the SLO's percentile, goodput, verdict."""

    rates: Sequence[float]
    latency_ms: Sequence[float | None]
    goodput_rps: Sequence[float | None]
    passed: Sequence[bool]
    slo_ms: float
    percentile: str
    capacity_rps: float | None


def capacity_figure(spec: CapacityPlot) -> Image:
    """Rate against corrected latency (SLO line, pass/fail markers) and goodput per probe."""
    with matplotlib.rc_context(_RC):
        fig = _new_figure(9.0, 3.2)
        ax, gx = fig.subplots(1, 2)
        for ok, marker, color, label in (
            (True, "o", GREEN, "passed"),
            (False, "x", VERMILLION, "failed"),
        ):
            pts = [
                (r, float(v))
                for r, v, p in zip(spec.rates, spec.latency_ms, spec.passed, strict=True)
                if p is ok and v is not None and math.isfinite(float(v)) and float(v) > 0
            ]
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker, color=color, label=label)
        ax.axhline(spec.slo_ms, color=BLACK, ls="--", lw=1, label=f"SLO {spec.percentile}")
        if spec.capacity_rps is not None:
            ax.axvline(spec.capacity_rps, color=GREY, ls=":", lw=1, label="capacity")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(_plain_number))
        ax.set_xlabel("offered rate (req/s)")
        ax.set_ylabel(f"corrected {spec.percentile} (ms, log)")
        ax.set_title("Latency per probe")
        _legend(ax, inside="upper left")
        order = sorted(range(len(spec.rates)), key=lambda i: spec.rates[i])
        gx.plot(
            [spec.rates[i] for i in order],
            [spec.goodput_rps[i] if spec.goodput_rps[i] is not None else math.nan for i in order],
            "o-",
            color=SERIES_COLORS[0],
            ms=3,
            label="goodput (within the SLO's latency)",
        )
        top = max(spec.rates, default=1.0)
        gx.plot([0, top], [0, top], ls=":", color=GREY, lw=1, label="offered")
        gx.set_xlabel("offered rate (req/s)")
        gx.set_ylabel("req/s")
        gx.set_title("Goodput per probe")
        _legend(gx, inside="upper left")
        return _render(
            fig,
            f"Capacity search: corrected {spec.percentile} and goodput for "
            f"{len(spec.rates)} probes; SLO {spec.slo_ms:g} ms.",
        )


@dataclass(frozen=True)
class SweepPlot:
    """Corrected P50/P95/P99 per configuration of a sweep."""

    labels: Sequence[str]
    p50_ms: Sequence[float | None]
    p95_ms: Sequence[float | None]
    p99_ms: Sequence[float | None]


def sweep_figure(spec: SweepPlot) -> Image:
    """Grouped bars: the three percentiles of each configuration."""
    with matplotlib.rc_context(_RC):
        fig = _new_figure(max(6.0, 1.4 * len(spec.labels) + 2), 3.2)
        ax = fig.subplots()
        x = list(range(len(spec.labels)))
        for k, (name, values) in enumerate(
            (("P50", spec.p50_ms), ("P95", spec.p95_ms), ("P99", spec.p99_ms))
        ):
            heights = [float(v) if v is not None else 0.0 for v in values]
            ax.bar(
                [i + (k - 1) * 0.27 for i in x], heights, 0.27, label=name, color=SERIES_COLORS[k]
            )
        ax.set_xticks(x, list(spec.labels), rotation=15, ha="right", fontsize=7)
        ax.set_ylabel("corrected latency (ms)")
        ax.set_title("Latency per configuration")
        _legend(ax, inside="upper left")
        return _render(
            fig, "Corrected P50, P95 and P99 per configuration: " + ", ".join(spec.labels) + "."
        )


@dataclass(frozen=True)
class TunePlot:
    """Per configuration of a tune: predicted capacity and P99; measured capacity where verified."""

    labels: Sequence[str]
    predicted_rps: Sequence[float | None]
    p99_ms: Sequence[float | None]
    measured_rps: Sequence[float | None]
    pareto: Sequence[bool]
    recommended: str | None
    slo_ms: float | None = None


def tune_figure(spec: TunePlot) -> Image:
    """Capacity against P99: the predicted space, its Pareto front, the measured points."""
    with matplotlib.rc_context(_RC):
        fig = _new_figure(7.5, 4.0)
        ax = fig.subplots()
        pts = [
            (float(x), float(y), lab, front)
            for x, y, lab, front in zip(
                spec.predicted_rps, spec.p99_ms, spec.labels, spec.pareto, strict=True
            )
            if x is not None and y is not None
        ]
        ax.plot([x for x, *_ in pts], [y for _, y, *_ in pts], "o", color=GREY, ms=4,
                label="predicted")  # fmt: skip
        front = sorted((x, y) for x, y, _, f in pts if f)
        if front:
            ax.plot([x for x, _ in front], [y for _, y in front], "-", color=SERIES_COLORS[0],
                    lw=1, label="Pareto front (predicted)")  # fmt: skip
        measured = [
            (float(m), float(y), lab, x)
            for m, y, lab, x in zip(
                spec.measured_rps, spec.p99_ms, spec.labels, spec.predicted_rps, strict=True
            )
            if m is not None and y is not None
        ]
        for m, y, lab, x in measured:
            if x is not None:
                ax.plot([float(x), m], [y, y], ":", color=GREY, lw=1)
            if lab == spec.recommended:
                ax.plot([m], [y], "*", color=GREEN, ms=12)
        if measured:
            ax.plot([m for m, *_ in measured], [y for _, y, *_ in measured], "D",
                    color=VERMILLION, ms=5, label="measured capacity (verified)")  # fmt: skip
        for x, y, lab, f in pts:
            if f or lab == spec.recommended:
                ax.annotate(lab, (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
        if spec.slo_ms is not None:
            ax.axhline(spec.slo_ms, color=BLACK, ls="--", lw=1, label="SLO")
        ax.set_xlabel("capacity within the SLO (req/s)")
        ax.set_ylabel("P99 at the scenario's arrivals (ms, predicted)")
        ax.set_title("Capacity against P99 per configuration")
        _legend(ax, inside="upper left")
        return _render(
            fig,
            f"Capacity against P99 for {len(pts)} configurations (predicted), "
            f"{len(measured)} verified by a capacity search.",
        )


PlotSpec = (
    Timeline
    | NinesPlot
    | BatchPhasePlot
    | AlignedPlot
    | OverlayPlot
    | CapacityPlot
    | SweepPlot
    | TunePlot
)


def draw(spec: PlotSpec) -> Image:
    """Render any figure spec (the reporters build specs; this turns them into images)."""
    if isinstance(spec, Timeline):
        return timeline_figure(spec)
    if isinstance(spec, NinesPlot):
        return nines_figure(spec)
    if isinstance(spec, BatchPhasePlot):
        return batch_phase_figure(spec)
    if isinstance(spec, AlignedPlot):
        return aligned_signal_figure(spec)
    if isinstance(spec, CapacityPlot):
        return capacity_figure(spec)
    if isinstance(spec, SweepPlot):
        return sweep_figure(spec)
    if isinstance(spec, TunePlot):
        return tune_figure(spec)
    return overlay_timeline_figure(spec)
