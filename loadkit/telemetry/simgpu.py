"""A simulated GPU: a small thermal/clock model driven by real model busy time.

Used where no GPU exists (the demo, CI). Everything it produces is labelled
`simulated`. The physics is deliberately simple and its time constants are
compressed (seconds instead of minutes) so that a 90 s demo shows several
clean throttle episodes:

- utilization is the measured busy fraction of the model (Triton's cumulative
  `compute_infer` time, differenced), clipped to [0, 1];
- power = idle + dynamic x utilization x clock_factor**2 (dynamic power falls
  with clock and voltage);
- temperature relaxes toward `coolant + power x thermal_resistance` with time
  constant `tau_s`; a *cooling fault* (failed fan / hot inlet air) raises the
  effective coolant temperature by `fault_coolant_rise_c` while it lasts;
- at `temp_slowdown_c` the GPU throttles (HW thermal slowdown): the SM clock
  drops to `throttle_clock_fraction` of max and the reason bits
  HW_SLOWDOWN | HW_THERMAL_SLOWDOWN are set, until the temperature falls
  `hysteresis_c` below the threshold.

With the defaults: without a fault the temperature stays between ~38 °C (idle)
and ~77 °C (full load), well under the 87 °C slowdown threshold; with a fault,
any load above ~5 % crosses it within ~0.5-2 s, stays throttled for the fault
(the throttled steady state, 86-93 °C, is above the release point) and is
released within ~0.5 s after the fault ends.

A *power cap* (`PowerCapSchedule`: an operator's `nvidia-smi -pl`, a rack's power
budget) holds the GPU at `power_fraction` of its board limit for each window:
the enforced limit reads that much, the power sits at it, the SM clock runs at
`clock_fraction` of max (power management's step down, 5-20 %) and the
SW_POWER_CAP reason bit is set. These are the readings of a GPU held at its
cap; the clock is drawn rather than solved from the power model, so that a
lightly loaded simulated GPU can be capped at all.

This module is pure: `SimGpuModel.step(dt_s, busy_fraction)` with an explicit
time step, no clocks, no files. `loadkit.telemetry.simgpu_runner` drives it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from loadkit.rundir.schema import (
    REASON_GPU_IDLE,
    REASON_HW_SLOWDOWN,
    REASON_HW_THERMAL,
    REASON_SW_POWER_CAP,
)

# The simulated GPU's state, in the run directory unless told otherwise: the simulator
# writes it, the GPU sampler reads it through `fake_nvml`.
SIM_GPU_STATE_FILE = "sim_gpu_state.json"

# What a hot GPU that slows down reports (NVML's reason bits).
THERMAL_THROTTLE_REASONS = REASON_HW_SLOWDOWN | REASON_HW_THERMAL


@dataclass(frozen=True)
class SimGpuParams:
    """Device constants and model coefficients (an H100-like card, compressed time)."""

    name: str = "Simulated GPU (loadkit sim, H100-like)"
    uuid: str = "GPU-00000000-5111-0000-0000-10adc17000001"
    sm_clock_max_mhz: int = 1980
    mem_clock_mhz: int = 2619
    mem_total_bytes: int = 80 * 1024**3
    mem_base_used_bytes: int = 1_300 * 1024**2
    power_idle_w: float = 50.0
    power_dynamic_w: float = 650.0
    power_limit_w: float = 700.0
    coolant_c: float = 35.0
    thermal_resistance_c_per_w: float = 0.06
    tau_s: float = 0.6
    fault_coolant_rise_c: float = 48.0
    temp_slowdown_c: float = 87.0
    temp_shutdown_c: float = 95.0
    temp_max_operating_c: float = 85.0
    hysteresis_c: float = 3.0
    throttle_clock_fraction: float = 0.55
    idle_busy_fraction: float = 0.005
    pcie_kbps_at_full_load: float = 2_000_000.0


@dataclass(frozen=True)
class CoolingFaultSchedule:
    """A fault lasting `duration_s`, every `period_s`, first starting at `offset_s`.

    `period_s` None means no faults. Times are seconds since the model started.
    """

    period_s: float | None = None
    duration_s: float = 5.0
    offset_s: float | None = None  # default: one period in (a clean baseline first)

    def __post_init__(self) -> None:
        if self.period_s is not None:
            if self.period_s <= 0 or self.duration_s <= 0:
                raise ValueError("cooling fault period and duration must be positive")
            if self.duration_s >= self.period_s:
                raise ValueError(
                    f"cooling fault duration {self.duration_s:g}s must be shorter than "
                    f"its period {self.period_s:g}s"
                )

    def active(self, t_s: float) -> bool:
        if self.period_s is None:
            return False
        offset = self.period_s if self.offset_s is None else self.offset_s
        if t_s < offset:
            return False
        return (t_s - offset) % self.period_s < self.duration_s


@dataclass(frozen=True)
class PowerCapSchedule(CoolingFaultSchedule):
    """A power cap for `duration_s` every `period_s` (None: never), as `CoolingFaultSchedule`.

    While it lasts the GPU is held at `power_fraction` of its board power limit,
    its SM clock at `clock_fraction` of max.
    """

    power_fraction: float = 0.8
    clock_fraction: float = 0.9

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.power_fraction <= 1.0 or not 0.0 < self.clock_fraction <= 1.0:
            raise ValueError("power cap fractions must be in (0, 1]")


@dataclass
class SimGpuState:
    """What the fake NVML reports; serialized as the state file (JSON)."""

    t_s: float = 0.0
    util_gpu_pct: float = 0.0
    util_mem_pct: float = 0.0
    sm_clock_mhz: int = 0
    sm_clock_max_mhz: int = 0
    mem_clock_mhz: int = 0
    mem_clock_max_mhz: int = 0
    clock_factor: float = 1.0
    temp_c: float = 0.0
    temp_slowdown_c: float = 0.0
    temp_shutdown_c: float = 0.0
    temp_max_operating_c: float = 0.0
    power_w: float = 0.0
    power_limit_w: float = 0.0
    energy_mj: int = 0
    mem_used_bytes: int = 0
    mem_total_bytes: int = 0
    clocks_event_reasons: int = 0
    throttled: bool = False
    cooling_fault: bool = False
    power_capped: bool = False
    # False: the driver does not read clocks-event reasons (fake_nvml: NotSupported).
    reasons_supported: bool = True
    thermal_violation_ns: int = 0
    pcie_tx_kbps: int = 0
    pcie_rx_kbps: int = 0
    name: str = ""
    uuid: str = ""
    simulated: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    # The GPUs after this one (index 1, 2, ...), each its own state (fake_nvml reads them).
    devices: list[dict[str, Any]] = field(default_factory=list)
    # Each model's share of the GPU's time left by the other models sharing it (the
    # models read theirs: `shares[name]`; absent: the GPU is theirs alone).
    shares: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Transition:
    """A change the runner logs as ground truth: (`cooling-fault` | `thermal-throttle` |
    `power-cap`, start|end)."""

    name: str
    action: str
    t_s: float


class SimGpuModel:
    """The thermal/clock model. Call `step(dt_s, busy_fraction)` at ~10 Hz."""

    def __init__(
        self,
        params: SimGpuParams | None = None,
        faults: CoolingFaultSchedule | None = None,
        power_cap: PowerCapSchedule | None = None,
    ) -> None:
        self.params = params or SimGpuParams()
        self.faults = faults or CoolingFaultSchedule()
        self.power_cap = power_cap or PowerCapSchedule()
        p = self.params
        self.t_s = 0.0
        self.temp_c = p.coolant_c + p.power_idle_w * p.thermal_resistance_c_per_w
        self.throttled = False
        self.fault = False
        self.capped = False
        self.energy_j = 0.0
        self.thermal_violation_s = 0.0
        self.state = self._snapshot(util=0.0, power_w=p.power_idle_w)

    @property
    def clock_factor(self) -> float:
        factor = self.params.throttle_clock_fraction if self.throttled else 1.0
        if self.capped:
            factor = min(factor, self.power_cap.clock_fraction)
        return factor

    @property
    def power_limit_w(self) -> float:
        """The enforced limit: the board's, or the cap's while it lasts."""
        p = self.params
        return p.power_limit_w * (self.power_cap.power_fraction if self.capped else 1.0)

    def steady_temp_c(self, power_w: float, fault: bool) -> float:
        """Where the temperature would settle at this power (for tests and docs)."""
        p = self.params
        coolant = p.coolant_c + (p.fault_coolant_rise_c if fault else 0.0)
        return coolant + power_w * p.thermal_resistance_c_per_w

    def power_w(self, util: float, clock_factor: float) -> float:
        p = self.params
        return p.power_idle_w + p.power_dynamic_w * util * clock_factor**2

    def step(self, dt_s: float, busy_fraction: float) -> list[Transition]:
        """Advance by `dt_s` with the model busy `busy_fraction` of that time."""
        if dt_s <= 0:
            return []
        p = self.params
        transitions: list[Transition] = []
        self.t_s += dt_s
        util = min(1.0, max(0.0, busy_fraction))

        fault = self.faults.active(self.t_s)
        if fault != self.fault:
            self.fault = fault
            transitions.append(Transition("cooling-fault", "start" if fault else "end", self.t_s))
        capped = self.power_cap.active(self.t_s)
        if capped != self.capped:
            self.capped = capped
            transitions.append(Transition("power-cap", "start" if capped else "end", self.t_s))

        power = self.power_w(util, self.clock_factor)
        if self.capped:  # held at its cap (see the module's docstring)
            power = 0.985 * self.power_limit_w
        target = self.steady_temp_c(power, fault)
        # Exact solution of dT/dt = (target - T) / tau over dt (stable for any dt).
        self.temp_c = target + (self.temp_c - target) * math.exp(-dt_s / p.tau_s)
        self.energy_j += power * dt_s
        if self.throttled:
            self.thermal_violation_s += dt_s

        if not self.throttled and self.temp_c >= p.temp_slowdown_c:
            self.throttled = True
            transitions.append(Transition("thermal-throttle", "start", self.t_s))
        elif self.throttled and self.temp_c < p.temp_slowdown_c - p.hysteresis_c:
            self.throttled = False
            transitions.append(Transition("thermal-throttle", "end", self.t_s))

        self.state = self._snapshot(util=util, power_w=power)
        return transitions

    def _snapshot(self, util: float, power_w: float) -> SimGpuState:
        p = self.params
        reasons = THERMAL_THROTTLE_REASONS if self.throttled else 0
        if self.capped:
            reasons |= REASON_SW_POWER_CAP
        if util < p.idle_busy_fraction and not self.throttled and not self.capped:
            reasons |= REASON_GPU_IDLE
        pcie = int(p.pcie_kbps_at_full_load * util)
        return SimGpuState(
            t_s=round(self.t_s, 6),
            util_gpu_pct=round(util * 100.0, 2),
            util_mem_pct=round(util * 40.0, 2),
            sm_clock_mhz=int(round(p.sm_clock_max_mhz * self.clock_factor)),
            sm_clock_max_mhz=p.sm_clock_max_mhz,
            mem_clock_mhz=p.mem_clock_mhz,
            mem_clock_max_mhz=p.mem_clock_mhz,
            clock_factor=self.clock_factor,
            temp_c=round(self.temp_c, 3),
            temp_slowdown_c=p.temp_slowdown_c,
            temp_shutdown_c=p.temp_shutdown_c,
            temp_max_operating_c=p.temp_max_operating_c,
            power_w=round(power_w, 3),
            power_limit_w=self.power_limit_w,
            energy_mj=int(self.energy_j * 1000.0),
            mem_used_bytes=p.mem_base_used_bytes + int(util * 512 * 1024**2),
            mem_total_bytes=p.mem_total_bytes,
            clocks_event_reasons=reasons,
            throttled=self.throttled,
            cooling_fault=self.fault,
            power_capped=self.capped,
            thermal_violation_ns=int(self.thermal_violation_s * 1e9),
            pcie_tx_kbps=pcie // 4,
            pcie_rx_kbps=pcie,
            name=p.name,
            uuid=p.uuid,
        )
