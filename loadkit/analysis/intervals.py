"""Spans to shade on timelines: GPU clock throttling, cgroup CPU throttling, injected faults.

Throttle spans are runs of windows classified with the same thresholds as
attribution (`loadkit/analysis/attribution.py`), so what the timeline shades is
what the findings mean. Fault spans are ground truth read from events.jsonl
(`kind: fault`, `action: start/end`): they are for the reader (and the diagnosis
benchmark) to check the findings against, and never feed attribution.
"""

from __future__ import annotations

from collections import defaultdict, deque

import numpy as np
import pandas as pd

from loadkit.analysis.align import NS, WindowGrid
from loadkit.analysis.attribution import (
    CGROUP_THROTTLED_PCT,
    CLOCK_DROP_RATIO,
    POWER_AT_LIMIT,
    REASON_SHARE,
)
from loadkit.analysis.episodes import hot_runs
from loadkit.analysis.model import Interval
from loadkit.analysis.telemetry import GpuSeries, HostSeries, events_of

HOT_GPU_C = 85.0  # without reason bits, a clock drop this hot counts as thermal

GPU_LABELS = {
    "gpu_thermal": "GPU thermal throttling",
    "gpu_power": "GPU power capping",
    "gpu_clock_other": "GPU clock drop (no thermal or power reason)",
}


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(first, last + 1) window index of each run of True."""
    return hot_runs(mask, merge_gap=0)


def _span(
    grid: WindowGrid, run_start_ns: int, run_end_ns: int, first: int, stop: int
) -> tuple[int, int, float, float]:
    lo = int(grid.start_ns + first * grid.window_ns)
    hi = int(min(grid.start_ns + stop * grid.window_ns, max(run_end_ns, lo)))
    return lo, hi, (lo - run_start_ns) / NS, (hi - run_start_ns) / NS


def gpu_throttle_classes(gpu: GpuSeries) -> dict[str, np.ndarray]:
    """Per window: thermal, power or other-clock throttling (exclusive, in that order).

    With reason bits a window is thermal/power when ≥ REASON_SHARE of its busy
    samples carry the bit (NVML says the clocks are held back for that reason),
    and "other" when the busy SM clock is under CLOCK_DROP_RATIO of max with
    neither bit. Without bits, a clock drop is thermal when the GPU is hot and
    power when it draws ≥ POWER_AT_LIMIT of its limit, as in attribution.
    """
    drop = np.nan_to_num(gpu.clock_ratio_busy, nan=1.0) < CLOCK_DROP_RATIO
    if gpu.has_reasons:
        thermal = np.nan_to_num(gpu.thermal_reason, nan=0.0) >= REASON_SHARE
        power = np.nan_to_num(gpu.power_reason, nan=0.0) >= REASON_SHARE
    else:
        thermal = drop & (np.nan_to_num(gpu.temp_c, nan=0.0) >= HOT_GPU_C)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.nan_to_num(gpu.power_w / gpu.power_limit_w, nan=0.0)
        power = drop & (share >= POWER_AT_LIMIT)
    power &= ~thermal
    return {"gpu_thermal": thermal, "gpu_power": power, "gpu_clock_other": drop & ~thermal & ~power}


def gpu_intervals(
    gpu: GpuSeries, grid: WindowGrid, run_start_ns: int, run_end_ns: int
) -> list[Interval]:
    out = []
    for kind, mask in gpu_throttle_classes(gpu).items():
        for first, stop in _runs(mask):
            lo, hi, lo_s, hi_s = _span(grid, run_start_ns, run_end_ns, first, stop)
            ratio = gpu.clock_ratio_busy[first:stop]
            label = GPU_LABELS[kind]
            if np.isfinite(ratio).any():
                label += f": busy SM clock {100 * float(np.nanmin(ratio)):.0f} % of max at lowest"
            out.append(Interval(kind, lo_s, hi_s, lo, hi, label))
    return out


def cgroup_intervals(
    host: HostSeries, grid: WindowGrid, run_start_ns: int, run_end_ns: int
) -> list[Interval]:
    """Windows with ≥ CGROUP_THROTTLED_PCT of the cgroup's CFS periods throttled."""
    if not host.has_cgroup:
        return []
    pct = np.nan_to_num(host.cgroup_throttled_pct, nan=0.0)
    out = []
    for first, stop in _runs(pct >= CGROUP_THROTTLED_PCT):
        lo, hi, lo_s, hi_s = _span(grid, run_start_ns, run_end_ns, first, stop)
        worst = float(pct[first:stop].max())
        label = f"cgroup CPU throttling: up to {worst:.0f} % of periods throttled"
        out.append(Interval("cgroup_throttled", lo_s, hi_s, lo, hi, label))
    return out


def fault_intervals(events: pd.DataFrame, run_start_ns: int, run_end_ns: int) -> list[Interval]:
    """Injected faults from events.jsonl, as `fault:<name>` (ground truth, never attribution).

    Starts and ends pair up per name in order; a fault still on at the end of the
    run ends there, an end without a start began at the run start, and an event
    without `action` is an instant (zero-length interval).
    """
    faults = events_of(events, "fault")
    if faults.empty:
        return []
    open_starts: dict[str, deque[tuple[int, bool]]] = defaultdict(deque)
    spans: list[tuple[str, int, int, bool]] = []
    for row in faults.to_dict("records"):
        name = str(row.get("name") or "fault")
        t = int(row["t_ns"])
        action = row.get("action")
        simulated = row.get("simulated") is True
        if action == "start":
            open_starts[name].append((t, simulated))
        elif action == "end":
            if open_starts[name]:
                start, sim = open_starts[name].popleft()
                spans.append((name, start, t, sim or simulated))
            else:
                spans.append((name, run_start_ns, t, simulated))
        else:
            spans.append((name, t, t, simulated))
    for name, pending in open_starts.items():
        spans.extend((name, start, max(run_end_ns, start), sim) for start, sim in pending)
    out = []
    for name, start, end, simulated in spans:
        lo = min(max(start, run_start_ns), run_end_ns)
        hi = min(max(end, lo), run_end_ns)
        label = f"injected fault (ground truth): {name}" + (" (simulated GPU)" if simulated else "")
        out.append(
            Interval(
                f"fault:{name}",
                (lo - run_start_ns) / NS,
                (hi - run_start_ns) / NS,
                lo,
                hi,
                label,
                ground_truth=True,
            )
        )
    return out


def run_intervals(
    grid: WindowGrid,
    run_start_ns: int,
    run_end_ns: int,
    gpu: GpuSeries | None,
    host: HostSeries | None,
    events: pd.DataFrame,
) -> tuple[Interval, ...]:
    """All intervals of a run, by start time (then kind)."""
    found: list[Interval] = []
    if gpu is not None:
        found += gpu_intervals(gpu, grid, run_start_ns, run_end_ns)
    if host is not None:
        found += cgroup_intervals(host, grid, run_start_ns, run_end_ns)
    found += fault_intervals(events, run_start_ns, run_end_ns)
    return tuple(sorted(found, key=lambda i: (i.start_ns, i.kind, i.end_ns)))


__all__ = [
    "cgroup_intervals",
    "fault_intervals",
    "gpu_intervals",
    "gpu_throttle_classes",
    "run_intervals",
]
