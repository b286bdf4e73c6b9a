"""A capacity run's answer: the bracket, replicas, the prediction from Triton's statistics."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from loadkit.analysis.capacity import bracket, capacity_result, predicted_ceiling, replicas_for
from loadkit.analysis.model import CapacityProbe


def _probe(i: int, rate: float, passed: bool, generator: bool = False) -> CapacityProbe:
    return CapacityProbe(
        index=i,
        rate_rps=rate,
        trial=1,
        start_s=10.0 * i,
        measure_start_s=10.0 * i + 2,
        end_s=10.0 * i + 8,
        offered_rps=rate,
        achieved_rps=rate if passed else rate * 0.8,
        goodput_rps=rate,
        corrected_ms=20.0 if passed else 900.0,
        p50_ms=5.0,
        service_ms=10.0,
        errors_pct=0.0,
        dropped=0,
        in_flight_growing=not passed,
        generator_cpu_pct=5.0,
        windows=3,
        stable=True,
        passed=passed,
        generator_limited=generator,
        reasons=() if passed else ("in flight growing",),
    )


def test_the_worked_example_2000_rps_at_50_percent_headroom() -> None:
    # capacity 450 req/s per replica, kept at half: 2000 / 225 = 8.9 -> 9 replicas
    assert replicas_for(2000.0, 450.0, 0.5) == 9
    assert replicas_for(2000.0, 500.0, 0.5) == 8  # exactly 8: no rounding up past it
    assert replicas_for(2000.0, 0.0, 0.5) is None


def test_bracket_is_highest_pass_below_the_lowest_failure() -> None:
    probes = [
        _probe(0, 10, True),
        _probe(1, 20, True),
        _probe(2, 40, False),
        _probe(3, 30, True),
        _probe(4, 35, False),
        _probe(5, 30, False),
    ]
    assert bracket(probes) == (20, 30)  # 30 failed once: it is not the capacity


def test_capacity_result_with_peak_gives_replicas_over_the_bracket() -> None:
    probes = [
        _probe(0, 100, True),
        _probe(1, 200, False),
        _probe(2, 150, True),
        _probe(3, 175, False),
    ]
    result = capacity_result(
        {"slo_percentile": "p99", "slo_ms": 50.0, "peak_rps": 2000, "headroom": 0.5},
        probes,
        window_starts_s=np.arange(0, 40, 1.0),
        window_s=1.0,
        triton_rows=None,
        triton=None,
        host=None,
        gpu=None,
        model=None,
        instances=None,
        max_batch_size=None,
    )
    assert (result.rate_rps, result.low_rps, result.high_rps) == (150, 150, 175)
    assert result.replicas == math.ceil(2000 / 75) == 27
    assert result.replicas_low == math.ceil(2000 / 87.5) == 23
    assert "linear scale-out" in result.answer
    assert result.limited_by == "server" and not result.generator_limited


def test_a_generator_limited_probe_is_never_the_servers_capacity() -> None:
    probes = [_probe(0, 100, True), _probe(1, 200, False, generator=True)]
    result = capacity_result(
        {"slo_percentile": "p99", "slo_ms": 50.0},
        probes,
        window_starts_s=np.arange(0, 20, 1.0),
        window_s=1.0,
        triton_rows=None,
        triton=None,
        host=None,
        gpu=None,
        model=None,
        instances=None,
        max_batch_size=None,
    )
    assert result.limited_by == "generator" and result.generator_limited
    assert result.high_rps == 200 and "not the server's capacity" in result.answer


def test_prediction_uses_the_best_served_batch_size() -> None:
    rows = pd.DataFrame(
        {
            "model": ["m", "m"],
            "batch_sizes": [{"1": 30, "8": 30}, {"8": 10}],
            "compute_infer_us_by_batch_size": [{"1": 1000.0, "8": 3000.0}, {"8": 3000.0}],
        }
    )
    p = predicted_ceiling(rows, "m", instances=2)
    assert p is not None and p.batch_size == 8
    assert round(p.rps_per_instance) == 2667 and round(p.rps) == 5333  # the example
