"""Arrival burst beyond capacity: arrivals rise above their baseline and beyond what the server serves.

What makes it this cause is the arrivals: in every code path they must rise
above their own baseline, in the window or the one before it (full batches or a
backlog at the usual arrival rate, after no rise, are a backlog draining after a
stall or a slow spell). With Triton statistics
and a model configuration, arrivals must also exceed the measured service
capacity (or batches pin at the maximum) with compute per batch unchanged.
Without them the capacity is unknown: the signature falls back to arrivals
outrunning completions, the finding says so and stays "weak".
"""

from __future__ import annotations

import numpy as np

from loadkit.analysis.causes.base import (
    Cause,
    Signals,
    Signature,
    compute_inflation,
    ev,
    flag,
    fmt,
    maximum,
    mean,
    median,
    na,
    service_capacity_rps,
)
from loadkit.analysis.causes.request_errors import CAUSE_REJECTING, CAUSE_TIMEOUTS
from loadkit.analysis.model import CAUSE_ARRIVAL_BURST, Evidence

BATCH_PINNED_SHARE = 0.8
# Arrivals 25 % over their baseline: beyond the Poisson noise of a 1 s window
# at >= 100 requests (about 10 %), well under any burst worth the name.
BURST_ARRIVALS_RISE = 1.25
UNCHANGED_COMPUTE = 1.25


def signature(sig: Signals, baseline: np.ndarray) -> Signature:
    cause = CAUSE_ARRIVAL_BURST
    if np.all(np.isnan(sig.offered_rps)):
        return na(cause, "not assessable: no load counters (offered rate)")
    offered_base = median(sig.offered_rps, baseline)
    if not offered_base:
        return na(cause, "not assessable: no arrivals in baseline windows to compare with")
    rose = np.nan_to_num(sig.offered_rps, nan=0.0) >= BURST_ARRIVALS_RISE * offered_base
    # A burst's backlog drains in the window after it (a 1.1 s burst at the end of a 2 s
    # window fills the next one's batches at the usual arrival rate): it is still the
    # burst's. A backlog after a stall or a slow spell follows no rise in arrivals.
    arrivals_up = rose | np.concatenate([[False], rose[:-1]])
    capacity = service_capacity_rps(sig, baseline)
    tr = sig.triton
    inflation = compute_inflation(sig, baseline)
    max_confidence = None
    notes: list[str] = []
    nominal = None
    if capacity is not None and tr is not None:
        unchanged = (
            np.nan_to_num(inflation, nan=1.0) < UNCHANGED_COMPUTE if inflation is not None else True
        )
        nominal = capacity * (np.nan_to_num(inflation, nan=1.0) if inflation is not None else 1.0)
        over = sig.offered_rps > np.maximum(nominal, 1e-9)
        pinned = np.nan_to_num(tr.batch_size_mean, nan=0.0) >= BATCH_PINNED_SHARE * float(
            sig.max_batch_size or 1
        )
        holds = flag((over | pinned) & unchanged & arrivals_up, sig.offered_rps)
        with np.errstate(invalid="ignore", divide="ignore"):
            metric = sig.offered_rps / nominal
    else:
        # Capacity unknown (no batch statistics or no max_batch_size): arrivals
        # above their baseline outrunning completions while work piles up.
        with np.errstate(invalid="ignore", divide="ignore"):
            metric = sig.offered_rps / sig.throughput_rps
        growing = np.diff(sig.in_flight, prepend=np.nan) > 0
        holds = flag((metric > 1.05) & growing & arrivals_up, sig.offered_rps, sig.throughput_rps)
        max_confidence = "weak"
        notes.append(
            "service capacity unknown (no Triton statistics or no max_batch_size in the "
            "manifest): arrivals outran completions, capacity not compared"
        )

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        out = [
            Evidence("offered_in_episodes", maximum(sig.offered_rps, ep), "req/s", "peak window"),
            Evidence("offered_baseline", median(sig.offered_rps, base), "req/s"),
            Evidence("throughput_in_episodes", mean(sig.throughput_rps, ep), "req/s"),
            Evidence(
                "service_capacity",
                median(capacity, base) if capacity is not None and nominal is not None else None,
                "req/s",
                "max batch / compute at max batch (Triton statistics)"
                if nominal is not None
                else "unknown: no Triton statistics or model config",
            ),
        ]
        if tr is not None:
            out += [
                Evidence("batch_size_in_episodes", mean(tr.batch_size_mean, ep), "requests"),
                Evidence("batch_size_baseline", median(tr.batch_size_mean, base), "requests"),
                Evidence("max_batch_size", float(sig.max_batch_size or 0) or None, "requests"),
                Evidence("queue_in_episodes", maximum(tr.queue_ms_per_request, ep), "ms/request"),
                Evidence("max_queue_delay", sig.max_queue_delay_ms, "ms"),
            ]
        if inflation is not None:
            out.append(Evidence("compute_inflation", median(inflation, ep), "x"))
        return out

    return Signature(cause, holds, metric, evidence, notes=notes, max_confidence=max_confidence)


def summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
    capacity = ev(e, "service_capacity")
    against = (
        f"against a capacity of {fmt(capacity)} req/s"
        if capacity is not None
        else "(capacity unknown: no Triton statistics or model config)"
    )
    text = (
        f"Arrivals reached {fmt(ev(e, 'offered_in_episodes'))} req/s "
        f"(baseline {fmt(ev(e, 'offered_baseline'))}) {against} in {eps}"
    )
    if ev(e, "batch_size_in_episodes") is not None:
        text += (
            f"; batches averaged {fmt(ev(e, 'batch_size_in_episodes'), '', 1)} "
            f"(max {fmt(ev(e, 'max_batch_size'))}), queue up to "
            f"{fmt(ev(e, 'queue_in_episodes'), '', 1)} ms"
        )
    return text + "."


CAUSE = Cause(
    id=CAUSE_ARRIVAL_BURST,
    title="Arrival burst beyond capacity",
    action="Add capacity ahead of bursts (more model instances or GPUs, "
    "autoscaling on queue time), or shed load with a bounded max_queue_size and timeouts.",
    signature=signature,
    summary=summary,
    signal=("windows.offered_rps", "offered rate (requests/s)"),
    # A burst past capacity fills the queue: requests wait past their timeout, and a
    # bounded queue (max_queue_size) rejects the rest.
    consequences=(CAUSE_TIMEOUTS, CAUSE_REJECTING),
)
