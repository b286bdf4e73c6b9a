"""GpuSampler against the fake NVML (the simulated GPU) and against the real
`pynvml` module patched with `unittest.mock` (no driver needed)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pynvml
import pytest

from loadkit.rundir.schema import GpuRow, row_problems
from loadkit.telemetry import fake_nvml
from loadkit.telemetry.base import SourceUnavailable
from loadkit.telemetry.gpu import GpuSampler, decode_reasons, probe_fake_nvml
from loadkit.telemetry.simgpu import CoolingFaultSchedule, SimGpuModel
from loadkit.telemetry.simgpu_runner import write_state

T = 1_764_449_000_000_000_000


# --- through the fake NVML --------------------------------------------------
@pytest.fixture
def sim_state(tmp_path: Path) -> Iterator[tuple[Path, SimGpuModel]]:
    path = tmp_path / "state.json"
    model = SimGpuModel(faults=CoolingFaultSchedule(period_s=20, duration_s=10, offset_s=1))
    write_state(path, model.state)
    fake_nvml.configure(path)
    yield path, model
    fake_nvml.configure(None)


def test_fake_nvml_rows_follow_the_simulated_state(sim_state: tuple[Path, SimGpuModel]) -> None:
    path, model = sim_state
    sampler = GpuSampler(fake_nvml, simulated=True, pcie_every=1)
    sampler.open()
    idle = sampler.sample(T)[0]
    assert idle["simulated"] is True and idle["sm_clock_mhz"] == idle["sm_clock_max_mhz"]
    assert idle["reason_gpu_idle"] is True and idle["reason_hw_thermal"] is False
    for _ in range(40):  # 4 s of load into a cooling fault
        model.step(0.1, 0.5)
    write_state(path, model.state)
    fake_nvml._cache_at = -1.0  # skip the 20 ms re-read cache
    hot = sampler.sample(T + 1)[0]
    sampler.close()
    assert hot["sm_clock_mhz"] < 0.6 * hot["sm_clock_max_mhz"]
    assert hot["reason_hw_thermal"] and hot["reason_hw_slowdown"]
    assert hot["clocks_event_reasons"] == model.state.clocks_event_reasons
    assert hot["temp_c"] >= hot["temp_slowdown_c"] - 3
    assert hot["power_w"] == pytest.approx(model.state.power_w, abs=0.001)
    assert hot["energy_mj"] == model.state.energy_mj
    assert hot["util_gpu_pct"] == 50 and hot["pcie_rx_kbps"] > 0
    assert hot["violation_thermal_ns"] > 0
    assert row_problems(idle, GpuRow) == row_problems(hot, GpuRow) == []
    # The simulator supports neither power violations nor per-process memory:
    assert hot["violation_power_ns"] is None
    warnings = sampler.drain_warnings()
    assert any("violation_power" in w for w in warnings)
    assert sampler.drain_warnings() == []  # logged once


def test_fake_nvml_identity_is_labelled_simulated(sim_state: tuple[Path, SimGpuModel]) -> None:
    path, _ = sim_state
    devices, why = probe_fake_nvml(path)
    assert why is None and devices is not None
    (dev,) = devices
    assert dev["simulated"] is True and dev["driver"] == "simulated"
    assert dev["sm_clock_max_mhz"] == 1980 and dev["power_limit_w"] == 700.0
    assert dev["temp_slowdown_c"] == 87  # the GPU rows' names (GpuRow)


def test_missing_state_file_is_one_clear_message(tmp_path: Path) -> None:
    devices, why = probe_fake_nvml(tmp_path / "nope.json")
    assert devices is None and why and "nope.json" in why
    fake_nvml.configure(None)


def test_decode_reasons() -> None:
    assert decode_reasons(0x48)["reason_hw_thermal"] is True
    assert decode_reasons(0x48)["reason_sw_power_cap"] is False
    assert set(decode_reasons(None).values()) == {None}


# --- through the real pynvml module, mocked ---------------------------------
def err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def nvml_fakes() -> dict[str, Any]:
    """Return values for every pynvml function the sampler calls (one H100)."""
    return {
        "nvmlInit": None,
        "nvmlShutdown": None,
        "nvmlDeviceGetCount": 1,
        "nvmlDeviceGetHandleByIndex": "h0",
        "nvmlSystemGetDriverVersion": "550.54.15",
        "nvmlSystemGetCudaDriverVersion": 12040,
        "nvmlDeviceGetName": "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetUUID": "GPU-7d3c1f2e-aaaa-bbbb-cccc-1234567890ab",
        "nvmlDeviceGetUtilizationRates": SimpleNamespace(gpu=87, memory=41),
        "nvmlDeviceGetMemoryInfo": SimpleNamespace(used=12 * 2**30, total=80 * 2**30, free=0),
        "nvmlDeviceGetClockInfo": 1755,
        "nvmlDeviceGetMaxClockInfo": 1980,
        "nvmlDeviceGetTemperature": 64,
        "nvmlDeviceGetTemperatureThreshold": 87,
        "nvmlDeviceGetPowerUsage": 412_345,
        "nvmlDeviceGetEnforcedPowerLimit": 700_000,
        "nvmlDeviceGetTotalEnergyConsumption": 9_876_543,
        "nvmlDeviceGetCurrentClocksEventReasons": 0x4,
        "nvmlDeviceGetCurrentClocksThrottleReasons": 0x4,
        "nvmlDeviceGetViolationStatus": SimpleNamespace(referenceTime=1, violationTime=5_000),
        "nvmlDeviceGetPcieThroughput": 1234,
        "nvmlDeviceGetComputeRunningProcesses": [
            SimpleNamespace(pid=4242, usedGpuMemory=3 * 2**30),
            SimpleNamespace(pid=9999, usedGpuMemory=2**30),
        ],
    }


@pytest.fixture
def patched() -> Iterator[dict[str, mock.MagicMock]]:
    with ExitStack() as stack:
        mocks = {
            name: stack.enter_context(mock.patch.object(pynvml, name, return_value=value))
            for name, value in nvml_fakes().items()
        }
        yield mocks


def open_sampler(**kwargs: Any) -> GpuSampler:
    sampler = GpuSampler(pynvml, pcie_every=1, **kwargs)
    sampler.open()
    return sampler


def test_all_fields_from_mocked_pynvml(patched: dict[str, mock.MagicMock]) -> None:
    with mock.patch("loadkit.telemetry.gpu._process_tree", return_value={4242}):
        sampler = open_sampler(server_pid=4242)
        (row,) = sampler.sample(T)
    assert row["util_gpu_pct"] == 87 and row["util_mem_pct"] == 41
    assert row["power_w"] == pytest.approx(412.345) and row["power_limit_w"] == 700.0
    assert row["energy_mj"] == 9_876_543
    assert row["reason_sw_power_cap"] is True and row["reason_hw_thermal"] is False
    assert row["violation_power_ns"] == 5_000
    assert row["pcie_tx_kbps"] == 1234
    assert row["proc_mem_bytes"] == 3 * 2**30
    (dev,) = sampler.identity()
    assert dev["cuda"] == "12.4" and dev["driver"] == "550.54.15" and dev["power_limit_w"] == 700.0
    assert dev["simulated"] is False
    sampler.close()
    patched["nvmlShutdown"].assert_called_once()


def test_per_field_not_supported_is_null_and_logged_once(
    patched: dict[str, mock.MagicMock],
) -> None:
    patched["nvmlDeviceGetPowerUsage"].side_effect = err(pynvml.NVML_ERROR_NOT_SUPPORTED)
    patched["nvmlDeviceGetTotalEnergyConsumption"].side_effect = err(
        pynvml.NVML_ERROR_NOT_SUPPORTED
    )
    sampler = open_sampler()
    rows = [sampler.sample(T + i)[0] for i in range(3)]
    assert all(r["power_w"] is None and r["energy_mj"] is None for r in rows)
    assert all(r["temp_c"] == 64 for r in rows)  # the rest still recorded
    warnings = sampler.drain_warnings()
    assert len([w for w in warnings if "'power'" in w]) == 1
    assert len([w for w in warnings if "'energy'" in w]) == 1
    assert patched["nvmlDeviceGetPowerUsage"].call_count == 1  # not asked again


def test_old_driver_without_clocks_event_call_falls_back(
    patched: dict[str, mock.MagicMock],
) -> None:
    patched["nvmlDeviceGetCurrentClocksEventReasons"].side_effect = err(
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    )
    patched["nvmlDeviceGetCurrentClocksThrottleReasons"].return_value = 0x40 | 0x8
    sampler = open_sampler()
    first, second = sampler.sample(T)[0], sampler.sample(T + 1)[0]
    assert first["clocks_event_reasons"] == second["clocks_event_reasons"] == 0x48
    assert first["reason_hw_thermal"] is True
    assert patched["nvmlDeviceGetCurrentClocksEventReasons"].call_count == 1
    assert any("older" in w for w in sampler.drain_warnings())


def test_nvml_binding_without_clocks_event_function(patched: dict[str, mock.MagicMock]) -> None:
    binding = SimpleNamespace(
        **{k: getattr(pynvml, k) for k in dir(pynvml) if k.startswith(("nvml", "NVML"))}
    )
    del binding.nvmlDeviceGetCurrentClocksEventReasons
    sampler = GpuSampler(binding)
    sampler.open()
    assert sampler.sample(T)[0]["clocks_event_reasons"] == 0x4


def test_lost_gpu_stops_its_rows_with_one_warning(patched: dict[str, mock.MagicMock]) -> None:
    sampler = open_sampler()
    assert sampler.sample(T)[0]["temp_c"] == 64
    patched["nvmlDeviceGetUtilizationRates"].side_effect = err(pynvml.NVML_ERROR_GPU_IS_LOST)
    lost = sampler.sample(T + 1)
    assert lost == [{"t_ns": T + 1, "gpu": 0, "gpu_lost": True}]
    assert sampler.sample(T + 2) == []
    assert [w for w in sampler.drain_warnings() if "lost" in w]


def test_library_not_found_is_one_line_naming_the_gpu_choices() -> None:
    with mock.patch.object(
        pynvml, "nvmlInit", side_effect=err(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    ):
        sampler = GpuSampler(pynvml)
        with pytest.raises(SourceUnavailable) as info:
            sampler.open()
    message = info.value.message + " " + (info.value.hint or "")
    assert "NVML library not found" in message
    assert "--gpu sim" in message and "none" in message
    assert "\n" not in message


def test_transient_error_is_null_for_that_sample_only(patched: dict[str, mock.MagicMock]) -> None:
    patched["nvmlDeviceGetTemperature"].side_effect = [err(pynvml.NVML_ERROR_TIMEOUT), 65]
    sampler = open_sampler()
    assert sampler.sample(T)[0]["temp_c"] is None
    assert sampler.sample(T + 1)[0]["temp_c"] == 65
