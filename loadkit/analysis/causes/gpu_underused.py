"""GPU utilization under 20 % for most of the run (a standing condition, never a spike cause).

An efficiency observation, not a latency cause: it is reported at most "weak"
so that it never outranks what explains the latency.
"""

from __future__ import annotations

import numpy as np

from loadkit.analysis.causes.base import (
    STANDING,
    Cause,
    Signals,
    Signature,
    assessed,
    check,
    ev,
    flag,
    fmt,
    median,
    need,
)
from loadkit.analysis.model import Evidence

CAUSE_GPU_UNDERUSED = "gpu_underused"
LOW_UTIL_PCT = 20.0


@assessed(CAUSE_GPU_UNDERUSED)
def signature(sig: Signals, baseline: np.ndarray) -> Signature:
    cause = CAUSE_GPU_UNDERUSED
    util = need(sig.gpu, "no gpu data").util_pct
    check(not np.all(np.isnan(util)), "gpu data has no util_gpu_pct")
    loaded = np.nan_to_num(sig.offered_rps, nan=0.0) > 0
    low = np.nan_to_num(util, nan=100.0) < LOW_UTIL_PCT
    holds = flag(low, util)
    holds[~loaded] = np.nan  # idle between runs says nothing about the configuration

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        scope = loaded
        out = [
            Evidence("gpu_util", median(util, scope), "%", "median window under load"),
            Evidence("offered", median(sig.offered_rps, scope), "req/s"),
        ]
        if sig.triton is not None:
            out.append(
                Evidence("batch_size_mean", median(sig.triton.batch_size_mean, scope), "requests")
            )
        return out

    return Signature(cause, holds, -util, evidence, run_level=True, max_confidence="weak")


def summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
    share = f"{run_share:.0%} of loaded windows" if run_share is not None else eps
    return (
        f"GPU busy {fmt(ev(e, 'gpu_util'), '%')} (median) at {fmt(ev(e, 'offered'))} req/s "
        f"in {share}: configuration or traffic, the GPU is not used."
    )


CAUSE = Cause(
    id=CAUSE_GPU_UNDERUSED,
    title="GPU utilization under 20 %",
    action="Configuration or traffic: send more traffic per GPU (fewer replicas), let batches "
    "grow (max_queue_delay, preferred_batch_size), check the model runs on the GPU "
    "(instance_group kind), or use a smaller GPU.",
    signature=signature,
    summary=summary,
    signal=("telemetry.gpu_util_pct", "GPU utilization (%)"),
    kind=STANDING,
    server_series=("gpu",),
)
