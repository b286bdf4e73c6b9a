"""Spans to shade on timelines: GPU clock throttling, cgroup CPU throttling, injected faults.

Throttle spans are runs of windows where a cause's condition holds, by the
rule the cause itself is found by (its `Cause.shading`, read from the
registry), so what the timeline shades is what the findings mean. Fault spans are ground truth read from events.jsonl
(`kind: fault`, `action: start/end`): they are for the reader (and the diagnosis
benchmark) to check the findings against, and never feed attribution.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from loadkit.analysis import causes
from loadkit.analysis.align import NS, WindowGrid
from loadkit.analysis.episodes import hot_runs
from loadkit.analysis.model import Interval
from loadkit.analysis.telemetry import GpuSeries, HostSeries, events_of


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
    """Per window and interval kind: thermal, power or other-clock throttling (attribution's rule)."""
    out: dict[str, np.ndarray] = {}
    for cause in causes.REGISTRY:
        if cause.shading is not None and cause.shading.source == "gpu":
            mask = cause.shading.windows(gpu)
            if mask is not None:
                out[cause.shading.kind] = mask
    return out


def cause_intervals(
    sources: Mapping[str, Any], grid: WindowGrid, run_start_ns: int, run_end_ns: int
) -> list[Interval]:
    """The spans where a registered cause's condition holds, from its source's series."""
    out = []
    for cause in causes.REGISTRY:
        shading = cause.shading
        series = sources.get(shading.source) if shading is not None else None
        if shading is None or series is None:
            continue
        mask = shading.windows(series)
        if mask is None:
            continue
        for first, stop in _runs(mask):
            lo, hi, lo_s, hi_s = _span(grid, run_start_ns, run_end_ns, first, stop)
            out.append(
                Interval(shading.kind, lo_s, hi_s, lo, hi, shading.label(series, first, stop))
            )
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
    found = cause_intervals({"gpu": gpu, "host": host}, grid, run_start_ns, run_end_ns)
    found += fault_intervals(events, run_start_ns, run_end_ns)
    return tuple(sorted(found, key=lambda i: (i.start_ns, i.kind, i.end_ns)))


__all__ = [
    "cause_intervals",
    "fault_intervals",
    "gpu_throttle_classes",
    "run_intervals",
]
