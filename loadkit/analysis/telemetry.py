"""Step 1 for each source: load counters, GPU, host, Triton statistics and request samples on the grid.

Every function takes a frame as the run reader gives it and returns numpy
arrays with one value per window (NaN where the source said nothing). A source
that is absent or lacks a field yields None for that series and a note; the
caller states "not assessable: no <source> data" for causes that need it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import pandas as pd

from loadkit.analysis.align import (
    NS,
    WindowGrid,
    counter_rate_on_grid,
    interval_rate_on_grid,
    interval_sum_on_grid,
    numeric,
    per_core_table,
    reduce_on_grid,
)
from loadkit.analysis.model import BatchSizeMatrix
from loadkit.rundir.schema import POWER_REASONS, REASON_COLUMNS, REASON_GPU_IDLE, THERMAL_REASONS

BUSY_CORE_PCT = 95.0
IDLE_CORE_PCT = 50.0


@dataclass
class LoadSeries:
    """Per-window load counters summed over processes and request names."""

    offered: np.ndarray
    ok: np.ndarray
    errors: np.ndarray
    dropped: np.ndarray
    in_flight: np.ndarray
    out_of_range: np.ndarray
    error_kinds: dict[str, int] = field(default_factory=dict)
    dispatch_lag_max_ms: np.ndarray | None = None  # worst arrival-scheduler lateness
    # Cores' worth of CPU the load generator's processes used (their mean per window,
    # summed): on the server's machine, work that is loadkit's own, not a neighbour's.
    generator_cpu_cores: np.ndarray | None = None
    # Failed requests per window by kind (`refused`, `queue_full`, ...): error episodes.
    error_kinds_per_window: dict[str, np.ndarray] = field(default_factory=dict)


def _per_process_level(
    frame: pd.DataFrame, grid: WindowGrid, t: np.ndarray, column: str, scale: float = 1.0
) -> np.ndarray | None:
    """A level (in flight, CPU): the mean per process in the window, summed over processes."""
    values = numeric(frame, column)
    if values is None:
        return None
    out = np.full(grid.n, np.nan)
    by_proc = frame.assign(_w=grid.index(t), _v=values * scale)
    by_proc = by_proc[(by_proc["_w"] >= 0) & by_proc["_v"].notna()]
    keys = ["_w", "process"] if "process" in by_proc.columns else ["_w"]
    levels = by_proc.groupby(keys)["_v"].mean().groupby(level=0).sum()
    out[levels.index.to_numpy(dtype=int)] = levels.to_numpy()
    return out


def align_load(frame: pd.DataFrame, grid: WindowGrid) -> LoadSeries | None:
    """Counts per window from `load/*.jsonl` (None when there are no load counters)."""
    if frame.empty or "t_ns" not in frame.columns:
        return None
    t = frame["t_ns"].to_numpy(dtype=np.int64)

    def total(column: str) -> np.ndarray:
        values = numeric(frame, column)
        if values is None:
            return np.full(grid.n, np.nan)
        return interval_sum_on_grid(grid, t, values)

    in_flight = _per_process_level(frame, grid, t, "in_flight")
    if in_flight is None:
        in_flight = np.full(grid.n, np.nan)
    kinds: dict[str, int] = {}
    per_window: dict[str, np.ndarray] = {}
    if "error_kinds" in frame.columns:
        windows = grid.index(t)
        for w, entry in zip(windows, frame["error_kinds"], strict=True):
            if isinstance(entry, dict):
                for kind, count in entry.items():
                    if isinstance(count, int | float):
                        kinds[str(kind)] = kinds.get(str(kind), 0) + int(count)
                        if w >= 0:
                            series = per_window.setdefault(str(kind), np.zeros(grid.n))
                            series[w] += count
    lag = numeric(frame, "dispatch_lag_max_ms")
    return LoadSeries(
        dispatch_lag_max_ms=reduce_on_grid(grid, t, lag, "max") if lag is not None else None,
        generator_cpu_cores=_per_process_level(frame, grid, t, "generator_cpu_pct", 0.01),
        offered=total("offered"),
        ok=total("ok"),
        errors=total("errors"),
        dropped=total("dropped"),
        in_flight=in_flight,
        out_of_range=total("out_of_range"),
        error_kinds=kinds,
        error_kinds_per_window=per_window,
    )


@dataclass
class GpuSeries:
    sm_clock_mhz: np.ndarray
    sm_clock_max_mhz: np.ndarray
    clock_ratio_busy: np.ndarray  # mean clock/max over samples not flagged idle
    temp_c: np.ndarray
    power_w: np.ndarray
    power_limit_w: np.ndarray
    util_pct: np.ndarray
    mem_used_bytes: np.ndarray
    mem_total_bytes: float | None
    thermal_reason: np.ndarray  # fraction of busy samples with a thermal bit
    power_reason: np.ndarray  # fraction of busy samples with a power-cap bit
    has_reasons: bool
    # The device's own slowdown temperature (NaN where not recorded); gpu_limits reads it.
    temp_slowdown_c: np.ndarray | None = None
    # Power / its limit per window, of the GPU whose clock is lowest (several GPUs: their
    # summed power and limit hide one capped GPU among idle ones). None: not recorded.
    power_of_limit: np.ndarray | None = None


def _reason_bits(frame: pd.DataFrame) -> np.ndarray | None:
    """The clocks-event bitmask per row, from `clocks_event_reasons` or the reason_* bools."""
    mask = numeric(frame, "clocks_event_reasons")
    if mask is not None:
        return np.nan_to_num(mask, nan=0).astype(np.int64)
    names = REASON_COLUMNS
    # a column NVML answered "not supported" for is all null: no bits read, not "no bit set"
    present = [n for n in names if n in frame.columns and frame[n].notna().any()]
    if not present:
        return None
    bits = np.zeros(len(frame), dtype=np.int64)
    for name in present:
        flag = frame[name].fillna(False).astype(bool).to_numpy()
        bits |= np.where(flag, names[name], 0)
    return bits


def _gpu_column_mean(frame: pd.DataFrame, grid: WindowGrid, column: str, how: str) -> np.ndarray:
    values = numeric(frame, column)
    if values is None:
        return np.full(grid.n, np.nan)
    return reduce_on_grid(grid, frame["t_ns"].to_numpy(dtype=np.int64), values, how)


def align_gpu(frame: pd.DataFrame, grid: WindowGrid) -> GpuSeries | None:
    """GPU gauges per window. With several GPUs: lowest clock ratio, hottest, summed power.

    Power against its limit is judged per GPU (`power_of_limit`: the GPU with the
    lowest clock), never on the sums.
    """
    if frame.empty or "t_ns" not in frame.columns:
        return None
    if "gpu" in frame.columns and frame["gpu"].nunique(dropna=True) > 1:
        frames = [g.reset_index(drop=True) for _, g in frame.groupby("gpu")]
    else:
        frames = [frame]
    per_gpu = [_align_one_gpu(f, grid) for f in frames]
    if len(per_gpu) == 1:
        return per_gpu[0]
    with np.errstate(all="ignore"):
        worst = np.nanargmin(
            np.nan_to_num(np.vstack([g.clock_ratio_busy for g in per_gpu]), nan=9), axis=0
        )

    def pick(name: str) -> np.ndarray:
        stack = np.vstack([getattr(g, name) for g in per_gpu])
        return stack[worst, np.arange(grid.n)]

    def nan_reduce(name: str, fn: str) -> np.ndarray:
        stack = np.vstack([getattr(g, name) for g in per_gpu])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows stay NaN
            return np.asarray(getattr(np, fn)(stack, axis=0), dtype=float)

    return GpuSeries(
        sm_clock_mhz=pick("sm_clock_mhz"),
        sm_clock_max_mhz=pick("sm_clock_max_mhz"),
        clock_ratio_busy=pick("clock_ratio_busy"),
        temp_c=nan_reduce("temp_c", "nanmax"),
        power_w=nan_reduce("power_w", "nansum"),
        power_limit_w=nan_reduce("power_limit_w", "nansum"),
        util_pct=nan_reduce("util_pct", "nanmean"),
        mem_used_bytes=nan_reduce("mem_used_bytes", "nanmax"),
        mem_total_bytes=per_gpu[0].mem_total_bytes,
        # why the clock fell is read on the GPU whose clock fell: a capped GPU beside it,
        # its clock holding, names nothing
        thermal_reason=pick("thermal_reason"),
        power_reason=pick("power_reason"),
        has_reasons=any(g.has_reasons for g in per_gpu),
        temp_slowdown_c=nan_reduce("temp_slowdown_c", "nanmin"),  # the first GPU to throttle
        power_of_limit=pick("power_of_limit"),
    )


def _align_one_gpu(frame: pd.DataFrame, grid: WindowGrid) -> GpuSeries:
    t = frame["t_ns"].to_numpy(dtype=np.int64)
    clock = numeric(frame, "sm_clock_mhz")
    clock_max = numeric(frame, "sm_clock_max_mhz")
    bits = _reason_bits(frame)
    idle = np.zeros(len(frame), dtype=bool)
    if bits is not None:
        idle = (bits & REASON_GPU_IDLE) != 0
    util = numeric(frame, "util_gpu_pct")
    if util is not None:
        idle |= np.nan_to_num(util, nan=100.0) < 1.0  # an idle GPU parks its clocks
    ratio = np.full(grid.n, np.nan)
    if clock is not None and clock_max is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.where(clock_max > 0, clock / clock_max, np.nan)
        r[idle] = np.nan
        ratio = reduce_on_grid(grid, t, r, "mean")
    thermal = np.full(grid.n, np.nan)
    power_r = np.full(grid.n, np.nan)
    if bits is not None:
        busy = ~idle
        th = np.where(busy, ((bits & THERMAL_REASONS) != 0).astype(float), np.nan)
        pw = np.where(busy, ((bits & POWER_REASONS) != 0).astype(float), np.nan)
        thermal = reduce_on_grid(grid, t, th, "mean")
        power_r = reduce_on_grid(grid, t, pw, "mean")
    mem_total = numeric(frame, "mem_total_bytes")
    power = _gpu_column_mean(frame, grid, "power_w", "mean")
    limit = _gpu_column_mean(frame, grid, "power_limit_w", "mean")
    with np.errstate(invalid="ignore", divide="ignore"):
        power_of_limit = np.where(limit > 0, power / limit, np.nan)
    return GpuSeries(
        sm_clock_mhz=_gpu_column_mean(frame, grid, "sm_clock_mhz", "mean"),
        sm_clock_max_mhz=_gpu_column_mean(frame, grid, "sm_clock_max_mhz", "max"),
        clock_ratio_busy=ratio,
        temp_c=_gpu_column_mean(frame, grid, "temp_c", "max"),
        power_w=power,
        power_limit_w=limit,
        util_pct=_gpu_column_mean(frame, grid, "util_gpu_pct", "mean"),
        mem_used_bytes=_gpu_column_mean(frame, grid, "mem_used_bytes", "max"),
        mem_total_bytes=float(np.nanmax(mem_total)) if mem_total is not None else None,
        thermal_reason=thermal,
        power_reason=power_r,
        has_reasons=bits is not None,
        temp_slowdown_c=_gpu_column_mean(frame, grid, "temp_slowdown_c", "min"),
        power_of_limit=power_of_limit,
    )


@dataclass
class HostSeries:
    cpu_core_max_pct: np.ndarray
    cpu_mean_pct: np.ndarray
    busy_core_frac: np.ndarray  # fraction of cores at >= 95 %
    idle_cores: np.ndarray  # cores under 50 %
    psi_some_avg10: np.ndarray
    cgroup_throttled_pct: np.ndarray
    cgroup_throttled_ms_per_s: np.ndarray
    server_rss_bytes: np.ndarray
    tcp_new_connections_per_s: np.ndarray
    server_new_connections_per_s: np.ndarray  # connections to the server's listening ports
    has_per_core: bool
    has_cgroup: bool
    has_tcp: bool
    has_server_tcp: bool
    counter_resets: int
    # Share of each window in which some task waited for a CPU (PSI cpu "some",
    # from the cumulative psi_cpu_some_total_us): contention, not just busy cores.
    cpu_contention: np.ndarray | None = None
    # The server's involuntary context switches per second of CPU it got: how often
    # the scheduler took a CPU from it. A server starved by other runnable work is
    # preempted more per CPU-second; a stopped one is not scheduled at all, so its
    # rate stays as usual (NaN where the server used no CPU or the data lack it).
    server_preemptions_per_cpu_s: np.ndarray | None = None
    # Milliseconds per second the server's threads were runnable but waited for a CPU
    # (the kernel's schedstat run delay, summed over threads): starvation itself. A
    # stopped server is not runnable and does not wait. None where not recorded.
    server_run_delay_ms_per_s: np.ndarray | None = None
    # Cores' worth of CPU the whole machine used, and the server's process tree of it:
    # the rest is other work's (a neighbour's, or loadkit's own on the same machine).
    cpu_cores_used: np.ndarray | None = None
    server_cpu_cores: np.ndarray | None = None


# The fields of each part of the host series (rundir.schema.SERIES_PARTS): `process` is one
# process tree and its cgroup (the server's with --server-pid, else loadkit's own), `None`
# the machine's cores, pressure and TCP opens. A part sampled elsewhere than the machine a
# reader wants is blanked (`host_without`): series NaN (or None), flags off.
HOST_PARTS: dict[str | None, tuple[str, ...]] = {
    None: (
        "cpu_core_max_pct",
        "cpu_mean_pct",
        "busy_core_frac",
        "idle_cores",
        "psi_some_avg10",
        "tcp_new_connections_per_s",
        "has_per_core",
        "has_tcp",
        "cpu_contention",
        "cpu_cores_used",
    ),
    "process": (
        "cgroup_throttled_pct",
        "cgroup_throttled_ms_per_s",
        "server_rss_bytes",
        "server_new_connections_per_s",
        "has_cgroup",
        "has_server_tcp",
        "server_preemptions_per_cpu_s",
        "server_run_delay_ms_per_s",
        "server_cpu_cores",
    ),
}


# Fields that are None where not recorded (readers test `is None`, not NaN).
_HOST_OPTIONAL = frozenset(f.name for f in fields(HostSeries) if f.default is None)


def host_without(host: HostSeries, part: str | None) -> HostSeries:
    """`host` without the fields of one part (`HOST_PARTS`; None: the machine's)."""
    blank: dict[str, Any] = {}
    for name in HOST_PARTS[part]:
        value = getattr(host, name)
        if isinstance(value, bool):
            blank[name] = False
        elif value is not None and name not in _HOST_OPTIONAL:
            blank[name] = np.full(len(value), np.nan)
        else:
            blank[name] = None
    return replace(host, **blank)


@dataclass(frozen=True)
class _CpuUse:
    """The machine's CPU per window: per core where recorded, else from its total."""

    core_max_pct: np.ndarray
    mean_pct: np.ndarray
    busy_core_frac: np.ndarray
    idle_cores: np.ndarray
    cores_used: np.ndarray | None
    has_per_core: bool


def _cpu_use(frame: pd.DataFrame, grid: WindowGrid, t: np.ndarray, nan: np.ndarray) -> _CpuUse:
    """Busiest, mean, busy and idle cores and cores used on the grid (`nan`: not recorded)."""
    core_max = core_mean = busy = idle = nan
    cores_used: np.ndarray | None = None
    has_per_core = "cpu_per_core_pct" in frame.columns
    if has_per_core:
        table, lengths = per_core_table(frame["cpu_per_core_pct"])
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # rows without cores stay NaN
            mx = np.nanmax(table, axis=1) if table.shape[1] else np.full(len(frame), np.nan)
            mean = np.nanmean(table, axis=1) if table.shape[1] else np.full(len(frame), np.nan)
            bf = np.sum(table >= BUSY_CORE_PCT, axis=1) / lengths
            ic = np.sum(table < IDLE_CORE_PCT, axis=1).astype(float)
        ok = ~np.isnan(mx)
        has_per_core = bool(ok.any())
        bf[~ok] = np.nan
        ic[~ok] = np.nan
        core_max = reduce_on_grid(grid, t, mx, "mean")
        core_mean = reduce_on_grid(grid, t, mean, "mean")
        used = np.where(ok, np.nansum(table, axis=1) / 100.0, np.nan)
        cores_used = reduce_on_grid(grid, t, used, "mean")
        busy = reduce_on_grid(grid, t, bf, "mean")
        idle = reduce_on_grid(grid, t, ic, "mean")
    total = numeric(frame, "cpu_pct")
    if total is not None and np.all(np.isnan(core_mean)):
        core_mean = reduce_on_grid(grid, t, total, "mean")
    count = numeric(frame, "cores")
    if cores_used is None and total is not None and count is not None:
        cores_used = reduce_on_grid(grid, t, total * count / 100.0, "mean")
    return _CpuUse(core_max, core_mean, busy, idle, cores_used, has_per_core)


@dataclass(frozen=True)
class _Throttling:
    """The server's cgroup throttling per window (None: not recorded) and its counter resets."""

    pct: np.ndarray | None  # throttled periods / periods, in %
    ms_per_s: np.ndarray | None
    resets: int
    has_cgroup: bool


def _cgroup_throttling(frame: pd.DataFrame, grid: WindowGrid, t: np.ndarray) -> _Throttling:
    """Throttled periods and time from the cgroup counters, restarted where the server moved."""
    periods = numeric(frame, "cgroup_nr_periods")
    throttled = numeric(frame, "cgroup_nr_throttled")
    throttled_ns = numeric(frame, "cgroup_throttled_ns")
    resets = 0
    throttled_pct = throttled_ms = None
    has_cgroup = periods is not None and throttled is not None
    # The server may be moved into another cgroup mid-run: its counters start over.
    moved = None
    if "cgroup_path" in frame.columns:
        path = frame["cgroup_path"].astype(str)
        moved = np.array(path != path.shift(), dtype=bool, copy=True)
        moved[0] = False
    if has_cgroup and periods is not None and throttled is not None:
        p_rate, r1 = counter_rate_on_grid(grid, t, periods, moved)
        th_rate, r2 = counter_rate_on_grid(grid, t, throttled, moved)
        resets += max(r1, r2)
        with np.errstate(invalid="ignore", divide="ignore"):
            throttled_pct = np.where(
                p_rate > 0, 100.0 * th_rate / p_rate, np.where(p_rate == 0, 0.0, np.nan)
            )
    if throttled_ns is not None:
        ns_rate, r3 = counter_rate_on_grid(grid, t, throttled_ns, moved)
        resets = max(resets, r3)
        throttled_ms = ns_rate / 1e6
    return _Throttling(throttled_pct, throttled_ms, resets, has_cgroup)


def align_host(frame: pd.DataFrame, grid: WindowGrid) -> HostSeries | None:
    if frame.empty or "t_ns" not in frame.columns:
        return None
    t = frame["t_ns"].to_numpy(dtype=np.int64)
    nan = np.full(grid.n, np.nan)
    cpu = _cpu_use(frame, grid, t, nan)
    psi = numeric(frame, "psi_cpu_some_avg10")
    psi_total = numeric(frame, "psi_cpu_some_total_us")
    contention = None
    if psi_total is not None:
        rate, _ = counter_rate_on_grid(grid, t, psi_total)
        contention = np.clip(rate / 1e6, 0.0, 1.0)
    cgroup = _cgroup_throttling(frame, grid, t)
    preemptions = _preemptions_per_cpu_s(frame, grid, t)
    run_delay = numeric(frame, "server_run_delay_ns")
    if run_delay is not None:
        delay_rate, _ = counter_rate_on_grid(grid, t, run_delay)
        run_delay = delay_rate / 1e6
    rss = numeric(frame, "server_rss_bytes")
    server_cpu = numeric(frame, "server_cpu_pct")
    tcp = numeric(frame, "tcp_new_connections")
    server_tcp = numeric(frame, "server_new_connections")
    interval_start = t - _sample_interval_ns(t)
    tcp_rate = (
        interval_sum_on_grid(grid, interval_start, tcp) / grid.window_s if tcp is not None else None
    )
    if tcp_rate is None:
        tcp_rate = _tcp_opens_rate(frame, grid, t)
    return HostSeries(
        cpu_core_max_pct=cpu.core_max_pct,
        cpu_mean_pct=cpu.mean_pct,
        busy_core_frac=cpu.busy_core_frac,
        idle_cores=cpu.idle_cores,
        psi_some_avg10=reduce_on_grid(grid, t, psi, "mean") if psi is not None else nan,
        cgroup_throttled_pct=cgroup.pct if cgroup.pct is not None else nan,
        cgroup_throttled_ms_per_s=cgroup.ms_per_s if cgroup.ms_per_s is not None else nan,
        server_rss_bytes=reduce_on_grid(grid, t, rss, "max") if rss is not None else nan,
        tcp_new_connections_per_s=tcp_rate if tcp_rate is not None else nan,
        server_new_connections_per_s=(
            interval_sum_on_grid(grid, interval_start, server_tcp) / grid.window_s
            if server_tcp is not None
            else nan
        ),
        has_per_core=cpu.has_per_core,
        has_cgroup=cgroup.has_cgroup,
        has_tcp=tcp_rate is not None,
        has_server_tcp=server_tcp is not None,
        counter_resets=cgroup.resets,
        cpu_contention=contention,
        server_preemptions_per_cpu_s=preemptions,
        server_run_delay_ms_per_s=run_delay,
        cpu_cores_used=cpu.cores_used,
        server_cpu_cores=(
            reduce_on_grid(grid, t, server_cpu / 100.0, "mean") if server_cpu is not None else None
        ),
    )


# Under this much CPU (share of a core) in a window, preemptions per CPU-second are noise.
MIN_SERVER_CPU_SHARE = 0.05


def _tcp_opens_rate(frame: pd.DataFrame, grid: WindowGrid, t: np.ndarray) -> np.ndarray | None:
    """New connections per second from the raw TCP open counters alone (a scraped or
    imported node-exporter has no per-interval `tcp_new_connections`)."""
    active = numeric(frame, "tcp_active_opens")
    passive = numeric(frame, "tcp_passive_opens")
    if active is None or passive is None:
        return None
    active_rate, _ = counter_rate_on_grid(grid, t, active)
    passive_rate, _ = counter_rate_on_grid(grid, t, passive)
    return active_rate + passive_rate


def _preemptions_per_cpu_s(
    frame: pd.DataFrame, grid: WindowGrid, t: np.ndarray
) -> np.ndarray | None:
    invol = numeric(frame, "server_ctx_invol")
    cpu = numeric(frame, "server_cpu_pct")
    if invol is None or cpu is None:
        return None
    rate, _ = counter_rate_on_grid(grid, t, invol)
    share = reduce_on_grid(grid, t, cpu, "mean") / 100.0
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(share >= MIN_SERVER_CPU_SHARE, rate / share, np.nan)


def _sample_interval_ns(t: np.ndarray) -> int:
    """Typical spacing of samples: a per-interval count at t describes [t - this, t)."""
    return int(np.median(np.diff(t))) if len(t) > 1 else 0


@dataclass
class TritonSeries:
    model: str | None
    executions_per_s: np.ndarray
    inferences_per_s: np.ndarray
    batch_size_mean: np.ndarray
    batch_size_max: np.ndarray
    batch_size_req_weighted: np.ndarray  # mean batch a request was in
    queue_ms_per_request: np.ndarray
    batch_compute_ms: np.ndarray  # compute of one execution (Triton charges each request the batch)
    compute_ms_per_request: np.ndarray  # amortized: batch compute / batch size
    batch_sizes: BatchSizeMatrix | None
    counter_resets: int
    # Triton's own time per request (success_ns / success_count) and its compute
    # (input + infer + output) per request; NaN where the counters are absent.
    request_ms_per_request: np.ndarray | None = None
    compute_total_ms: np.ndarray | None = None
    # compute_input + compute_output per request (Triton charges each request its batch's
    # copy time, like compute_infer): moving tensors to and from the device, apart from
    # the model's own compute. None where the statistics do not record them.
    data_movement_ms: np.ndarray | None = None
    # Every other model the server reported, by name: its activity per window. Models on
    # one server share its GPU (and, on CPU, the backend's threads): another model's burst
    # slows the analyzed one with nothing else changing (causes/model_contention.py).
    others: dict[str, ModelActivity] = field(default_factory=dict)


@dataclass
class ModelActivity:
    """One model's load on the server per window, from Triton's statistics."""

    inferences_per_s: np.ndarray
    executions_per_s: np.ndarray
    # Milliseconds of compute per second (its executions' compute_infer time, each batch
    # counted once): the share of the server's accelerator it held, x 1000.
    compute_ms_per_s: np.ndarray


def _pick_model(frame: pd.DataFrame, preferred: str | None) -> tuple[pd.DataFrame, str | None]:
    if "model" not in frame.columns:
        return frame, preferred
    models = frame["model"].dropna().unique().tolist()
    if not models:
        return frame, preferred
    if preferred in models:
        chosen = preferred
    else:  # the busiest model
        counts = frame.groupby("model").size()
        chosen = str(counts.idxmax())
    return frame[frame["model"] == chosen].reset_index(drop=True), chosen


def _model_activity(frame: pd.DataFrame, grid: WindowGrid) -> ModelActivity:
    """A model's requests, executions and busy time per second (its rows only)."""
    execs, _ = _triton_rate(frame, grid, "execution_count")
    infers, _ = _triton_rate(frame, grid, "inference_count")
    busy_ns, _ = _triton_rate(frame, grid, "batch_compute_infer_ns")
    if np.all(np.isnan(busy_ns)):  # Triton charges each request its batch: once per batch
        per_request_ns, _ = _triton_rate(frame, grid, "compute_infer_ns")
        with np.errstate(invalid="ignore", divide="ignore"):
            busy_ns = np.where(infers > 0, per_request_ns * execs / infers, 0.0)
    return ModelActivity(infers, execs, busy_ns / 1e6)


def other_models(
    frame: pd.DataFrame, grid: WindowGrid, chosen: str | None
) -> dict[str, ModelActivity]:
    """Every model but `chosen` that the server's statistics report, with its activity."""
    if "model" not in frame.columns or chosen is None:
        return {}
    out: dict[str, ModelActivity] = {}
    for name, rows in frame[frame["model"] != chosen].groupby("model"):
        out[str(name)] = _model_activity(rows.reset_index(drop=True), grid)
    return out


def _triton_rate(frame: pd.DataFrame, grid: WindowGrid, name: str) -> tuple[np.ndarray, int]:
    """Rate of a Triton counter: from raw cumulative values, else from `<name>_delta`.

    An interval row (`interval_ns` present) describes [t_ns, t_ns + interval_ns),
    so its cumulative value was read at the interval's end.
    """
    t = frame["t_ns"].to_numpy(dtype=np.int64)
    raw = numeric(frame, name)
    if raw is not None:
        interval = numeric(frame, "interval_ns")
        read_at = t + np.nan_to_num(interval, nan=0).astype(np.int64) if interval is not None else t
        return counter_rate_on_grid(grid, read_at, raw)
    delta = numeric(frame, f"{name}_delta")
    if delta is not None:
        return interval_rate_on_grid(grid, t, delta, numeric(frame, "interval_ns")), 0
    return np.full(grid.n, np.nan), 0


def align_triton(frame: pd.DataFrame, grid: WindowGrid, model: str | None) -> TritonSeries | None:
    if frame.empty or "t_ns" not in frame.columns:
        return None
    everything = frame
    frame, chosen = _pick_model(frame, model)
    execs, r1 = _triton_rate(frame, grid, "execution_count")
    infers, r2 = _triton_rate(frame, grid, "inference_count")
    queue_ns, r3 = _triton_rate(frame, grid, "queue_ns")
    compute_ns, r4 = _triton_rate(frame, grid, "compute_infer_ns")
    with np.errstate(invalid="ignore", divide="ignore"):
        batch_mean = np.where(execs > 0, infers / execs, np.nan)
        queue_ms = np.where(infers > 0, queue_ns / infers / 1e6, np.nan)
        batch_compute = np.where(infers > 0, compute_ns / infers / 1e6, np.nan)
    success_ns, _ = _triton_rate(frame, grid, "success_ns")
    success, _ = _triton_rate(frame, grid, "success_count")
    input_ns, _ = _triton_rate(frame, grid, "compute_input_ns")
    output_ns, _ = _triton_rate(frame, grid, "compute_output_ns")
    with np.errstate(invalid="ignore", divide="ignore"):
        request_ms = np.where(success > 0, success_ns / success / 1e6, np.nan)
        extra = np.nan_to_num(input_ns, nan=0.0) + np.nan_to_num(output_ns, nan=0.0)
        compute_total = np.where(infers > 0, (compute_ns + extra) / infers / 1e6, np.nan)
        recorded = not (np.all(np.isnan(input_ns)) and np.all(np.isnan(output_ns)))
        data_movement = np.where(infers > 0, extra / infers / 1e6, np.nan) if recorded else None
    matrix, batch_max, weighted = _batch_matrix(frame, grid)
    if np.all(np.isnan(batch_mean)) and matrix is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            sizes = np.array(matrix.sizes, dtype=float)
            counts = np.array(matrix.counts, dtype=float)
            batch_mean = np.where(counts.sum(1) > 0, counts @ sizes / counts.sum(1), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_req = np.where(weighted > 0, batch_compute / weighted, batch_compute / batch_mean)
    return TritonSeries(
        model=chosen,
        executions_per_s=execs,
        inferences_per_s=infers,
        batch_size_mean=batch_mean,
        batch_size_max=batch_max,
        batch_size_req_weighted=weighted,
        queue_ms_per_request=queue_ms,
        batch_compute_ms=batch_compute,
        compute_ms_per_request=per_req,
        batch_sizes=matrix,
        counter_resets=max(r1, r2, r3, r4),
        request_ms_per_request=request_ms,
        compute_total_ms=compute_total,
        data_movement_ms=data_movement,
        others=other_models(everything, grid, chosen),
    )


def _batch_matrix(
    frame: pd.DataFrame, grid: WindowGrid
) -> tuple[BatchSizeMatrix | None, np.ndarray, np.ndarray]:
    nan = np.full(grid.n, np.nan)
    if "batch_sizes" not in frame.columns:
        return None, nan, nan
    idx = grid.index(frame["t_ns"].to_numpy(dtype=np.int64))
    per_window: list[dict[int, int]] = [{} for _ in range(grid.n)]
    sizes: set[int] = set()
    seen = np.zeros(grid.n, dtype=bool)
    for w, entry in zip(idx, frame["batch_sizes"], strict=True):
        if w < 0 or not isinstance(entry, dict):
            continue
        seen[w] = True
        for size, count in entry.items():
            try:
                s, c = int(size), int(count)
            except (TypeError, ValueError):
                continue
            if c <= 0:
                continue
            sizes.add(s)
            per_window[w][s] = per_window[w].get(s, 0) + c
    if not seen.any():
        return None, nan, nan
    ordered = sorted(sizes)
    counts = tuple(tuple(per_window[w].get(s, 0) for s in ordered) for w in range(grid.n))
    bmax = np.array([max(d) if d else np.nan for d in per_window], dtype=float)
    weighted = np.full(grid.n, np.nan)
    for w, d in enumerate(per_window):
        items = sum(s * c for s, c in d.items())
        if items:
            weighted[w] = sum(s * s * c for s, c in d.items()) / items
    bmax[~seen] = np.nan
    return BatchSizeMatrix(tuple(ordered), counts), bmax, weighted


@dataclass
class RequestSampleSeries:
    new_connection_frac: np.ndarray  # fraction of sampled requests on a new connection
    first_request_ms: float | None  # median service time on a new connection
    reused_request_ms: float | None  # median service time on a reused connection
    samples: int
    # Median over new-connection requests of their service time / the median of
    # reused-connection requests sent within NEIGHBOUR_S of them: the cost of a
    # new connection against requests at the same moment (None: no such neighbours).
    first_vs_neighbours: float | None = None
    # Per window, from the rows' `request_bytes` (None: not recorded): the sampled
    # requests' mean size, and the slowest ones' (SLOW_QUANTILE) mean size.
    bytes_per_request: np.ndarray | None = None
    slow_request_bytes: np.ndarray | None = None


def align_request_samples(frame: pd.DataFrame, grid: WindowGrid) -> RequestSampleSeries | None:
    if frame.empty or "connection_new" not in frame.columns or "t_ns" not in frame.columns:
        return None
    new = frame["connection_new"].map(lambda v: 1.0 if v is True else 0.0 if v is False else np.nan)
    frac = reduce_on_grid(grid, frame["t_ns"].to_numpy(dtype=np.int64), new.to_numpy(dtype=float))
    sizes = request_sizes(frame, grid)
    first = reused = None
    sent = numeric(frame, "sent_ns")
    done = numeric(frame, "done_ns")
    if sent is not None and done is not None:
        service_ms = (done - sent) / 1e6
        flag = new.to_numpy(dtype=float)
        a = service_ms[(flag == 1.0) & ~np.isnan(service_ms)]
        b = service_ms[(flag == 0.0) & ~np.isnan(service_ms)]
        first = float(np.median(a)) if a.size else None
        reused = float(np.median(b)) if b.size else None
        neighbours = _first_vs_neighbours(sent, service_ms, new.to_numpy(dtype=float))
        return RequestSampleSeries(frac, first, reused, int(len(frame)), neighbours, *sizes)
    return RequestSampleSeries(frac, first, reused, int(len(frame)), None, *sizes)


# The slowest requests of a window: those at or above this quantile of its sampled
# corrected latencies (the tail that makes P99, with the `slowest` rows included).
SLOW_QUANTILE = 0.95


def request_sizes(
    frame: pd.DataFrame, grid: WindowGrid
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per window: the sampled requests' mean bytes, and the slowest ones' mean bytes.

    A tail made by a few large requests hides in every per-window mean of the
    server's time (Triton's compute_input is a mean); the requests themselves say
    whether the slow ones are the large ones.
    """
    size = numeric(frame, "request_bytes")
    done = numeric(frame, "done_ns")
    if size is None or done is None or np.all(np.isnan(size)):
        return None, None
    idx = grid.index(frame["t_ns"].to_numpy(dtype=np.int64))
    latency = done - frame["t_ns"].to_numpy(dtype=float)
    rows = pd.DataFrame({"w": idx, "size": size, "latency": latency})
    rows = rows[(rows["w"] >= 0) & rows["size"].notna() & rows["latency"].notna()]
    typical = np.full(grid.n, np.nan)
    slowest = np.full(grid.n, np.nan)
    if rows.empty:
        return typical, slowest
    mean = rows.groupby("w")["size"].mean()
    typical[mean.index.to_numpy()] = mean.to_numpy()
    cut = rows["w"].map(rows.groupby("w")["latency"].quantile(SLOW_QUANTILE))
    slow = rows[rows["latency"] >= cut].groupby("w")["size"].mean()
    slowest[slow.index.to_numpy()] = slow.to_numpy()
    return typical, slowest


NEIGHBOUR_S = 0.1
MAX_FIRST_REQUESTS = 2000


def _first_vs_neighbours(
    sent_ns: np.ndarray, service_ms: np.ndarray, new: np.ndarray
) -> float | None:
    """A new connection's request against reused-connection requests sent at the same moment.

    A client pool that grows while requests pile up opens its new connections
    exactly when latency is high: against the whole run those first requests
    look slow, against their neighbours they do not. Only a slower first
    request than its neighbours' is a cost of the connection itself.
    """
    ok = ~np.isnan(sent_ns) & ~np.isnan(service_ms)
    reused = ok & (new == 0.0)
    order = np.argsort(sent_ns[reused])
    rs, rv = sent_ns[reused][order], service_ms[reused][order]
    fs, fv = sent_ns[ok & (new == 1.0)], service_ms[ok & (new == 1.0)]
    if not rs.size or not fs.size:
        return None
    step = max(1, fs.size // MAX_FIRST_REQUESTS)  # bounded work on long runs
    fs, fv = fs[::step], fv[::step]
    lo = np.searchsorted(rs, fs - NEIGHBOUR_S * 1e9)
    hi = np.searchsorted(rs, fs + NEIGHBOUR_S * 1e9)
    ratios = []
    for a, b, v in zip(lo, hi, fv, strict=True):
        if b > a:
            ref = float(np.median(rv[a:b]))
            if ref > 0:
                ratios.append(v / ref)
    return float(np.median(ratios)) if ratios else None


def new_connections_per_s(
    host: HostSeries | None, samples: RequestSampleSeries | None, throughput_rps: np.ndarray
) -> tuple[np.ndarray | None, str]:
    """New connections per second per window, and where the number comes from.

    The request samples come first: they mark exactly which of this run's
    requests opened a connection (share x throughput). Then the host's count
    of connections to the server's own ports, and last the host-wide TCP
    opens, which count every process on the machine (on a shared host, other
    people's connections).
    """
    if samples is not None and np.any(~np.isnan(samples.new_connection_frac)):
        return samples.new_connection_frac * throughput_rps, "request samples"
    if host is not None and host.has_server_tcp:
        return host.server_new_connections_per_s, "connections to the server's ports"
    if host is not None and host.has_tcp:
        return host.tcp_new_connections_per_s, "host TCP opens (all processes)"
    return None, ""


def events_of(frame: pd.DataFrame, kind: str, names: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Events of one kind (optionally some names), sorted by time."""
    if frame.empty or "kind" not in frame.columns:
        return pd.DataFrame(columns=["t_ns", "kind", "name"])
    out = frame[frame["kind"] == kind]
    if names is not None and "name" in out.columns:
        out = out[out["name"].isin(names)]
    return out.sort_values("t_ns").reset_index(drop=True)


def seconds(ns: float) -> float:
    return ns / NS
