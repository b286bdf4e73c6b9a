"""A signal judged against its own run: effect sizes and the baseline's spread.

Fixed multipliers ("3x the baseline run delay") fit the faults they were tuned
on and miss the weak end: a neighbour at the server's own priority raises the
server's run delay 1.5-2x, a quota just below the need throttles a few periods.
These helpers judge a window, or a set of windows, against the distribution of
the same series in the run's own baseline windows instead. One owner for the
rule, used by the causes and by the residual's "no change in X" text.
"""

from __future__ import annotations

import numpy as np

# Cliff's delta at or above this is at least a "small-to-medium" effect (Romano et al.:
# negligible < 0.147 <= small < 0.33 <= medium < 0.474 <= large): a series that moved.
EFFECT_MOVED = 0.33
# A window clears the baseline's spread when it lies this many robust standard deviations
# (1.4826 x MAD) above the baseline median ...
SPREAD_SIGMAS = 3.0
MAD_TO_SIGMA = 1.4826


def cliffs_delta(a: np.ndarray, b: np.ndarray) -> float | None:
    """P(a > b) - P(a < b) over all pairs: -1..1, robust to outliers and scale.

    Counted by binary search in the sorted `b`, never as the a x b matrix of
    pairs: at 24 h that matrix (thousands of episode windows x ~80,000 baseline
    windows) was 4-5 GB and attribution's whole peak.
    """
    a = a[~np.isnan(a)]
    b = np.sort(b[~np.isnan(b)])
    if a.size == 0 or b.size == 0:
        return None
    below = int(np.searchsorted(b, a, side="left").sum())  # pairs with b < a
    above = int((b.size - np.searchsorted(b, a, side="right")).sum())  # pairs with b > a
    return float((below - above) / (a.size * b.size))


def moved(values: np.ndarray | None, episode: np.ndarray, baseline: np.ndarray) -> float | None:
    """Cliff's delta of `values` in the episode windows against the baseline windows."""
    if values is None:
        return None
    return cliffs_delta(values[episode], values[baseline])


def above_spread(
    values: np.ndarray,
    baseline: np.ndarray,
    floor_ratio: float,
    at_least: float | None = None,
    by_at_least: float | None = None,
) -> np.ndarray | None:
    """Per window: the value clears the baseline's own spread (NaN where unknown).

    Above the baseline median by SPREAD_SIGMAS robust standard deviations, and by at
    least `floor_ratio` x the median (a series with almost no spread must still move by
    an amount that matters). None where the baseline has under 3 windows of data.
    Without `at_least`, None too where the baseline median is zero (no scale to judge
    by); with it, the value must also reach `at_least`, the least amount that means the
    thing happened at all: a series flat at zero in the baseline (no throttled period)
    fires at that floor, not at a fixed share tuned on strong faults. `by_at_least`: the
    value must also lie that much above the median (a difference of amounts, for a series
    whose median may be zero or below, such as the CPU left over when others are
    subtracted).
    """
    base = values[baseline]
    base = base[~np.isnan(base)]
    if base.size < 3:
        return None
    med = float(np.median(base))
    if med <= 0 and at_least is None and by_at_least is None:
        return None
    sigma = MAD_TO_SIGMA * float(np.median(np.abs(base - med)))
    threshold = max(med + SPREAD_SIGMAS * sigma, floor_ratio * med, med + (by_at_least or 0.0))
    if at_least is not None:
        threshold = max(threshold, at_least)
    out = (np.nan_to_num(values, nan=0.0) >= threshold).astype(float)
    out[np.isnan(values)] = np.nan
    return out
