"""What every cause module shares: the signals it reads, its signature, its registry entry.

A cause module (`loadkit/analysis/causes/<cause>.py`) holds one `Cause`: its id,
title, action, the series the report aligns on its episodes (`signal`), the
function that says per window whether its signature holds (`signature`) and
the one-sentence summary of its evidence (`summary`). Attribution
(`loadkit/analysis/attribution.py`) scores every registered cause the same way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from scipy import stats

from loadkit.analysis.align import NS, WindowGrid, make_grid
from loadkit.analysis.gaps import MIN_GAP_SERVICE_MULTIPLE, CompletionGaps, min_gap_s
from loadkit.analysis.model import Evidence, Finding, SeriesPlace
from loadkit.analysis.noise import EFFECT_MOVED, above_spread
from loadkit.analysis.places import CLIENT_SIDE, SERVER_SIDE, on_loadkit_machine, sources_at
from loadkit.analysis.sources import SourceAccessors
from loadkit.analysis.telemetry import (
    HostSeries,
    ModelActivity,
    RequestSampleSeries,
    align_load,
)

# The error class of requests that got no answer in time (request_errors.CAUSE_TIMEOUTS;
# named here so that every cause can list it without importing the error causes).
CAUSE_TIMEOUTS_ID = "request_timeouts"
# Kinds of cause: an episode cause explains spike episodes; a standing condition is
# there all run long and never counts as a spike cause; "either" can be both.
EPISODIC = "episodic"
STANDING = "standing"
EITHER = "either"
# A fallback: scored only on the episodes no other found cause explains.
UNEXPLAINED = "unexplained"
# Explains error episodes (failed requests), not latency spikes: found by its `find`.
ERRORS = "errors"

# --- thresholds that several causes share ---------------------------------------------
# One table, so that a cause that rules out a neighbour's condition (a gap is no stop
# where the CPU was taken from the server) and the timelines that shade a condition read
# the number the cause itself is found by.

# Busy SM clock under this share of its max is a clock drop: the three clock causes and
# their timeline spans (`_gpu_clock.throttle_classes`). A shallower fall is a drop too where
# it clears the clock's own baseline spread and a reason names it (`_gpu_clock.shallow_drop`).
CLOCK_DROP_RATIO = 0.80
# A reason bit in at least this share of a window's busy samples names its clock drop (the
# larger share where both are seen). A throttle of a second or two fills only part of a
# window, 3 s long at a low rate: the clock's mean is down while the bit was on in 30-47 %
# of the samples. The floor keeps a bit seen once from naming a drop it did not cause.
REASON_SHARE = 0.1
# Without reason bits, a drop while the GPU draws this share of its power limit is power
# capping (the thermal and power causes split the drop by it).
POWER_AT_LIMIT = 0.97
# The server's cgroup quota binds in a window where its throttled share of CFS periods
# clears its baseline's spread (loadkit/analysis/noise.py), is at least this many times
# its baseline median ... (`quota_throttled`: cgroup throttling is found by it; CPU
# saturation and a process stall leave such windows to it.)
CGROUP_THROTTLED_RISE = 2.0
# ... and at least this % of periods: the floor that says the quota bound at all where the
# baseline never throttled (one 100 ms period of a 5 s window). A fixed 10 % missed a
# quota just below the need, which throttles a few % of the periods.
CGROUP_THROTTLED_FLOOR_PCT = 2.0
# This share of the host's cores at >= 95 % saturates it: CPU saturation is found by it; a
# process stall and an unexplained compute slowdown leave such windows to it.
BUSY_CORES_SHARE = 0.75
# The server waits for a CPU when its run delay (or preemptions per CPU-second) clears its
# baseline's spread (loadkit/analysis/noise.py) and is at least this many times its median
# (`server_starved`: CPU saturation's evidence, a process stall's "not a stop").
# Seen while tuning (seeds 11-12): burners at nice -10 gave 7-27x, a SIGSTOP stall and the
# catch-up after it at most 1.5x (a stopped server is not runnable, so it does not wait);
# a neighbour at the server's own priority 1.5-2x (issue 26).
WAIT_RISE_FLOOR = 1.5
# Where the run delay alone names CPU saturation (no core count to back it: a neighbour on
# a few cores), it must also reach this many ms per second, summed over the server's
# threads (2 % of one core's time): the floor where the baseline's run delay is near zero,
# and above the blips a quiet host's own work makes (`server_waited`).
WAIT_FLOOR_MS_PER_S = 20.0
# Other work took the CPU the server waited for where the cores' worth used by everything
# but the server (and loadkit's own generator, on its machine) clears its baseline's spread
# and is at least this much above its median: a tenth of a core, the least that means a
# neighbour started at all (`neighbours_rose`). A server that waits on its own threads
# (bunched arrivals, its own copies) raises no one else's CPU: seen on seed 44 (re-scored,
# session 18), a slow proxy +0.03 core and data movement +0.01 against +0.98 and +1.73 for
# the two neighbours, each within or beyond its baseline's spread.
NEIGHBOUR_MIN_CORES = 0.1
# Compute per batch this much over its baseline at the same batch size is a slowdown of
# the model's compute on its own (the compute residual's bar); a neighbour model's
# contention holds at it too, or lower where the growth clears its own spread
# (model_contention.COMPUTE_INFLATION_FLOOR).
COMPUTE_INFLATION = 1.3
# A part of the latency other than compute (the queue, client + network, generator lag)
# grew where it is this many times its baseline: the residuals' bar (with 1 ms more), and
# the queue growth that makes a neighbour's small compute growth material (model_contention).
GROWTH_RATIO = 2.0
# Another model on the same server works more where its compute per second clears its
# baseline's spread and is this many times its baseline median ... (`model_rises`: the
# effect of model_contention's "another model was asked for more", `model_asked_more`;
# CPU saturation leaves such windows to it.)
MODEL_RISE_FLOOR = 1.5
# ... and where that model was idle in the baseline (no spread to judge by), where it holds
# at least this many ms of compute per second (2 % of the accelerator).
IDLE_MODEL_BUSY_MS_PER_S = 20.0
# Its demand rose where its inferences per second clear their baseline's spread and are
# MODEL_RISE_FLOOR times its median, and, idle in the baseline, reach this many (any work
# at all: the compute's floor above says whether it matters) (`model_asked_more`).
IDLE_MODEL_MIN_INFERENCES_PER_S = 1.0


@dataclass(frozen=True)
class ErrorCounts:
    """Completions and failed requests (in all and by kind) per window of `window_s` from `start_ns`.

    On a 1 s grid of wall-clock seconds whatever the analysis grid: an outage's
    start and end are named to the second in which they fell.
    """

    start_ns: int
    window_s: float
    completed: np.ndarray
    errors: np.ndarray
    kinds: dict[str, np.ndarray]
    # The grid's start minus the run's, in seconds (<= 0): load counters cover whole
    # wall-clock seconds, and the grid follows them, not the run's fractional start.
    offset_s: float = 0.0

    @property
    def n(self) -> int:
        return len(self.completed)


def error_counts(load: pd.DataFrame, start_ns: int, end_ns: int) -> ErrorCounts | None:
    """The load counters' completions and failures per second (None: no load counters)."""
    second = 1_000_000_000
    grid_start = start_ns - start_ns % second  # the recorder's intervals are whole seconds
    grid = make_grid(grid_start, end_ns, 1.0)
    series = align_load(load, grid)
    if series is None:
        return None
    ok = np.nan_to_num(series.ok)
    errors = np.nan_to_num(series.errors)
    offset = (grid_start - start_ns) / second
    return ErrorCounts(grid_start, 1.0, ok + errors, errors, series.error_kinds_per_window, offset)


@dataclass
class Signals(SourceAccessors):
    """Everything attribution reads, aligned on the analysis grid (NaN = unknown).

    `sources` holds each telemetry source's series by name (`.gpu`, `.host` and
    `.triton` read the ones several causes share).
    """

    window_s: float
    starts_ns: np.ndarray
    p99_ms: np.ndarray
    service_p50_ms: np.ndarray
    completed: np.ndarray  # completions per window (ok + errors), from load counters or histograms
    offered_rps: np.ndarray
    throughput_rps: np.ndarray
    in_flight: np.ndarray
    # Each telemetry source's aligned series by source name (loadkit/analysis/sources.py).
    sources: dict[str, Any]
    samples: RequestSampleSeries | None
    max_batch_size: int | None
    max_queue_delay_ms: float | None
    burst_mask: np.ndarray  # windows inside a declared burst phase
    corrected_p50_ms: np.ndarray | None = None
    # The attributed percentile's latency per window (the series its episodes were found
    # on: a production window's mean, where a 60 s summary's P99 is flat); the quietest
    # windows that stand in for a missing baseline are read from it (None: p99_ms).
    primary_ms: np.ndarray | None = None
    dispatch_lag_ms: np.ndarray | None = None  # worst arrival-scheduler lateness per window
    generator_cpu_cores: np.ndarray | None = None  # loadkit's Locust processes, cores' worth
    gaps: CompletionGaps | None = None  # spans with requests in flight and nothing completing
    gpu_count: int | None = None
    # Error episodes (causes of kind ERRORS): completions and failures on a 1 s grid.
    error_counts: ErrorCounts | None = None
    max_queue_size: int | None = None  # the model config's default_queue_policy, if any
    timeout_s: float | None = None  # the scenario's request timeout
    # Where each telemetry series was sampled (analysis.json's `run.sources`); empty: nowhere
    # known, every series read as the server's (analysis/places.py).
    places: tuple[SeriesPlace, ...] = ()
    # Each side's view, made once: every cause of a side reads the same one.
    _views: dict[str, Signals] = field(init=False, default_factory=dict, repr=False, compare=False)

    @property
    def n(self) -> int:
        return len(self.starts_ns)

    def seen_from(self, side: str) -> Signals:
        """These signals with only the telemetry sampled on `side` (SERVER_SIDE, CLIENT_SIDE).

        A server cause reads the server's machine (and series of unknown place, as
        before places were); a cause of the load machine, the load machine's.
        """
        view = self._views.get(side)
        if view is None:
            view = replace(self, sources=sources_at(self.sources, self.places, side))
            self._views[side] = view
        return view


@dataclass
class Signature:
    """A cause's signature per window, or why it cannot be assessed."""

    cause: str
    holds: np.ndarray | None  # float: 1 holds, 0 does not, NaN unknown
    metric: np.ndarray | None  # larger = more of the cause
    evidence: Callable[[np.ndarray, np.ndarray], list[Evidence]] | None = None
    not_assessable: str | None = None
    run_level: bool = False  # a standing condition, not an episode cause
    standing: bool = False  # only ever a standing condition (never tested against episodes)
    notes: list[str] = field(default_factory=list)
    # The highest confidence the data allow (e.g. "weak" when a capacity is unknown).
    max_confidence: str | None = None
    # Evidence judged episode by episode: given the windows each explained episode was
    # tested on, and the baseline (the residual's "no change in X" per episode).
    per_episode: Callable[[list[np.ndarray], np.ndarray], list[Evidence]] | None = None


@dataclass(frozen=True)
class Shading:
    """The spans a timeline shades where a cause's condition holds (loadkit/analysis/intervals.py).

    Read from the cause's own rule, so that what a timeline shades is what its
    findings mean.
    """

    kind: str  # the Interval's kind ("gpu_thermal", "cgroup_throttled")
    source: str  # the telemetry source whose series it reads ("gpu", "host")
    # Per window: the condition holds (None: the series does not record it).
    windows: Callable[[Any], np.ndarray | None]
    # A span's label from the series and its windows [first, stop).
    label: Callable[[Any, int, int], str]


# find(error counts, the model's max_queue_size, the scenario's timeout_s) -> its finding
FindFn = Callable[[ErrorCounts, "int | None", "float | None"], "Finding | None"]


@dataclass(frozen=True)
class Cause:
    """One cause: everything attribution, the report's figures and the benchmark need."""

    id: str
    title: str
    action: str
    signature: Callable[[Signals, np.ndarray], Signature]
    # summary(evidence, "3/4 spike episodes", share of windows or None) -> one sentence
    summary: Callable[[list[Evidence], str, float | None], str]
    signal: tuple[str, str] | None = None  # (Analysis attribute path, axis label)
    kind: str = EPISODIC
    # Names of loadkit fault events (events.jsonl, kind "fault") that inject this
    # cause: the ground truth the diagnosis benchmark scores against.
    fault_events: tuple[str, ...] = ()
    # For an unexplained slowdown: the latency component (breakdown name) it names.
    component: str | None = None
    # For a cause of kind ERRORS: its finding from the run's error counts (None: none).
    find: FindFn | None = None
    # What a summary leads with when it is found ("TARGET UNREACHABLE"): an outage.
    headline: str | None = None
    # The per-request data its evidence needs, where metrics alone (a production window)
    # cannot show it either way (None: telemetry or counters suffice).
    per_request: str | None = None
    # What timelines shade where it holds (None: nothing).
    shading: Shading | None = None
    # The telemetry it cannot be judged without, from the server's machine: `gpu`, `host`
    # (the machine's cores), `host.process` (the server's process tree and cgroup). Every
    # cause reads only what was sampled on the server's side (`Signals.seen_from`); where
    # each of these was sampled on a load machine instead, it is not assessable
    # (NO_SERVER_TELEMETRY), never judged on the load machine's signal.
    server_series: tuple[str, ...] = ()
    # A cause of the load machine itself reads the load machine's telemetry instead of the
    # server's, and is not assessable without one of these from there (NO_CLIENT_TELEMETRY).
    client_series: tuple[str, ...] = ()
    # Error causes (kind ERRORS) whose failed requests, where they fall in its windows, are
    # its consequence: whatever slows requests past the client's timeout times them out (a
    # stall, a quota, a capped clock alike), so every latency cause can make timeouts; an
    # error cause makes none. Such an error finding is listed right after this cause's
    # finding and says so (`attribution.consequences`, which asks the evidence: most of
    # the class's failures in the cause's windows, beyond the share of the run they cover,
    # and the cause rated moderate or above). A residual listed here (a stall holds back
    # a load generator on its host as the server drains) is its consequence where it
    # explains mostly the cause's episodes (`attribution.rank_findings`).
    consequences: tuple[str, ...] = (CAUSE_TIMEOUTS_ID,)

    @property
    def side(self) -> str:
        """Whose machine's telemetry it reads: the server's, or a load machine's."""
        return CLIENT_SIDE if self.client_series else SERVER_SIDE


# A server cause whose series were all sampled on a load machine (Cause.server_series).
NO_SERVER_TELEMETRY = (
    "not assessable: no telemetry from the server's host (give --scrape, --agent or --server-pid)"
)
# A load machine's cause without a series sampled there (Cause.client_series).
NO_CLIENT_TELEMETRY = (
    "not assessable: no host telemetry from a load machine (the host series are the server's "
    "or of unknown place)"
)


# --- the shared confidence ------------------------------------------------------------


def confidence(
    coincidence: float, p_value: float | None, delta: float | None, lift: float | None
) -> str | None:
    """strong / moderate / weak, or None when the evidence does not support the cause.

    One function of co-occurrence and effect size for every cause (attribution's
    scoring, and the error causes' rating of their failed requests). A weak fault
    holds its signature in baseline windows too (the windows where it did not
    raise P99 enough to make an episode), so a modest lift with a significant
    test and a clear effect on the cause's own metric (Cliff's delta of at least
    EFFECT_MOVED, episodes against baseline) is as good as a large lift.

    Above weak the cause's own metric must have moved: co-occurrence alone is what
    a condition unrelated to the spikes also shows in long episodes (issue 51).
    Every signature carries its metric (`Signature.metric`); a caller without one
    passes the delta its own evidence stands for and says why (request_errors).
    """
    d = abs(delta) if delta is not None else 0.0
    p = p_value if p_value is not None else 1.0
    big_lift = lift is None or lift >= 3.0  # None: never seen in baseline
    moved = d >= EFFECT_MOVED
    clear_effect = p < 0.05 and moved and (lift is None or lift >= 1.5)
    if coincidence >= 0.8 and p < 0.05 and d >= 0.6 and big_lift:
        return "strong"
    if coincidence >= 0.5 and moved and ((p < 0.1 and big_lift) or clear_effect):
        return "moderate"
    # A lead also where its metric moved in the spikes while the signature is common in
    # stretches of the run too (a quota throttling a little all along, hard in the spikes).
    if coincidence >= 0.3 and (lift is None or lift >= 2.0 or (moved and lift > 1.0)):
        return "weak"
    return None


# --- helpers ------------------------------------------------------------------------


def na(cause: str, why: str) -> Signature:
    return Signature(cause, None, None, not_assessable=why)


SignatureFn = Callable[[Signals, np.ndarray], Signature]
# summary(evidence, "3/4 spike episodes", share of windows or None) -> one sentence
SummaryFn = Callable[[list[Evidence], str, float | None], str]
T = TypeVar("T")


class NotAssessable(Exception):  # noqa: N818 (a verdict on the data, not an error)
    """Raised in a signature by `need`/`check`: this run's data cannot say whether the cause holds."""


def need(value: T | None, why: str) -> T:
    """`value`, or not assessable ("not assessable: {why}") where the run did not record it."""
    if value is None:
        raise NotAssessable(f"not assessable: {why}")
    return value


def check(ok: bool, why: str) -> None:
    """Not assessable ("not assessable: {why}") unless `ok`."""
    if not ok:
        raise NotAssessable(f"not assessable: {why}")


def assessed(cause: str) -> Callable[[SignatureFn], SignatureFn]:
    """Decorate a cause's signature: a `need`/`check` that fails returns `na(cause, why)`."""

    def wrap(fn: SignatureFn) -> SignatureFn:
        @functools.wraps(fn)
        def signature(sig: Signals, baseline: np.ndarray) -> Signature:
            try:
                return fn(sig, baseline)
            except NotAssessable as missing:
                return na(cause, str(missing))

        return signature

    return wrap


def flag(cond: np.ndarray, *known: np.ndarray) -> np.ndarray:
    out = np.asarray(cond).astype(float)
    for k in known:
        out[np.isnan(k)] = np.nan
    return out


def mean(values: np.ndarray, mask: np.ndarray) -> float | None:
    sel = values[mask]
    sel = sel[~np.isnan(sel)]
    return float(sel.mean()) if sel.size else None


def median(values: np.ndarray, mask: np.ndarray) -> float | None:
    sel = values[mask]
    sel = sel[~np.isnan(sel)]
    return float(np.median(sel)) if sel.size else None


def maximum(values: np.ndarray, mask: np.ndarray) -> float | None:
    sel = values[mask]
    sel = sel[~np.isnan(sel)]
    return float(sel.max()) if sel.size else None


def fmt(value: float | None, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}{unit}"


def ev(evidence: list[Evidence], name: str) -> float | None:
    return next((e.value for e in evidence if e.name == name), None)


# --- what several causes need -------------------------------------------------------


@dataclass(frozen=True)
class BatchComputeFit:
    """Compute per batch against batch size, fitted (Theil-Sen) on baseline windows."""

    intercept_ms: float
    slope_ms: float  # per request in the batch; 0 where the baseline saw one batch size
    batch_size: np.ndarray  # per window; the baseline's median where unknown

    def at(self, batch_size: float | np.ndarray) -> float | np.ndarray:
        return self.intercept_ms + self.slope_ms * batch_size


def batch_compute_fit(sig: Signals, baseline: np.ndarray) -> BatchComputeFit | None:
    """The one fit of compute per batch (None: no Triton statistics, under 3 baseline windows).

    Batch size is the request-weighted one, else the mean per batch (runs and
    imports that record only that).
    """
    tr = sig.triton
    if tr is None:
        return None
    x, y = tr.batch_size_req_weighted, tr.batch_compute_ms
    if np.all(np.isnan(x)):
        x = tr.batch_size_mean
    ok = baseline & ~np.isnan(x) & ~np.isnan(y)
    if ok.sum() < 3:
        return None
    sizes = np.where(np.isnan(x), np.nanmedian(x[ok]), x)
    if np.ptp(x[ok]) < 0.2:  # one batch size only: no slope to fit
        return BatchComputeFit(float(np.median(y[ok])), 0.0, sizes)
    slope, _, _, _ = stats.theilslopes(y[ok], x[ok])
    slope = max(0.0, float(slope))
    return BatchComputeFit(float(np.median(y[ok] - slope * x[ok])), slope, sizes)


def expected_batch_compute(sig: Signals, baseline: np.ndarray) -> np.ndarray | None:
    """Batch compute time predicted per window from its batch size (`batch_compute_fit`)."""
    fit = batch_compute_fit(sig, baseline)
    if fit is None:
        return None
    return np.asarray(fit.at(fit.batch_size), dtype=float)


def compute_inflation(sig: Signals, baseline: np.ndarray) -> np.ndarray | None:
    """Observed / expected compute per batch (1.0 = as fast as in baseline windows)."""
    expected = expected_batch_compute(sig, baseline)
    if expected is None or sig.triton is None:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(expected > 0, sig.triton.batch_compute_ms / expected, np.nan)


# A part of a request's time that grew must matter: at least this share of a latency of
# the baseline (0.1 ms more under a 2 ms P99 explains no spike of it).
MATERIAL_SHARE = 0.1


def material(excess_ms: np.ndarray, latency_ms: np.ndarray, baseline: np.ndarray) -> np.ndarray:
    """Per window: `excess_ms` is a material share of `latency_ms`'s median over the baseline.

    True everywhere when that latency is unknown (nothing to weigh it against).
    """
    reference = median(latency_ms, baseline)
    if reference is None:
        return np.ones(len(excess_ms), dtype=bool)
    return np.nan_to_num(excess_ms, nan=0.0) >= MATERIAL_SHARE * reference


def service_capacity_rps(sig: Signals, baseline: np.ndarray) -> np.ndarray | None:
    """Requests/s one instance can serve at max batch, slowed by each window's compute inflation."""
    if not sig.max_batch_size:
        return None
    fit = batch_compute_fit(sig, baseline)
    if fit is None:
        return None
    b = float(sig.max_batch_size)
    at_max = float(fit.at(b))  # one batch size seen: optimistic, compute does not grow
    infl = compute_inflation(sig, baseline)
    factor = (
        np.ones(sig.n) if infl is None else np.where(np.isnan(infl), 1.0, np.maximum(infl, 1.0))
    )
    return b / (at_max * factor) * 1000.0


def busy_cores(sig: Signals) -> np.ndarray | None:
    """Share of cores at >= 95 % per window (from the mean CPU where there is no per-core data)."""
    return None if sig.host is None else host_busy_cores(sig.host)


def host_busy_cores(host: HostSeries) -> np.ndarray | None:
    """`busy_cores` of one machine's host series (a worker machine's too)."""
    if host.has_per_core:
        return host.busy_core_frac
    if np.all(np.isnan(host.cpu_mean_pct)):
        return None
    return flag(host.cpu_mean_pct >= 95.0, host.cpu_mean_pct)


def quota_throttled(host: HostSeries, baseline: np.ndarray) -> np.ndarray | None:
    """Per window: the server's cgroup quota bound beyond the run's own throttling (NaN unknown).

    Its throttled share of CFS periods clears the baseline's spread, is at least
    CGROUP_THROTTLED_RISE x its median and CGROUP_THROTTLED_FLOOR_PCT (`noise.above_spread`);
    the floor alone where the baseline has under 3 windows of cgroup data. None without
    cgroup counters.
    """
    if not host.has_cgroup:
        return None
    pct = host.cgroup_throttled_pct
    spread = above_spread(pct, baseline, CGROUP_THROTTLED_RISE, at_least=CGROUP_THROTTLED_FLOOR_PCT)
    if spread is not None:
        return spread
    return flag(np.nan_to_num(pct, nan=0.0) >= CGROUP_THROTTLED_FLOOR_PCT, pct)


def server_waited(sig: Signals, baseline: np.ndarray) -> np.ndarray | None:
    """Per window: the server's threads waited for a CPU beyond their baseline's spread.

    The schedstat run delay (time runnable but not running) clears its baseline's
    spread, is at least WAIT_RISE_FLOOR x its median and WAIT_FLOOR_MS_PER_S
    (`noise.above_spread`). However many cores are full: a neighbour on one core of
    sixteen makes no core count, but the server's threads that land on its core wait.
    None where the run delay is not recorded or the baseline has under 3 windows of it.
    """
    host = sig.host
    delay = None if host is None else host.server_run_delay_ms_per_s
    if delay is None or np.all(np.isnan(delay)):
        return None
    return above_spread(delay, baseline, WAIT_RISE_FLOOR, at_least=WAIT_FLOOR_MS_PER_S)


def neighbours_cpu_cores(sig: Signals) -> np.ndarray | None:
    """Per window: cores' worth of CPU that work other than the server's used on its machine.

    The machine's CPU less the server's process tree, and less loadkit's own load
    generator where the host series was sampled on loadkit's machine. None where the
    machine's or the server's CPU is not recorded.
    """
    host = sig.host
    if host is None or host.cpu_cores_used is None or host.server_cpu_cores is None:
        return None
    others = host.cpu_cores_used - host.server_cpu_cores
    if sig.generator_cpu_cores is not None and on_loadkit_machine(sig.places, "host"):
        others = others - np.nan_to_num(sig.generator_cpu_cores, nan=0.0)
    return np.asarray(others, dtype=float)


def neighbours_rose(sig: Signals, baseline: np.ndarray) -> np.ndarray | None:
    """Per window: others' CPU (`neighbours_cpu_cores`) rose beyond its baseline's spread.

    By at least NEIGHBOUR_MIN_CORES. NaN where unknown; None where not recorded or the
    baseline has under 3 windows of it.
    """
    others = neighbours_cpu_cores(sig)
    if others is None:
        return None
    return above_spread(others, baseline, 0.0, by_at_least=NEIGHBOUR_MIN_CORES)


def model_rises(busy_ms_per_s: np.ndarray, baseline: np.ndarray) -> np.ndarray:
    """Per window: a model's compute per second rose above its own baseline (NaN unknown)."""
    spread = above_spread(busy_ms_per_s, baseline, MODEL_RISE_FLOOR)
    if spread is not None:
        return spread
    floor = IDLE_MODEL_BUSY_MS_PER_S
    return flag(np.nan_to_num(busy_ms_per_s, nan=0.0) >= floor, busy_ms_per_s)


def model_asked_more(act: ModelActivity, baseline: np.ndarray) -> np.ndarray:
    """Per window: a model was asked for more work and took more of the server for it.

    Its demand (inferences per second) rose beyond its baseline's spread, and its compute
    per second with it (`model_rises`). The compute alone is no sign of a neighbour: a
    device slower for everyone (a power cap, heat, a container quota) raises every
    model's compute per second at unchanged traffic.
    """
    demand = above_spread(
        act.inferences_per_s, baseline, MODEL_RISE_FLOOR, at_least=IDLE_MODEL_MIN_INFERENCES_PER_S
    )
    if demand is None:
        return np.zeros(len(act.inferences_per_s), dtype=bool)
    busier = np.nan_to_num(model_rises(act.compute_ms_per_s, baseline)) > 0
    return (np.nan_to_num(demand) > 0) & busier


def other_models_rose(sig: Signals, baseline: np.ndarray) -> np.ndarray:
    """Per window: another model on the same server was asked for more (`model_asked_more`);
    all False without any."""
    tr = sig.triton
    if tr is None or not tr.others:
        return np.zeros(sig.n, dtype=bool)
    return np.logical_or.reduce([model_asked_more(o, baseline) for o in tr.others.values()])


def stall_gaps(
    sig: Signals, baseline: np.ndarray
) -> tuple[CompletionGaps, np.ndarray, float] | None:
    """The completion gaps long enough to be a stop, the longest of them per window (0:
    none) and that length (`gaps.min_gap_s` of the baseline's median service time and
    P99); None without gaps.

    One rule for process_stall, which names them, and cpu_saturation, which leaves them out.
    """
    if sig.gaps is None:
        return None
    grid = WindowGrid(int(sig.starts_ns[0]), int(round(sig.window_s * NS)), sig.n)
    threshold = min_gap_s(median(sig.service_p50_ms, baseline), median(sig.p99_ms, baseline))
    gaps = sig.gaps.longer_than(threshold)
    longest = gaps.longest_per_window(grid)
    # A gap of a few batches' time is the server working slowly (large copies, a slow
    # model: the same multiple of the time Triton took per request in that window, which
    # is its batch's), not stopped; a stop adds its length to one batch at most.
    tr = sig.triton
    per_request = None if tr is None else tr.compute_total_ms
    if per_request is not None:
        working_s = MIN_GAP_SERVICE_MULTIPLE * np.nan_to_num(per_request, nan=0.0) / 1000.0
        longest = np.where(longest >= working_s, longest, 0.0)
    return gaps, longest, threshold


def server_starved(sig: Signals, baseline: np.ndarray) -> np.ndarray | None:
    """Per window: cores saturated and the server kept waiting for a CPU.

    Best evidence: its threads' run delay (the kernel's time runnable but not
    running) beyond its baseline's spread. A server stopped (SIGSTOP, a freeze)
    is not runnable and does not wait; one starved by other runnable work
    waits most of the time. Where the run delay is not recorded (older runs,
    kernels without schedstat): preempted beyond its baseline's spread per
    CPU-second it got. None where the host data have neither.
    """
    host = sig.host
    busy = busy_cores(sig)
    if busy is None or host is None:
        return None
    for rate in (host.server_run_delay_ms_per_s, host.server_preemptions_per_cpu_s):
        if rate is None or np.all(np.isnan(rate)):
            continue
        # No absolute floor: the saturated cores back it (burners at nice -10 on a quiet
        # host raise a run delay of 1-5 ms/s 7-27x, under WAIT_FLOOR_MS_PER_S).
        waited = above_spread(rate, baseline, WAIT_RISE_FLOOR)
        if waited is None:
            continue
        cond = (np.nan_to_num(busy, nan=0.0) >= BUSY_CORES_SHARE) & (
            np.nan_to_num(waited, nan=0.0) > 0
        )
        return flag(cond, busy)
    return None


def error_spans(e: list[Evidence]) -> str:
    """When a cause of kind ERRORS failed requests, from its evidence ("from 12 to 16 s")."""
    episodes = int(ev(e, "episodes") or 0)
    if episodes == 1:
        return f"from {fmt(ev(e, 'start_s'))} to {fmt(ev(e, 'end_s'))} s"
    starts = [x.value for x in e if x.name == "episode_start_s"]
    ends = [x.value for x in e if x.name == "episode_end_s"]
    parts = [f"{fmt(a)}-{fmt(b)} s" for a, b in zip(starts, ends, strict=True)]
    spans = ", ".join(parts[:4]) + (f" and {len(parts) - 4} more" if len(parts) > 4 else "")
    return f"{episodes} times ({spans}; {fmt(ev(e, 'duration_s'))} s in all)"


def outside_server_ms(sig: Signals) -> np.ndarray | None:
    """Median service latency minus Triton's queue + compute: client, network, connection setup."""
    if sig.triton is None:
        return None
    return sig.service_p50_ms - (sig.triton.queue_ms_per_request + sig.triton.batch_compute_ms)


# --- where the time goes (loadkit/analysis/breakdown.py) ------------------------------

LABELS = {
    "generator_lag": "generator lag (sent late)",
    "client_network": "client + network",
    "server_queue": "server queue",
    "server_compute": "server compute (infer; input + infer + output where not split)",
    "server_data_movement": "server data movement (compute input + output)",
    "server_side": "server + network (no server statistics)",
}


def data_movement_ms(sig: Signals) -> np.ndarray | None:
    """Compute input + output per request where Triton recorded them (not all zero)."""
    tr = sig.triton
    if tr is None or tr.data_movement_ms is None:
        return None
    moved = tr.data_movement_ms
    if np.all(np.isnan(moved)) or not np.nanmax(moved) > 0:
        return None
    return moved


def components(sig: Signals) -> dict[str, np.ndarray]:
    """Each known component per window (ms; NaN unknown)."""
    out: dict[str, np.ndarray] = {}
    if sig.corrected_p50_ms is not None:
        out["generator_lag"] = np.maximum(sig.corrected_p50_ms - sig.service_p50_ms, 0.0)
    tr = sig.triton
    if tr is None:
        out["server_side"] = sig.service_p50_ms
        return out
    moved = data_movement_ms(sig)
    compute = tr.compute_total_ms if tr.compute_total_ms is not None else tr.batch_compute_ms
    if moved is not None:  # the copies apart from the model's own compute
        compute = tr.batch_compute_ms
    server = tr.request_ms_per_request
    if server is None or np.all(np.isnan(server)):
        server = tr.queue_ms_per_request + compute
        if moved is not None:
            server = server + np.nan_to_num(moved, nan=0.0)
    out["client_network"] = np.maximum(sig.service_p50_ms - server, 0.0)
    out["server_queue"] = tr.queue_ms_per_request
    out["server_compute"] = compute
    if moved is not None:
        out["server_data_movement"] = moved
    return out
