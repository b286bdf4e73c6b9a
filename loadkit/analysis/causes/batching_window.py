"""Batching window too long for the load (a standing condition).

Requests wait about `max_queue_delay` in small batches at low load: the wait
adds latency and buys no throughput. Needs the model configuration from the
manifest (`environment.server.models`); without it the cause says so.
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
    service_capacity_rps,
)
from loadkit.analysis.model import CAUSE_BATCHING_WINDOW, Evidence

QUEUE_SHARE_OF_LATENCY = 0.4
QUEUE_NEAR_WINDOW = 1.5  # queue wait up to 1.5x max_queue_delay (+1 ms) counts as the window's


@assessed(CAUSE_BATCHING_WINDOW)
def signature(sig: Signals, baseline: np.ndarray) -> Signature:
    cause = CAUSE_BATCHING_WINDOW
    tr = need(sig.triton, "no triton_stats data")
    no_config = "no model config (max_queue_delay) in the manifest"
    delay = need(sig.max_queue_delay_ms, no_config)
    max_batch = need(sig.max_batch_size or None, no_config)
    check(delay > 0, "max_queue_delay is 0 (no batching window)")
    small = tr.batch_size_mean <= max(2.0, 0.25 * max_batch)
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
    holds = flag(small & waits & low_load, tr.batch_size_mean, tr.queue_ms_per_request)
    with np.errstate(invalid="ignore", divide="ignore"):
        metric = tr.queue_ms_per_request / delay

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        scope = ep if ep.any() else base
        queue = median(tr.queue_ms_per_request, scope)
        p50 = median(sig.service_p50_ms, scope)
        return [
            Evidence("max_queue_delay", delay, "ms", "model config"),
            Evidence("queue_time", queue, "ms/request", "median over windows"),
            Evidence("batch_size_mean", median(tr.batch_size_mean, scope), "requests"),
            Evidence("max_batch_size", float(sig.max_batch_size or 0), "requests"),
            Evidence("offered", median(sig.offered_rps, scope), "req/s"),
            Evidence(
                "service_capacity",
                median(capacity, scope) if capacity is not None else None,
                "req/s",
            ),
            Evidence(
                "queue_share_of_p50",
                queue / p50 if queue is not None and p50 else None,
                "of median latency",
            ),
        ]

    return Signature(cause, holds, metric, evidence, run_level=True)


def summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
    share = f"{run_share:.0%} of windows" if run_share is not None else eps
    return (
        f"Requests wait {fmt(ev(e, 'queue_time'), '', 1)} ms in the queue "
        f"(max_queue_delay {fmt(ev(e, 'max_queue_delay'), '', 1)} ms) for batches of "
        f"{fmt(ev(e, 'batch_size_mean'), '', 1)} at {fmt(ev(e, 'offered'))} req/s, "
        f"in {share}: the wait adds latency and buys no throughput."
    )


CAUSE = Cause(
    id=CAUSE_BATCHING_WINDOW,
    title="Batching window too long for the load",
    action="Lower dynamic_batching.max_queue_delay_microseconds "
    "(at this load batches never fill, so the wait buys no throughput), or set "
    "preferred_batch_size, or turn dynamic batching off.",
    signature=signature,
    summary=summary,
    signal=("telemetry.queue_ms_per_request", "queue time per request (ms)"),
    kind=STANDING,
    fault_events=("batching-window",),
)
