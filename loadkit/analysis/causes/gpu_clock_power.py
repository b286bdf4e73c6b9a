"""GPU power-cap throttling: the busy SM clock drops with a power-cap reason (or at the limit)."""

from __future__ import annotations

import numpy as np

from loadkit.analysis.causes._gpu_clock import (
    SIGNAL,
    clock_shading,
    clock_signature,
    clock_summary,
)
from loadkit.analysis.causes.base import Cause, Signals, Signature
from loadkit.analysis.model import CAUSE_GPU_POWER


def signature(sig: Signals, baseline: np.ndarray) -> Signature:
    return clock_signature(CAUSE_GPU_POWER, sig, baseline)


CAUSE = Cause(
    id=CAUSE_GPU_POWER,
    title="GPU power-cap throttling",
    action="Review the power limit (nvidia-smi -q -d POWER; -pl) or lock clocks a step "
    "lower for steady latency.",
    signature=signature,
    summary=clock_summary("power-cap throttling"),
    signal=SIGNAL,
    shading=clock_shading(CAUSE_GPU_POWER, "gpu_power", "GPU power capping"),
    server_series=("gpu",),
    fault_events=("power-cap",),
)
