"""A GPU clock drop with neither a thermal nor a power reason (clock locks, policies)."""

from __future__ import annotations

import numpy as np

from loadkit.analysis.causes._gpu_clock import (
    SIGNAL,
    clock_shading,
    clock_signature,
    clock_summary,
)
from loadkit.analysis.causes.base import Cause, Signals, Signature
from loadkit.analysis.model import CAUSE_GPU_CLOCK_OTHER


def signature(sig: Signals, baseline: np.ndarray) -> Signature:
    return clock_signature(CAUSE_GPU_CLOCK_OTHER, sig, baseline)


CAUSE = Cause(
    id=CAUSE_GPU_CLOCK_OTHER,
    title="GPU clock drop (no thermal or power reason)",
    action="Check application clocks and clock locks (nvidia-smi -q -d CLOCK), "
    "and whether another process or policy lowers clocks.",
    signature=signature,
    summary=clock_summary("a clock drop"),
    signal=SIGNAL,
    shading=clock_shading(
        CAUSE_GPU_CLOCK_OTHER, "gpu_clock_other", "GPU clock drop (no thermal or power reason)"
    ),
    server_series=("gpu",),
)
