"""GPU temperature limits: the device's own, as recorded, else a typical one. The one owner.

NVML reports each GPU's slowdown temperature (`temp_slowdown_c` in the GPU
rows; DCGM's `DCGM_FI_DEV_SLOWDOWN_TEMP`): at it the hardware lowers its
clocks. It differs between models (87 °C on some, 90+ on others), so a fixed
number misses a GPU that throttles below it. The fixed values are only the
fallback for runs that did not record the device's limit.
"""

from __future__ import annotations

import numpy as np

FALLBACK_SLOWDOWN_C = 90.0  # a typical data-centre GPU's slowdown temperature
HOT_MARGIN_C = 5.0  # "hot": this close to the slowdown temperature


def _own(recorded_c: np.ndarray | None, n: int) -> np.ndarray:
    if recorded_c is None:
        return np.full(n, np.nan)
    own = np.asarray(recorded_c, dtype=float)
    return np.where(np.isfinite(own) & (own > 0), own, np.nan)


def slowdown_c(recorded_c: np.ndarray | None, n: int) -> np.ndarray:
    """Per window: the temperature at which the GPU throttles (`recorded_c`: the
    device's own per window, NaN or None where not recorded)."""
    return np.nan_to_num(_own(recorded_c, n), nan=FALLBACK_SLOWDOWN_C)


def hot_c(recorded_c: np.ndarray | None, n: int) -> np.ndarray:
    """Per window: the temperature from which the GPU counts as hot (near its slowdown)."""
    return slowdown_c(recorded_c, n) - HOT_MARGIN_C


def recorded(recorded_c: np.ndarray | None) -> bool:
    """Whether any window carries the device's own slowdown temperature."""
    return recorded_c is not None and bool(np.any(np.isfinite(_own(recorded_c, len(recorded_c)))))
