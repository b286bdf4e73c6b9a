"""Process stall: nothing completes for a span while requests are in flight, then the backlog drains.

The evidence is finer than a window: completion gaps (`loadkit/analysis/gaps.py`)
of at least 5x the typical service time and twice the usual P99, in the window
their requests complete in. A gap during which the load generator itself
stopped (its arrival scheduler late by nearly the whole gap, `_generator_stopped`)
is the generator stopping, not the server. Runs without gap data fall back to windows that
complete under 10 % of their arrivals and then catch up.
"""

from __future__ import annotations

import numpy as np

from loadkit.analysis.align import NS
from loadkit.analysis.causes.base import (
    BUSY_CORES_SHARE,
    CAUSE_TIMEOUTS_ID,
    Cause,
    Signals,
    Signature,
    ev,
    fmt,
    maximum,
    mean,
    median,
    na,
    quota_throttled,
    server_starved,
    stall_gaps,
)
from loadkit.analysis.causes.unexplained import CAUSE_GENERATOR
from loadkit.analysis.model import CAUSE_PROCESS_STALL, Evidence

LEAD_WINDOWS = 2
STALL_THROUGHPUT_SHARE = 0.1
# A window completing under half its arrivals is part of a stop's onset, not its "before".
STALL_ONSET_SHARE = 0.5
GENERATOR_LAG_SHARE = 0.5  # the least share of the gap a stopped generator is late by


def signature(sig: Signals, baseline: np.ndarray) -> Signature:
    cause = CAUSE_PROCESS_STALL
    if sig.gaps is not None:
        return _gap_signature(sig, baseline)
    if np.all(np.isnan(sig.completed)) or np.all(np.isnan(sig.offered_rps)):
        return na(cause, "not assessable: no load counters")
    return _window_signature(sig, baseline)


def _gap_signature(sig: Signals, baseline: np.ndarray) -> Signature:
    stalls = stall_gaps(sig, baseline)
    assert stalls is not None
    gaps, longest, threshold = stalls
    holds = (longest > 0).astype(float)
    generator_windows = _generator_stopped(sig, longest)
    holds[generator_windows] = 0.0
    # A gap while the server's CPU was taken from it (cores saturated, or its
    # cgroup throttled, where that is not the usual state of the run), or while
    # the server was preempted far more per CPU-second than usual (runnable but
    # kept off the CPU), is CPU starvation: cpu_saturation's or
    # cgroup_throttling's, not a stop.
    host = sig.host
    # From counters (run delay or preemptions, the cgroup's throttled periods): one
    # window either side, for host samples are coarser than the gaps, and a counter's
    # increase is spread over its sampling interval.
    taken = np.zeros(sig.n, dtype=bool)
    preempted = server_starved(sig, baseline)
    if preempted is not None:  # the server was runnable and preempted: not stopped
        taken |= np.nan_to_num(preempted, nan=0.0) > 0
    throttled = None if host is None else quota_throttled(host, baseline)
    if throttled is not None:  # beyond the run's own throttling: cgroup_throttling's
        taken |= np.nan_to_num(throttled, nan=0.0) > 0
    starved = taken.copy()
    starved[1:] |= taken[:-1]
    starved[:-1] |= taken[1:]
    if host is not None and host.has_per_core:
        busy = np.nan_to_num(host.busy_core_frac, nan=0.0) >= BUSY_CORES_SHARE
        if (median(host.busy_core_frac, baseline) or 0.0) < BUSY_CORES_SHARE:
            starved |= busy
    starved &= longest > 0
    holds[starved] = 0.0
    lengths = (gaps.spans_ns[:, 1] - gaps.spans_ns[:, 0]) / NS if len(gaps.spans_ns) else None

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        in_ep = ep & (holds > 0)
        return [
            Evidence(
                "stall_longest_in_episodes",
                maximum(longest, in_ep),
                "s",
                "no completion, requests in flight",
            ),
            Evidence("stall_median_in_episodes", median(longest, in_ep), "s"),
            Evidence("stalls_total", float(len(gaps.spans_ns)), "gaps", gaps.source),
            Evidence("stall_shortest", float(lengths.min()) if lengths is not None else None, "s"),
            Evidence("stall_threshold", threshold, "s", "5x median service time, 2x usual P99"),
            Evidence("stall_windows_in_baseline", float((base & (holds > 0)).sum()), "windows"),
            Evidence(
                "cpu_starved_gap_windows",
                float(starved.sum()),
                "windows",
                "gaps while the CPU or the cgroup quota was taken (left to those causes)",
            ),
            Evidence(
                "generator_stall_windows",
                float(generator_windows.sum()),
                "windows",
                "gaps while the load generator itself was late (not the server)",
            ),
        ]

    return Signature(CAUSE_PROCESS_STALL, holds, longest, evidence)


def _generator_stopped(sig: Signals, longest: np.ndarray) -> np.ndarray:
    """Per window: its gap is the load generator stopping, not the server.

    A generator stopped for the whole gap sends the first arrival due in it late
    by the gap less the wait for that arrival (one spacing between arrivals at
    most, on average): its scheduler's lateness is nearly the gap. One held only
    after the gap, as the server drains its backlog on a shared host, is late by
    less: the stall's consequence, not its cause (issue 51: a 0.2 s stop whose
    drain held the generator 0.12 s was read as the generator's). At low rates,
    where an arrival is rarely due in a gap, at least half the gap.
    """
    if sig.dispatch_lag_ms is None:
        return np.zeros(sig.n, dtype=bool)
    lag_s = np.nan_to_num(sig.dispatch_lag_ms, nan=0.0) / 1000.0
    with np.errstate(divide="ignore"):
        spacing_s = 1.0 / np.nan_to_num(sig.offered_rps, nan=0.0)
    needed = np.maximum(longest - spacing_s, GENERATOR_LAG_SHARE * longest)
    return (longest > 0) & (lag_s >= needed)


def _window_signature(sig: Signals, baseline: np.ndarray) -> Signature:
    """Whole windows completing under 10 % of arrivals, then a catch-up; no queue growth before."""
    offered = sig.offered_rps * sig.window_s
    done = sig.completed
    typical = median(done, baseline) or float(np.nanmedian(done))
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(offered > 0, done / offered, np.nan)
    stalled = (np.nan_to_num(ratio, nan=1.0) < STALL_THROUGHPUT_SHARE) & (offered > 0.2 * typical)
    holds = np.zeros(sig.n)
    q = sig.triton.queue_ms_per_request if sig.triton is not None else None
    q_base = median(q, baseline) if q is not None else None
    short = np.nan_to_num(ratio, nan=1.0) < STALL_ONSET_SHARE
    for i in np.nonzero(stalled)[0]:
        after = done[i + 1 : i + 4]
        catch_up = after.size and np.nanmax(after) >= 1.5 * max(typical, 1.0)
        # "Before" is the window before the stop began: the window holding the
        # SIGSTOP itself already completes little, and Triton charges the stopped
        # time to the queue of the requests caught in it.
        onset = i
        while onset > max(0, i - LEAD_WINDOWS) and short[onset - 1]:
            onset -= 1
        j = onset - 1
        before_ok = True
        if q is not None and q_base is not None and j >= 0 and not np.isnan(q[j]):
            before_ok = q[j] <= max(3.0 * q_base, q_base + 2.0)
        if catch_up and before_ok:
            holds[i] = 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        # Completions away from arrivals in either direction: the stop and the catch-up.
        metric = np.abs(np.log((done + 1.0) / (offered + 1.0)))

    def evidence(ep: np.ndarray, base: np.ndarray) -> list[Evidence]:
        stall_windows = ep & (holds > 0)
        return [
            Evidence("completions_in_stall", mean(done, stall_windows), "per window"),
            Evidence("completions_typical", typical, "per window"),
            Evidence("completions_after_stall", maximum(done, ep), "per window", "catch-up"),
            Evidence("stall_windows", float(stall_windows.sum()), "windows"),
            Evidence(
                "queue_before_stall",
                None if q is None else median(q, np.roll(stall_windows, -1)),
                "ms/request",
            ),
        ]

    return Signature(CAUSE_PROCESS_STALL, holds, metric, evidence)


def summary(e: list[Evidence], eps: str, run_share: float | None) -> str:
    if ev(e, "stall_longest_in_episodes") is not None or ev(e, "stalls_total") is not None:
        return (
            f"Nothing completed for up to {fmt(ev(e, 'stall_longest_in_episodes'), ' s', 2)} "
            f"(median {fmt(ev(e, 'stall_median_in_episodes'), ' s', 2)}) while requests were in "
            f"flight, in {eps}; {fmt(ev(e, 'stalls_total'))} such gaps of at least "
            f"{fmt(ev(e, 'stall_threshold'), ' s', 2)} in the run."
        )
    return (
        f"Completions fell to {fmt(ev(e, 'completions_in_stall'))} per window "
        f"(typical {fmt(ev(e, 'completions_typical'))}) then {fmt(ev(e, 'completions_after_stall'))} "
        f"completed at once, with no queue growth before, in {eps}."
    )


CAUSE = Cause(
    id=CAUSE_PROCESS_STALL,
    title="Process stall",
    action="Look for what stops the process: GC pauses, swapping or page faults, "
    "container freeze/checkpoint, debugger or SIGSTOP; check dmesg and node pressure.",
    signature=signature,
    summary=summary,
    signal=("windows.throughput_rps", "completions/s"),
    fault_events=("stall",),
    per_request="completion gaps (spans with requests in flight and none completing)",
    # On a shared host the drain after a stop takes the load generator's CPU too.
    consequences=(CAUSE_TIMEOUTS_ID, CAUSE_GENERATOR),
)
