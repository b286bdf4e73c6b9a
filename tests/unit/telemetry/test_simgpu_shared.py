"""The simulated GPU of a shared fleet: a power cap, a second GPU, hidden reason bits, shared time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadkit.rundir.schema import REASON_SW_POWER_CAP
from loadkit.telemetry import fake_nvml
from loadkit.telemetry.simgpu import PowerCapSchedule, SimGpuModel
from loadkit.telemetry.simgpu_runner import (
    MIN_SHARE,
    SimGpuConfig,
    _published,
    beside,
    config_from_json,
    config_to_json,
    shares,
    write_state,
)


def test_a_power_cap_holds_power_at_its_limit_and_the_clock_down_with_the_reason_bit() -> None:
    cap = PowerCapSchedule(10.0, 3.0, 2.0, power_fraction=0.7, clock_fraction=0.85)
    gpu = SimGpuModel(power_cap=cap)
    seen = []
    for _ in range(60):  # 6 s at 10 Hz, 30 % busy
        transitions = gpu.step(0.1, 0.3)
        seen += [(t.name, t.action) for t in transitions]
        if 2.2 < gpu.t_s < 4.8:  # inside the window
            s = gpu.state
            assert s.power_limit_w == pytest.approx(0.7 * 700.0)
            assert s.power_w / s.power_limit_w > 0.97
            assert s.sm_clock_mhz == round(0.85 * 1980)
            assert s.clocks_event_reasons & REASON_SW_POWER_CAP
        elif gpu.t_s > 5.2:  # after it: the board's limit, full clock, no bit
            s = gpu.state
            assert s.power_limit_w == 700.0 and s.sm_clock_mhz == 1980
            assert not s.clocks_event_reasons & REASON_SW_POWER_CAP
    assert seen == [("power-cap", "start"), ("power-cap", "end")]


def test_power_cap_fractions_are_checked() -> None:
    with pytest.raises(ValueError, match="fractions"):
        PowerCapSchedule(10.0, 3.0, power_fraction=1.5)


def test_models_sharing_the_gpu_leave_each_other_what_their_work_does_not_take() -> None:
    # GIVEN the ranker busy 20 % and doc_ranker 40 % of the last step, each at full speed
    first = shares({"ranker": 0.2, "doc_ranker": 0.4})
    assert first == {"ranker": 0.6, "doc_ranker": 0.8}
    # THEN a model slowed to half (busy twice as long for the same work) takes no more:
    # doc_ranker busy 80 % at a share of 0.5 is still 40 % of the GPU's time
    assert shares({"ranker": 0.2, "doc_ranker": 0.8}, {"ranker": 1.0, "doc_ranker": 0.5}) == first
    # ... and however busy the others, a model keeps its turn
    assert shares({"ranker": 0.1, "doc_ranker": 3.0})["ranker"] == MIN_SHARE


def test_the_state_file_holds_both_gpus_and_fake_nvml_reads_them(tmp_path: Path) -> None:
    # GIVEN a capped GPU 0 beside a GPU 1 at a background load, reason bits hidden
    config = SimGpuConfig(
        state_path=str(tmp_path / "state.json"),
        triton_url=None,
        shared_models=("doc_ranker",),
        power_cap=PowerCapSchedule(10.0, 3.0, 0.0, power_fraction=0.6, clock_fraction=0.8),
        extra_devices=(0.3,),
        reason_bits=False,
    )
    assert config_from_json(config_to_json(config)) == config
    gpu, (other,) = SimGpuModel(config.params, power_cap=config.power_cap), beside(config)
    gpu.step(0.5, 0.4)
    other.step(0.5, 0.3)
    state = _published(config, gpu, [other], {"ranker": 0.4, "doc_ranker": 0.2})
    write_state(Path(config.state_path), state)
    assert json.loads(Path(config.state_path).read_text())["shares"] == {
        "ranker": 0.8,
        "doc_ranker": 0.6,
    }
    fake_nvml.configure(config.state_path)
    fake_nvml.nvmlInit()
    try:
        # THEN NVML shows two GPUs: the capped one at its limit, the other at full clock
        assert fake_nvml.nvmlDeviceGetCount() == 2
        capped, second = (fake_nvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
        assert fake_nvml.nvmlDeviceGetEnforcedPowerLimit(capped) == 420_000
        assert fake_nvml.nvmlDeviceGetEnforcedPowerLimit(second) == 700_000
        assert fake_nvml.nvmlDeviceGetClockInfo(capped, fake_nvml.NVML_CLOCK_SM) == 1584
        assert fake_nvml.nvmlDeviceGetClockInfo(second, fake_nvml.NVML_CLOCK_SM) == 1980
        assert fake_nvml.nvmlDeviceGetUUID(capped) != fake_nvml.nvmlDeviceGetUUID(second)
        # ... and no reason bits, as a driver that does not read them
        with pytest.raises(fake_nvml.NVMLError_NotSupported):
            fake_nvml.nvmlDeviceGetCurrentClocksEventReasons(capped)
        with pytest.raises(fake_nvml.NVMLError_InvalidArgument):
            fake_nvml.nvmlDeviceGetHandleByIndex(2)
    finally:
        fake_nvml.nvmlShutdown()
        fake_nvml.configure(None)


def _model_module(name: str):  # type: ignore[no-untyped-def]
    """A shipped model's file, loaded without Triton (its backend utils stubbed)."""
    import importlib.util
    import sys
    import types

    import loadkit

    sys.modules.setdefault("triton_python_backend_utils", types.ModuleType("tpbu"))
    path = Path(loadkit.__file__).parent / f"target/model_repository/{name}/1/model.py"
    spec = importlib.util.spec_from_file_location(f"{name}_model_under_test", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_both_models_read_their_share_of_the_gpu(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text(
        json.dumps({"clock_factor": 0.8, "shares": {"ranker": 0.5, "doc_ranker": 0.4}})
    )
    ranker = _model_module("ranker")
    assert ranker.ClockFactor(str(state), ("shares", "ranker")).get() == 0.5
    assert ranker.ClockFactor(str(state), ("shares", "other")).get() == 1.0  # not sharing
    doc = _model_module("doc_ranker")
    assert doc.GpuShare(str(state), "doc_ranker").get() == pytest.approx(0.8 * 0.4)
    assert doc.GpuShare(None, "doc_ranker").get() == 1.0
