"""The registry of telemetry series the analysis aligns: one entry per source name.

Each entry puts one recorded source (`telemetry/<name>.jsonl`, named as in
loadkit/telemetry/sources.py) on the window grid and says which
`TelemetryWindows` fields (analysis.json) it fills. The pipeline, the causes'
`Signals` and `TelemetryWindows` read the aligned series by this name
(`Aligned.sources`, `Signals.sources`), with typed accessors (`.gpu`, `.host`,
`.triton`) where the causes need them.

A source whose fields aggregate plainly per window needs no aligner of its
own: `declared(name, {"field": "mean" | "max" | "min" | "sum" | "rate"})`
aligns it into a `DeclaredSeries`. See docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from loadkit.analysis.align import (
    WindowGrid,
    counter_rate_on_grid,
    numeric,
    reduce_on_grid,
    to_series,
)
from loadkit.analysis.model import Series
from loadkit.analysis.telemetry import (
    GpuSeries,
    HostSeries,
    TritonSeries,
    align_gpu,
    align_host,
    align_triton,
    host_without,
)


@dataclass(frozen=True)
class AlignContext:
    """What an aligner may need beyond its rows: the model the run tested."""

    model: str | None = None


@dataclass(frozen=True)
class AlignedSource:
    """How one source's rows become per-window series, and what they add to analysis.json."""

    name: str  # the recorded source: telemetry/<name>.jsonl
    align: Callable[[pd.DataFrame, WindowGrid, AlignContext], Any | None]
    # Its TelemetryWindows fields (field name -> per-window series) from its aligned series.
    windows: Callable[[Any], Mapping[str, Series | Any]] = lambda _: {}
    counter_resets: Callable[[Any], int] = lambda _: 0
    # Say "no <name> telemetry: causes that need it are not assessable" when absent.
    noted_when_missing: bool = True
    # Its series without the fields of one part (`rundir.schema.SERIES_PARTS`; None: the
    # fields outside every part), where that part was sampled on another machine than a
    # reader wants (analysis/places.py, `sources_at`). None: the series has no parts.
    without_part: Callable[[Any, str | None], Any] | None = None
    # Its series describe the machine they were sampled on (gpu, host): a reader of the other
    # machine's leaves them out. False: the server's own statistics, the server's whoever
    # reads them (a load machine's cause splits the server's time from its own with them).
    machine: bool = True


class SourceAccessors:
    """Typed accessors to the aligned sources the causes read, over a `sources` mapping."""

    sources: dict[str, Any]

    @property
    def gpu(self) -> GpuSeries | None:
        return self.sources.get("gpu")

    @gpu.setter
    def gpu(self, series: GpuSeries | None) -> None:
        self.sources["gpu"] = series

    @property
    def host(self) -> HostSeries | None:
        return self.sources.get("host")

    @host.setter
    def host(self, series: HostSeries | None) -> None:
        self.sources["host"] = series

    @property
    def triton(self) -> TritonSeries | None:
        return self.sources.get("triton_stats")

    @triton.setter
    def triton(self, series: TritonSeries | None) -> None:
        self.sources["triton_stats"] = series


# --- sources with their own aligners (loadkit/analysis/telemetry.py) ----------------


def _gpu_windows(gpu: GpuSeries) -> dict[str, Any]:
    reasons = gpu.has_reasons
    return {
        "gpu_sm_clock_mhz": to_series(gpu.sm_clock_mhz),
        "gpu_sm_clock_max_mhz": to_series(gpu.sm_clock_max_mhz),
        "gpu_temp_c": to_series(gpu.temp_c),
        "gpu_power_w": to_series(gpu.power_w),
        "gpu_power_limit_w": to_series(gpu.power_limit_w),
        "gpu_util_pct": to_series(gpu.util_pct),
        "gpu_mem_used_bytes": to_series(gpu.mem_used_bytes),
        "gpu_thermal_reason": to_series(gpu.thermal_reason) if reasons else None,
        "gpu_power_reason": to_series(gpu.power_reason) if reasons else None,
    }


def _host_windows(host: HostSeries) -> dict[str, Any]:
    cgroup = host.has_cgroup
    return {
        "cpu_core_max_pct": to_series(host.cpu_core_max_pct) if host.has_per_core else None,
        "cpu_mean_pct": to_series(host.cpu_mean_pct),
        "cpu_psi_some_avg10": to_series(host.psi_some_avg10),
        "cgroup_throttled_pct": to_series(host.cgroup_throttled_pct) if cgroup else None,
        "cgroup_throttled_ms_per_s": to_series(host.cgroup_throttled_ms_per_s) if cgroup else None,
        "server_rss_bytes": to_series(host.server_rss_bytes),
    }


def _triton_windows(triton: TritonSeries) -> dict[str, Any]:
    return {
        "batch_size_mean": to_series(triton.batch_size_mean),
        "batch_size_max": to_series(triton.batch_size_max),
        "executions_per_s": to_series(triton.executions_per_s),
        "inferences_per_s": to_series(triton.inferences_per_s),
        "queue_ms_per_request": to_series(triton.queue_ms_per_request),
        "compute_ms_per_request": to_series(triton.compute_ms_per_request),
        "compute_ms_per_execution": to_series(triton.batch_compute_ms),
        "data_movement_ms_per_request": to_series(triton.data_movement_ms),
        "batch_sizes": triton.batch_sizes,
        **_other_models_windows(triton),
    }


def _other_models_windows(triton: TritonSeries) -> dict[str, Any]:
    """The server's other models summed per window (none reported: nothing)."""
    if not triton.others:
        return {}
    infers = np.nansum([o.inferences_per_s for o in triton.others.values()], axis=0)
    busy = np.nansum([o.compute_ms_per_s for o in triton.others.values()], axis=0)
    return {
        "other_models_inferences_per_s": to_series(infers),
        "other_models_compute_ms_per_s": to_series(busy),
    }


GPU = AlignedSource("gpu", lambda frame, grid, _: align_gpu(frame, grid), windows=_gpu_windows)
HOST = AlignedSource(
    "host",
    lambda frame, grid, _: align_host(frame, grid),
    windows=_host_windows,
    counter_resets=lambda host: host.counter_resets,
    without_part=host_without,
)
TRITON_STATS = AlignedSource(
    "triton_stats",
    lambda frame, grid, context: align_triton(frame, grid, context.model),
    windows=_triton_windows,
    counter_resets=lambda triton: triton.counter_resets,
    machine=False,
)


# --- sources aligned from declared per-field aggregations ---------------------------

AGGREGATIONS = ("mean", "max", "min", "sum", "rate")


@dataclass
class DeclaredSeries:
    """Per-window series of a declared source, by field (a field absent from the rows: None)."""

    fields: dict[str, np.ndarray | None] = field(default_factory=dict)
    counter_resets: int = 0

    def __getitem__(self, name: str) -> np.ndarray | None:
        return self.fields.get(name)


def align_declared(
    frame: pd.DataFrame, grid: WindowGrid, how: Mapping[str, str]
) -> DeclaredSeries | None:
    """Each field reduced into its windows as declared; "rate": a cumulative counter per second."""
    if frame.empty or "t_ns" not in frame.columns:
        return None
    t = frame["t_ns"].to_numpy(dtype=np.int64)
    out = DeclaredSeries()
    for name, agg in how.items():
        values = numeric(frame, name)
        if values is None:
            out.fields[name] = None
        elif agg == "rate":
            out.fields[name], resets = counter_rate_on_grid(grid, t, values)
            out.counter_resets += resets
        else:
            out.fields[name] = reduce_on_grid(grid, t, values, agg)
    return out


def declared(
    name: str, how: Mapping[str, str], *, noted_when_missing: bool = False
) -> AlignedSource:
    """The entry of a source whose fields aggregate per window as `how` says (no aligner)."""
    unknown = sorted(set(how.values()) - set(AGGREGATIONS))
    if unknown:
        raise ValueError(f"{name}: unknown aggregation {unknown}; use one of {AGGREGATIONS}")
    fixed = dict(how)
    return AlignedSource(
        name,
        lambda frame, grid, _: align_declared(frame, grid, fixed),
        counter_resets=lambda series: series.counter_resets,
        noted_when_missing=noted_when_missing,
    )


# In the order they are aligned (and named in the "no <source> telemetry" notes).
REGISTRY: tuple[AlignedSource, ...] = (GPU, HOST, TRITON_STATS)

BY_NAME: dict[str, AlignedSource] = {s.name: s for s in REGISTRY}


__all__ = [
    "AGGREGATIONS",
    "BY_NAME",
    "REGISTRY",
    "AlignContext",
    "AlignedSource",
    "DeclaredSeries",
    "SourceAccessors",
    "align_declared",
    "declared",
]
