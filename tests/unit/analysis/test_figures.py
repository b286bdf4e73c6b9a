"""Figure values the report reads: episode-aligned signals, batch sizes per phase, CPU per core."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from loadkit.analysis.align import NS, make_grid
from loadkit.analysis.figures import (
    ALIGN_AFTER_S,
    ALIGN_BEFORE_S,
    align_on_episodes,
    cpu_per_core_windows,
    phase_masks,
)
from loadkit.analysis.model import Analysis, BurstRecovery
from loadkit.testing.synthetic import Burst, RunSpec, demo_spec
from loadkit.testing.synthetic import FaultWindow as W

T0 = 1_764_449_000 * NS
CGROUP = RunSpec(rate_rps=200, cgroup_quotas=(W(20, 30, 1.5), W(60, 70, 1.5)))
CPU = RunSpec(rate_rps=200, cpu_saturations=(W(20, 30, 15.0), W(60, 70, 15.0)))
BURST = RunSpec(rate_rps=600, bursts=(Burst(30, 45, 2.0),))
BATCHING = RunSpec(rate_rps=150, max_queue_delay_us=20000, max_batch_size=32)


def _at(aligned, offset_s: float) -> float | None:
    return aligned.mean[aligned.offsets_s.index(offset_s)]


# --- R1: episode-aligned signal -------------------------------------------------------


def test_align_on_episodes_averages_each_offset_over_the_episodes_inside_the_run():
    grid = make_grid(T0, T0 + 40 * NS, 1.0)
    values = np.arange(40, dtype=float)
    values[12] = np.nan
    offsets, mean, low, high = align_on_episodes(values, [2, 10, 30], grid)
    assert offsets[0] == -ALIGN_BEFORE_S and offsets[-1] == ALIGN_AFTER_S
    at = dict(zip(offsets, mean, strict=True))
    assert at[0.0] == pytest.approx((2 + 10 + 30) / 3)
    assert at[-5.0] == pytest.approx((5 + 25) / 2)  # episode at window 2 has no -5
    assert at[2.0] == pytest.approx((4 + 32) / 2)  # window 12 is missing
    assert at[20.0] == pytest.approx((22 + 30) / 2)  # 30 + 20 is past the run
    j = offsets.index(0.0)
    assert low[j] == pytest.approx(np.percentile([2, 10, 30], 10))
    assert np.isnan(low[offsets.index(-5.0)])  # a band needs 3 episodes


def test_gpu_finding_carries_the_sm_clock_aligned_at_its_episodes(analyze_spec):
    a = analyze_spec(demo_spec(), "demo")
    finding = next(f for f in a.findings if f.cause == "gpu_clock_thermal")
    aligned = finding.aligned
    assert aligned is not None and aligned.signal == "telemetry.gpu_sm_clock_mhz"
    assert aligned.label == "SM clock (MHz)" and aligned.episodes_used == len(finding.episodes)
    assert len(aligned.mean) == len(aligned.offsets_s) == len(aligned.p99_ms)
    assert aligned.baseline == pytest.approx(1980, rel=0.01)
    # THEN the clock is down right after the start while P99 is up, and normal before.
    assert _at(aligned, 2.0) < 0.7 * aligned.baseline
    assert _at(aligned, -4.0) > 0.95 * aligned.baseline
    p99 = dict(zip(aligned.offsets_s, aligned.p99_ms, strict=True))
    assert p99[2.0] > 1.5 * p99[-4.0]
    assert aligned.low is not None and aligned.high is not None


@pytest.mark.parametrize(
    ("spec", "cause", "signal"),
    [
        (CGROUP, "cgroup_throttling", "telemetry.cgroup_throttled_pct"),
        (CPU, "cpu_saturation", "telemetry.cpu_core_max_pct"),
        (BURST, "arrival_burst", "windows.offered_rps"),
    ],
)
def test_each_cause_is_aligned_on_its_own_signal(analyze_spec, spec, cause, signal):
    a = analyze_spec(spec, cause)
    finding = next(f for f in a.findings if f.cause == cause)
    aligned = finding.aligned
    assert aligned is not None and aligned.signal == signal
    # The cause's signal inside the episode is well above its matched-baseline level.
    inside = max(v for v in aligned.mean[aligned.offsets_s.index(0.0) :][:5] if v is not None)
    assert aligned.baseline is not None and inside > 1.5 * aligned.baseline + 5


def test_a_standing_condition_without_episodes_has_no_aligned_signal(analyze_spec):
    a = analyze_spec(BATCHING, "batching")
    finding = next(f for f in a.findings if f.cause == "batching_window")
    assert finding.episodes == () and not a.episodes
    assert finding.aligned is None


# --- R2: batch sizes per phase ----------------------------------------------------------


def test_phase_masks_burst_recovery_and_steady_after_warmup():
    grid = make_grid(T0, T0 + 60 * NS, 1.0)

    def rec(start, end, recovered_at):
        return BurstRecovery(
            burst_start_ns=T0 + start * NS,
            burst_end_ns=T0 + end * NS,
            rate=None,
            pre_burst_p99_ms=None,
            band_upper_ms=None,
            recovered=recovered_at is not None,
            recovery_s=None,
            recovered_at_ns=None if recovered_at is None else T0 + recovered_at * NS,
            peak_p99_ms=None,
            peak_excess_ms=None,
            excess_area_ms_s=None,
        )

    # GIVEN one burst that recovered at 25 s and one at 40 s that never did.
    masks = phase_masks(grid, [rec(40, 45, None), rec(10, 20, 25)], T0 + 5 * NS)
    idx = {k: set(np.flatnonzero(v).tolist()) for k, v in masks.items()}
    assert idx["burst"] == set(range(10, 20)) | set(range(40, 45))
    assert idx["recovery"] == set(range(20, 25)) | set(range(45, 60))
    assert idx["steady"] == set(range(5, 10)) | set(range(25, 40))


def test_batch_histogram_per_phase_from_the_window_matrix(analyze_spec):
    a = analyze_spec(BURST, "arrival_burst")
    phases = {p.phase: p for p in a.batch_by_phase}
    assert set(phases) == {"steady", "burst", "recovery"}
    matrix = np.array(a.telemetry.batch_sizes.counts)
    for p in phases.values():
        assert p.sizes == a.telemetry.batch_sizes.sizes
        assert sum(p.share) == pytest.approx(1.0)
        assert p.mean_batch_size == pytest.approx(np.dot(p.executions, p.sizes) / sum(p.executions))
    assert sum(sum(p.executions) for p in phases.values()) <= matrix.sum()
    # THEN the 2x burst fills batches; steady traffic does not.
    assert phases["burst"].mean_batch_size > 1.5 * phases["steady"].mean_batch_size
    assert phases["burst"].windows == 15


def test_a_run_without_bursts_has_only_the_steady_phase(analyze_spec):
    a = analyze_spec(CGROUP, "cgroup_throttling")
    assert [p.phase for p in a.batch_by_phase] == ["steady"]


# --- R4: CPU per core ------------------------------------------------------------------


def test_cpu_per_core_window_means_with_a_missing_core():
    grid = make_grid(T0, T0 + 3 * NS, 1.0)
    frame = pd.DataFrame(
        {
            "t_ns": [T0, T0 + NS // 2, T0 + NS, T0 + 2 * NS],
            "cpu_per_core_pct": [[10.0, 20.0], [30.0, 40.0], [50.0], None],
        }
    )
    per_core = cpu_per_core_windows(frame, grid)
    assert per_core == ((20.0, 50.0, None), (30.0, None, None))
    assert cpu_per_core_windows(frame.drop(columns="cpu_per_core_pct"), grid) is None


def test_pipeline_fills_cpu_per_core_from_host_rows(analyze_spec):
    a = analyze_spec(CPU, "cpu_saturation")
    per_core = a.telemetry.cpu_per_core_pct
    assert per_core is not None and len(per_core) == CPU.cores
    assert all(len(core) == len(a.windows.t_ns) for core in per_core)
    second = a.windows.t_s.index(25.0)
    assert all(core[second] >= 95 for core in per_core)  # saturated: every core busy
    assert max(core[a.windows.t_s.index(45.0)] for core in per_core) < 80


# --- serialization --------------------------------------------------------------------


def test_new_fields_round_trip_and_old_files_without_them_still_load(analyze_spec):
    a = analyze_spec(demo_spec(), "demo")
    data = json.loads(a.to_json())
    assert Analysis.from_dict(data) == a
    # GIVEN an analysis.json written before these fields existed.
    for key in ("batch_by_phase", "intervals"):
        del data[key]
    del data["telemetry"]["cpu_per_core_pct"]
    for finding in data["findings"]:
        del finding["aligned"]
    old = Analysis.from_dict(data)
    assert old.batch_by_phase == () and old.intervals == ()
    assert old.telemetry.cpu_per_core_pct is None
    assert all(f.aligned is None for f in old.findings)
