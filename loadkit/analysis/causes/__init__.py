"""The registry of causes: one module per cause, listed once here.

Adding a cause = one new module in this package holding a `CAUSE = Cause(...)`
(id, title, action, signature, summary, figure signal, kind, fault events; the
per-request data it needs, the timeline spans it shades, an error cause's
`find` and headline), plus its entry in `REGISTRY`. Attribution, the pipeline,
the timelines, the reports, the commands and the diagnosis benchmark read this
registry and the `Cause` fields, and no cause module (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Iterable

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
    load_machine,
    model_contention,
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
    ErrorCounts,
    Shading,
    Signals,
    Signature,
    error_counts,
)
from loadkit.analysis.model import Finding

# In the order causes are tested (and listed in `causes_checked`).
REGISTRY: tuple[Cause, ...] = (
    arrival_burst.CAUSE,
    batching_window.CAUSE,
    gpu_clock_thermal.CAUSE,
    gpu_clock_power.CAUSE,
    gpu_clock_other.CAUSE,
    data_movement.CAUSE,
    # Another model on the same server (Triton's statistics of every model).
    model_contention.CAUSE,
    cpu_saturation.CAUSE,
    cgroup_throttling.CAUSE,
    # The load machine's own trouble (its telemetry, never the server's).
    load_machine.CAUSE,
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


def is_error(cause_id: str) -> bool:
    """Whether a finding's cause counts failed requests (kind ERRORS), not latency spikes."""
    cause = BY_ID.get(cause_id)
    return cause is not None and cause.kind == ERRORS


def outage(counts: ErrorCounts) -> Finding | None:
    """The finding a summary leads with (an error cause with a `headline`), from error counts."""
    for cause in REGISTRY:
        if cause.headline is not None and cause.find is not None:
            found = cause.find(counts, None, None)
            if found is not None:
                return found
    return None


def outage_line(findings: Iterable[Finding]) -> str | None:
    """The line a summary starts with when a cause with a headline was found (the target
    stopped answering); None when none was."""
    for f in findings:
        cause = BY_ID.get(f.cause)
        if cause is not None and cause.headline is not None:
            return f"{cause.headline}: {f.summary}"
    return None


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
    "ErrorCounts",
    "Shading",
    "Signals",
    "Signature",
    "error_counts",
    "get",
    "is_error",
    "outage",
    "outage_line",
]
