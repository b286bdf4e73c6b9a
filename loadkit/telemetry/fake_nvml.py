"""A stand-in for the `pynvml` module that reads the simulated GPU's state file.

It exposes the functions, constants and exception classes of `nvidia-ml-py`
that `loadkit.telemetry.gpu.GpuSampler` calls, with the same names, units and
error behaviour (power in mW, energy in mJ, PCIe in KB/s; unsupported calls
raise `NVMLError_NotSupported`), so the sampler's real code path reads it.
Point it at a state file with `configure(path)` or `LOADKIT_SIM_GPU_STATE`.

One device (index 0), plus one more per entry of the state's `devices` list (index
1, 2, ...: a second simulated GPU). A device whose state says
`"reasons_supported": false` answers its clocks-event reasons with NotSupported
(a driver or exporter that does not read them). The state file is re-read at most
every 20 ms.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

STATE_ENV = "LOADKIT_SIM_GPU_STATE"
REREAD_S = 0.02
SIMULATED = True

# --- constants (values as in nvidia-ml-py) ---------------------------------
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_TEMPERATURE_THRESHOLD_MEM_MAX = 2
NVML_TEMPERATURE_THRESHOLD_GPU_MAX = 3

NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3

NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1

NVML_PERF_POLICY_POWER = 0
NVML_PERF_POLICY_THERMAL = 1


# --- exceptions (same names and hierarchy shape as nvidia-ml-py) ------------
class NVMLError(Exception):
    value: int = NVML_ERROR_UNKNOWN
    _strings = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }

    def __init__(self, value: int | None = None) -> None:
        if value is not None:
            self.value = value
        super().__init__(self.value)

    def __str__(self) -> str:
        return self._strings.get(self.value, f"NVML Error with code {self.value}")


class NVMLError_Uninitialized(NVMLError):  # noqa: N801 - pynvml's names
    value = NVML_ERROR_UNINITIALIZED


class NVMLError_InvalidArgument(NVMLError):  # noqa: N801
    value = NVML_ERROR_INVALID_ARGUMENT


class NVMLError_NotSupported(NVMLError):  # noqa: N801
    value = NVML_ERROR_NOT_SUPPORTED


class NVMLError_NotFound(NVMLError):  # noqa: N801
    value = NVML_ERROR_NOT_FOUND


class NVMLError_DriverNotLoaded(NVMLError):  # noqa: N801
    value = NVML_ERROR_DRIVER_NOT_LOADED


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
    value = NVML_ERROR_LIBRARY_NOT_FOUND


class NVMLError_FunctionNotFound(NVMLError):  # noqa: N801
    value = NVML_ERROR_FUNCTION_NOT_FOUND


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
    value = NVML_ERROR_GPU_IS_LOST


# --- state ----------------------------------------------------------------
_state_path: Path | None = None
_initialized = False
_cache: dict[str, Any] = {}
_cache_at = -1.0


def configure(state_path: str | os.PathLike[str] | None) -> None:
    """Read the simulated GPU from `state_path` (None: use $LOADKIT_SIM_GPU_STATE)."""
    global _state_path, _cache_at
    _state_path = Path(state_path) if state_path else None
    _cache_at = -1.0


def _path() -> Path | None:
    if _state_path is not None:
        return _state_path
    env = os.environ.get(STATE_ENV)
    return Path(env) if env else None


def _load() -> dict[str, Any]:
    global _cache, _cache_at
    now = time.monotonic()
    if _cache and now - _cache_at < REREAD_S:
        return _cache
    path = _path()
    if path is None:
        raise NVMLError_DriverNotLoaded()
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        if _cache:
            raise NVMLError_GpuIsLost() from None  # the simulator went away
        raise NVMLError_DriverNotLoaded() from None
    except (OSError, ValueError):
        if _cache:
            return _cache  # a torn read: keep the last good state
        raise NVMLError_Uninitialized() from None
    _cache, _cache_at = data, now
    return data


def _state() -> dict[str, Any]:
    if not _initialized:
        raise NVMLError_Uninitialized()
    return _load()


def _devices() -> list[dict[str, Any]]:
    state = _state()
    return [state, *(state.get("devices") or [])]


def _handle(handle: Any) -> dict[str, Any]:
    devices = _devices()
    if not isinstance(handle, int) or not 0 <= handle < len(devices):
        raise NVMLError_InvalidArgument()
    return devices[handle]


# --- the API the GPU sampler uses ------------------------------------------
def nvmlInit() -> None:
    global _initialized, _cache
    _cache = {}
    _initialized = True
    try:
        _load()
    except NVMLError:
        _initialized = False
        raise


def nvmlShutdown() -> None:
    global _initialized
    _initialized = False


def nvmlSystemGetDriverVersion() -> str:
    _state()
    return "simulated"


def nvmlSystemGetCudaDriverVersion() -> int:
    _state()
    return 12040


def nvmlDeviceGetCount() -> int:
    return len(_devices())


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    if not 0 <= index < len(_devices()):
        raise NVMLError_InvalidArgument()
    return index


def nvmlDeviceGetName(handle: Any) -> str:
    return str(_handle(handle).get("name") or "Simulated GPU")


def nvmlDeviceGetUUID(handle: Any) -> str:
    return str(_handle(handle).get("uuid") or "GPU-simulated")


def nvmlDeviceGetUtilizationRates(handle: Any) -> SimpleNamespace:
    s = _handle(handle)
    return SimpleNamespace(gpu=int(round(s["util_gpu_pct"])), memory=int(round(s["util_mem_pct"])))


def nvmlDeviceGetMemoryInfo(handle: Any, version: Any = None) -> SimpleNamespace:
    s = _handle(handle)
    used, total = int(s["mem_used_bytes"]), int(s["mem_total_bytes"])
    return SimpleNamespace(used=used, total=total, free=total - used)


def nvmlDeviceGetClockInfo(handle: Any, type: int) -> int:  # noqa: A002 - pynvml's name
    s = _handle(handle)
    if type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
        return int(s["sm_clock_mhz"])
    if type == NVML_CLOCK_MEM:
        return int(s["mem_clock_mhz"])
    raise NVMLError_NotSupported()


def nvmlDeviceGetMaxClockInfo(handle: Any, type: int) -> int:  # noqa: A002
    s = _handle(handle)
    if type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
        return int(s["sm_clock_max_mhz"])
    if type == NVML_CLOCK_MEM:
        return int(s["mem_clock_max_mhz"])
    raise NVMLError_NotSupported()


def nvmlDeviceGetTemperature(handle: Any, sensor: int) -> int:
    s = _handle(handle)
    if sensor != NVML_TEMPERATURE_GPU:
        raise NVMLError_NotSupported()
    return int(round(s["temp_c"]))


def nvmlDeviceGetTemperatureThreshold(handle: Any, threshold: int) -> int:
    s = _handle(handle)
    keys = {
        NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: "temp_shutdown_c",
        NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: "temp_slowdown_c",
        NVML_TEMPERATURE_THRESHOLD_GPU_MAX: "temp_max_operating_c",
    }
    if threshold not in keys:
        raise NVMLError_NotSupported()
    return int(round(s[keys[threshold]]))


def nvmlDeviceGetPowerUsage(handle: Any) -> int:
    return int(round(_handle(handle)["power_w"] * 1000.0))


def nvmlDeviceGetEnforcedPowerLimit(handle: Any) -> int:
    return int(round(_handle(handle)["power_limit_w"] * 1000.0))


def nvmlDeviceGetTotalEnergyConsumption(handle: Any) -> int:
    return int(_handle(handle)["energy_mj"])


def nvmlDeviceGetCurrentClocksEventReasons(handle: Any) -> int:
    s = _handle(handle)
    if s.get("reasons_supported") is False:
        raise NVMLError_NotSupported()
    return int(s["clocks_event_reasons"])


def nvmlDeviceGetCurrentClocksThrottleReasons(handle: Any) -> int:
    return nvmlDeviceGetCurrentClocksEventReasons(handle)


def nvmlDeviceGetViolationStatus(device: Any, perfPolicyType: int) -> SimpleNamespace:  # noqa: N803
    s = _handle(device)
    if perfPolicyType != NVML_PERF_POLICY_THERMAL:
        raise NVMLError_NotSupported()
    return SimpleNamespace(referenceTime=0, violationTime=int(s["thermal_violation_ns"]))


def nvmlDeviceGetPcieThroughput(device: Any, counter: int) -> int:
    s = _handle(device)
    return int(s["pcie_tx_kbps"] if counter == NVML_PCIE_UTIL_TX_BYTES else s["pcie_rx_kbps"])


def nvmlDeviceGetComputeRunningProcesses(handle: Any) -> list[Any]:
    # The simulator does not know which process "owns" its memory.
    _handle(handle)
    raise NVMLError_NotSupported()
