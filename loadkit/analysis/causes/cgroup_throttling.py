"""Container CPU quota throttling: the server's cgroup uses up its CFS quota.

Judged against the run's own throttling (`base.quota_throttled`): a quota just below
the need throttles a few % of the periods over a baseline that throttles none, which a
fixed 10 % missed; a quota that throttles now and then all run long fires only where it
throttles beyond that spread.
"""

from __future__ import annotations

import numpy as np

from loadkit.analysis.causes.base import (
    CGROUP_THROTTLED_FLOOR_PCT,
    Cause,
    Shading,
    Signals,
    Signature,
    assessed,
    check,
    ev,
    flag,
    fmt,
    mean,
    median,
    need,
    quota_throttled,
)
from loadkit.analysis.model import CAUSE_CGROUP_THROTTLING, Evidence
from loadkit.analysis.telemetry import HostSeries


@assessed(CAUSE_CGROUP_THROTTLING)
def signature(sig: Signals, baseline: np.ndarray) -> Signature:
    """CFS throttled periods rising: the server's cgroup uses up its CPU quota."""
    cause = CAUSE_CGROUP_THROTTLING
    host = need(sig.host, "no host data")
    check(host.has_cgroup, "host data has no cgroup_nr_periods/nr_throttled")
    pct = host.cgroup_throttled_pct
    # No condition on the host's idle cores: a period is throttled only when the
    # cgroup used up its quota, so throttled periods prove the quota binds even
    # on a host that other work keeps busy (idle cores are reported as evidence).
    throttled = quota_throttled(host, baseline)
    assert throttled is not None
    holds = flag(np.nan_to_num(throttled, nan=0.0) > 0, pct)

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        return [
            Evidence("throttled_periods_in_episodes", mean(pct, ep), "% of periods"),
            Evidence("throttled_periods_baseline", median(pct, base), "% of periods"),
            Evidence(
                "throttled_time_in_episodes", mean(host.cgroup_throttled_ms_per_s, ep), "ms/s"
            ),
            Evidence("idle_cores_in_episodes", mean(host.idle_cores, ep), "cores under 50 %"),
            Evidence("counter_resets", float(host.counter_resets), "resets", "handled"),
        ]

    return Signature(cause, holds, pct, evidence)


def summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
    return (
        f"Container CPU quota throttled {fmt(ev(e, 'throttled_periods_in_episodes'))}% of periods "
        f"(baseline {fmt(ev(e, 'throttled_periods_baseline'))}%) in {eps} while "
        f"{fmt(ev(e, 'idle_cores_in_episodes'), '', 1)} host cores were idle."
    )


def throttled_windows(host: HostSeries) -> np.ndarray | None:
    """Windows with >= CGROUP_THROTTLED_FLOOR_PCT of the cgroup's CFS periods throttled.

    The floor alone: a timeline has no baseline, and shades where the quota bound at all.
    """
    if not host.has_cgroup:
        return None
    return np.nan_to_num(host.cgroup_throttled_pct, nan=0.0) >= CGROUP_THROTTLED_FLOOR_PCT


def throttled_label(host: HostSeries, first: int, stop: int) -> str:
    worst = float(np.nan_to_num(host.cgroup_throttled_pct, nan=0.0)[first:stop].max())
    return f"cgroup CPU throttling: up to {worst:.0f} % of periods throttled"


CAUSE = Cause(
    id=CAUSE_CGROUP_THROTTLING,
    title="Container CPU quota throttling",
    action="Raise the container CPU quota (cpu.cfs_quota_us / Kubernetes "
    "limits.cpu) or drop the CPU limit: the server uses up its quota.",
    signature=signature,
    summary=summary,
    signal=("telemetry.cgroup_throttled_pct", "cgroup periods throttled (%)"),
    fault_events=("cgroup-quota",),
    shading=Shading("cgroup_throttled", "host", throttled_windows, throttled_label),
    server_series=("host.process",),
)
