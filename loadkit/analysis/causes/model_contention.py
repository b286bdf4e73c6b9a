"""Another model on the same server: its load takes the accelerator (or the backend's threads).

Models on one Triton share its GPU's SMs (and, on a CPU backend, its threads):
a burst on a second model makes the analyzed model's compute per batch grow
with nothing else changing, neither its arrivals nor the GPU's clock. Triton's
statistics report every model, so the other models' activity per window is on
the record (`TritonSeries.others`): the signature holds where the analyzed
model's compute per batch grew while another model was asked for more work, its
inferences per second and with them its compute per second beyond its own
baseline's spread (`base.model_asked_more`). Its demand is the gate, its compute
the effect: a device slower for everyone (a power cap, heat, a container quota)
raises every model's compute per second at flat traffic, and is not a neighbour's
doing. Its series are the server's own.
"""

from __future__ import annotations

import numpy as np

from loadkit.analysis.causes.base import (
    COMPUTE_INFLATION,
    GROWTH_RATIO,
    Cause,
    Signals,
    Signature,
    assessed,
    check,
    compute_inflation,
    ev,
    flag,
    fmt,
    material,
    mean,
    median,
    model_asked_more,
    need,
)
from loadkit.analysis.model import Evidence
from loadkit.analysis.noise import above_spread
from loadkit.analysis.telemetry import ModelActivity

CAUSE_MODEL_CONTENTION = "model_contention"
# The analyzed model's compute per batch (over its baseline at the same batch size) grew
# where it reaches the compute residual's bar (`base.COMPUTE_INFLATION`) or clears its
# baseline's spread (`noise.above_spread`) by at least this ratio, and by a material share
# of the P99 (`base.material`) either way. Below the residual's bar because a second,
# independent signal (another model rose in the same windows) carries the specificity:
# the growth need only stand out of its own noise. Near capacity a small growth is a large
# queue: a neighbour holding 16 % of the accelerator grew compute per batch 1.24x (spread
# 0.005) and the queue 5x, and the queue residual was named (report set seed 61, session 20).
COMPUTE_INFLATION_FLOOR = 1.1
# ... and the queue per request beyond its spread and at least `base.GROWTH_RATIO` times
# its baseline median (the queue residual's bar) makes a small growth material.
# Another model was asked for more where its inferences per second and its compute per
# second clear their baselines' spreads (`base.model_asked_more`, which CPU saturation
# reads too).


def _busiest_riser(
    others: dict[str, ModelActivity], asked: dict[str, np.ndarray], ep: np.ndarray, base: np.ndarray
) -> tuple[str, ModelActivity] | None:
    """The other model asked for more in most episode windows; of those, the one whose
    compute per second rose most over its baseline."""
    best: tuple[int, float, str, ModelActivity] | None = None
    for name, act in others.items():
        windows = int(np.count_nonzero(asked[name] & ep))
        rise = (mean(act.compute_ms_per_s, ep) or 0.0) - (median(act.compute_ms_per_s, base) or 0.0)
        if best is None or (windows, rise) > best[:2]:
            best = (windows, rise, name, act)
    return None if best is None else (best[2], best[3])


@assessed(CAUSE_MODEL_CONTENTION)
def signature(sig: Signals, baseline: np.ndarray) -> Signature:
    tr = need(sig.triton, "no triton_stats data")
    check(bool(tr.others), "the server's statistics report no other model")
    inflation = need(
        compute_inflation(sig, baseline),
        "fewer than 3 baseline windows with Triton statistics to fit compute per batch",
    )
    others = tr.others
    asked = {name: model_asked_more(o, baseline) for name, o in others.items()}
    busy = np.nansum([o.compute_ms_per_s for o in others.values()], axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        excess_ms = tr.batch_compute_ms - tr.batch_compute_ms / inflation
    beyond_spread = need(
        above_spread(inflation, baseline, COMPUTE_INFLATION_FLOOR),
        "fewer than 3 baseline windows of compute per batch to judge its spread by",
    )
    grew = (np.nan_to_num(beyond_spread, nan=0.0) > 0) | (
        np.nan_to_num(inflation, nan=0.0) >= COMPUTE_INFLATION
    )
    # Material: the compute's own growth is a share of the P99 that matters, or, near
    # capacity, it shows as the queue: requests wait behind the slower batches (a 1.19x
    # at 80 % of capacity added 1.3 ms of compute and 5 ms of queue to a 20 ms P99).
    matters = material(excess_ms, sig.p99_ms, baseline)
    queued = above_spread(tr.queue_ms_per_request, baseline, GROWTH_RATIO)
    if queued is not None:
        matters |= np.nan_to_num(queued, nan=0.0) > 0
    slower = grew & matters
    holds = flag(slower & np.logical_or.reduce(list(asked.values())), inflation)

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        out = [
            Evidence(
                "compute_inflation_in_episodes",
                median(inflation, ep & (holds > 0)),
                "x",
                "compute per batch vs baseline at the same batch size",
            ),
            Evidence("compute_per_batch_in_episodes", mean(tr.batch_compute_ms, ep), "ms"),
            Evidence("compute_per_batch_baseline", median(tr.batch_compute_ms, base), "ms"),
            Evidence("offered_in_episodes", mean(sig.offered_rps, ep), "req/s"),
            Evidence("offered_baseline", median(sig.offered_rps, base), "req/s"),
            Evidence("other_models_compute_in_episodes", mean(busy, ep), "ms/s"),
            Evidence("other_models_compute_baseline", median(busy, base), "ms/s"),
        ]
        top = _busiest_riser(others, asked, ep, base)
        if top is not None:
            name, act = top
            out += [
                Evidence(
                    "neighbour_rate_in_episodes",
                    mean(act.inferences_per_s, ep),
                    "inferences/s",
                    name,
                ),
                Evidence(
                    "neighbour_rate_baseline",
                    median(act.inferences_per_s, base),
                    "inferences/s",
                    name,
                ),
                Evidence(
                    "neighbour_compute_in_episodes", mean(act.compute_ms_per_s, ep), "ms/s", name
                ),
                Evidence(
                    "neighbour_compute_baseline", median(act.compute_ms_per_s, base), "ms/s", name
                ),
            ]
        return out

    return Signature(CAUSE_MODEL_CONTENTION, holds, busy, evidence)


def summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
    who = next((x.note for x in e if x.name == "neighbour_rate_in_episodes"), None)
    model = f"model {who!r}" if who else "another model"
    return (
        f"Compute per batch x{fmt(ev(e, 'compute_inflation_in_episodes'), '', 1)} in {eps} "
        f"while {model} on the same server ran "
        f"{fmt(ev(e, 'neighbour_rate_in_episodes'))} inferences/s "
        f"(baseline {fmt(ev(e, 'neighbour_rate_baseline'))}) and held "
        f"{fmt(ev(e, 'neighbour_compute_in_episodes'))} ms of compute per second "
        f"(baseline {fmt(ev(e, 'neighbour_compute_baseline'))}); this model's arrivals "
        f"{fmt(ev(e, 'offered_in_episodes'))} req/s (baseline {fmt(ev(e, 'offered_baseline'))})."
    )


CAUSE = Cause(
    id=CAUSE_MODEL_CONTENTION,
    title="Another model on the same server",
    action="Keep the models from taking each other's accelerator time: give each model its "
    "own instance_group (count, GPUs), use Triton's rate limiter (rate_limiter resources) or "
    "request priorities (dynamic_batching priority_levels), or move the busy model to a "
    "separate GPU or server.",
    signature=signature,
    summary=summary,
    signal=("telemetry.other_models_compute_ms_per_s", "other models' compute (ms/s)"),
    fault_events=("neighbour-model",),
)
