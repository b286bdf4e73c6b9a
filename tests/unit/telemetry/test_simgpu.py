"""The simulated GPU's physics, stepped with an explicit dt (no clocks, no files)."""

from __future__ import annotations

import pytest

from loadkit.telemetry.simgpu import (
    REASON_GPU_IDLE,
    THERMAL_THROTTLE_REASONS,
    CoolingFaultSchedule,
    SimGpuModel,
)

DT = 0.1


def drive(model: SimGpuModel, seconds: float, work: float) -> list[tuple[str, str, float]]:
    """Offer `work` (busy fraction at full clock); a throttled GPU is busy longer."""
    log = []
    for _ in range(round(seconds / DT)):
        busy = min(1.0, work / model.clock_factor)
        log += [(t.name, t.action, t.t_s) for t in model.step(DT, busy)]
    return log


@pytest.mark.parametrize("work", [0.0, 0.3, 1.0])
def test_without_a_fault_the_gpu_never_throttles(work: float) -> None:
    model = SimGpuModel()
    assert drive(model, 60, work) == []
    assert model.state.clock_factor == 1.0
    assert model.temp_c < model.params.temp_slowdown_c - 5


def test_temperature_follows_power_and_cools_toward_ambient() -> None:
    model = SimGpuModel()
    drive(model, 10, 0.8)
    hot = model.temp_c
    assert hot > 60
    drive(model, 10, 0.0)
    assert model.temp_c < hot - 15
    assert model.temp_c == pytest.approx(
        model.steady_temp_c(model.params.power_idle_w, False), abs=0.5
    )
    assert model.state.clocks_event_reasons & REASON_GPU_IDLE


@pytest.mark.parametrize("work", [0.1, 0.3, 0.6])
def test_cooling_fault_throttles_quickly_and_releases_quickly(work: float) -> None:
    # GIVEN a fault of 5 s every 15 s, first at t=5 s
    model = SimGpuModel(faults=CoolingFaultSchedule(period_s=15, duration_s=5, offset_s=5))
    log = drive(model, 48, work)
    starts = [t for name, action, t in log if name == "thermal-throttle" and action == "start"]
    ends = [t for name, action, t in log if name == "thermal-throttle" and action == "end"]
    fault_starts = [t for name, action, t in log if name == "cooling-fault" and action == "start"]
    fault_ends = [t for name, action, t in log if name == "cooling-fault" and action == "end"]
    # THEN one throttle episode per fault, starting within 2 s, ending within 2 s of its end
    assert len(fault_starts) == len(starts) == len(ends) == 3
    for fs, fe, ts, te in zip(fault_starts, fault_ends, starts, ends, strict=True):
        assert 0 < ts - fs <= 2.0
        assert 0 <= te - fe <= 2.0


def test_throttling_drops_the_clock_and_sets_thermal_reason_bits() -> None:
    model = SimGpuModel(faults=CoolingFaultSchedule(period_s=20, duration_s=8, offset_s=1))
    drive(model, 5, 0.4)
    state = model.state
    assert state.throttled
    assert 0.5 <= state.clock_factor <= 0.6
    assert state.sm_clock_mhz == round(state.sm_clock_max_mhz * state.clock_factor)
    assert state.clocks_event_reasons & THERMAL_THROTTLE_REASONS == THERMAL_THROTTLE_REASONS
    assert state.temp_c < state.temp_shutdown_c  # plausible temperatures even under a fault
    assert state.thermal_violation_ns > 0


def test_idle_gpu_does_not_throttle_even_during_a_fault() -> None:
    model = SimGpuModel(faults=CoolingFaultSchedule(period_s=20, duration_s=15, offset_s=1))
    assert [e for e in drive(model, 15, 0.0) if e[0] == "thermal-throttle"] == []


def test_energy_counter_integrates_power() -> None:
    model = SimGpuModel()
    drive(model, 10, 0.0)
    assert model.state.energy_mj == pytest.approx(model.params.power_idle_w * 10 * 1000, rel=1e-6)


def test_fault_schedule_validation_and_activity() -> None:
    with pytest.raises(ValueError, match="shorter than its period"):
        CoolingFaultSchedule(period_s=5, duration_s=5)
    sched = CoolingFaultSchedule(period_s=10, duration_s=2)  # first fault one period in
    assert not sched.active(5)
    assert sched.active(10.5) and not sched.active(12.5) and sched.active(21)
    assert not CoolingFaultSchedule().active(100)
