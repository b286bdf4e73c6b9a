"""Spike episodes: runs of windows where a percentile sits far above its robust baseline.

Baseline is a rolling median over a long centered window; the spread is
max(1.4826·MAD, a fraction of the median, a floor), with the MAD taken on the
quiet (lower) side so that frequent one-sided spikes cannot hide themselves by
inflating it, and the floor and fraction ensure a perfectly flat series
(MAD = 0) does not turn every millisecond of noise into an infinite z-score. A
window is hot when both its robust z and its ratio to the baseline are high;
hot runs separated by short gaps are one episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from loadkit.analysis.model import SpikeEpisode

# Rolling-median span: long against spikes and bursts of seconds to tens of seconds.
BASELINE_SPAN_S = 60.0
MIN_BASELINE_WINDOWS = 15
BASELINE_WINDOWS = 61
# The baseline is re-estimated without the episodes found so far, until they stop
# changing: a 20 s burst plus a 4-in-15 s sawtooth fill half of a 61 s window and
# would otherwise lift the median onto the spikes themselves.
MAX_BASELINE_PASSES = 5
FIRST_PASS_QUANTILE = 0.25
# Spikes that fill most windows (bursts whose backlog drains for 6 of every 8 s)
# put even the first pass's low quantile on the spikes. Their sign is a floor: a
# sizeable share of windows at a third of the median or less, which a latency
# series without such spikes does not have (a percentile rarely falls to a third
# of its usual level). The first pass then starts from the floor windows alone.
FLOOR_RATIO = 3.0
FLOOR_MIN_SHARE = 0.15
MAD_TO_SIGMA = 1.4826
MIN_SCALE_FRACTION = 0.05  # of the baseline median
MIN_SCALE_MS = 0.1
Z_THRESHOLD = 4.0
RATIO_THRESHOLD = 1.3
# Hysteresis: an episode found at the thresholds above extends over neighbouring
# windows that still clear these lower ones, so its start is when the rise began.
EDGE_Z_THRESHOLD = 1.0
EDGE_RATIO_THRESHOLD = 1.15
MERGE_GAP_WINDOWS = 1
# Two peaks inside one run are two episodes when the series falls back between
# them to within this share of the smaller peak's excess over the baseline: on a
# noisy (busy) host the hysteresis edges bridge the quiet spell between two spikes.
VALLEY_SHARE = 0.25


@dataclass(frozen=True)
class Baseline:
    """Robust baseline and spread per window (NaN where the series has no data nearby)."""

    median: np.ndarray
    scale: np.ndarray


def _rolling(
    values: np.ndarray,
    window: int,
    fn: str,
    quantile: float = 0.5,
    min_periods: int | None = None,
) -> np.ndarray:
    s = pd.Series(values)
    least = max(1, window // 4) if min_periods is None else min_periods
    roll = s.rolling(window, center=True, min_periods=least)
    if fn == "median":
        out = roll.median() if quantile == 0.5 else roll.quantile(quantile)
        return np.array(out, dtype=float)
    stride = 1 if window <= EXACT_MAD_WINDOWS else window // MAD_STEPS_PER_WINDOW
    return _rolling_quiet_mad(np.asarray(values, dtype=float), window, least, stride)


# Values sorted at once, per chunk of windows (a chunk of 61-wide windows: 32,800 rows, 16 MB).
_MAD_CHUNK_VALUES = 2_000_000
# Windows up to this wide get their own quiet MAD; a wider one (periodicity's baseline
# spans two candidate periods: up to 34,560 windows in a 24 h run) is computed every
# window/MAD_STEPS_PER_WINDOW windows and held in between: the window then moves by
# under 1/64 of itself, and sorting every one of 86,400 such windows took minutes
# and gigabytes.
EXACT_MAD_WINDOWS = 256
MAD_STEPS_PER_WINDOW = 64


def _rolling_quiet_mad(v: np.ndarray, window: int, min_periods: int, stride: int = 1) -> np.ndarray:
    """`_mad` over every full centered window, vectorized; NaN at the partial edge windows.

    The same values as `Series.rolling(window, center=True, min_periods).apply(_mad)`
    on every full window (tests/unit/analysis/test_episodes.py), ten times faster:
    pandas calls `_mad` once per window in Python (~20 s for a 24 h run at 1 s).
    With `stride` > 1 only every stride-th window (and the last) is computed, and
    each window takes the value of the last computed one at or before it.
    The edges are replaced by the nearest full window by the caller anyway.
    """
    n = len(v)
    out = np.full(n, np.nan)
    if n < window:
        return out
    rows = np.lib.stride_tricks.sliding_window_view(v, window)
    n_rows = len(rows)
    # Values present in each window, from a running count (not a pass over every window).
    present = np.concatenate([[0], np.cumsum(~np.isnan(v))])
    counts = present[window:] - present[:n_rows]
    picked = np.arange(0, n_rows, max(1, stride))
    if picked[-1] != n_rows - 1:
        picked = np.append(picked, n_rows - 1)
    mads = np.full(len(picked), np.nan)
    step = max(1, _MAD_CHUNK_VALUES // window)
    for a in range(0, len(picked), step):
        # Each window sorted once (NaNs last): its median m is the middle of its
        # k values, the values <= m are its first j, and the median of m - x over
        # them is m minus their middle (m - x falls as x rises).
        chosen = picked[a : a + step]
        ordered = np.sort(rows[chosen], axis=1)
        k = counts[chosen]
        has = k > 0
        r = np.flatnonzero(has)
        kk = k[has]
        m = (ordered[r, (kk - 1) // 2] + ordered[r, kk // 2]) / 2
        j = np.count_nonzero(ordered[r] <= m[:, None], axis=1)
        quiet_mid = (ordered[r, (j - 1) // 2] + ordered[r, j // 2]) / 2
        mads[a + r] = m - quiet_mid
    held = mads[np.searchsorted(picked, np.arange(n_rows), side="right") - 1]
    half = window // 2  # pandas' centered window for index i starts at i - window // 2
    out[half : half + n_rows] = np.where(counts >= min_periods, held, np.nan)
    return out


def _mad(x: np.ndarray) -> float:
    """MAD of the quiet side: median distance below the median.

    Spikes are one-sided; when they fill a large share of windows (a 4 s
    throttle every 15 s is 27 %), they inflate a two-sided MAD until the spikes
    themselves look normal. For symmetric noise this equals the usual MAD.
    """
    x = x[~np.isnan(x)]
    if x.size == 0:
        return np.nan
    m = np.median(x)
    return float(np.median(m - x[x <= m]))


def robust_baseline(
    values: np.ndarray,
    window: int = BASELINE_WINDOWS,
    min_fraction: float = MIN_SCALE_FRACTION,
    floor: float = MIN_SCALE_MS,
    level_quantile: float = 0.5,
    min_periods: int | None = None,
) -> Baseline:
    """Rolling median and max(1.4826·MAD, min_fraction·median, floor).

    Near the ends, where a centered window does not fit, the nearest full
    window's values are used; a series shorter than the window uses one global
    median and MAD.
    """
    v = np.asarray(values, dtype=float)
    n = len(v)
    if n == 0 or np.all(np.isnan(v)):
        return Baseline(np.full(n, np.nan), np.full(n, np.nan))
    if n <= window:
        med = np.full(n, float(np.nanquantile(v, level_quantile)))
        mad = np.full(n, _mad(v))
    else:
        med = _rolling(v, window, "median", level_quantile, min_periods)
        mad = _rolling(v, window, "mad", min_periods=min_periods)
        half = window // 2
        med[:half], mad[:half] = med[half], mad[half]
        med[n - half :], mad[n - half :] = med[n - half - 1], mad[n - half - 1]
        # Interior windows far from any data: carry the nearest value.
        med = np.array(pd.Series(med).ffill().bfill(), dtype=float)
        mad = np.array(pd.Series(mad).ffill().bfill(), dtype=float)
    # A level shift inside the baseline span (a burst plateau beside a sawtooth)
    # inflates even the quiet-side MAD; the spread of window-to-window changes
    # does not see level shifts, only noise (and two edges per spike), so the
    # smaller of the two is the noise.
    spread = np.fmin(MAD_TO_SIGMA * mad, _diff_sigma(v, window))
    scale = np.maximum.reduce(
        [np.nan_to_num(spread, nan=0.0), min_fraction * np.abs(med), np.full(n, floor)]
    )
    scale = np.where(np.isnan(med), np.nan, scale)
    return Baseline(med, scale)


def _diff_sigma(v: np.ndarray, window: int) -> np.ndarray:
    """Noise sigma from first differences: 1.4826 * median|diff| / sqrt(2), rolling."""
    n = len(v)
    if n < 3:
        return np.full(n, np.nan)
    d = np.abs(np.diff(v))
    d = np.append(d, np.nan)
    if n <= window:
        est = float(np.nanmedian(d)) if np.any(~np.isnan(d)) else np.nan
        return np.full(n, MAD_TO_SIGMA * est / np.sqrt(2.0))
    roll = pd.Series(d).rolling(window, center=True, min_periods=max(1, window // 4)).median()
    out = np.array(roll.ffill().bfill(), dtype=float)
    return MAD_TO_SIGMA * out / np.sqrt(2.0)


def hot_windows(
    values: np.ndarray,
    baseline: Baseline,
    z_threshold: float = Z_THRESHOLD,
    ratio_threshold: float = RATIO_THRESHOLD,
) -> np.ndarray:
    """Windows whose robust z and ratio to baseline are both over their thresholds."""
    v = np.asarray(values, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (v - baseline.median) / baseline.scale
        ratio = v / baseline.median
    return (np.nan_to_num(z, nan=0.0) >= z_threshold) & (
        np.nan_to_num(ratio, nan=0.0) >= ratio_threshold
    )


def iterative_baseline(
    values: np.ndarray,
    window: int = BASELINE_WINDOWS,
    z_threshold: float = Z_THRESHOLD,
    ratio_threshold: float = RATIO_THRESHOLD,
) -> tuple[Baseline, np.ndarray]:
    """Baseline re-estimated without the hot windows until the hot set is stable; and that set."""
    v = np.asarray(values, dtype=float)
    # Start from a low quantile: a sawtooth whose spikes (with their tails) fill
    # half the windows or more lifts a first median onto the spikes, and then
    # nothing looks hot. Later passes use the median of the quiet windows.
    floor = _floor_windows(v)
    if floor is None:
        baseline = robust_baseline(v, window, level_quantile=FIRST_PASS_QUANTILE)
    else:  # the floor windows alone, however few of them a span holds
        baseline = robust_baseline(np.where(floor, v, np.nan), window, min_periods=3)
    hot = np.zeros(len(v), dtype=bool)
    used = baseline  # the baseline the returned hot set was found against
    for i in range(MAX_BASELINE_PASSES):
        used = baseline
        core = hot_windows(v, baseline, z_threshold, ratio_threshold)
        warm = hot_windows(v, baseline, EDGE_Z_THRESHOLD, EDGE_RATIO_THRESHOLD) | core
        new_hot = extend_edges(core, warm)
        converged = i > 0 and np.array_equal(new_hot, hot)
        hot = new_hot
        if converged:
            break
        quiet = np.where(hot, np.nan, v)
        if np.count_nonzero(~np.isnan(quiet)) < max(3, len(v) // 10):
            break  # almost everything is hot: keep the last baseline
        candidate = robust_baseline(quiet, window)
        if np.any(np.isnan(candidate.median) & ~np.isnan(v)):
            # Too few quiet windows left in some baseline span (a wide sawtooth):
            # a baseline with holes would hide every spike in them; keep the last.
            break
        baseline = candidate
    return used, hot


def _floor_windows(v: np.ndarray) -> np.ndarray | None:
    """The windows at the series' floor when spikes fill most of it, else None."""
    known = v[~np.isnan(v)]
    if known.size == 0:
        return None
    least = max(3, FLOOR_MIN_SHARE * known.size)
    floor = v <= np.median(known) / FLOOR_RATIO
    if np.count_nonzero(floor) >= least:
        return floor
    return _below_a_gap(v, known, least)


def _below_a_gap(v: np.ndarray, known: np.ndarray, least: float) -> np.ndarray | None:
    """The windows under a clean gap between two levels, each held by many windows.

    A quota held for half of every period puts half the windows on a plateau a
    few times the quiet level, with nothing in between: both the first pass's
    low quantile and its quiet-side spread then come from the plateau's side.
    A gap no window falls into, at least a spike's ratio wide, with a sizeable
    share of windows on either side, is not noise: the lower level is the floor.
    """
    ordered = np.sort(known[known > 0])
    n = ordered.size
    lo = int(np.ceil(least)) - 1  # the floor's highest value, at the smallest floor
    hi = n - int(np.ceil(least))  # ... and at the largest floor leaving a plateau
    if lo >= hi:
        return None
    gaps = ordered[lo + 1 : hi + 1] / ordered[lo:hi]
    widest = int(np.argmax(gaps))
    if gaps[widest] < RATIO_THRESHOLD:
        return None
    return v <= ordered[lo + widest]


def extend_edges(hot: np.ndarray, warm: np.ndarray) -> np.ndarray:
    """Grow each hot run over adjacent warm windows (hysteresis thresholding)."""
    out = hot.copy()
    n = len(hot)
    for i in np.nonzero(hot)[0]:
        j = i - 1
        while j >= 0 and warm[j] and not out[j]:
            out[j] = True
            j -= 1
        j = i + 1
        while j < n and warm[j] and not out[j]:
            out[j] = True
            j += 1
    return out


def hot_runs(
    hot: np.ndarray, merge_gap: int = MERGE_GAP_WINDOWS, bridgeable: np.ndarray | None = None
) -> list[tuple[int, int]]:
    """[start, end) index ranges of hot windows, merging runs separated by <= merge_gap windows.

    With `bridgeable`, only gaps made entirely of bridgeable windows merge.
    """
    runs: list[tuple[int, int]] = []
    i, n = 0, len(hot)
    while i < n:
        if not hot[i]:
            i += 1
            continue
        j = i
        while j < n and hot[j]:
            j += 1
        gap = slice(runs[-1][1], i) if runs else slice(0, 0)
        if (
            runs
            and i - runs[-1][1] <= merge_gap
            and (bridgeable is None or bool(np.all(bridgeable[gap])))
        ):
            runs[-1] = (runs[-1][0], j)
        else:
            runs.append((i, j))
        i = j
    return runs


def split_at_valleys(
    v: np.ndarray, baseline: Baseline, core: np.ndarray, run: tuple[int, int]
) -> list[tuple[int, int]]:
    """[start, end) pieces of one hot run, split where it falls back between two peaks.

    Peaks are the runs of core (z >= 4) windows. Between two of them, two or
    more consecutive windows whose excess over the baseline is at most
    VALLEY_SHARE of the smaller peak's split the run (a one-window dip or a
    window without data does not: those merge, as in `hot_runs`); the valley
    windows belong to neither piece.
    """
    a, b = run
    excess = v[a:b] - baseline.median[a:b]
    peaks = hot_runs(core[a:b], merge_gap=0)
    if len(peaks) < 2:
        return [run]
    pieces: list[tuple[int, int]] = []
    start = 0
    for (p0, p1), (q0, q1) in zip(peaks, peaks[1:], strict=False):
        smaller = min(float(np.nanmax(excess[p0:p1])), float(np.nanmax(excess[q0:q1])))
        low = np.nan_to_num(excess[p1:q0], nan=np.inf) <= VALLEY_SHARE * smaller
        valleys = [r for r in hot_runs(low, merge_gap=0) if r[1] - r[0] >= 2]
        if valleys and p1 > start:
            v0, v1 = valleys[0]
            pieces.append((a + start, a + p1 + v0))
            start = p1 + v1
    pieces.append((a + start, b))
    return [(x, y) for x, y in pieces if y > x]


def find_episodes(
    values: Sequence[float | None],
    starts_ns: np.ndarray,
    window_s: float,
    run_start_ns: int,
    percentile: str,
    kind: str = "corrected",
    *,
    baseline_windows: int = BASELINE_WINDOWS,
    z_threshold: float = Z_THRESHOLD,
    ratio_threshold: float = RATIO_THRESHOLD,
    merge_gap: int = MERGE_GAP_WINDOWS,
) -> tuple[list[SpikeEpisode], Baseline]:
    """Spike episodes of one percentile series (ms per window) and the baseline used."""
    v = np.array([np.nan if x is None else x for x in values], dtype=float)
    baseline, hot = iterative_baseline(v, baseline_windows, z_threshold, ratio_threshold)
    window_ns = int(round(window_s * 1e9))
    episodes: list[SpikeEpisode] = []
    core = hot_windows(v, baseline, z_threshold, ratio_threshold)
    # A window without data inside an episode (a stall completes nothing) is bridged;
    # one with data that fell back below the edge thresholds ends it: bursts whose
    # backlog leaves one quiet second between them are that many episodes.
    runs = [
        r
        for run in hot_runs(hot, merge_gap, bridgeable=np.isnan(v))
        for r in split_at_valleys(v, baseline, core, run)
    ]
    for n, (a, b) in enumerate(runs, start=1):
        seg = v[a:b]
        k = a + int(np.nanargmax(seg))
        base = float(baseline.median[k])
        scale = float(baseline.scale[k])
        excess = np.clip(seg - baseline.median[a:b], 0, None)
        start_ns = int(starts_ns[a])
        episodes.append(
            SpikeEpisode(
                episode_id=f"{percentile}#{n}",
                percentile=percentile,
                kind=kind,
                start_ns=start_ns,
                end_ns=int(starts_ns[b - 1]) + window_ns,
                start_s=(start_ns - run_start_ns) / 1e9,
                duration_s=(b - a) * window_s,
                peak_ns=int(starts_ns[k]),
                peak_ms=float(v[k]),
                baseline_ms=base,
                excess_ms=float(v[k] - base),
                excess_area_ms_s=float(np.nansum(excess) * window_s),
                peak_ratio=float(v[k] / base) if base > 0 else float("inf"),
                peak_z=float((v[k] - base) / scale) if scale > 0 else float("inf"),
                windows=b - a,
            )
        )
    return episodes, baseline


def baseline_windows_for(window_s: float) -> int:
    """Odd number of windows spanning about BASELINE_SPAN_S (at least MIN_BASELINE_WINDOWS)."""
    n = max(MIN_BASELINE_WINDOWS, int(round(BASELINE_SPAN_S / window_s)))
    return n if n % 2 else n + 1


def episode_mask(episode: SpikeEpisode, starts_ns: np.ndarray) -> np.ndarray:
    """Boolean mask of the windows an episode covers."""
    return (starts_ns >= episode.start_ns) & (starts_ns < episode.end_ns)
