"""Values the report's figures need that are statistics, computed here so reporters only draw.

- `aligned_signal`: a finding's cause signal averaged over its episodes, aligned at
  each episode's start (with P99 aligned the same way, so a reader sees the cause lead);
- `batch_by_phase`: the batch-size histogram of the steady, burst and recovery phases;
- `cpu_per_core_windows`: per-core CPU busy as window means (the timeline's heatmap).

Throttle, cgroup and fault intervals are in `loadkit/analysis/intervals.py`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from loadkit.analysis.align import WindowGrid, per_core_table, reduce_on_grid
from loadkit.analysis.attribution import baseline_mask
from loadkit.analysis.causes import REGISTRY
from loadkit.analysis.intervals import run_intervals
from loadkit.analysis.model import (
    AlignedSignal,
    Analysis,
    BurstRecovery,
    Finding,
    PhaseBatchHistogram,
    Series,
    SpikeEpisode,
)
from loadkit.analysis.telemetry import GpuSeries, HostSeries
from loadkit.rundir import Run

# Offsets of the episode-aligned average, seconds from the episode start.
ALIGN_BEFORE_S = 10.0
ALIGN_AFTER_S = 20.0
# Spread band of the aligned average (percentiles over episodes), needs this many episodes.
BAND_PERCENTILES = (10.0, 90.0)
BAND_MIN_EPISODES = 3

# The signal that shows each cause (an attribute path on Analysis) and its axis label,
# from the cause registry.
CAUSE_SIGNALS: dict[str, tuple[str, str]] = {c.id: c.signal for c in REGISTRY if c.signal}


def _values(series: Series | None) -> np.ndarray | None:
    if series is None:
        return None
    return np.array([np.nan if v is None else float(v) for v in series], dtype=float)


def _read(analysis: Analysis, path: str) -> Series | None:
    value: object = analysis
    for part in path.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value  # type: ignore[return-value]


def _clean(values: np.ndarray) -> Series:
    return tuple(float(v) if math.isfinite(v) else None for v in values)


def _window_index(grid: WindowGrid, t_ns: int) -> int:
    return int((t_ns - grid.start_ns) // grid.window_ns)


def align_on_episodes(
    values: np.ndarray, starts: Sequence[int], grid: WindowGrid
) -> tuple[tuple[float, ...], np.ndarray, np.ndarray, np.ndarray]:
    """Offsets (s) and the mean, low and high of `values` at each offset from the episode starts.

    `starts` are window indices. An offset outside the run, or a missing value,
    leaves that episode out at that offset; low/high need BAND_MIN_EPISODES values.
    """
    before = int(math.ceil(ALIGN_BEFORE_S / grid.window_s - 1e-9))
    after = int(math.ceil(ALIGN_AFTER_S / grid.window_s - 1e-9))
    ks = range(-before, after + 1)
    mean = np.full(len(ks), np.nan)
    low = np.full(len(ks), np.nan)
    high = np.full(len(ks), np.nan)
    for j, k in enumerate(ks):
        at = [values[i + k] for i in starts if 0 <= i + k < len(values)]
        got = np.array([v for v in at if math.isfinite(v)], dtype=float)
        if got.size:
            mean[j] = float(got.mean())
        if got.size >= BAND_MIN_EPISODES:
            low[j], high[j] = (float(x) for x in np.percentile(got, BAND_PERCENTILES))
    offsets = tuple(round(k * grid.window_s, 6) for k in ks)
    return offsets, mean, low, high


def aligned_signal(analysis: Analysis, finding: Finding, grid: WindowGrid) -> AlignedSignal | None:
    """The finding's cause signal around the episodes it explains (None: no signal or episodes).

    A standing condition (no episodes of its own) is shown around all episodes of
    the percentile findings are tested against, and says so in `anchor`.
    """
    spec = CAUSE_SIGNALS.get(finding.cause)
    if spec is None:
        return None
    path, label = spec
    values = _values(_read(analysis, path))
    if values is None or len(values) != grid.n or not np.isfinite(values).any():
        return None
    by_id = {e.episode_id: e for e in analysis.episodes}
    episodes: list[SpikeEpisode] = [by_id[i] for i in finding.episodes if i in by_id]
    anchor = "start of the episodes this finding explains"
    if not episodes:
        episodes = list(analysis.primary_episodes())
        if not episodes:
            return None
        primary = episodes[0].percentile
        anchor = f"start of every {primary.upper()} episode (standing condition)"
    starts = [_window_index(grid, e.start_ns) for e in episodes]
    offsets, mean, low, high = align_on_episodes(values, starts, grid)
    if not np.isfinite(mean).any():
        return None
    base_mask = baseline_mask(grid.n, analysis.episodes, grid.starts_ns)
    base_values = values[base_mask & np.isfinite(values)]
    p99 = _values(analysis.windows.corrected.p99_ms)
    p99_mean = align_on_episodes(p99, starts, grid)[1] if p99 is not None else None
    return AlignedSignal(
        signal=path,
        label=label,
        offsets_s=offsets,
        mean=_clean(mean),
        low=_clean(low) if np.isfinite(low).any() else None,
        high=_clean(high) if np.isfinite(high).any() else None,
        baseline=float(np.median(base_values)) if base_values.size else None,
        p99_ms=_clean(p99_mean) if p99_mean is not None else None,
        episodes_used=len(episodes),
        anchor=anchor,
    )


def with_aligned_signals(analysis: Analysis, grid: WindowGrid) -> tuple[Finding, ...]:
    """Every finding with its `aligned` signal filled in (where it has one)."""
    return tuple(replace(f, aligned=aligned_signal(analysis, f, grid)) for f in analysis.findings)


# --- batch sizes per phase ---------------------------------------------------------


def phase_masks(
    grid: WindowGrid, recoveries: Sequence[BurstRecovery], warmup_end_ns: int
) -> dict[str, np.ndarray]:
    """Windows of each phase: burst (burst start..end), recovery, steady (the rest after warm-up).

    Recovery runs from the burst's end to when P99 settled (`recovered_at_ns`), or,
    when it never settled, to the next burst or the end of the run. A window
    belongs to the phase its start falls in; a burst wins over a recovery.
    """
    starts = grid.starts_ns
    burst = np.zeros(grid.n, dtype=bool)
    recovery = np.zeros(grid.n, dtype=bool)
    ordered = sorted(recoveries, key=lambda r: r.burst_start_ns)
    for j, rec in enumerate(ordered):
        end = rec.burst_end_ns if rec.burst_end_ns is not None else grid.end_ns
        burst |= (starts >= rec.burst_start_ns) & (starts < end)
        if rec.burst_end_ns is None:
            continue
        if rec.recovered and rec.recovered_at_ns is not None:
            settled = rec.recovered_at_ns
        else:
            settled = ordered[j + 1].burst_start_ns if j + 1 < len(ordered) else grid.end_ns
        recovery |= (starts >= rec.burst_end_ns) & (starts < settled)
    recovery &= ~burst
    steady = ~burst & ~recovery & (starts >= warmup_end_ns)
    return {"steady": steady, "burst": burst, "recovery": recovery}


def batch_by_phase(
    analysis: Analysis, grid: WindowGrid, warmup_end_ns: int
) -> tuple[PhaseBatchHistogram, ...]:
    """Executions per batch size summed over each phase's windows (phases without any left out)."""
    matrix = analysis.telemetry.batch_sizes
    if matrix is None or not matrix.sizes or len(matrix.counts) != grid.n:
        return ()
    counts = np.array(matrix.counts, dtype=np.int64).reshape(grid.n, len(matrix.sizes))
    sizes = np.array(matrix.sizes, dtype=float)
    out = []
    for phase, mask in phase_masks(grid, analysis.recoveries, warmup_end_ns).items():
        executions = counts[mask].sum(axis=0)
        total = int(executions.sum())
        if total == 0:
            continue
        out.append(
            PhaseBatchHistogram(
                phase=phase,
                sizes=tuple(matrix.sizes),
                executions=tuple(int(x) for x in executions),
                share=tuple(float(x) / total for x in executions),
                mean_batch_size=float(executions @ sizes) / total,
                windows=int(mask.sum()),
            )
        )
    return tuple(out)


# --- CPU per core ------------------------------------------------------------------


def cpu_per_core_windows(frame: pd.DataFrame, grid: WindowGrid) -> tuple[Series, ...] | None:
    """Window mean of each core's busy % (outer: core, inner: window), to 0.1 %.

    Rows with fewer cores than the widest row (a core went offline) leave the
    missing cores out of that sample. None when host.jsonl has no per-core lists.
    """
    if frame.empty or "t_ns" not in frame.columns or "cpu_per_core_pct" not in frame.columns:
        return None
    table, _ = per_core_table(frame["cpu_per_core_pct"])
    cores = table.shape[1]
    if cores == 0:
        return None
    if not np.isfinite(table).any():
        return None
    t = frame["t_ns"].to_numpy(dtype=np.int64)
    out = []
    for j in range(cores):
        means = np.round(reduce_on_grid(grid, t, table[:, j], "mean"), 1)
        out.append(_clean(means))
    return tuple(out)


def with_figure_values(
    analysis: Analysis,
    grid: WindowGrid,
    run: Run,
    gpu: GpuSeries | None,
    host: HostSeries | None,
    warmup_end_ns: int,
) -> Analysis:
    """The analysis with the values its figures need: per-core CPU, aligned signals, phases, spans."""
    per_core = cpu_per_core_windows(run.series("host"), grid) if run.has_series("host") else None
    analysis = replace(analysis, telemetry=replace(analysis.telemetry, cpu_per_core_pct=per_core))
    start = analysis.run.start_ns if analysis.run.start_ns is not None else grid.start_ns
    end = analysis.run.end_ns if analysis.run.end_ns is not None else grid.end_ns
    return replace(
        analysis,
        findings=with_aligned_signals(analysis, grid),
        batch_by_phase=batch_by_phase(analysis, grid, warmup_end_ns),
        intervals=run_intervals(grid, start, end, gpu, host, run.events),
    )


__all__ = [
    "CAUSE_SIGNALS",
    "align_on_episodes",
    "aligned_signal",
    "batch_by_phase",
    "cpu_per_core_windows",
    "phase_masks",
    "with_aligned_signals",
    "with_figure_values",
]
