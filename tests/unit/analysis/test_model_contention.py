"""Another model on the same server, and GPU clock drops too shallow for the fixed 80 %."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from loadkit.analysis.align import make_grid
from loadkit.analysis.causes import model_contention
from loadkit.analysis.causes._gpu_clock import throttle_classes
from loadkit.analysis.causes.base import Signals
from loadkit.analysis.causes.unexplained import COMPUTE, compute_signature
from loadkit.analysis.model import CAUSE_GPU_CLOCK_OTHER, CAUSE_GPU_POWER, CAUSE_GPU_THERMAL
from loadkit.analysis.telemetry import (
    GpuSeries,
    ModelActivity,
    TritonSeries,
    align_gpu,
    align_triton,
)
from loadkit.testing.synthetic import FaultWindow as W
from loadkit.testing.synthetic import RunSpec, periodic_clock_drops

S = 1_000_000_000
N = 20
EPISODE = [5, 6, 7, 14, 15]


def _signals(compute_x: float, neighbour_ms_per_s: float, neighbour_base: float = 0.0) -> Signals:
    """The ranker's compute per batch x`compute_x` in EPISODE; doc_ranker's busy ms/s there."""
    nan = np.full(N, np.nan)
    tr = TritonSeries("ranker", nan, nan, nan, nan, nan, nan, nan, nan, None, 0)
    tr.batch_compute_ms = np.full(N, 4.0)
    tr.batch_compute_ms[EPISODE] *= compute_x
    tr.batch_size_req_weighted = np.full(N, 2.0)
    tr.batch_size_mean = np.full(N, 2.0)
    tr.queue_ms_per_request = np.full(N, 0.5)
    busy = np.full(N, neighbour_base)
    busy[EPISODE] = neighbour_ms_per_s
    rate = busy / 2.0  # 2 ms of compute per request
    tr.others = {"doc_ranker": ModelActivity(rate, rate / 4.0, busy)}
    return Signals(
        window_s=1.0,
        starts_ns=np.arange(N, dtype=np.int64) * S,
        p99_ms=np.full(N, 10.0),
        service_p50_ms=np.full(N, 5.0),
        completed=np.full(N, 150.0),
        offered_rps=np.full(N, 150.0),
        throughput_rps=np.full(N, 150.0),
        in_flight=np.ones(N),
        sources={"triton_stats": tr},
        samples=None,
        max_batch_size=32,
        max_queue_delay_ms=0.5,
        burst_mask=np.zeros(N, dtype=bool),
    )


def _baseline() -> np.ndarray:
    base = np.ones(N, dtype=bool)
    base[EPISODE] = False
    return base


def _holds(sig: Signals) -> list[int]:
    s = model_contention.signature(sig, _baseline())
    assert s.holds is not None, s.not_assessable
    return np.flatnonzero(s.holds == 1).tolist()


def test_compute_growing_while_another_model_bursts_is_model_contention():
    # GIVEN compute per batch x1.8 while doc_ranker holds 400 ms/s of compute (idle before)
    sig = _signals(1.8, 400.0)
    # THEN the signature holds in exactly those windows, naming the other model and its rate
    assert _holds(sig) == EPISODE
    s = model_contention.signature(sig, _baseline())
    assert s.evidence is not None
    ep = ~_baseline()
    evidence = s.evidence(ep, _baseline())
    text = model_contention.CAUSE.summary(evidence, "5/5 spike episodes", None)
    assert "'doc_ranker'" in text and "200 inferences/s (baseline 0)" in text, text
    assert "x1.8" in text, text


def test_another_model_busy_alone_or_compute_slow_alone_is_not_contention():
    # GIVEN the other model's burst without any slowdown of this model: nothing to explain
    assert _holds(_signals(1.0, 400.0)) == []
    # ... the model slowing while the other model stays idle: the model's own (the residual)
    assert _holds(_signals(1.8, 0.0)) == []
    # ... and a busy neighbour at its usual load (within its own spread): no rise
    assert _holds(_signals(1.8, 410.0, neighbour_base=400.0)) == []


def _neighbour(busy_x: float, rate_x: float) -> ModelActivity:
    """A model at 100 inferences/s and 200 ms/s of compute, each x`rate_x`, x`busy_x` in EPISODE."""
    rate, busy = np.full(N, 100.0), np.full(N, 200.0)
    rate[EPISODE] *= rate_x
    busy[EPISODE] *= busy_x
    return ModelActivity(rate, rate / 4.0, busy)


def test_a_slowdown_shared_by_every_model_does_not_name_the_neighbour():
    # GIVEN the whole device slower in EPISODE (a power cap, heat, a quota): the ranker's
    # compute per batch x1.8, and doc_ranker's compute per second x1.8 at its usual traffic
    sig = _signals(1.8, 0.0)
    assert sig.triton is not None
    sig.triton.others = {"doc_ranker": _neighbour(busy_x=1.8, rate_x=1.0)}
    # THEN no window is the neighbour's: it was asked for nothing more
    assert _holds(sig) == []


def test_a_neighbour_asked_for_more_in_the_episodes_is_named():
    # GIVEN the same slowdown, doc_ranker's traffic x1.8 with its compute
    sig = _signals(1.8, 0.0)
    assert sig.triton is not None
    sig.triton.others = {"doc_ranker": _neighbour(busy_x=1.8, rate_x=1.8)}
    # THEN it holds in the episodes
    assert _holds(sig) == EPISODE
    # AND beside a second model whose compute rose more at flat traffic (slowed too), the
    # one asked for more is the one named
    sig.triton.others["hembed"] = _neighbour(busy_x=2.5, rate_x=1.0)
    s = model_contention.signature(sig, _baseline())
    assert s.evidence is not None
    text = model_contention.CAUSE.summary(
        s.evidence(~_baseline(), _baseline()), "5/5 spike episodes", None
    )
    assert "'doc_ranker'" in text and "180 inferences/s (baseline 100)" in text, text


def test_a_growth_under_the_residuals_bar_is_contention_where_it_clears_its_own_spread():
    # GIVEN compute per batch x1.25 (under the compute residual's 1.3x) while doc_ranker
    # bursts, the ranker's compute flat in its baseline: 1 ms more, a tenth of the P99
    assert _holds(_signals(1.25, 400.0)) == EPISODE
    # ... but not where the baseline's compute varies as much on its own
    noisy = _signals(1.25, 400.0)
    assert noisy.triton is not None
    noisy.triton.batch_compute_ms[::2] *= 1.3
    noisy.triton.batch_compute_ms[EPISODE] = 5.0
    assert _holds(noisy) == []
    # ... nor a growth of a few % that stands out of a flat baseline
    assert _holds(_signals(1.05, 400.0)) == []


def test_near_capacity_a_small_growth_is_material_by_the_queue_it_makes():
    # GIVEN compute per batch x1.15 (0.6 ms, under a tenth of the 10 ms P99) while doc_ranker
    # bursts: no contention by its compute alone ...
    assert _holds(_signals(1.15, 400.0)) == []
    # ... but with the queue per request x4 in those windows (requests wait behind the
    # slower batches), it is
    sig = _signals(1.15, 400.0)
    assert sig.triton is not None
    sig.triton.queue_ms_per_request[EPISODE] = 2.0
    assert _holds(sig) == EPISODE


def test_a_server_with_one_model_cannot_show_contention():
    sig = _signals(1.8, 400.0)
    assert sig.triton is not None
    sig.triton.others = {}
    s = model_contention.signature(sig, _baseline())
    assert s.holds is None and "no other model" in (s.not_assessable or "")


def test_the_residual_does_not_deny_another_models_burst():
    # GIVEN compute x1.8 while doc_ranker bursts: the residual's text reads the statistics
    sig = _signals(1.8, 400.0)
    s = compute_signature(sig, _baseline())
    assert s.evidence is not None
    text = COMPUTE.summary(s.evidence(~_baseline(), _baseline()), "5/5 spike episodes", None)
    assert "moved too: other models' load" in text, text
    # ... and on a server with one model it says nothing about other models
    assert sig.triton is not None
    sig.triton.others = {}
    s = compute_signature(sig, _baseline())
    assert s.evidence is not None
    text = COMPUTE.summary(s.evidence(~_baseline(), _baseline()), "5/5 spike episodes", None)
    assert "other models" not in text, text


def test_align_triton_keeps_the_other_models_activity():
    # GIVEN interval rows of two models: ranker steady, doc_ranker busy in seconds 3-4 only
    rows = []
    for t in range(8):
        rows.append(
            {"t_ns": t * S, "interval_ns": S, "model": "ranker", "inference_count_delta": 100,
             "execution_count_delta": 50, "compute_infer_ns_delta": 100 * 4_000_000,
             "queue_ns_delta": 100 * 500_000, "batch_compute_infer_ns_delta": 50 * 4_000_000}
        )  # fmt: skip
        busy = 300 if t in (3, 4) else 0
        rows.append(
            {"t_ns": t * S, "interval_ns": S, "model": "doc_ranker",
             "inference_count_delta": busy, "execution_count_delta": busy // 8,
             "compute_infer_ns_delta": busy * 2_000_000,
             "queue_ns_delta": 0, "batch_compute_infer_ns_delta": busy // 8 * 2_000_000}
        )  # fmt: skip
    tr = align_triton(pd.DataFrame(rows), make_grid(0, 8 * S, 1.0), "ranker")
    # THEN the analyzed model is the ranker, and doc_ranker's load is kept beside it
    assert tr is not None and tr.model == "ranker"
    assert list(tr.others) == ["doc_ranker"]
    other = tr.others["doc_ranker"]
    assert other.inferences_per_s.tolist() == [0, 0, 0, 300, 300, 0, 0, 0]
    assert other.compute_ms_per_s[3] == 37 * 2.0  # each batch counted once
    assert np.allclose(tr.inferences_per_s, 100)


# --- a shallow clock drop, and one capped GPU among several -------------------------


def _gpu(ratio: np.ndarray, *, power_bit: np.ndarray | None = None, at_limit: float = 0.5):
    n = len(ratio)
    return GpuSeries(
        sm_clock_mhz=1980.0 * ratio,
        sm_clock_max_mhz=np.full(n, 1980.0),
        clock_ratio_busy=ratio,
        temp_c=np.full(n, 60.0),
        power_w=np.full(n, 700.0 * at_limit),
        power_limit_w=np.full(n, 700.0),
        util_pct=np.full(n, 90.0),
        mem_used_bytes=np.full(n, 1e9),
        mem_total_bytes=8e10,
        thermal_reason=np.zeros(n) if power_bit is not None else np.full(n, np.nan),
        power_reason=power_bit if power_bit is not None else np.full(n, np.nan),
        has_reasons=power_bit is not None,
        power_of_limit=np.full(n, at_limit),
    )


def test_a_shallow_drop_with_the_power_cap_bit_is_power_capping():
    # GIVEN the busy clock at 88 % of max in windows 5-7 (a cap at ~80 % of the board's
    # power), with the power-cap bit there, and a steady full clock elsewhere
    ratio = np.ones(N)
    ratio[[5, 6, 7]] = 0.88
    bit = np.zeros(N)
    bit[[5, 6, 7]] = 1.0
    classes = throttle_classes(_gpu(ratio, power_bit=bit))
    # THEN it is power capping, though above the fixed 80 % (which counted it as no drop)
    assert np.flatnonzero(classes[CAUSE_GPU_POWER]).tolist() == [5, 6, 7]
    # ... and a shallow drop with no reason is not an "other" clock drop (GPU Boost moves
    # the clock by a few percent): only a deep one is
    none = throttle_classes(_gpu(ratio, power_bit=np.zeros(N)))
    assert not none[CAUSE_GPU_CLOCK_OTHER].any() and not none[CAUSE_GPU_POWER].any()


def test_a_shallow_drop_within_the_runs_own_clock_spread_is_no_drop():
    # GIVEN a clock that wanders 84-100 % of max all run (its baseline spread), the power
    # bit on throughout, and windows at 90 %
    rng = np.random.default_rng(3)
    ratio = rng.uniform(0.84, 1.0, N)
    ratio[[5, 6, 7]] = 0.90
    classes = throttle_classes(_gpu(ratio, power_bit=np.ones(N)), _baseline())
    # THEN 90 % is inside the run's own spread: no drop
    assert not classes[CAUSE_GPU_POWER][[5, 6, 7]].any()
    # ... while the same windows at 60 % are a drop
    ratio[[5, 6, 7]] = 0.6
    classes = throttle_classes(_gpu(ratio, power_bit=np.ones(N)), _baseline())
    assert classes[CAUSE_GPU_POWER][[5, 6, 7]].all()


def _gpu_rows(gpu: int, power_w: float, clock: float, t: range) -> list[dict[str, object]]:
    return [
        {"t_ns": int(s * S + k * S / 10), "gpu": gpu, "sm_clock_mhz": clock,
         "sm_clock_max_mhz": 1980.0, "power_w": power_w, "power_limit_w": 700.0,
         "util_gpu_pct": 90.0, "temp_c": 60.0}
        for s in t for k in range(10)
    ]  # fmt: skip


def test_one_capped_gpu_of_two_is_judged_on_its_own_power_without_reason_bits():
    # GIVEN two GPUs without reason bits: GPU 0 at 100 W of 700, GPU 1 at its limit (690 W
    # of 700) with its clock at 85 % in seconds 4-6, full elsewhere at 400 W
    rows = _gpu_rows(0, 100.0, 1980.0, range(10))
    rows += _gpu_rows(1, 400.0, 1980.0, range(0, 4)) + _gpu_rows(1, 400.0, 1980.0, range(7, 10))
    rows += _gpu_rows(1, 690.0, 0.85 * 1980.0, range(4, 7))
    gpu = align_gpu(pd.DataFrame(rows), make_grid(0, 10 * S, 1.0))
    assert gpu is not None and not gpu.has_reasons
    # THEN the summed power (790 of 1400 W) is far from the limit, but GPU 1's is at it
    assert gpu.power_w[5] == 790.0 and gpu.power_of_limit is not None
    assert gpu.power_of_limit[5] > 0.97
    classes = throttle_classes(gpu)
    assert np.flatnonzero(classes[CAUSE_GPU_POWER]).tolist() == [4, 5, 6]
    assert not classes[CAUSE_GPU_THERMAL].any()


def test_a_neighbours_bursts_on_the_shared_accelerator_are_named_first(analyze_spec):
    """The whole pipeline: Triton's statistics of two models, the analyzed one slowed."""
    from loadkit.testing.synthetic import FaultWindow, RunSpec

    # GIVEN doc_ranker holding 55 % of the accelerator for 3 s every 9 s, the ranker's
    # compute per batch x2.2 there, its arrivals flat, no clock, CPU or quota signal
    bursts = tuple(FaultWindow(12 + 9 * k, 15 + 9 * k, 0.55) for k in range(7))
    a = analyze_spec(RunSpec(duration_s=80, rate_rps=400, neighbour_bursts=bursts), "neighbour")
    # THEN the other model is the first finding, by name, above weak
    assert a.findings, a.headline
    top = a.findings[0]
    assert top.cause == "model_contention", [(f.cause, f.confidence) for f in a.findings]
    assert top.confidence in ("strong", "moderate")
    assert "'doc_ranker'" in top.summary, top.summary
    # ... the compute residual is not first, and the other models' series is in the analysis
    assert a.telemetry.other_models_compute_ms_per_s is not None
    assert max(v or 0 for v in a.telemetry.other_models_compute_ms_per_s) > 400


def test_a_light_neighbour_near_capacity_is_named_not_the_queue(analyze_spec):
    from loadkit.testing.synthetic import FaultWindow, RunSpec

    # GIVEN doc_ranker holding 16 % of the accelerator for 3 s every 9 s while the ranker
    # runs at 800 req/s: its compute per batch grows 1.19x (1.3 ms, under a tenth of the
    # 20 ms P99) and its queue per request 2-3x, as in report set seed 61 at the knee
    bursts = tuple(FaultWindow(12 + 9 * k, 15 + 9 * k, 0.16) for k in range(7))
    spec = RunSpec(duration_s=80, rate_rps=800, neighbour_bursts=bursts)
    a = analyze_spec(spec, "light-neighbour")
    # THEN the other model is named first, not the queue growth it made
    causes = [(f.cause, f.confidence) for f in a.findings]
    assert causes and causes[0][0] == "model_contention", causes
    assert "unexplained_queue_growth" not in [c for c, _ in causes], causes


# The whole server slowed for 3 s every 9 s: its container's CPU quota, or its GPU's power cap.
SHARED_SLOWDOWNS = {
    "cgroup_throttling": {"cgroup_quotas": tuple(W(12 + 9 * k, 15 + 9 * k, 1.2) for k in range(7))},
    "gpu_clock_power": {
        "clock_drops": periodic_clock_drops(9, 3, first_s=12, until_s=80, factor=1.8, kind="power")
    },
}


@pytest.mark.parametrize("cause", sorted(SHARED_SLOWDOWNS))
def test_a_whole_server_slowing_names_its_cause_not_a_neighbour_at_flat_traffic(
    analyze_spec, cause
):
    # GIVEN doc_ranker holding 30 % of the accelerator at flat traffic all run, and the
    # whole server slowed every 9 s: both models' compute per second rises there (x2.2
    # under the quota, x1.8 under the cap), doc_ranker's requests do not
    spec = RunSpec(duration_s=80, rate_rps=400, neighbour_share=0.3, **SHARED_SLOWDOWNS[cause])
    a = analyze_spec(spec, f"flat-neighbour-{cause}")
    causes = [(f.cause, f.confidence) for f in a.findings]
    # THEN the common cause is first, and the neighbour is not named above weak
    assert causes and causes[0][0] == cause, causes
    assert ("model_contention", "strong") not in causes, causes
    assert ("model_contention", "moderate") not in causes, causes
