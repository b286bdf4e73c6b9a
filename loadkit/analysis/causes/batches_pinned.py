"""Batches pinned at max_batch_size (a standing condition): the server runs full and requests wait.

Most executions carry `max_batch_size` requests and requests wait in the queue
for a slot at least half a batch's compute: the model runs as wide as it is
allowed and still falls behind. Needs the model configuration from the
manifest; a model without batching (max_batch_size <= 1) has nothing to pin.

It also says whether the queue ever drained: whether even the calmest windows
waited for a slot (the server never caught up, as when the mean load is near
capacity or each peak's backlog lasts until the next) or the server was full
only in its peaks. Read from the queue itself, not from the estimated capacity:
with batches of 1-2 in the calm windows the capacity at max batch is an
extrapolation (a run at "105 %" of it drained its queue between bursts). It
states what was measured and no more: spikes may still stand out above a queue
that never drains (the spike findings say so). Full in its peaks only, it is a
weak lead: what fills the queue there is the spikes' own cause.
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
    mean,
    median,
    need,
    service_capacity_rps,
)
from loadkit.analysis.model import Evidence

CAUSE_BATCHES_PINNED = "batches_pinned"
PINNED_SHARE = 0.9  # mean batch at >= 90 % of max_batch_size
QUEUE_OVER_COMPUTE = 0.5  # requests wait at least half a batch's compute for a slot
# The calmest tenth of windows: the queue never drained if even these wait for a slot.
CALMEST_QUANTILE = 10


@assessed(CAUSE_BATCHES_PINNED)
def signature(sig: Signals, baseline: np.ndarray) -> Signature:
    cause = CAUSE_BATCHES_PINNED
    tr = need(sig.triton, "no triton_stats data")
    b = float(need(sig.max_batch_size or None, "no model config (max_batch_size) in the manifest"))
    check(b > 1, "max_batch_size <= 1 (no batching to pin)")
    pinned = np.nan_to_num(tr.batch_size_mean, nan=0.0) >= PINNED_SHARE * b
    waiting = np.nan_to_num(tr.queue_ms_per_request, nan=0.0) >= QUEUE_OVER_COMPUTE * np.nan_to_num(
        tr.batch_compute_ms, nan=np.inf
    )
    holds = flag(pinned & waiting, tr.batch_size_mean)
    with np.errstate(invalid="ignore", divide="ignore"):
        metric = tr.batch_size_mean / b
    capacity = service_capacity_rps(sig, baseline)
    never_drained = _never_drained(
        _calmest(tr.queue_ms_per_request), median(tr.batch_compute_ms, np.ones(sig.n, dtype=bool))
    )

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        scope = np.ones(sig.n, dtype=bool)
        return [
            Evidence("max_batch_size", b, "requests", "model config"),
            Evidence(
                "batch_size_mean", median(tr.batch_size_mean, scope), "requests", "median window"
            ),
            Evidence("queue_time", median(tr.queue_ms_per_request, scope), "ms/request"),
            Evidence("compute_per_batch", median(tr.batch_compute_ms, scope), "ms"),
            Evidence("offered", median(sig.offered_rps, scope), "req/s"),
            Evidence(
                "queue_time_calmest",
                _calmest(tr.queue_ms_per_request),
                "ms/request",
                f"{CALMEST_QUANTILE}th percentile of windows",
            ),
            *_utilisation(sig.offered_rps, capacity, scope),
        ]

    # A queue that drained between the peaks is full in the peaks only: what fills it
    # there is the spikes' cause (a neighbour slowing the model, a burst), and this a lead.
    cap = "weak" if never_drained is False else None
    return Signature(cause, holds, metric, evidence, run_level=True, max_confidence=cap)


def _never_drained(calmest: float | None, compute: float | None) -> bool | None:
    """Whether even the calmest windows waited for a slot (None: not known)."""
    if calmest is None or compute is None:
        return None
    return calmest >= QUEUE_OVER_COMPUTE * compute


def _calmest(queue_ms: np.ndarray) -> float | None:
    values = queue_ms[~np.isnan(queue_ms)]
    return float(np.percentile(values, CALMEST_QUANTILE)) if values.size else None


def _utilisation(
    offered: np.ndarray, capacity: np.ndarray | None, scope: np.ndarray
) -> list[Evidence]:
    """Mean offered load over the median capacity: the share of the server the run asked for."""
    cap = median(capacity, scope) if capacity is not None else None
    offered_mean = mean(offered, scope)
    if not cap or offered_mean is None:
        return []
    return [
        Evidence("offered_mean", offered_mean, "req/s", "whole run"),
        Evidence("service_capacity", cap, "req/s", "max batch / compute at max batch"),
        Evidence("mean_utilisation", offered_mean / cap, "x", "mean offered / capacity"),
    ]


def summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
    share = f"{run_share:.0%} of windows" if run_share is not None else eps
    text = (
        f"Batches averaged {fmt(ev(e, 'batch_size_mean'), '', 1)} of max_batch_size "
        f"{fmt(ev(e, 'max_batch_size'))} in {share}, and requests waited "
        f"{fmt(ev(e, 'queue_time'), ' ms', 1)} in the queue for a slot (a batch computes in "
        f"{fmt(ev(e, 'compute_per_batch'), ' ms', 1)}) at {fmt(ev(e, 'offered'))} req/s."
    )
    calmest, compute = ev(e, "queue_time_calmest"), ev(e, "compute_per_batch")
    never_drained = _never_drained(calmest, compute)
    if never_drained is None:
        return text
    utilisation = ev(e, "mean_utilisation")
    load = (
        f"; mean offered {fmt(ev(e, 'offered_mean'))} req/s, {utilisation:.0%} of an estimated "
        f"capacity of {fmt(ev(e, 'service_capacity'))} req/s"
        if utilisation is not None
        else ""
    )
    if never_drained:
        return (
            f"{text} The queue never drained: even the calmest tenth of windows waited "
            f"{fmt(calmest, ' ms', 1)} for a slot{load}."
        )
    return (
        f"{text} The queue drained between peaks (calmest tenth of windows: "
        f"{fmt(calmest, ' ms', 1)}{load}): the server is full in its peaks only."
    )


CAUSE = Cause(
    id=CAUSE_BATCHES_PINNED,
    title="Batches pinned at max_batch_size",
    action="Raise max_batch_size (if the model and memory allow) or add model instances "
    "(instance_group count) or GPUs: the server runs full-width and still queues.",
    signature=signature,
    summary=summary,
    signal=("telemetry.batch_size_mean", "mean batch size"),
    kind=STANDING,
)
