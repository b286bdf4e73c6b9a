"""Attribution: which causes' signatures hold during spike episodes and not in baseline windows.

Each cause has one function returning a `Signature`: per window, does the
cause's signature hold (True/False, NaN = not measurable), a metric whose
episode-vs-baseline effect size is reported, and the evidence numbers. The
shared statistics (`score`) are the same for all causes:

- coincidence: share of episodes where the signature holds in some window
  of the episode or of the LEAD_WINDOWS before it (a cause can lead);
- baseline rate: share of baseline windows (outside every episode, with a
  margin) where it holds; lift = coincidence / baseline rate;
- Fisher's exact test (one-sided) of episodes against baseline windows;
- Cliff's delta of the metric, episode windows against baseline windows;
- lag: median of (first window where it holds - episode start), seconds.

Queue time and latency are symptoms and never a cause; they appear only as
evidence (e.g. "queue time far above the batching window").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from loadkit.analysis.model import (
    CAUSE_ARRIVAL_BURST,
    CAUSE_BATCHING_WINDOW,
    CAUSE_CGROUP_THROTTLING,
    CAUSE_CONNECTION_CHURN,
    CAUSE_CPU_SATURATION,
    CAUSE_GPU_CLOCK_OTHER,
    CAUSE_GPU_POWER,
    CAUSE_GPU_THERMAL,
    CAUSE_PROCESS_STALL,
    CauseCheck,
    Evidence,
    Finding,
    SpikeEpisode,
)
from loadkit.analysis.telemetry import (
    GpuSeries,
    HostSeries,
    RequestSampleSeries,
    TritonSeries,
    new_connections_per_s,
)

LEAD_WINDOWS = 2
BASELINE_MARGIN_WINDOWS = 2
CLOCK_DROP_RATIO = 0.80  # busy SM clock under 80 % of max
REASON_SHARE = 0.5  # share of busy samples with the reason bit
POWER_AT_LIMIT = 0.97
BUSY_CORES_SHARE = 0.75  # share of cores at >= 95 %
CGROUP_THROTTLED_PCT = 10.0
CHURN_NEW_CONN_SHARE = 0.05
CHURN_MIN_PER_S = 5.0
STALL_THROUGHPUT_SHARE = 0.1
# A window completing under half its arrivals is part of a stop's onset, not its "before".
STALL_ONSET_SHARE = 0.5
BATCH_PINNED_SHARE = 0.8
# Arrivals 25 % over their baseline: beyond the Poisson noise of a 1 s window
# at >= 100 requests (about 10 %), well under any burst worth the name.
BURST_ARRIVALS_RISE = 1.25
QUEUE_SHARE_OF_LATENCY = 0.4
QUEUE_NEAR_WINDOW = 1.5  # queue wait up to 1.5x max_queue_delay (+1 ms) counts as the window's
FIRST_REQUEST_SLOWDOWN = 1.2  # churn needs the first request on a connection this much slower
# Half the requests or more open a connection, run-long: keep-alive is off (a
# standing condition), not reconnect bursts, which touch a few % of requests.
RUN_LEVEL_CHURN_SHARE = 0.5

TITLES = {
    CAUSE_ARRIVAL_BURST: "Arrival burst beyond capacity",
    CAUSE_BATCHING_WINDOW: "Batching window too long for the load",
    CAUSE_GPU_THERMAL: "GPU thermal throttling",
    CAUSE_GPU_POWER: "GPU power-cap throttling",
    CAUSE_GPU_CLOCK_OTHER: "GPU clock drop (no thermal or power reason)",
    CAUSE_CPU_SATURATION: "CPU saturation",
    CAUSE_CGROUP_THROTTLING: "Container CPU quota throttling",
    CAUSE_CONNECTION_CHURN: "Connection churn",
    CAUSE_PROCESS_STALL: "Process stall",
}

ACTIONS = {
    CAUSE_ARRIVAL_BURST: "Add capacity ahead of bursts (more model instances or GPUs, "
    "autoscaling on queue time), or shed load with a bounded max_queue_size and timeouts.",
    CAUSE_BATCHING_WINDOW: "Lower dynamic_batching.max_queue_delay_microseconds "
    "(at this load batches never fill, so the wait buys no throughput), or set preferred_batch_size.",
    CAUSE_GPU_THERMAL: "Check cooling (airflow, fans, inlet temperature); lock SM clocks to a "
    "sustainable frequency (nvidia-smi -lgc) so the GPU stops oscillating between boost and throttle.",
    CAUSE_GPU_POWER: "Review the power limit (nvidia-smi -q -d POWER; -pl) or lock clocks a step "
    "lower for steady latency.",
    CAUSE_GPU_CLOCK_OTHER: "Check application clocks and clock locks (nvidia-smi -q -d CLOCK), "
    "and whether another process or policy lowers clocks.",
    CAUSE_CPU_SATURATION: "Give the server and the load generator more CPU: move load generation "
    "to other hosts, stop co-located jobs, pin Triton to dedicated cores.",
    CAUSE_CGROUP_THROTTLING: "Raise the container CPU quota (cpu.cfs_quota_us / Kubernetes "
    "limits.cpu) or drop the CPU limit: the server uses up its quota.",
    CAUSE_CONNECTION_CHURN: "Reuse connections: one long-lived gRPC channel or keep-alive HTTP "
    "client per worker; check load-balancer and server idle timeouts.",
    CAUSE_PROCESS_STALL: "Look for what stops the process: GC pauses, swapping or page faults, "
    "container freeze/checkpoint, debugger or SIGSTOP; check dmesg and node pressure.",
}


@dataclass
class Signals:
    """Everything attribution reads, aligned on the analysis grid (NaN = unknown)."""

    window_s: float
    starts_ns: np.ndarray
    p99_ms: np.ndarray
    service_p50_ms: np.ndarray
    completed: np.ndarray  # completions per window (ok + errors), from load counters or histograms
    offered_rps: np.ndarray
    throughput_rps: np.ndarray
    in_flight: np.ndarray
    gpu: GpuSeries | None
    host: HostSeries | None
    triton: TritonSeries | None
    samples: RequestSampleSeries | None
    max_batch_size: int | None
    max_queue_delay_ms: float | None
    burst_mask: np.ndarray  # windows inside a declared burst phase

    @property
    def n(self) -> int:
        return len(self.starts_ns)


@dataclass
class Signature:
    """A cause's signature per window, or why it cannot be assessed."""

    cause: str
    holds: np.ndarray | None  # float: 1 holds, 0 does not, NaN unknown
    metric: np.ndarray | None  # larger = more of the cause
    evidence: Callable[[np.ndarray, np.ndarray], list[Evidence]] | None = None
    not_assessable: str | None = None
    run_level: bool = False  # a standing condition, not an episode cause
    notes: list[str] = field(default_factory=list)


def _na(cause: str, why: str) -> Signature:
    return Signature(cause, None, None, not_assessable=why)


def _flag(cond: np.ndarray, *known: np.ndarray) -> np.ndarray:
    out = cond.astype(float)
    for k in known:
        out[np.isnan(k)] = np.nan
    return out


def _mean(values: np.ndarray, mask: np.ndarray) -> float | None:
    sel = values[mask]
    sel = sel[~np.isnan(sel)]
    return float(sel.mean()) if sel.size else None


def _median(values: np.ndarray, mask: np.ndarray) -> float | None:
    sel = values[mask]
    sel = sel[~np.isnan(sel)]
    return float(np.median(sel)) if sel.size else None


def _max(values: np.ndarray, mask: np.ndarray) -> float | None:
    sel = values[mask]
    sel = sel[~np.isnan(sel)]
    return float(sel.max()) if sel.size else None


def expected_batch_compute(sig: Signals, baseline: np.ndarray) -> np.ndarray | None:
    """Batch compute time predicted from batch size by a Theil-Sen fit on baseline windows."""
    tr = sig.triton
    if tr is None:
        return None
    x, y = tr.batch_size_req_weighted, tr.batch_compute_ms
    if np.all(np.isnan(x)):
        x = tr.batch_size_mean
    ok = baseline & ~np.isnan(x) & ~np.isnan(y)
    if ok.sum() < 3:
        return None
    if np.ptp(x[ok]) < 0.2:  # one batch size only: no slope to fit
        return np.full(sig.n, float(np.median(y[ok])))
    slope, intercept, _, _ = stats.theilslopes(y[ok], x[ok])
    slope = max(0.0, float(slope))
    intercept = float(np.median(y[ok] - slope * x[ok]))
    return intercept + slope * np.where(np.isnan(x), np.nanmedian(x[ok]), x)


def compute_inflation(sig: Signals, baseline: np.ndarray) -> np.ndarray | None:
    """Observed / expected compute per batch (1.0 = as fast as in baseline windows)."""
    expected = expected_batch_compute(sig, baseline)
    if expected is None or sig.triton is None:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(expected > 0, sig.triton.batch_compute_ms / expected, np.nan)


def service_capacity_rps(sig: Signals, baseline: np.ndarray) -> np.ndarray | None:
    """Requests/s one instance can serve at max batch, slowed by each window's compute inflation."""
    tr = sig.triton
    if tr is None or not sig.max_batch_size:
        return None
    x = tr.batch_size_req_weighted
    y = tr.batch_compute_ms
    ok = baseline & ~np.isnan(x) & ~np.isnan(y)
    if ok.sum() < 3:
        return None
    b = float(sig.max_batch_size)
    if np.ptp(x[ok]) >= 0.2:
        slope, _, _, _ = stats.theilslopes(y[ok], x[ok])
        slope = max(0.0, float(slope))
        intercept = float(np.median(y[ok] - slope * x[ok]))
        at_max = intercept + slope * b
    else:
        at_max = float(np.median(y[ok]))  # unknown slope: optimistic, compute does not grow
    infl = compute_inflation(sig, baseline)
    factor = (
        np.ones(sig.n) if infl is None else np.where(np.isnan(infl), 1.0, np.maximum(infl, 1.0))
    )
    return b / (at_max * factor) * 1000.0


# --- one function per cause -----------------------------------------------------------


def gpu_clock_signatures(sig: Signals, baseline: np.ndarray) -> list[Signature]:
    """Busy SM clock under 80 % of max; thermal / power / other by reason bits and readings."""
    causes = (CAUSE_GPU_THERMAL, CAUSE_GPU_POWER, CAUSE_GPU_CLOCK_OTHER)
    gpu = sig.gpu
    if gpu is None:
        return [_na(c, "not assessable: no gpu data") for c in causes]
    ratio = gpu.clock_ratio_busy
    if np.all(np.isnan(ratio)):
        return [
            _na(c, "not assessable: gpu data has no sm_clock_mhz/sm_clock_max_mhz") for c in causes
        ]
    drop = np.nan_to_num(ratio, nan=1.0) < CLOCK_DROP_RATIO
    thermal = np.nan_to_num(gpu.thermal_reason, nan=0.0) >= REASON_SHARE
    power = np.nan_to_num(gpu.power_reason, nan=0.0) >= REASON_SHARE
    if not gpu.has_reasons:  # no reason bits: fall back to readings
        thermal = np.nan_to_num(gpu.temp_c, nan=0.0) >= 85.0
        with np.errstate(invalid="ignore", divide="ignore"):
            power = np.nan_to_num(gpu.power_w / gpu.power_limit_w, nan=0.0) >= POWER_AT_LIMIT
    kinds = {
        CAUSE_GPU_THERMAL: drop & thermal,
        CAUSE_GPU_POWER: drop & power & ~thermal,
        CAUSE_GPU_CLOCK_OTHER: drop & ~thermal & ~power,
    }
    inflation = compute_inflation(sig, baseline)
    metric = 1.0 - ratio

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        clock_ep = _mean(gpu.sm_clock_mhz, ep & drop)
        clock_max = _max(gpu.sm_clock_max_mhz, ep | base)
        r = _mean(ratio, ep & drop)
        out = [
            Evidence("sm_clock_in_episodes", clock_ep, "MHz", "mean while busy"),
            Evidence("sm_clock_baseline", _mean(gpu.sm_clock_mhz, base), "MHz"),
            Evidence("sm_clock_max", clock_max, "MHz"),
            Evidence("clock_ratio_in_episodes", r, "x max"),
            Evidence(
                "compute_inflation_predicted", 1.0 / r if r else None, "x", "max / current clock"
            ),
        ]
        if inflation is not None:
            out.append(
                Evidence(
                    "compute_inflation_observed",
                    _median(inflation, ep & drop),
                    "x",
                    "Triton compute per batch vs baseline at the same batch size",
                )
            )
        out += [
            Evidence("temp_max_in_episodes", _max(gpu.temp_c, ep), "°C"),
            Evidence("temp_baseline", _median(gpu.temp_c, base), "°C"),
            Evidence("thermal_reason_share", _mean(gpu.thermal_reason, ep & drop), "of samples"),
            Evidence("power_in_episodes", _mean(gpu.power_w, ep & drop), "W"),
            Evidence("power_limit", _max(gpu.power_limit_w, ep | base), "W"),
            Evidence("power_cap_reason_share", _mean(gpu.power_reason, ep & drop), "of samples"),
        ]
        return out

    return [Signature(cause, _flag(kinds[cause], ratio), metric, evidence) for cause in causes]


def arrival_burst_signature(sig: Signals, baseline: np.ndarray) -> Signature:
    """Arrivals above the measured service rate, batches pinned at max, compute per batch unchanged."""
    cause = CAUSE_ARRIVAL_BURST
    if np.all(np.isnan(sig.offered_rps)):
        return _na(cause, "not assessable: no load counters (offered rate)")
    capacity = service_capacity_rps(sig, baseline)
    tr = sig.triton
    inflation = compute_inflation(sig, baseline)
    if capacity is not None and tr is not None:
        unchanged = np.nan_to_num(inflation, nan=1.0) < 1.25 if inflation is not None else True
        nominal = capacity * (np.nan_to_num(inflation, nan=1.0) if inflation is not None else 1.0)
        over = sig.offered_rps > 1.0 * np.maximum(nominal, 1e-9)
        pinned = np.nan_to_num(tr.batch_size_mean, nan=0.0) >= BATCH_PINNED_SHARE * float(
            sig.max_batch_size or 1
        )
        # A burst is arrivals rising: at the usual arrival rate, full batches and
        # a capacity "exceeded" are a backlog draining after a stall or a slow
        # spell (whose Triton statistics also charge the stopped time as compute).
        offered_base = _median(sig.offered_rps, baseline)
        arrivals_up = (
            np.nan_to_num(sig.offered_rps, nan=0.0) >= BURST_ARRIVALS_RISE * offered_base
            if offered_base
            else np.ones(sig.n, dtype=bool)
        )
        holds = _flag(
            (over | pinned) & unchanged & arrivals_up & (sig.offered_rps > 0), sig.offered_rps
        )
        with np.errstate(invalid="ignore", divide="ignore"):
            metric = sig.offered_rps / nominal
    else:
        # No batch statistics: arrivals outrunning completions while work piles up.
        with np.errstate(invalid="ignore", divide="ignore"):
            metric = sig.offered_rps / sig.throughput_rps
        growing = np.diff(sig.in_flight, prepend=np.nan) > 0
        holds = _flag((metric > 1.05) & growing, sig.offered_rps, sig.throughput_rps)
        nominal = None

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        out = [
            Evidence("offered_in_episodes", _max(sig.offered_rps, ep), "req/s", "peak window"),
            Evidence("offered_baseline", _median(sig.offered_rps, base), "req/s"),
            Evidence("throughput_in_episodes", _mean(sig.throughput_rps, ep), "req/s"),
        ]
        if nominal is not None:
            out.append(
                Evidence(
                    "service_capacity",
                    _median(capacity, base) if capacity is not None else None,
                    "req/s",
                    "max batch / compute at max batch (Triton statistics)",
                )
            )
        if tr is not None:
            out += [
                Evidence("batch_size_in_episodes", _mean(tr.batch_size_mean, ep), "requests"),
                Evidence("batch_size_baseline", _median(tr.batch_size_mean, base), "requests"),
                Evidence("max_batch_size", float(sig.max_batch_size or 0) or None, "requests"),
                Evidence("queue_in_episodes", _max(tr.queue_ms_per_request, ep), "ms/request"),
                Evidence("max_queue_delay", sig.max_queue_delay_ms, "ms"),
            ]
        if inflation is not None:
            out.append(Evidence("compute_inflation", _median(inflation, ep), "x"))
        return out

    return Signature(cause, holds, metric, evidence)


def batching_window_signature(sig: Signals, baseline: np.ndarray) -> Signature:
    """Requests wait about max_queue_delay in small batches at low load: latency for no throughput."""
    cause = CAUSE_BATCHING_WINDOW
    tr = sig.triton
    if tr is None:
        return _na(cause, "not assessable: no triton_stats data")
    if sig.max_queue_delay_ms is None or not sig.max_batch_size:
        return _na(cause, "not assessable: no model config (max_queue_delay) in the manifest")
    if sig.max_queue_delay_ms <= 0:
        return _na(cause, "not assessable: max_queue_delay is 0 (no batching window)")
    delay = sig.max_queue_delay_ms
    small = tr.batch_size_mean <= max(2.0, 0.25 * sig.max_batch_size)
    # The wait is near the window and a large share of what a request experiences.
    # Far above the window is queueing behind slow or saturated compute, which
    # other causes explain; the window's own cost is a wait *near* it.
    waits = (
        (tr.queue_ms_per_request >= 0.5 * delay)
        & (tr.queue_ms_per_request <= QUEUE_NEAR_WINDOW * delay + 1.0)
        & (tr.queue_ms_per_request >= QUEUE_SHARE_OF_LATENCY * sig.service_p50_ms)
    )
    capacity = service_capacity_rps(sig, np.ones(sig.n, dtype=bool))
    low_load = (
        sig.offered_rps < 0.5 * capacity if capacity is not None else np.ones(sig.n, dtype=bool)
    )
    holds = _flag(small & waits & low_load, tr.batch_size_mean, tr.queue_ms_per_request)
    with np.errstate(invalid="ignore", divide="ignore"):
        metric = tr.queue_ms_per_request / delay

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        scope = ep if ep.any() else base
        queue = _median(tr.queue_ms_per_request, scope)
        p50 = _median(sig.service_p50_ms, scope)
        return [
            Evidence("max_queue_delay", delay, "ms", "model config"),
            Evidence("queue_time", queue, "ms/request", "median over windows"),
            Evidence("batch_size_mean", _median(tr.batch_size_mean, scope), "requests"),
            Evidence("max_batch_size", float(sig.max_batch_size or 0), "requests"),
            Evidence("offered", _median(sig.offered_rps, scope), "req/s"),
            Evidence(
                "service_capacity",
                _median(capacity, scope) if capacity is not None else None,
                "req/s",
            ),
            Evidence(
                "queue_share_of_p50",
                queue / p50 if queue is not None and p50 else None,
                "of median latency",
            ),
        ]

    return Signature(cause, holds, metric, evidence, run_level=True)


def cpu_saturation_signature(sig: Signals, baseline: np.ndarray) -> Signature:
    """Most cores at >= 95 % while Triton's queue stays normal (the time goes outside the server)."""
    cause = CAUSE_CPU_SATURATION
    host = sig.host
    if host is None:
        return _na(cause, "not assessable: no host data")
    if not host.has_per_core and np.all(np.isnan(host.cpu_mean_pct)):
        return _na(cause, "not assessable: host data has no cpu_per_core_pct")
    busy = host.busy_core_frac if host.has_per_core else (host.cpu_mean_pct >= 95.0).astype(float)
    cond = np.nan_to_num(busy, nan=0.0) >= BUSY_CORES_SHARE
    client_minus_server = None
    if sig.triton is not None:
        q = sig.triton.queue_ms_per_request
        q_base = _median(q, baseline)
        if q_base is not None:
            cond &= np.nan_to_num(q, nan=0.0) <= max(2.0 * q_base, q_base + 1.0)
        client_minus_server = sig.service_p50_ms - (q + sig.triton.batch_compute_ms)
    if host.has_cgroup:
        # The server used up its own CPU quota: it waited for its cgroup, not for
        # the host's busy cores (cgroup_throttling explains those windows).
        cond &= np.nan_to_num(host.cgroup_throttled_pct, nan=0.0) < CGROUP_THROTTLED_PCT
    holds = _flag(cond, busy)

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        out = [
            Evidence("cores_at_95pct_in_episodes", _mean(busy, ep), "share of cores"),
            Evidence("cores_at_95pct_baseline", _median(busy, base), "share of cores"),
            Evidence("psi_cpu_some_in_episodes", _max(host.psi_some_avg10, ep), "%"),
            Evidence("psi_cpu_some_baseline", _median(host.psi_some_avg10, base), "%"),
        ]
        if client_minus_server is not None and sig.triton is not None:
            out += [
                Evidence(
                    "client_minus_server_in_episodes",
                    _median(client_minus_server, ep),
                    "ms",
                    "median service latency minus Triton queue + compute",
                ),
                Evidence("client_minus_server_baseline", _median(client_minus_server, base), "ms"),
                Evidence("queue_in_episodes", _median(sig.triton.queue_ms_per_request, ep), "ms"),
                Evidence("queue_baseline", _median(sig.triton.queue_ms_per_request, base), "ms"),
            ]
        return out

    return Signature(cause, holds, busy, evidence)


def cgroup_throttling_signature(sig: Signals, baseline: np.ndarray) -> Signature:
    """CFS throttled periods rising: the server's cgroup uses up its CPU quota."""
    cause = CAUSE_CGROUP_THROTTLING
    host = sig.host
    if host is None:
        return _na(cause, "not assessable: no host data")
    if not host.has_cgroup:
        return _na(cause, "not assessable: host data has no cgroup_nr_periods/nr_throttled")
    pct = host.cgroup_throttled_pct
    base_pct = _median(pct, baseline) or 0.0
    # No condition on the host's idle cores: a period is throttled only when the
    # cgroup used up its quota, so throttled periods prove the quota binds even
    # on a host that other work keeps busy (idle cores are reported as evidence).
    cond = np.nan_to_num(pct, nan=0.0) >= max(CGROUP_THROTTLED_PCT, 2.0 * base_pct)
    holds = _flag(cond, pct)

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        return [
            Evidence("throttled_periods_in_episodes", _mean(pct, ep), "% of periods"),
            Evidence("throttled_periods_baseline", _median(pct, base), "% of periods"),
            Evidence(
                "throttled_time_in_episodes", _mean(host.cgroup_throttled_ms_per_s, ep), "ms/s"
            ),
            Evidence("idle_cores_in_episodes", _mean(host.idle_cores, ep), "cores under 50 %"),
            Evidence("counter_resets", float(host.counter_resets), "resets", "handled"),
        ]

    return Signature(cause, holds, pct, evidence)


def connection_churn_signature(sig: Signals, baseline: np.ndarray) -> Signature:
    """New connections per second rising; the first request on a connection is slow.

    When most requests open a connection all run long (keep-alive off), there
    is no baseline to contrast episodes with: that is a standing condition,
    reported like the batching window (`run_level`).
    """
    cause = CAUSE_CONNECTION_CHURN
    rate, source = new_connections_per_s(sig.host, sig.samples, sig.throughput_rps)
    if rate is None:
        return _na(cause, "not assessable: no request samples or host tcp_new_connections")
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(sig.throughput_rps > 0, rate / sig.throughput_rps, np.nan)
    first, reused = (
        (sig.samples.first_request_ms, sig.samples.reused_request_ms)
        if sig.samples is not None
        else (None, None)
    )
    # New connections that are not slower (e.g. the user pool growing) cost nothing.
    not_slower = (
        first is not None and reused is not None and first < FIRST_REQUEST_SLOWDOWN * reused
    )
    run_share = float(np.nanmedian(share)) if np.any(~np.isnan(share)) else 0.0
    run_level = run_share >= RUN_LEVEL_CHURN_SHARE
    if run_level:
        cond = np.nan_to_num(share, nan=0.0) >= RUN_LEVEL_CHURN_SHARE
    else:
        base_rate = _median(rate, baseline) or 0.0
        cond = (np.nan_to_num(rate, nan=0.0) >= max(CHURN_MIN_PER_S, 4.0 * base_rate + 1.0)) & (
            np.nan_to_num(share, nan=0.0) >= CHURN_NEW_CONN_SHARE
        )
    if not_slower:
        cond = np.zeros(sig.n, dtype=bool)
    holds = _flag(cond, rate if not run_level else share)
    outside = None
    if sig.triton is not None:
        # Time a request spends outside Triton (client, network, connection setup).
        outside = sig.service_p50_ms - (
            sig.triton.queue_ms_per_request + sig.triton.batch_compute_ms
        )

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        out = [
            Evidence("new_connections_in_episodes", _mean(rate, ep), "/s", source),
            Evidence("new_connections_baseline", _median(rate, base), "/s"),
            Evidence("new_connection_share_in_episodes", _mean(share, ep), "of requests"),
            Evidence("new_connection_share_run", run_share, "of requests", "median window"),
        ]
        if sig.samples is not None:
            out += [
                Evidence(
                    "first_request_latency",
                    sig.samples.first_request_ms,
                    "ms",
                    "median, new connection",
                ),
                Evidence(
                    "reused_connection_latency", sig.samples.reused_request_ms, "ms", "median"
                ),
            ]
        if outside is not None:
            out.append(
                Evidence(
                    "outside_server_time",
                    _median(outside, ep if ep.any() else base),
                    "ms",
                    "median service latency minus Triton queue + compute",
                )
            )
        return out

    return Signature(cause, holds, rate, evidence, run_level=run_level)


def process_stall_signature(sig: Signals, baseline: np.ndarray) -> Signature:
    """Nothing completes while arrivals continue, then many complete at once; no queue growth before."""
    cause = CAUSE_PROCESS_STALL
    if np.all(np.isnan(sig.completed)) or np.all(np.isnan(sig.offered_rps)):
        return _na(cause, "not assessable: no load counters")
    offered = sig.offered_rps * sig.window_s
    done = sig.completed
    typical = _median(done, baseline) or float(np.nanmedian(done))
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(offered > 0, done / offered, np.nan)
    stalled = (np.nan_to_num(ratio, nan=1.0) < STALL_THROUGHPUT_SHARE) & (offered > 0.2 * typical)
    n = sig.n
    holds = np.zeros(n)
    q = sig.triton.queue_ms_per_request if sig.triton is not None else None
    q_base = _median(q, baseline) if q is not None else None
    short = np.nan_to_num(ratio, nan=1.0) < STALL_ONSET_SHARE
    for i in np.nonzero(stalled)[0]:
        after = done[i + 1 : i + 4]
        catch_up = after.size and np.nanmax(after) >= 1.5 * max(typical, 1.0)
        # "Before" is the window before the stop began: the window holding the
        # SIGSTOP itself already completes little, and Triton charges the stopped
        # time to the queue of the requests caught in it.
        onset = i
        while onset > max(0, i - LEAD_WINDOWS) and short[onset - 1]:
            onset -= 1
        j = onset - 1
        before_ok = True
        if q is not None and q_base is not None and j >= 0 and not np.isnan(q[j]):
            before_ok = q[j] <= max(3.0 * q_base, q_base + 2.0)
        if catch_up and before_ok:
            holds[i] = 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        # Completions away from arrivals in either direction: the stop and the catch-up.
        metric = np.abs(np.log((done + 1.0) / (offered + 1.0)))

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        stall_windows = ep & (holds > 0)
        return [
            Evidence("completions_in_stall", _mean(done, stall_windows), "per window"),
            Evidence("completions_typical", typical, "per window"),
            Evidence("completions_after_stall", _max(done, ep), "per window", "catch-up"),
            Evidence("stall_windows", float(stall_windows.sum()), "windows"),
            Evidence(
                "queue_before_stall",
                None if q is None else _median(q, np.roll(stall_windows, -1)),
                "ms/request",
            ),
        ]

    return Signature(cause, holds, metric, evidence)


SIGNATURE_FUNCTIONS: tuple[Callable[[Signals, np.ndarray], Signature | list[Signature]], ...] = (
    arrival_burst_signature,
    batching_window_signature,
    gpu_clock_signatures,
    cpu_saturation_signature,
    cgroup_throttling_signature,
    connection_churn_signature,
    process_stall_signature,
)


# --- statistics -------------------------------------------------------------------------


def cliffs_delta(a: np.ndarray, b: np.ndarray) -> float | None:
    """P(a > b) - P(a < b) over all pairs: -1..1, robust to outliers and scale."""
    a = a[~np.isnan(a)]
    b = b[~np.isnan(b)]
    if a.size == 0 or b.size == 0:
        return None
    diff = a[:, None] - b[None, :]
    return float((np.sum(diff > 0) - np.sum(diff < 0)) / diff.size)


def baseline_mask(n: int, episodes: Sequence[SpikeEpisode], starts_ns: np.ndarray) -> np.ndarray:
    """Windows outside every episode, with BASELINE_MARGIN_WINDOWS on each side."""
    mask = np.ones(n, dtype=bool)
    for e in episodes:
        idx = np.nonzero((starts_ns >= e.start_ns) & (starts_ns < e.end_ns))[0]
        if idx.size:
            lo = max(0, idx[0] - BASELINE_MARGIN_WINDOWS)
            hi = min(n, idx[-1] + BASELINE_MARGIN_WINDOWS + 1)
            mask[lo:hi] = False
    return mask


def _episode_windows(e: SpikeEpisode, starts_ns: np.ndarray, lead: int) -> np.ndarray:
    idx = np.nonzero((starts_ns >= e.start_ns) & (starts_ns < e.end_ns))[0]
    mask = np.zeros(len(starts_ns), dtype=bool)
    if idx.size:
        mask[max(0, idx[0] - lead) : idx[-1] + 1] = True
    return mask


def confidence(
    coincidence: float, p_value: float | None, delta: float | None, lift: float | None
) -> str | None:
    """strong / moderate / weak, or None when the evidence does not support the cause."""
    d = abs(delta) if delta is not None else 0.0
    p = p_value if p_value is not None else 1.0
    big_lift = lift is None or lift >= 3.0  # None: never seen in baseline
    if coincidence >= 0.8 and p < 0.05 and d >= 0.6 and big_lift:
        return "strong"
    if coincidence >= 0.5 and p < 0.1 and big_lift:
        return "moderate"
    if coincidence >= 0.3 and (lift is None or lift >= 2.0):
        return "weak"
    return None


@dataclass
class Attribution:
    findings: list[Finding]
    checks: list[CauseCheck]
    causes_by_episode: dict[str, list[str]]


def score(
    signature: Signature,
    episodes: Sequence[SpikeEpisode],
    sig: Signals,
    baseline: np.ndarray,
) -> tuple[Finding | None, CauseCheck, list[str]]:
    """Coincidence, baseline rate, lift, Fisher p, Cliff's delta and lag for one cause."""
    cause = signature.cause
    if signature.holds is None:
        return None, CauseCheck(cause, "not_assessable", signature.not_assessable or ""), []
    holds = signature.holds
    explained: list[str] = []
    lags: list[float] = []
    ep_union = np.zeros(sig.n, dtype=bool)
    ep_proper = np.zeros(sig.n, dtype=bool)
    tested = 0
    for e in episodes:
        win = _episode_windows(e, sig.starts_ns, LEAD_WINDOWS)
        ep_union |= win
        ep_proper |= _episode_windows(e, sig.starts_ns, 0)
        h = holds[win]
        if np.all(np.isnan(h)):
            continue
        tested += 1
        if np.nansum(h) > 0:
            explained.append(e.episode_id)
            first = int(np.nonzero(np.nan_to_num(holds, nan=0) * win)[0][0])
            lags.append((int(sig.starts_ns[first]) - e.start_ns) / 1e9)
    base = baseline & ~np.isnan(holds)
    base_n = int(base.sum())
    base_hits = int(np.nansum(holds[base]))
    base_rate = base_hits / base_n if base_n else 0.0
    if signature.run_level:
        valid = ~np.isnan(holds)
        share = float(np.nanmean(holds[valid])) if valid.any() else 0.0
        if share >= 0.5:
            level = "strong" if share >= 0.8 else "moderate"
            ev = signature.evidence(ep_union & valid, valid) if signature.evidence else []
            # A standing condition: it does not explain episodes, it is there all along.
            finding = _finding(
                signature,
                level,
                [],
                len(episodes),
                share,
                base_rate,
                None,
                None,
                None,
                None,
                ev,
                run_share=share,
            )
            return (
                finding,
                CauseCheck(cause, "found", f"holds in {share:.0%} of windows"),
                explained,
            )
        if not tested:
            return None, CauseCheck(cause, "not_found", f"holds in {share:.0%} of windows"), []
    if not episodes:
        return None, CauseCheck(cause, "not_found", "no spike episodes to explain"), []
    if not tested:
        return None, CauseCheck(cause, "not_assessable", "no data during the episodes"), []
    coincidence = len(explained) / tested
    lift = coincidence / base_rate if base_rate > 0 else None
    _, p_value = stats.fisher_exact(
        [[len(explained), tested - len(explained)], [base_hits, base_n - base_hits]],
        alternative="greater",
    )
    delta = None
    if signature.metric is not None:
        delta = cliffs_delta(signature.metric[ep_proper], signature.metric[base])
    found = confidence(coincidence, float(p_value), delta, lift) if explained else None
    reason = f"signature in {len(explained)}/{tested} episodes, {base_rate:.0%} of baseline windows"
    if found is None:
        return None, CauseCheck(cause, "not_found", reason), []
    ev = signature.evidence(ep_union, base) if signature.evidence else []
    lag = float(np.median(lags)) if lags else None
    finding = _finding(
        signature,
        found,
        explained,
        tested,
        coincidence,
        base_rate,
        lift,
        float(p_value),
        delta,
        lag,
        ev,
    )
    return finding, CauseCheck(cause, "found", reason), explained


def _fmt(value: float | None, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}{unit}"


def _ev(evidence: list[Evidence], name: str) -> float | None:
    return next((e.value for e in evidence if e.name == name), None)


def _summary(
    cause: str, ev: list[Evidence], explained: int, total: int, run_share: float | None
) -> str:
    eps = f"{explained}/{total} spike episodes" if total else "no spike episodes"
    if cause in (CAUSE_GPU_THERMAL, CAUSE_GPU_POWER, CAUSE_GPU_CLOCK_OTHER):
        what = {
            CAUSE_GPU_THERMAL: "thermal throttling",
            CAUSE_GPU_POWER: "power-cap throttling",
        }.get(cause, "a clock drop")
        return (
            f"SM clock fell to {_fmt(_ev(ev, 'sm_clock_in_episodes'))} of {_fmt(_ev(ev, 'sm_clock_max'))} MHz "
            f"({what}, max temp {_fmt(_ev(ev, 'temp_max_in_episodes'))} °C) in {eps}; "
            f"compute per batch x{_fmt(_ev(ev, 'compute_inflation_observed'), '', 2)} "
            f"(clock predicts x{_fmt(_ev(ev, 'compute_inflation_predicted'), '', 2)})."
        )
    if cause == CAUSE_ARRIVAL_BURST:
        return (
            f"Arrivals reached {_fmt(_ev(ev, 'offered_in_episodes'))} req/s against a capacity of "
            f"{_fmt(_ev(ev, 'service_capacity'))} req/s in {eps}; batches averaged "
            f"{_fmt(_ev(ev, 'batch_size_in_episodes'), '', 1)} (max {_fmt(_ev(ev, 'max_batch_size'))}), "
            f"queue up to {_fmt(_ev(ev, 'queue_in_episodes'), '', 1)} ms."
        )
    if cause == CAUSE_BATCHING_WINDOW:
        share = f"{run_share:.0%} of windows" if run_share is not None else eps
        return (
            f"Requests wait {_fmt(_ev(ev, 'queue_time'), '', 1)} ms in the queue "
            f"(max_queue_delay {_fmt(_ev(ev, 'max_queue_delay'), '', 1)} ms) for batches of "
            f"{_fmt(_ev(ev, 'batch_size_mean'), '', 1)} at {_fmt(_ev(ev, 'offered'))} req/s, "
            f"in {share}: the wait adds latency and buys no throughput."
        )
    if cause == CAUSE_CPU_SATURATION:
        cores = _ev(ev, "cores_at_95pct_in_episodes")
        return (
            f"{_fmt(None if cores is None else 100 * cores)}% of cores at >=95% in {eps}; "
            f"client-minus-server time {_fmt(_ev(ev, 'client_minus_server_in_episodes'), '', 1)} ms "
            f"vs {_fmt(_ev(ev, 'client_minus_server_baseline'), '', 1)} ms baseline while Triton's queue stayed "
            f"{_fmt(_ev(ev, 'queue_in_episodes'), '', 1)} ms."
        )
    if cause == CAUSE_CGROUP_THROTTLING:
        return (
            f"Container CPU quota throttled {_fmt(_ev(ev, 'throttled_periods_in_episodes'))}% of periods "
            f"(baseline {_fmt(_ev(ev, 'throttled_periods_baseline'))}%) in {eps} while "
            f"{_fmt(_ev(ev, 'idle_cores_in_episodes'), '', 1)} host cores were idle."
        )
    if cause == CAUSE_CONNECTION_CHURN and run_share is not None:
        new_share = _ev(ev, "new_connection_share_run")
        reused = _ev(ev, "reused_connection_latency")
        return (
            f"{_fmt(None if new_share is None else 100 * new_share)}% of requests open a new connection "
            f"(in {run_share:.0%} of windows: keep-alive is off); requests on a new connection "
            f"take {_fmt(_ev(ev, 'first_request_latency'), '', 1)} ms"
            + (f" vs {_fmt(reused, '', 1)} ms reused" if reused is not None else "")
            + f", {_fmt(_ev(ev, 'outside_server_time'), '', 1)} ms of it outside Triton."
        )
    if cause == CAUSE_CONNECTION_CHURN:
        return (
            f"{_fmt(_ev(ev, 'new_connections_in_episodes'))} new connections/s "
            f"(baseline {_fmt(_ev(ev, 'new_connections_baseline'), '', 1)}) in {eps}; first request on a "
            f"connection {_fmt(_ev(ev, 'first_request_latency'), '', 1)} ms vs "
            f"{_fmt(_ev(ev, 'reused_connection_latency'), '', 1)} ms reused."
        )
    if cause == CAUSE_PROCESS_STALL:
        return (
            f"Completions fell to {_fmt(_ev(ev, 'completions_in_stall'))} per window "
            f"(typical {_fmt(_ev(ev, 'completions_typical'))}) then {_fmt(_ev(ev, 'completions_after_stall'))} "
            f"completed at once, with no queue growth before, in {eps}."
        )
    return f"Signature held in {eps}."


def _finding(
    signature: Signature,
    level: str,
    explained: list[str],
    total: int,
    coincidence: float,
    base_rate: float,
    lift: float | None,
    p_value: float | None,
    delta: float | None,
    lag: float | None,
    evidence: list[Evidence],
    run_share: float | None = None,
) -> Finding:
    cause = signature.cause
    return Finding(
        cause=cause,
        title=TITLES[cause],
        confidence=level,
        episodes=tuple(explained),
        episodes_total=total,
        coincidence=coincidence,
        baseline_rate=base_rate,
        lift=lift,
        p_value=p_value,
        cliffs_delta=delta,
        lag_s=lag,
        evidence=tuple(evidence),
        summary=_summary(cause, evidence, len(explained), total, run_share),
        action=ACTIONS[cause],
    )


_RANK = {"strong": 0, "moderate": 1, "weak": 2}


def attribute(
    sig: Signals, episodes: Sequence[SpikeEpisode], all_episodes: Sequence[SpikeEpisode]
) -> Attribution:
    """Test every cause against `episodes`; also tag `all_episodes` whose windows carry a found cause."""
    baseline = baseline_mask(sig.n, all_episodes, sig.starts_ns)
    if baseline.sum() < 3:  # nearly everything is an episode: use all windows
        baseline = np.ones(sig.n, dtype=bool)
    signatures: list[Signature] = []
    for fn in SIGNATURE_FUNCTIONS:
        out = fn(sig, baseline)
        signatures.extend(out if isinstance(out, list) else [out])
    findings: list[Finding] = []
    checks: list[CauseCheck] = []
    causes_by_episode: dict[str, list[str]] = {}
    for signature in signatures:
        finding, check, _ = score(signature, episodes, sig, baseline)
        checks.append(check)
        if finding is None:
            continue
        findings.append(finding)
        if signature.holds is None or signature.run_level:
            continue
        for e in all_episodes:
            win = _episode_windows(e, sig.starts_ns, LEAD_WINDOWS)
            if np.nansum(signature.holds[win]) > 0:
                causes_by_episode.setdefault(e.episode_id, []).append(signature.cause)
    findings.sort(
        key=lambda f: (_RANK[f.confidence], not f.episodes, -len(f.episodes), -f.coincidence)
    )
    return Attribution(findings, checks, causes_by_episode)
