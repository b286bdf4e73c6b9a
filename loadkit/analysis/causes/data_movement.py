"""Data movement: the time to copy tensors to and from the device grows, the model's compute does not.

Two signals, either of which holds:
- Triton's statistics split a request's compute into compute_input (preparing and
  copying the inputs, host to device), compute_infer (the model) and compute_output
  (copying the outputs back). Spikes where input + output per request clear their
  baseline's spread while compute_infer stays within its own are data movement.
- The requests say it themselves: the slowest requests of a spike window are far
  larger than the slowest of the baseline windows (loadkit records each sampled
  request's bytes). A few large requests make P99 while every per-window mean of
  the server's time (Triton's included) barely moves.
For Triton's copy times the model's own compute must not be what grew (a stall or a
slower model inflates every part of a request's time). The size signal needs no such
guard: a stall or a quota does not make requests larger, and on a CPU-only server the
copies of large requests take the cores the model computes on, so compute grows with
them. On a GPU host the utilization stays low and
memory swings while it happens (reported as evidence; a simulated or absent GPU
says nothing).
"""

from __future__ import annotations

import numpy as np

from loadkit.analysis.causes.base import (
    Cause,
    Signals,
    Signature,
    assessed,
    check,
    data_movement_ms,
    ev,
    fmt,
    material,
    mean,
    median,
)
from loadkit.analysis.model import CAUSE_DATA_MOVEMENT, Evidence
from loadkit.analysis.noise import above_spread

# Input + output per request at least this many times their baseline median (besides
# clearing the baseline's spread): copies that grew by an amount that matters.
MOVEMENT_RISE_FLOOR = 1.5
# ... and the model's own compute per batch within this many times its baseline median
# (or within its spread): the time went to the copies, not to the model.
INFER_RISE_FLOOR = 1.3


# The slowest requests' mean size at least this many times the baseline's (besides
# clearing its spread): the slow requests became the large ones.
SIZE_RISE_FLOOR = 1.5


def _copies_grew(
    sig: Signals, baseline: np.ndarray, moved: np.ndarray, infer: np.ndarray | None
) -> np.ndarray | None:
    """Per window: Triton's copy time grew by an amount that matters, the model's compute did not."""
    grew = above_spread(moved, baseline, MOVEMENT_RISE_FLOOR)
    if grew is None:
        return None
    cond = np.nan_to_num(grew, nan=0.0) > 0
    move_excess = np.nan_to_num(moved - (median(moved, baseline) or 0.0), nan=0.0)
    infer_base = median(infer, baseline) if infer is not None else None
    if infer is not None and infer_base is not None:
        cond &= move_excess > np.nan_to_num(infer - infer_base, nan=0.0)
        infer_grew = above_spread(infer, baseline, INFER_RISE_FLOOR)
        if infer_grew is not None:  # the time went to the model, not to the copies
            cond &= ~(np.nan_to_num(infer_grew, nan=0.0) > 0)
    return cond & material(move_excess, sig.service_p50_ms, baseline)  # matters to a request


@assessed(CAUSE_DATA_MOVEMENT)
def signature(sig: Signals, baseline: np.ndarray) -> Signature:
    cause = CAUSE_DATA_MOVEMENT
    moved = data_movement_ms(sig)
    samples = sig.samples
    slow_bytes = samples.slow_request_bytes if samples is not None else None
    typical_bytes = samples.bytes_per_request if samples is not None else None
    check(
        moved is not None or slow_bytes is not None,
        "neither Triton's compute_input/output time nor the requests' sizes were recorded",
    )
    infer = sig.triton.batch_compute_ms if sig.triton is not None else None
    copies = _copies_grew(sig, baseline, moved, infer) if moved is not None else None
    larger = above_spread(slow_bytes, baseline, SIZE_RISE_FLOOR) if slow_bytes is not None else None
    check(copies is not None or larger is not None, "no copy time or request sizes in baseline")
    cond = np.zeros(sig.n, bool)
    if copies is not None:
        cond |= copies
    if larger is not None:
        cond |= np.nan_to_num(larger, nan=0.0) > 0
    # The metric is the signal the signature holds on: the copies' time where it grew (the
    # sizes of a run whose payloads stay the same do not move), else the requests' size.
    sizes = slow_bytes if larger is not None else None
    copied = copies is not None and bool(copies.any())
    metric = moved if moved is not None and (copied or sizes is None) else sizes
    assert metric is not None
    unknown = np.ones(sig.n, bool)  # only where every assessed signal is unknown
    for series, test in ((moved, copies), (slow_bytes, larger)):
        if series is not None and test is not None:
            unknown &= np.isnan(series)
    holds = cond.astype(float)
    holds[unknown] = np.nan
    gpu = sig.gpu

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        out: list[Evidence] = []
        if slow_bytes is not None and typical_bytes is not None:
            out += [
                Evidence(
                    "slowest_request_kib_in_episodes",
                    _kib(mean(slow_bytes, ep)),
                    "KiB",
                    "mean size of the slowest 5 % of sampled requests",
                ),
                Evidence("slowest_request_kib_baseline", _kib(median(slow_bytes, base)), "KiB"),
                Evidence("request_kib_in_episodes", _kib(mean(typical_bytes, ep)), "KiB"),
            ]
        if moved is not None:
            out += [
                Evidence(
                    "data_movement_in_episodes",
                    mean(moved, ep),
                    "ms/request",
                    "Triton compute_input + compute_output",
                ),
                Evidence("data_movement_baseline", median(moved, base), "ms/request"),
            ]
        if infer is not None:
            out += [
                Evidence("compute_infer_in_episodes", mean(infer, ep), "ms/batch"),
                Evidence("compute_infer_baseline", median(infer, base), "ms/batch"),
            ]
        if gpu is not None and not np.all(np.isnan(gpu.util_pct)):
            swing = gpu.mem_used_bytes / 2**20
            out += [
                Evidence("gpu_util_in_episodes", mean(gpu.util_pct, ep), "%"),
                Evidence("gpu_util_baseline", median(gpu.util_pct, base), "%"),
                Evidence(
                    "gpu_mem_swing_in_episodes",
                    float(np.nanmax(swing[ep]) - np.nanmin(swing[ep]))
                    if np.any(ep & ~np.isnan(swing))
                    else None,
                    "MiB",
                    "largest minus smallest memory used in the episode windows",
                ),
            ]
        return out

    return Signature(cause, holds, metric, evidence)


def _kib(value: float | None) -> float | None:
    return None if value is None else value / 1024.0


def summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
    parts = []
    if ev(e, "slowest_request_kib_in_episodes") is not None:
        parts.append(
            f"The slowest requests carried {fmt(ev(e, 'slowest_request_kib_in_episodes'), '', 1)}"
            f" KiB on average in {eps} (baseline {fmt(ev(e, 'slowest_request_kib_baseline'), '', 1)}"
            f" KiB; all requests {fmt(ev(e, 'request_kib_in_episodes'), '', 1)} KiB)"
        )
    if ev(e, "data_movement_in_episodes") is not None:
        parts.append(
            f"copying tensors to and from the model took "
            f"{fmt(ev(e, 'data_movement_in_episodes'), '', 2)} ms per request (baseline "
            f"{fmt(ev(e, 'data_movement_baseline'), '', 2)} ms)" + ("" if parts else f" in {eps}")
        )
    infer, infer_base = ev(e, "compute_infer_in_episodes"), ev(e, "compute_infer_baseline")
    if infer is not None:
        grew = infer_base is not None and infer > INFER_RISE_FLOOR * infer_base
        parts.append(
            (
                "the model's compute per batch grew with them"
                if grew
                else "while the model's compute stayed"
            )
            + f" at {fmt(infer, '', 1)} ms per batch (baseline {fmt(infer_base, '', 1)} ms)"
            + ("; the large requests' copies share the host's cores with it" if grew else "")
        )
    text = "; ".join(parts)
    text = text[:1].upper() + text[1:]
    if ev(e, "gpu_util_in_episodes") is not None:
        text += (
            f"; GPU utilization {fmt(ev(e, 'gpu_util_in_episodes'))}% "
            f"(baseline {fmt(ev(e, 'gpu_util_baseline'))}%), memory swinging by "
            f"{fmt(ev(e, 'gpu_mem_swing_in_episodes'))} MiB"
        )
    return text + "."


CAUSE = Cause(
    id=CAUSE_DATA_MOVEMENT,
    title="Data movement (host-device copies)",
    action="Cut the copies: use pinned (page-locked) host memory or CUDA shared memory for "
    "inputs, send smaller tensors (fewer candidates, FP16, ids instead of embeddings), keep "
    "data on the device between models (ensembles, output to GPU), and check what else "
    "shares the PCIe link.",
    signature=signature,
    summary=summary,
    signal=("telemetry.data_movement_ms_per_request", "compute input + output (ms/request)"),
    fault_events=("data-movement",),
)
