"""Thermal throttling and power caps: faults of the simulated GPU (nothing to inject here).

The simulated GPU (`loadkit.telemetry.simgpu`, run by
`loadkit.telemetry.simgpu_runner`) owns its cooling-fault schedule: while a
fault lasts, the effective coolant temperature rises, the GPU crosses its
slowdown temperature, the SM clock drops and the ranker model (which reads the
same state file) slows down for real. The runner writes its own ground truth:
`fault` events `cooling-fault` (the injected fault) and `thermal-throttle`
(the throttling it caused, which is what latency feels), each with
`action: start|end` and `simulated: true`.

`ThermalFault` only gives that the same shape as the other injectors
(a schedule in, `start()`/`stop()`, `describe()`), so the benchmark can treat
it alike. The simulator's schedule is strictly periodic: it has no jitter,
and its clock starts when the simulator starts.

    fault = ThermalFault(period_s=15, duration_s=4, first_start_s=12)
    gpu = fault.start(state_path, triton_url=t.http_url, run_dir=run_dir)
    ...                                # Triton started with sim_gpu_state=state_path
    fault.stop()

The same handle starts the simulated GPU with a power cap (`power_cap`: its
windows are `power-cap` events), with GPUs beside it (`extra_devices`), with the
reason bits hidden (`reason_bits=False`), and shared by other models
(`shared_models`: their executions take its time from the model's).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from loadkit.telemetry.simgpu import PowerCapSchedule
from loadkit.telemetry.simgpu_runner import SimulatedGpu, start_simulated_gpu

# The event names the simulated GPU writes (kind "fault").
COOLING_FAULT_EVENT = "cooling-fault"
THERMAL_THROTTLE_EVENT = "thermal-throttle"


@dataclass
class ThermalFault:
    """A periodic cooling fault of the simulated GPU; `period_s=None`: a healthy GPU."""

    period_s: float | None
    duration_s: float = 5.0
    first_start_s: float | None = None  # default: one period in (the simulator's default)
    power_cap: PowerCapSchedule | None = None
    shared_models: tuple[str, ...] = ()
    extra_devices: tuple[float, ...] = ()  # GPUs beside it: each one's background busy share
    reason_bits: bool = True
    gpu: SimulatedGpu | None = field(default=None, init=False)

    def start(
        self,
        state_path: str | os.PathLike[str],
        *,
        triton_url: str | None,
        run_dir: str | os.PathLike[str] | None,
        model: str = "ranker",
    ) -> SimulatedGpu:
        """Start the simulated GPU with this fault schedule; the state file exists on return."""
        if self.gpu is not None:
            raise RuntimeError("thermal fault already started")
        self.gpu = start_simulated_gpu(
            state_path,
            triton_url,
            model=model,
            run_dir=run_dir,
            cooling_fault_period_s=self.period_s,
            cooling_fault_duration_s=self.duration_s,
            cooling_fault_offset_s=self.first_start_s,
            shared_models=self.shared_models,
            power_cap=self.power_cap,
            extra_devices=self.extra_devices,
            reason_bits=self.reason_bits,
        )
        return self.gpu

    def stop(self) -> None:
        """Stop the simulator (it logs the end of any open fault or throttle)."""
        gpu, self.gpu = self.gpu, None
        if gpu is not None:
            gpu.stop()

    def describe(self) -> dict[str, Any]:
        return {
            "fault": COOLING_FAULT_EVENT,
            "simulated": True,
            "schedule": {
                "period_s": self.period_s,
                "duration_s": self.duration_s,
                "first_start_s": self.first_start_s,
                "jitter_s": 0.0,
            },
        }
