"""The registry of causes: one module per cause, listed once here.

Adding a cause = one new module in this package holding a `CAUSE = Cause(...)`
(id, title, action, signature, summary, figure signal, kind, fault events),
plus its entry in `REGISTRY`. Attribution, the report's figures and the
diagnosis benchmark read this registry and nothing else (docs/analysis.md).
"""

from __future__ import annotations

from loadkit.analysis.causes import (
    arrival_burst,
    batches_pinned,
    batching_window,
    cgroup_throttling,
    connection_churn,
    cpu_saturation,
    data_movement,
    gpu_clock_other,
    gpu_clock_power,
    gpu_clock_thermal,
    gpu_underused,
    process_stall,
    request_errors,
    unexplained,
)
from loadkit.analysis.causes.base import (
    EITHER,
    EPISODIC,
    ERRORS,
    STANDING,
    UNEXPLAINED,
    Cause,
    Signals,
    Signature,
)

# In the order causes are tested (and listed in `causes_checked`).
REGISTRY: tuple[Cause, ...] = (
    arrival_burst.CAUSE,
    batching_window.CAUSE,
    gpu_clock_thermal.CAUSE,
    gpu_clock_power.CAUSE,
    gpu_clock_other.CAUSE,
    data_movement.CAUSE,
    cpu_saturation.CAUSE,
    cgroup_throttling.CAUSE,
    connection_churn.CAUSE,
    process_stall.CAUSE,
    # Standing conditions checked on every run (never spike causes).
    batches_pinned.CAUSE,
    gpu_underused.CAUSE,
    # No cause matched: which part of the latency grew (scored last, on what is left).
    *unexplained.CAUSES,
    # Error episodes (failed requests): an outage, rejections, timeouts (found first).
    *request_errors.CAUSES,
)

BY_ID: dict[str, Cause] = {c.id: c for c in REGISTRY}
CAUSE_IDS: tuple[str, ...] = tuple(c.id for c in REGISTRY)


def get(cause_id: str) -> Cause:
    return BY_ID[cause_id]


__all__ = [
    "BY_ID",
    "CAUSE_IDS",
    "EITHER",
    "EPISODIC",
    "ERRORS",
    "REGISTRY",
    "STANDING",
    "UNEXPLAINED",
    "Cause",
    "Signals",
    "Signature",
    "get",
]
