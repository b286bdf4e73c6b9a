"""Telemetry samplers (GPU, host, Triton, Prometheus) and the simulated GPU.

Each sampler runs in its own process (never under gevent) in a drift-free
loop and streams rows to `telemetry/<source>.jsonl` in the run directory.
Names are imported lazily, so `python -m loadkit.telemetry.<module>` (how the
sampler processes start) loads only what that process needs.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SourceUnavailable": "loadkit.telemetry.base",
    "SamplerSet": "loadkit.telemetry.supervisor",
    "SIM_GPU_STATE_FILE": "loadkit.telemetry.simgpu",
    "SimulatedGpu": "loadkit.telemetry.simgpu_runner",
    "start_simulated_gpu": "loadkit.telemetry.simgpu_runner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'loadkit.telemetry' has no attribute {name!r}")
