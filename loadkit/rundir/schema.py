"""The run directory's row formats in code (docs/run-format.md is the prose).

Values every producer (samplers, simulators, importers, the synthetic-run
builder) and the reader must agree on are defined here once.
"""

from __future__ import annotations

# NVML's clock-event (throttle) reason bits, nvmlClocksEventReason*: gpu.jsonl holds
# the mask (`clocks_event_reasons`) and one `reason_<name>` bool per bit.
CLOCK_EVENT_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clocks": 0x100,
}
REASON_GPU_IDLE = CLOCK_EVENT_REASONS["gpu_idle"]
REASON_SW_POWER_CAP = CLOCK_EVENT_REASONS["sw_power_cap"]
REASON_HW_SLOWDOWN = CLOCK_EVENT_REASONS["hw_slowdown"]
REASON_SW_THERMAL = CLOCK_EVENT_REASONS["sw_thermal"]
REASON_HW_THERMAL = CLOCK_EVENT_REASONS["hw_thermal"]
REASON_HW_POWER_BRAKE = CLOCK_EVENT_REASONS["hw_power_brake"]
THERMAL_REASONS = REASON_SW_THERMAL | REASON_HW_THERMAL
POWER_REASONS = REASON_SW_POWER_CAP | REASON_HW_POWER_BRAKE
# gpu.jsonl's `reason_<name>` column of each bit.
REASON_COLUMNS: dict[str, int] = {
    f"reason_{name}": bit for name, bit in CLOCK_EVENT_REASONS.items()
}


def decode_reasons(mask: int | None) -> dict[str, bool | None]:
    """`{"reason_<name>": bool}` for each known bit; all None when the mask is unknown."""
    return {
        column: (None if mask is None else bool(mask & bit))
        for column, bit in REASON_COLUMNS.items()
    }


__all__ = [
    "CLOCK_EVENT_REASONS",
    "POWER_REASONS",
    "REASON_COLUMNS",
    "REASON_GPU_IDLE",
    "REASON_HW_POWER_BRAKE",
    "REASON_HW_SLOWDOWN",
    "REASON_HW_THERMAL",
    "REASON_SW_POWER_CAP",
    "REASON_SW_THERMAL",
    "THERMAL_REASONS",
    "decode_reasons",
]
