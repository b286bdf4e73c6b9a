"""GPU telemetry through NVML (`nvidia-ml-py`, module `pynvml`) or the fake NVML.

The sampler takes the NVML module as a parameter, so the real driver and the
simulated GPU (`loadkit.telemetry.fake_nvml`) go through the same code. Every
field is queried on its own: a field the device does not support is null and
reported once; a lost GPU stops that device's rows (one warning); a driver
without `nvmlDeviceGetCurrentClocksEventReasons` falls back to the older
throttle-reasons call. This is the only module (with fake_nvml) that imports
pynvml.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from loadkit.placement import remote_gpu_warning
from loadkit.rundir.schema import PLACE_SERVER, GpuLimits, GpuRow, decode_reasons
from loadkit.telemetry.base import (
    Row,
    Sampler,
    SamplerOptions,
    SamplerSpec,
    SourcePlan,
    SourceUnavailable,
    TelemetrySource,
    WarnOnce,
    this_machine,
)

GPU_CHOICES = ("auto", "nvml", "sim", "none")
DEFAULT_GPU_INTERVAL_S = 0.1
# Each PCIe throughput call blocks ~20 ms in the driver: read it every Nth sample.
PCIE_EVERY_N_SAMPLES = 10


def load_pynvml() -> Any:
    """The real NVML module (imported here so nothing else imports pynvml)."""
    import pynvml

    return pynvml


def _err_name(exc: BaseException) -> str:
    return type(exc).__name__


class GpuSampler:
    """Per-GPU rows at (default) 10 Hz; see docs/telemetry.md for the fields."""

    source = "gpu"

    def __init__(
        self,
        nvml: Any,
        *,
        server_pid: int | None = None,
        devices: list[int] | None = None,
        simulated: bool = False,
        pcie_every: int = PCIE_EVERY_N_SAMPLES,
    ) -> None:
        self.nvml = nvml
        self.server_pid = server_pid
        self.device_indices = devices
        self.simulated = simulated
        self.pcie_every = max(1, pcie_every)
        self._warn = WarnOnce()
        self._handles: dict[int, Any] = {}
        self._lost: set[int] = set()
        self._unsupported: set[str] = set()
        self._reasons_fn: Callable[[Any], int] | None = None
        self._n = 0
        self._initialized = False
        self._static: dict[int, GpuLimits] = {}

    # --- lifecycle -------------------------------------------------------
    def open(self) -> None:
        nvml = self.nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError_LibraryNotFound as exc:
            raise SourceUnavailable(
                "no NVIDIA driver: NVML library not found (libnvidia-ml.so); GPU telemetry is off",
                hint="on a machine without a GPU use --gpu sim (simulated) or --gpu none "
                "(choices: auto, nvml, sim, none)",
            ) from exc
        except nvml.NVMLError as exc:
            raise SourceUnavailable(
                f"NVML did not initialize ({exc}); GPU telemetry is off",
                hint="check the driver with nvidia-smi, or use --gpu sim / --gpu none "
                "(choices: auto, nvml, sim, none)",
            ) from exc
        self._initialized = True
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            self.close()
            raise SourceUnavailable(f"NVML could not count GPUs ({exc})") from exc
        indices = self.device_indices if self.device_indices is not None else list(range(count))
        for index in indices:
            try:
                self._handles[index] = nvml.nvmlDeviceGetHandleByIndex(index)
            except nvml.NVMLError as exc:
                self._warn.warn(f"handle{index}", f"GPU {index}: no handle ({exc}); skipped")
        if not self._handles:
            self.close()
            raise SourceUnavailable("NVML found no usable GPU", hint="check nvidia-smi")
        self._reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if self._reasons_fn is None:
            self._use_old_reasons_call("this nvidia-ml-py has no clocks-event call")
        for index, handle in self._handles.items():
            self._static[index] = {
                "sm_clock_max_mhz": self._q(
                    "sm_clock_max", nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_SM
                ),
                "mem_clock_max_mhz": self._q(
                    "mem_clock_max", nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_MEM
                ),
                "temp_slowdown_c": self._q(
                    "temp_slowdown",
                    nvml.nvmlDeviceGetTemperatureThreshold,
                    handle,
                    nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
                ),
                "temp_shutdown_c": self._q(
                    "temp_shutdown",
                    nvml.nvmlDeviceGetTemperatureThreshold,
                    handle,
                    nvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
                ),
                "temp_max_operating_c": self._q(
                    "temp_max_operating",
                    nvml.nvmlDeviceGetTemperatureThreshold,
                    handle,
                    nvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX,
                ),
            }

    def close(self) -> None:
        if self._initialized:
            self._initialized = False
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting down a broken driver must not fail a run
                pass

    def drain_warnings(self) -> list[str]:
        return self._warn.drain()

    # --- identity for the manifest ---------------------------------------
    def identity(self) -> list[Row]:
        """`environment.gpu.devices` entries (call after open())."""
        nvml = self.nvml
        driver = self._q("driver", nvml.nvmlSystemGetDriverVersion)
        cuda_raw = self._q("cuda", nvml.nvmlSystemGetCudaDriverVersion)
        cuda = (
            f"{cuda_raw // 1000}.{(cuda_raw % 1000) // 10}" if isinstance(cuda_raw, int) else None
        )
        devices = []
        for index, handle in self._handles.items():
            limit_mw = self._q("power_limit", nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
            static: GpuLimits = self._static.get(index, {})
            devices.append(
                {
                    "index": index,
                    "name": _text(self._q("name", nvml.nvmlDeviceGetName, handle)),
                    "uuid": _text(self._q("uuid", nvml.nvmlDeviceGetUUID, handle)),
                    "driver": _text(driver),
                    "cuda": cuda,
                    "power_limit_w": None if limit_mw is None else limit_mw / 1000.0,
                    # the GPU rows' names for the same values (GpuRow)
                    "sm_clock_max_mhz": static.get("sm_clock_max_mhz"),
                    "mem_clock_max_mhz": static.get("mem_clock_max_mhz"),
                    "temp_slowdown_c": static.get("temp_slowdown_c"),
                    "temp_shutdown_c": static.get("temp_shutdown_c"),
                    "simulated": self.simulated,
                }
            )
        return devices

    # --- sampling --------------------------------------------------------
    def sample(self, t_ns: int) -> list[GpuRow]:
        self._n += 1
        rows: list[GpuRow] = []
        for index, handle in list(self._handles.items()):
            if index in self._lost:
                continue
            try:
                rows.append(self._sample_device(t_ns, index, handle))
            except self.nvml.NVMLError_GpuIsLost:
                self._lost.add(index)
                self._warn.warn(
                    f"lost{index}",
                    f"GPU {index} is lost (fell off the bus?); no more rows for it in this run",
                )
                rows.append({"t_ns": t_ns, "gpu": index, "gpu_lost": True})
        return rows

    def _sample_device(self, t_ns: int, index: int, handle: Any) -> GpuRow:
        nvml, q = self.nvml, self._q
        row: GpuRow = {"t_ns": t_ns, "gpu": index}
        if self.simulated:
            row["simulated"] = True
        util = q("utilization", nvml.nvmlDeviceGetUtilizationRates, handle)
        row["util_gpu_pct"] = None if util is None else util.gpu
        row["util_mem_pct"] = None if util is None else util.memory
        mem = q("memory", nvml.nvmlDeviceGetMemoryInfo, handle)
        row["mem_used_bytes"] = None if mem is None else int(mem.used)
        row["mem_total_bytes"] = None if mem is None else int(mem.total)
        row["sm_clock_mhz"] = q("sm_clock", nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
        row["mem_clock_mhz"] = q(
            "mem_clock", nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM
        )
        row.update(self._static.get(index, {}))
        row["temp_c"] = q(
            "temperature", nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU
        )
        power_mw = q("power", nvml.nvmlDeviceGetPowerUsage, handle)
        row["power_w"] = None if power_mw is None else power_mw / 1000.0
        limit_mw = q("power_limit", nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        row["power_limit_w"] = None if limit_mw is None else limit_mw / 1000.0
        row["energy_mj"] = q("energy", nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        mask = self._reasons(handle)
        row["clocks_event_reasons"] = mask
        row.update(decode_reasons(mask))
        row["violation_power_ns"] = self._violation("power", handle, "NVML_PERF_POLICY_POWER")
        row["violation_thermal_ns"] = self._violation("thermal", handle, "NVML_PERF_POLICY_THERMAL")
        if self._n % self.pcie_every == 1 or self.pcie_every == 1:
            row["pcie_tx_kbps"] = q(
                "pcie", nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_TX_BYTES
            )
            row["pcie_rx_kbps"] = q(
                "pcie", nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_RX_BYTES
            )
        else:
            row["pcie_tx_kbps"] = row["pcie_rx_kbps"] = None
        row["proc_mem_bytes"] = self._process_memory(handle) if self.server_pid else None
        return row

    def _q(self, field: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call one NVML function; NotSupported etc. become None (reported once)."""
        if field in self._unsupported:
            return None
        nvml = self.nvml
        try:
            return fn(*args)
        except nvml.NVMLError_GpuIsLost:
            raise
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound) as exc:
            self._unsupported.add(field)
            self._warn.warn(
                field, f"GPU field {field!r} not supported here ({exc}); recorded as null"
            )
            return None
        except nvml.NVMLError as exc:
            # Transient (timeout, no permission, ...): null this time, say so once.
            self._warn.warn(
                f"{field}:{_err_name(exc)}", f"GPU field {field!r}: {exc}; null for now"
            )
            return None

    def _use_old_reasons_call(self, why: str) -> None:
        old = getattr(self.nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        self._reasons_fn = old
        self._warn.warn(
            "reasons_fallback",
            f"{why}; using the older nvmlDeviceGetCurrentClocksThrottleReasons",
        )

    def _reasons(self, handle: Any) -> int | None:
        nvml = self.nvml
        if self._reasons_fn is None:
            return None
        try:
            return int(self._reasons_fn(handle))
        except nvml.NVMLError_FunctionNotFound:
            if self._reasons_fn is getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None):
                self._use_old_reasons_call("driver has no nvmlDeviceGetCurrentClocksEventReasons")
                return self._reasons(handle)
            self._reasons_fn = None
            self._warn.warn("reasons", "GPU clock-event reasons not available; recorded as null")
            return None
        except nvml.NVMLError_GpuIsLost:
            raise
        except nvml.NVMLError_NotSupported:
            self._reasons_fn = None
            self._warn.warn("reasons", "GPU clock-event reasons not supported; recorded as null")
            return None
        except nvml.NVMLError as exc:
            self._warn.warn(f"reasons:{_err_name(exc)}", f"GPU clock-event reasons: {exc}")
            return None

    def _violation(self, name: str, handle: Any, policy_const: str) -> int | None:
        policy = getattr(self.nvml, policy_const, None)
        fn = getattr(self.nvml, "nvmlDeviceGetViolationStatus", None)
        if policy is None or fn is None:
            return None
        status = self._q(f"violation_{name}", fn, handle, policy)
        return None if status is None else int(status.violationTime)

    def _process_memory(self, handle: Any) -> int | None:
        procs = self._q("processes", self.nvml.nvmlDeviceGetComputeRunningProcesses, handle)
        if procs is None:
            return None
        pids = _process_tree(self.server_pid)
        used = [p.usedGpuMemory for p in procs if p.pid in pids and p.usedGpuMemory is not None]
        return int(sum(used)) if used else 0


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _process_tree(pid: int | None) -> set[int]:
    """The server's PID and its children (Triton's Python backend stubs)."""
    if pid is None:
        return set()
    try:
        import psutil

        return {pid} | {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except Exception:  # noqa: BLE001 - a vanished process just means "only the PID"
        return {pid}


def probe_nvml() -> tuple[list[Row] | None, str | None]:
    """Can real NVML be read here? (devices, None) or (None, one-line reason)."""
    try:
        nvml = load_pynvml()
    except ImportError:
        return None, "nvidia-ml-py is not installed; GPU telemetry is off"
    sampler = GpuSampler(nvml)
    try:
        sampler.open()
    except SourceUnavailable as exc:
        return None, exc.message
    try:
        return sampler.identity(), None
    finally:
        sampler.close()


def probe_fake_nvml(state_path: str | os.PathLike[str]) -> tuple[list[Row] | None, str | None]:
    """Identity of the simulated GPU behind `state_path`, or a one-line reason."""
    from loadkit.telemetry import fake_nvml

    fake_nvml.configure(state_path)
    sampler = GpuSampler(fake_nvml, simulated=True)
    try:
        sampler.open()
    except SourceUnavailable as exc:
        return None, f"simulated GPU state {state_path} not readable: {exc.message}"
    try:
        return sampler.identity(), None
    finally:
        sampler.close()


def _nvml_sampler(spec: SamplerSpec) -> Sampler:
    return GpuSampler(load_pynvml(), server_pid=spec.options.get("server_pid"))


def _sim_sampler(spec: SamplerSpec) -> Sampler:
    from loadkit.telemetry import fake_nvml

    fake_nvml.configure(spec.options["state_path"])
    return GpuSampler(fake_nvml, server_pid=spec.options.get("server_pid"), simulated=True)


def plan_gpu(options: SamplerOptions, interval_s: float) -> SourcePlan:
    """environment.gpu and the GPU sampler for `--gpu auto|nvml|sim|none`.

    This machine's GPUs are the server's only when the target runs here
    (`options.target`): `auto` samples NVML then (and when nothing says where the
    target is), never for a target on another machine; `nvml` samples what it was
    asked to, as a `client` series when the target is elsewhere. The simulated GPU
    belongs to the embedded target: `server`.
    """
    from loadkit.telemetry.simgpu import SIM_GPU_STATE_FILE

    gpu, server_pid = options.gpu, options.server_pid
    here = this_machine(options)
    if gpu == "none":
        return SourcePlan(None, {"kind": "none", "devices": []})
    if gpu == "sim":
        sim_state = options.sim_gpu_state
        state = Path(sim_state) if sim_state else Path(options.run_dir) / SIM_GPU_STATE_FILE
        simulated = replace(here, place=PLACE_SERVER)
        devices, why = probe_fake_nvml(state)
        if devices is None:
            return SourcePlan(None, {"kind": "none", "devices": []}, why, simulated)
        spec = SamplerSpec(
            "gpu",
            "gpu-sim",
            interval_s,
            {"state_path": str(state), "server_pid": server_pid},
            simulated=True,
        )
        return SourcePlan(
            spec, {"kind": "simulated", "simulated": True, "devices": devices}, place=simulated
        )
    target = options.target
    if gpu == "auto" and target is not None and target.local is False:
        # Not even probed: whatever NVML finds here is a load machine's GPU.
        return SourcePlan(None, {"kind": "none", "devices": []}, remote_gpu_warning(target), here)
    devices, why = probe_nvml()
    if devices is None:
        # Even when NVML was asked for explicitly, a missing driver is a warning: the
        # rest of the run (latency, host, server telemetry) is still worth having.
        return SourcePlan(None, {"kind": "none", "devices": []}, f"{why} [--gpu {gpu}]", here)
    spec = SamplerSpec("gpu", "gpu-nvml", interval_s, {"server_pid": server_pid})
    return SourcePlan(spec, {"kind": "nvml", "simulated": False, "devices": devices}, place=here)


SOURCE = TelemetrySource(
    name="gpu",
    label="GPU",
    default_interval_s=DEFAULT_GPU_INTERVAL_S,
    row_type=GpuRow,
    samplers={"gpu-nvml": _nvml_sampler, "gpu-sim": _sim_sampler},
    plan=plan_gpu,
    rate_flag=True,
)
