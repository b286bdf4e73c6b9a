"""Data movement: the time to copy tensors to and from the device grows, the model's compute does not.

Triton's statistics split a request's compute into compute_input (preparing
and copying the inputs, host to device), compute_infer (the model) and
compute_output (copying the outputs back). Spikes where input + output per
request clear their baseline's spread while compute_infer stays within its own
are data movement, not compute: large or unpinned tensors, a PCIe link shared
with other work. On a GPU host the utilization stays low and memory swings
while it happens (reported as evidence; a simulated or absent GPU says nothing).
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
    flag,
    fmt,
    mean,
    median,
    need,
)
from loadkit.analysis.model import CAUSE_DATA_MOVEMENT, Evidence
from loadkit.analysis.noise import above_spread

# Input + output per request at least this many times their baseline median (besides
# clearing the baseline's spread): copies that grew by an amount that matters.
MOVEMENT_RISE_FLOOR = 1.5
# ... and the model's own compute per batch within this many times its baseline median
# (or within its spread): the time went to the copies, not to the model.
INFER_RISE_FLOOR = 1.3
# The copies' growth must matter to a request: at least this share of the baseline's
# median service time (0.1 ms more copying under a 25 ms request explains nothing).
MATERIAL_SHARE = 0.1


@assessed(CAUSE_DATA_MOVEMENT)
def signature(sig: Signals, baseline: np.ndarray) -> Signature:
    cause = CAUSE_DATA_MOVEMENT
    tr = need(sig.triton, "no triton_stats data (compute input/infer/output)")
    moved = need(data_movement_ms(sig), "Triton's statistics have no compute_input/output time")
    grew = above_spread(moved, baseline, MOVEMENT_RISE_FLOOR)
    check(grew is not None, "no compute input/output time in baseline windows")
    assert grew is not None
    infer = tr.batch_compute_ms
    infer_grew = above_spread(infer, baseline, INFER_RISE_FLOOR)
    cond = np.nan_to_num(grew, nan=0.0) > 0
    if infer_grew is not None:
        cond &= ~(np.nan_to_num(infer_grew, nan=0.0) > 0)
    # The time went to the copies: they grew by more than the model's compute did, and
    # by a share of a request's time that matters.
    move_excess = np.nan_to_num(moved - (median(moved, baseline) or 0.0), nan=0.0)
    infer_base = median(infer, baseline)
    if infer_base is not None:
        cond &= move_excess > np.nan_to_num(infer - infer_base, nan=0.0)
    service = median(sig.service_p50_ms, baseline)
    if service is not None:
        cond &= move_excess >= MATERIAL_SHARE * service
    holds = flag(cond, moved)
    gpu = sig.gpu

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        out = [
            Evidence(
                "data_movement_in_episodes",
                mean(moved, ep),
                "ms/request",
                "Triton compute_input + compute_output",
            ),
            Evidence("data_movement_baseline", median(moved, base), "ms/request"),
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

    return Signature(cause, holds, moved, evidence)


def summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
    text = (
        f"Copying tensors to and from the model took {fmt(ev(e, 'data_movement_in_episodes'), '', 1)}"
        f" ms per request (baseline {fmt(ev(e, 'data_movement_baseline'), '', 1)} ms) in {eps}, "
        f"while the model's compute stayed at {fmt(ev(e, 'compute_infer_in_episodes'), '', 1)} ms "
        f"per batch (baseline {fmt(ev(e, 'compute_infer_baseline'), '', 1)} ms)"
    )
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
