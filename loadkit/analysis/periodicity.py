"""Is the spiking periodic (a sawtooth)? Periodogram candidates, autocorrelation, phase folding.

1. Candidates: peaks of the periodogram of the detrended log-percentile series
   (log because spikes are multiplicative; detrended by the robust baseline).
2. Confirmation: the autocorrelation at the candidate lag (best lag within
   ±20 %) must be a clear positive peak.
3. Refinement: the episode start times are folded on periods near the
   candidate; the period with the highest mean resultant length wins, and a
   Rayleigh test of the folded phases must be significant at a strict level.
A period with fewer than MIN_CYCLES cycles in the run is rejected.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import signal

from loadkit.analysis.episodes import robust_baseline
from loadkit.analysis.model import Periodicity, SpikeEpisode

MIN_CYCLES = 5.0
MIN_EPISODES = 4
MIN_ACF = 0.25
MIN_OCCUPANCY = 0.6  # share of cycles (between the first and last onset) that hold a spike
# Strict: with 4 episodes even perfect alignment gives p = 0.008, so a period
# needs at least 5 phase-locked episode starts (and 5 cycles) to pass.
RAYLEIGH_ALPHA = 5e-3
CANDIDATES = 3
REFINE_SPAN = 0.2  # search ±20 % around the candidate period
# The shortest period a step resolves: onsets jitter by a step, so a period of a few steps
# folds on noise. A 4 s slowdown every 12 s at a 5 s production step is 2.4 steps: said
# as not resolvable there, never as absent (issue 54).
RESOLVABLE_STEPS = 4
# A spike this many windows wide (the median) is also folded on its centre (`_onset_sets`).
WIDE_SPIKE_WINDOWS = 3


def rayleigh_test(phases: np.ndarray) -> tuple[float, float]:
    """Mean resultant length R and the Rayleigh test p-value (Zar's approximation)."""
    n = len(phases)
    if n == 0:
        return 0.0, 1.0
    c, s = np.cos(phases).sum(), np.sin(phases).sum()
    rn = math.hypot(c, s)
    r = rn / n
    p = math.exp(math.sqrt(1 + 4 * n + 4 * (n * n - rn * rn)) - (1 + 2 * n))
    return r, min(1.0, max(0.0, p))


def autocorrelation(x: np.ndarray) -> np.ndarray:
    """Normalized autocorrelation for lags 0..n-1 (x already has NaNs filled)."""
    x = x - x.mean()
    denom = float(np.dot(x, x))
    if denom <= 0:
        return np.zeros(len(x))
    # By FFT: np.correlate is O(n^2), minutes for the 86,400 windows of a 24 h run.
    full = signal.correlate(x, x, mode="full", method="fft")[len(x) - 1 :]
    return np.asarray(full / denom, dtype=float)


def _detrended_log(values: Sequence[float | None]) -> np.ndarray:
    v = np.array([np.nan if x is None else x for x in values], dtype=float)
    v = np.where(v > 0, v, np.nan)
    logv = np.log(v)
    base = robust_baseline(logv, floor=1e-3).median
    resid = logv - base
    return np.nan_to_num(resid, nan=0.0)


def fold_episodes(starts_s: np.ndarray, period_s: float) -> tuple[float, float, float]:
    """Rayleigh R, p-value and circular jitter (s) of start times folded on a period."""
    phases = 2 * np.pi * (starts_s % period_s) / period_s
    r, p = rayleigh_test(phases)
    # r rounds to just above 1 for onsets exactly one period apart: no jitter, not a NaN.
    jitter = (
        math.sqrt(-2 * math.log(min(r, 1.0))) * period_s / (2 * math.pi) if r > 0 else float("inf")
    )
    return r, p, jitter


@dataclass(frozen=True)
class _Spikes:
    """The spikes seen against a local baseline: when each starts, its size, and its centre."""

    onsets: np.ndarray  # seconds since the series' start
    sizes: np.ndarray | None  # peak log-ratio to the local baseline; None: episode starts only
    centres: np.ndarray | None  # excess-weighted centre (seconds); None: episode starts only
    widths: np.ndarray | None  # windows


def _onsets_for(
    values: Sequence[float | None], window_s: float, period_s: float, episode_starts: np.ndarray
) -> _Spikes:
    """Spikes seen against a baseline about two candidate periods long: onset, size and centre.

    The episodes' long baseline merges spikes that ride on a plateau (a burst
    holding latency up) into one episode, losing cycles; a baseline that
    follows the plateau sees each spike start. The size is the spike's peak
    log-ratio to that baseline. Falls back to the episode starts (sizes unknown).
    """
    from loadkit.analysis.episodes import hot_runs, iterative_baseline

    v = np.array([np.nan if x is None else x for x in values], dtype=float)
    span = max(5, int(round(2 * period_s / window_s)))
    span += 1 - span % 2
    baseline, hot = iterative_baseline(v, span)
    runs = hot_runs(hot)
    if len(runs) < max(MIN_EPISODES, len(episode_starts)):
        return _Spikes(episode_starts, None, None, None)
    # A window where nothing completed has no percentile, yet it is the worst
    # latency of all (a stall): a spike starts where the empty windows before it
    # start, when there was data before them (not the warm-up at the run start).
    has_data = ~np.isnan(v)
    first_data = int(np.argmax(has_data)) if has_data.any() else len(v)
    starts = []
    for a, _ in runs:
        while a - 1 > first_data and not has_data[a - 1]:
            a -= 1
        starts.append(a)
    with np.errstate(invalid="ignore", divide="ignore"):
        log_ratio = np.log(v / baseline.median)
    sizes = np.array(
        [
            float(np.nanmax(log_ratio[a:b])) if np.any(~np.isnan(log_ratio[a:b])) else 0.0
            for a, b in runs
        ]
    )
    centres = np.array([_centre(log_ratio[a:b], a) for (_, b), a in zip(runs, starts, strict=True)])
    widths = np.array([b - a for (_, b), a in zip(runs, starts, strict=True)], dtype=float)
    return _Spikes(np.array(starts, dtype=float) * window_s, sizes, centres * window_s, widths)


def _centre(excess: np.ndarray, first: int) -> float:
    """The excess-weighted centre of one spike, in windows; an empty window (a stall)
    weighs as much as the spike's largest known excess."""
    w = np.clip(excess, 0.0, None)
    known = w[~np.isnan(w)]
    w = np.where(np.isnan(w), float(known.max()) if known.size else 1.0, w)
    if w.sum() <= 0:
        return first + (len(w) - 1) / 2
    return first + float(np.dot(np.arange(len(w)), w) / w.sum())


def largest_spikes(onsets: np.ndarray, sizes: np.ndarray | None) -> np.ndarray | None:
    """Onsets of the spikes above the widest gap in spike size, if there are enough of them.

    A sawtooth's spikes come from one mechanism and have about one size; on a
    busy host, smaller spikes from other work fall between them and break the
    phase lock of the whole set. Choosing by size alone (never by timing)
    keeps the phase test valid: without a period, big spikes are as
    uniformly spread in phase as all of them.
    """
    if sizes is None or len(sizes) <= MIN_EPISODES:
        return None
    order = np.sort(sizes)
    gaps = np.diff(order)
    cut = int(np.argmax(gaps))
    threshold = order[cut + 1]
    keep = onsets[sizes >= threshold]
    return keep if MIN_EPISODES <= len(keep) < len(onsets) else None


def _fold_test(onsets: np.ndarray, cand: float) -> tuple[float, float, float, float]:
    """(period, R, p-value, jitter) of the period near `cand` that folds the onsets most tightly."""
    grid = np.linspace(cand * (1 - REFINE_SPAN), cand * (1 + REFINE_SPAN), 401)
    rs = [fold_episodes(onsets, p)[0] for p in grid]
    period = float(grid[int(np.argmax(rs))])
    r, p_value, jitter = fold_episodes(onsets, period)
    return period, r, p_value, jitter


@dataclass(frozen=True)
class _Candidate:
    """A periodogram candidate that passed the autocorrelation check, with what confirmed it."""

    period_s: float
    strength: float  # autocorrelation at the best lag near the period
    lag_s: float


@dataclass(frozen=True)
class _Rejection:
    """Why one onset set did not fold on a candidate, for the list and for the summary."""

    reason: str  # the full entry of `Periodicity.rejected`
    closest: str  # the few words the one-line summary names, if this came closest
    p_value: float


def _candidate_periods(x: np.ndarray, window_s: float, duration_s: float) -> list[float] | None:
    """The strongest periodogram periods that fit MIN_CYCLES cycles; None if no period fits."""
    freqs, power = signal.periodogram(x, fs=1.0 / window_s, detrend="constant", scaling="spectrum")
    # Periods from 3 windows up to a length that still fits MIN_CYCLES cycles.
    valid = (freqs > 0) & (freqs >= MIN_CYCLES / duration_s) & (freqs <= 1.0 / (3 * window_s))
    if not valid.any():
        return None
    order = np.argsort(power[valid])[::-1][:CANDIDATES]
    return [1.0 / f for f in freqs[valid][order]]


def _candidate_lags(cand: float, window_s: float, n: int) -> np.ndarray | None:
    """The autocorrelation lags within ±REFINE_SPAN of a candidate; None: too short a series."""
    lag_lo = max(2, int(math.floor(cand * (1 - REFINE_SPAN) / window_s)))
    lag_hi = min(n - 2, int(math.ceil(cand * (1 + REFINE_SPAN) / window_s)))
    if lag_hi < lag_lo:
        return None
    return np.arange(lag_lo, lag_hi + 1)


def _onset_sets(spikes: _Spikes, starts: np.ndarray) -> list[tuple[np.ndarray, str]]:
    """The onset sets a candidate is folded on, each with the words that name it in a reason.

    All onsets, and (when they differ) those of the largest spikes (at least
    MIN_EPISODES of them) and the episodes' own starts: a short local baseline
    also sees small blips between the spikes, whose onsets break the phase lock
    of a sawtooth the episodes show cleanly. Where spikes are several windows
    wide, their centres too: a slow rise (a counter's rate over a window of
    several scrapes smears a 2.5 s slowdown over 6 s) crosses the threshold a
    step early or late with the noise of the calm around it, while the centre
    of its excess stays put.
    """
    all_onsets = spikes.onsets
    sets = [(all_onsets, "")]
    big = largest_spikes(all_onsets, spikes.sizes)
    if big is not None:
        sets.append((big, " (largest spikes)"))
    if (
        spikes.centres is not None
        and spikes.widths is not None
        and float(np.median(spikes.widths)) >= WIDE_SPIKE_WINDOWS
    ):
        sets.append((spikes.centres, " (their centres)"))
    if len(starts) >= MIN_EPISODES and not np.array_equal(starts, all_onsets):
        sets.append((starts, " (episode starts)"))
    return sets


def _phase_locked(
    onsets: np.ndarray,
    which: str,
    candidate: _Candidate,
    alpha: float,
    duration_s: float,
    percentile: str,
) -> Periodicity | _Rejection:
    """The confirmed period of one onset set near a candidate, or why it does not hold."""
    cand = candidate.period_s
    period, r, p_value, jitter = _fold_test(onsets, cand)
    cycles = duration_s / period
    # A fraction of the true period (P/2, P/3) folds the same onsets just as
    # tightly; it shows as cycles without a spike.
    span_cycles = (onsets.max() - onsets.min()) / period + 1.0
    occupancy = len(onsets) / span_cycles
    if cycles < MIN_CYCLES:
        return _Rejection(
            f"{period:.1f} s: only {cycles:.1f} cycles (need {MIN_CYCLES:.0f})",
            f"{period:.1f} s, only {cycles:.1f} cycles",
            p_value,
        )
    if occupancy < MIN_OCCUPANCY:
        return _Rejection(
            f"{period:.1f} s: spikes{which} in only {len(onsets)} of {span_cycles:.0f} cycles",
            f"{period:.1f} s, spikes in {len(onsets)} of {span_cycles:.0f} cycles",
            p_value,
        )
    if p_value >= alpha:
        return _Rejection(
            f"{period:.1f} s: spike onsets{which} not phase-locked "
            f"(Rayleigh p={p_value:.2g} >= {alpha:g})",
            f"{period:.1f} s, onsets not phase-locked (p={p_value:.2g})",
            p_value,
        )
    reason = (
        f"periodogram peak at {cand:.1f} s, autocorrelation {candidate.strength:.2f} at "
        f"{candidate.lag_s:.0f} s, {len(onsets)} spike onsets{which} fold at "
        f"{period:.1f} s (R={r:.2f}, Rayleigh p={p_value:.1g})"
    )
    return Periodicity(
        percentile=percentile,
        periodic=True,
        period_s=period,
        jitter_s=jitter,
        strength=candidate.strength,
        p_value=p_value,
        cycles=cycles,
        episodes_used=len(onsets),
        reason=reason,
    )


def detect_periodicity(
    values: Sequence[float | None],
    window_s: float,
    episodes: Sequence[SpikeEpisode],
    percentile: str,
) -> Periodicity:
    """Period of a percentile's spikes, or not periodic with the reason."""
    n = len(values)
    duration_s = n * window_s
    starts = np.array(sorted(e.start_s for e in episodes), dtype=float)

    def no(reason: str, rejected: Sequence[str] = ()) -> Periodicity:
        return Periodicity(
            percentile=percentile,
            periodic=False,
            episodes_used=len(starts),
            reason=reason,
            rejected=tuple(dict.fromkeys(rejected)),  # each period and reason once
        )

    if len(starts) == 0:
        return no("no spike episodes")
    x = _detrended_log(values)
    if n < 2 * MIN_CYCLES or not np.any(x):
        return no("series too short or flat for a periodogram")
    candidates = _candidate_periods(x, window_s, duration_s)
    if candidates is None:
        return no(
            f"the run ({duration_s:.0f} s) is too short for {MIN_CYCLES:.0f} cycles of any period"
        )
    acf = autocorrelation(x)
    best: Periodicity | None = None
    reasons: list[str] = []
    # The candidate that came closest (the lowest Rayleigh p among those folded), and why
    # it failed, in a few words: what the one-line summary names.
    closest: tuple[float, str] | None = None
    for cand in candidates:
        lags = _candidate_lags(cand, window_s, n)
        if lags is None:
            continue
        # Too few spikes to test any period: say so first (whatever the autocorrelation).
        spikes = _onsets_for(values, window_s, cand, starts)
        all_onsets = spikes.onsets
        if len(all_onsets) < MIN_EPISODES:
            k = len(all_onsets)
            reasons.append(
                f"{cand:.1f} s: only {k} spike onset{'' if k == 1 else 's'} "
                f"(need {MIN_EPISODES} to test a period)"
            )
            continue
        lag = int(lags[np.argmax(acf[lags])])
        strength = float(acf[lag])
        if strength < MIN_ACF:
            reasons.append(f"{cand:.1f} s: autocorrelation {strength:.2f} < {MIN_ACF}")
            continue
        candidate = _Candidate(cand, strength, lag * window_s)
        # Refine on the spike onsets: the period that folds them most tightly. With
        # several sets each must pass at a share of the level (Bonferroni).
        sets = _onset_sets(spikes, starts)
        alpha = RAYLEIGH_ALPHA / len(sets)
        for onsets, which in sets:
            outcome = _phase_locked(onsets, which, candidate, alpha, duration_s, percentile)
            if isinstance(outcome, _Rejection):
                reasons.append(outcome.reason)
                if closest is None or outcome.p_value < closest[0]:
                    closest = (outcome.p_value, outcome.closest)
            else:
                p_value = outcome.p_value if outcome.p_value is not None else 1.0  # always set
                if best is None or p_value < (best.p_value or 1.0):
                    best = outcome
    if best is not None:
        return best
    limit = _resolution_limit(window_s, starts)
    if not reasons:
        return no(f"no candidate period in range{limit}")
    if closest is not None:
        return no(f"no period confirmed; closest {closest[1]}{limit}", reasons)
    return no(f"no period confirmed; {reasons[0]}{limit}", reasons)


def _resolution_limit(window_s: float, starts: np.ndarray) -> str:
    """What a period test at this step cannot see, said beside "no period confirmed" so that
    a period of a few steps reads as unresolved here, not as absent."""
    shortest = RESOLVABLE_STEPS * window_s
    gaps = np.diff(starts)
    if len(gaps) >= MIN_EPISODES - 1 and float(np.median(gaps)) < shortest:
        return (
            f" (spike onsets about every {float(np.median(gaps)):.0f} s, under "
            f"{RESOLVABLE_STEPS} steps of {window_s:g} s: not resolvable at this step)"
        )
    if window_s > 1.0:
        return f" (a period under {shortest:g} s is not resolvable at a {window_s:g} s step)"
    return ""


def run_period(periodicity: Sequence[Periodicity], primary: str) -> Periodicity | None:
    """The run's sawtooth period: the primary percentile's, else the most significant other one.

    The spikes of every percentile come from the same faults, but a P99 from
    about 150 requests is set by two of them, and one slow request on a busy
    host makes a spike that breaks the phase lock; P95 or P50 then still
    shows the period.
    """
    found = [p for p in periodicity if p.periodic and p.period_s]
    own = next((p for p in found if p.percentile == primary), None)
    if own is not None:
        return own
    return min(found, key=lambda p: p.p_value if p.p_value is not None else 1.0, default=None)
