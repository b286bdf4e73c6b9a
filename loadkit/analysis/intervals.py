"""Spans to shade on timelines: GPU clock throttling, cgroup CPU throttling, injected faults.

Throttle spans are runs of windows classified by the rule attribution uses
(`causes._gpu_clock.throttle_classes`), so what the timeline shades is what the
findings mean. Fault spans are ground truth read from events.jsonl
(`kind: fault`, `action: start/end`): they are for the reader (and the diagnosis
benchmark) to check the findings against, and never feed attribution.
"""

from __future__ import annotations

from collections import defaultdict, deque

import numpy as np
import pandas as pd

from loadkit.analysis.align import NS, WindowGrid
from loadkit.analysis.causes._gpu_clock import throttle_classes
from loadkit.analysis.causes.cgroup_throttling import CGROUP_THROTTLED_PCT
from loadkit.analysis.episodes import hot_runs
from loadkit.analysis.model import (
    CAUSE_GPU_CLOCK_OTHER,
    CAUSE_GPU_POWER,
    CAUSE_GPU_THERMAL,
    Interval,
)
from loadkit.analysis.telemetry import GpuSeries, HostSeries, events_of

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


# Interval kinds of the three clock causes (`throttle_classes`).
GPU_KINDS = {
    CAUSE_GPU_THERMAL: "gpu_thermal",
    CAUSE_GPU_POWER: "gpu_power",
    CAUSE_GPU_CLOCK_OTHER: "gpu_clock_other",
}


def gpu_throttle_classes(gpu: GpuSeries) -> dict[str, np.ndarray]:
    """Per window and interval kind: thermal, power or other-clock throttling (attribution's rule)."""
    return {GPU_KINDS[cause]: mask for cause, mask in throttle_classes(gpu).items()}


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
