"""GPU thermal throttling: the busy SM clock drops with a thermal reason (or a hot GPU)."""

from __future__ import annotations

import numpy as np

from loadkit.analysis.causes._gpu_clock import (
    SIGNAL,
    clock_shading,
    clock_signature,
    clock_summary,
)
from loadkit.analysis.causes.base import Cause, Signals, Signature
from loadkit.analysis.model import CAUSE_GPU_THERMAL


def signature(sig: Signals, baseline: np.ndarray) -> Signature:
    return clock_signature(CAUSE_GPU_THERMAL, sig, baseline)


CAUSE = Cause(
    id=CAUSE_GPU_THERMAL,
    title="GPU thermal throttling",
    action="Check cooling (airflow, fans, inlet temperature); lock SM clocks to a "
    "sustainable frequency (nvidia-smi -lgc) so the GPU stops oscillating between boost and throttle.",
    signature=signature,
    summary=clock_summary("thermal throttling"),
    signal=SIGNAL,
    shading=clock_shading(CAUSE_GPU_THERMAL, "gpu_thermal", "GPU thermal throttling"),
    fault_events=("thermal-throttle",),
    server_series=("gpu",),
)
