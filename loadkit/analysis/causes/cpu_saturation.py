"""CPU saturation: most of the host's cores busy while the server's own quota is not the limit.

Client, server and network stack all wait for a CPU: the latency grows on
both sides of Triton. Neither the server's queue nor its compute has to stay
normal (Triton's own threads wait for the CPU too). Windows where arrivals rise
above their baseline are left out (the server working through a burst makes
the cores busy itself), and so are windows where the server's cgroup is
throttled (its quota, not the host, is what it waits for).
"""

from __future__ import annotations

import numpy as np

from loadkit.analysis.causes.base import (
    Cause,
    Signals,
    Signature,
    assessed,
    check,
    ev,
    flag,
    fmt,
    maximum,
    mean,
    median,
    need,
    outside_server_ms,
)
from loadkit.analysis.causes.cgroup_throttling import CGROUP_THROTTLED_PCT
from loadkit.analysis.model import CAUSE_CPU_SATURATION, Evidence

BUSY_CORES_SHARE = 0.75  # share of cores at >= 95 %
ARRIVALS_RISE = 1.25  # arrivals this far above baseline: a burst, not a neighbour


@assessed(CAUSE_CPU_SATURATION)
def signature(sig: Signals, baseline: np.ndarray) -> Signature:
    cause = CAUSE_CPU_SATURATION
    host = need(sig.host, "no host data")
    check(
        host.has_per_core or not np.all(np.isnan(host.cpu_mean_pct)),
        "host data has no cpu_per_core_pct",
    )
    busy = host.busy_core_frac if host.has_per_core else (host.cpu_mean_pct >= 95.0).astype(float)
    cond = np.nan_to_num(busy, nan=0.0) >= BUSY_CORES_SHARE
    offered_base = median(sig.offered_rps, baseline)
    if offered_base:
        cond &= np.nan_to_num(sig.offered_rps, nan=0.0) < ARRIVALS_RISE * offered_base
    if host.has_cgroup:
        cond &= np.nan_to_num(host.cgroup_throttled_pct, nan=0.0) < CGROUP_THROTTLED_PCT
    holds = flag(cond, busy)
    outside = outside_server_ms(sig)

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        out = [
            Evidence("cores_at_95pct_in_episodes", mean(busy, ep), "share of cores"),
            Evidence("cores_at_95pct_baseline", median(busy, base), "share of cores"),
            Evidence("psi_cpu_some_in_episodes", maximum(host.psi_some_avg10, ep), "%"),
            Evidence("psi_cpu_some_baseline", median(host.psi_some_avg10, base), "%"),
        ]
        if outside is not None and sig.triton is not None:
            out += [
                Evidence(
                    "client_minus_server_in_episodes",
                    median(outside, ep),
                    "ms",
                    "median service latency minus Triton queue + compute",
                ),
                Evidence("client_minus_server_baseline", median(outside, base), "ms"),
                Evidence("queue_in_episodes", median(sig.triton.queue_ms_per_request, ep), "ms"),
                Evidence("queue_baseline", median(sig.triton.queue_ms_per_request, base), "ms"),
            ]
        return out

    return Signature(cause, holds, busy, evidence)


def summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
    cores = ev(e, "cores_at_95pct_in_episodes")
    return (
        f"{fmt(None if cores is None else 100 * cores)}% of cores at >=95% in {eps}; "
        f"client-minus-server time {fmt(ev(e, 'client_minus_server_in_episodes'), '', 1)} ms "
        f"vs {fmt(ev(e, 'client_minus_server_baseline'), '', 1)} ms baseline, Triton's queue "
        f"{fmt(ev(e, 'queue_in_episodes'), '', 1)} ms vs {fmt(ev(e, 'queue_baseline'), '', 1)} ms."
    )


CAUSE = Cause(
    id=CAUSE_CPU_SATURATION,
    title="CPU saturation",
    action="Give the server and the load generator more CPU: move load generation "
    "to other hosts, stop co-located jobs, pin Triton to dedicated cores.",
    signature=signature,
    summary=summary,
    signal=("telemetry.cpu_core_max_pct", "busiest core CPU (%)"),
    fault_events=("cpu-burn",),
)
