"""The result of analyzing a run: frozen dataclasses serialized to `analysis.json`.

This module is the contract between analysis and the reporters (docs/analysis.md).
Reporters format these values; they never compute statistics, so everything a
report plots or states is here, already computed: per-window latency and load
series, aligned telemetry, spike episodes, periodicity, findings with their
evidence, verdicts, recoveries, knee and soak drift.

Conventions: times are wall-clock UTC integer nanoseconds (`*_ns`) or seconds
since the run start (`*_s` on a timeline); latencies are milliseconds (`*_ms`);
a value that could not be computed is `None` (JSON `null`), never NaN. Series
are tuples with one entry per window of `WindowSeries.t_ns`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, TypeVar, Union

from loadkit.errors import RunFormatError

# History:
#   1 (loadkit 0.1.0): first version.
SCHEMA_VERSION = 1
KNOWN_SCHEMA_VERSIONS = (1,)

Series = tuple[float | None, ...]

# Ids of the built-in causes (Finding.cause, CauseCheck.cause). The causes themselves,
# and the list of them, are in loadkit/analysis/causes/ (its REGISTRY).
CAUSE_ARRIVAL_BURST = "arrival_burst"
CAUSE_BATCHING_WINDOW = "batching_window"
CAUSE_GPU_THERMAL = "gpu_clock_thermal"
CAUSE_GPU_POWER = "gpu_clock_power"
CAUSE_GPU_CLOCK_OTHER = "gpu_clock_other"
CAUSE_CPU_SATURATION = "cpu_saturation"
CAUSE_CGROUP_THROTTLING = "cgroup_throttling"
CAUSE_CONNECTION_CHURN = "connection_churn"
CAUSE_PROCESS_STALL = "process_stall"
CAUSE_DATA_MOVEMENT = "data_movement"

CONFIDENCES = ("strong", "moderate", "weak")

# Drift identifiers (DriftFinding.drift).
DRIFTS = (
    "server_memory_growth",
    "gpu_memory_growth",
    "gpu_memory_headroom",
    "latency_floor_creep",
    "capacity_fall",
    "errors_onset",
)


# --- run and series ---------------------------------------------------------


@dataclass(frozen=True)
class RunAbort:
    """Why a run stopped early, from the manifest's `abort`: a guard condition or Ctrl-C."""

    by: str  # "condition" (`loadkit run --abort-on`) or "interrupt" (Ctrl-C / SIGTERM)
    condition: str | None  # e.g. "p99>200ms for 3s"
    t_ns: int | None  # when the condition held (end of its last interval) or the interrupt
    t_s: float | None  # the same, seconds since the run started
    since_s: float | None  # when the breach began (first interval of the span)
    message: str  # one line, e.g. "p99>200ms for 3s held for 3 s (last interval 1.9e+03ms, ...)"


@dataclass(frozen=True)
class TargetPlace:
    """Whether the target ran on loadkit's machine (the manifest's `environment.target_location`)."""

    local: bool | None  # None: not known (not recorded, no target, a name that did not resolve)
    how: str  # what decided it: "loopback address", "--server-pid", "--server-host", ...
    host: str | None  # the target machine's name, when known
    address: str | None = None


@dataclass(frozen=True)
class SeriesPlace:
    """Where one telemetry series was sampled (the manifest's `sources[]`)."""

    name: str  # the series: telemetry/<name>.jsonl (or the source's name when it has no file)
    place: str  # "server" (the target's machine), "client" (a load machine) or "unknown"
    host: str | None  # that machine's name
    loadkit_host: bool  # sampled on the machine loadkit ran on (its hostname)
    parts: dict[str, str] = field(default_factory=dict)  # e.g. host's {"process": "server"}
    recorded: bool = True  # False: the manifest said nothing; the legacy rules decided
    file: str | None = None  # None: asked for, not recorded (`warning` says why)
    warning: str | None = None

    @property
    def parts_elsewhere(self) -> bool:
        """A part of the series (host's process part) was sampled in another place."""
        return any(p != self.place for p in self.parts.values())


@dataclass(frozen=True)
class RunInfo:
    """What was analyzed: identity of the run, from its manifest."""

    run_id: str
    path: str
    kind: str  # "load", "watch", "import"
    status: str  # "complete", "aborted", "running"
    scenario: str | None
    target_url: str | None
    model: str | None
    start_ns: int | None
    end_ns: int | None
    duration_s: float | None
    gpu_kind: str  # "nvml", "simulated", "none"
    simulated: bool  # any source labelled simulated
    loadkit_version: str | None  # that recorded the run
    analyzed_with: str  # loadkit version that wrote analysis.json
    abort: RunAbort | None = None  # set when the run was stopped early (guard or Ctrl-C)
    # Where the target ran and where each series was sampled (issue 41); absent in
    # analysis.json files written before.
    target_location: TargetPlace | None = None
    sources: tuple[SeriesPlace, ...] = ()


@dataclass(frozen=True)
class LatencyWindows:
    """Percentiles of one latency kind per window, from merged HDR histograms."""

    kind: str  # "corrected" (from intended send) or "service" (from actual send)
    count: tuple[int, ...]  # completions recorded in the window itself
    p50_ms: Series
    p95_ms: Series
    p99_ms: Series
    p999_ms: Series
    max_ms: Series
    # Requests behind the percentiles: more than `count` where the window was
    # too thin and its percentiles come from a widened span (`WindowSeries.basis_s`).
    basis_count: tuple[int, ...]
    # Mean per request (production windows only: Triton's duration/count counters);
    # a mean, never one of the percentiles above. Empty for load runs.
    mean_ms: Series = ()

    def percentile(self, name: str) -> Series:
        """The series for "p50", "p95", "p99", "p999" or "max"."""
        return typing.cast(Series, getattr(self, f"{name}_ms"))


@dataclass(frozen=True)
class WindowSeries:
    """Latency and load per window on the analysis grid (window starts in `t_ns`)."""

    window_s: float
    t_ns: tuple[int, ...]
    t_s: tuple[float, ...]  # window start, seconds since run start
    corrected: LatencyWindows
    service: LatencyWindows
    basis_s: tuple[float, ...]  # span of data behind each window's percentiles
    throughput_rps: Series  # completed OK per second
    offered_rps: Series  # arrivals scheduled per second (open model)
    errors_per_s: Series
    error_pct: Series  # errors / completed (ok + errors)
    dropped_per_s: Series
    in_flight: Series  # max over processes' last value in the window (summed)

    def latency(self, kind: str) -> LatencyWindows:
        return self.corrected if kind == "corrected" else self.service


@dataclass(frozen=True)
class Overview:
    """A long run at minute resolution (loadkit.analysis.overview), for whole-run timelines.

    Latency percentiles come from each minute's merged histograms; the rest are
    means of the minute's windows (maxima: temperature, busiest core).
    """

    window_s: float
    t_s: tuple[float, ...]  # minute start, seconds since run start
    corrected: LatencyWindows
    throughput_rps: Series
    offered_rps: Series
    gpu_util_pct: Series | None = None
    gpu_sm_clock_mhz: Series | None = None
    gpu_sm_clock_max_mhz: Series | None = None
    gpu_temp_c: Series | None = None
    gpu_power_w: Series | None = None
    gpu_power_limit_w: Series | None = None
    cpu_core_max_pct: Series | None = None
    cpu_mean_pct: Series | None = None
    cgroup_throttled_pct: Series | None = None
    queue_ms_per_request: Series | None = None
    compute_ms_per_request: Series | None = None


@dataclass(frozen=True)
class BatchSizeMatrix:
    """Executions per batch size per window: `counts[i][j]` is window i, size `sizes[j]`."""

    sizes: tuple[int, ...]
    counts: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class TelemetryWindows:
    """Telemetry aligned to the same windows as `WindowSeries` (None: source absent).

    Gauges are window means (clocks, temperature, power, utilization) or maxima
    where stated; counters are turned into per-second rates with resets handled.
    """

    gpu_sm_clock_mhz: Series | None = None  # mean over the window (GPU 0 or mean of GPUs)
    gpu_sm_clock_max_mhz: Series | None = None
    gpu_temp_c: Series | None = None  # max over the window
    gpu_power_w: Series | None = None
    gpu_power_limit_w: Series | None = None
    gpu_util_pct: Series | None = None
    gpu_mem_used_bytes: Series | None = None
    gpu_thermal_reason: Series | None = None  # fraction of samples with a thermal reason bit
    gpu_power_reason: Series | None = None  # fraction of samples with the power-cap bit
    cpu_core_max_pct: Series | None = None  # busiest core
    cpu_mean_pct: Series | None = None
    cpu_psi_some_avg10: Series | None = None
    cgroup_throttled_pct: Series | None = None  # throttled periods / periods, in %
    cgroup_throttled_ms_per_s: Series | None = None
    server_rss_bytes: Series | None = None
    new_connections_per_s: Series | None = None  # host TCP opens, else request samples
    batch_size_mean: Series | None = None  # inferences / executions
    batch_size_max: Series | None = None
    executions_per_s: Series | None = None
    inferences_per_s: Series | None = None
    queue_ms_per_request: Series | None = None
    compute_ms_per_request: Series | None = None  # compute_infer time / inferences
    compute_ms_per_execution: Series | None = None  # compute_infer time / executions
    # compute_input + compute_output per request: host-device copies (data_movement)
    data_movement_ms_per_request: Series | None = None
    batch_sizes: BatchSizeMatrix | None = None
    # The server's other models together (Triton's statistics; None: it reported no other
    # model): their requests per second and compute milliseconds per second.
    other_models_inferences_per_s: Series | None = None
    other_models_compute_ms_per_s: Series | None = None
    # Per core (outer), one window mean per window (inner), from host `cpu_per_core_pct`.
    cpu_per_core_pct: tuple[Series, ...] | None = None


@dataclass(frozen=True)
class PhaseMark:
    """A phase event to draw on timelines (burst start/end, load steps)."""

    t_ns: int
    t_s: float
    name: str
    rate: float | None = None


# --- whole-run numbers ------------------------------------------------------


@dataclass(frozen=True)
class LatencySummary:
    """Whole-run percentiles of one latency kind (merged histogram of the run)."""

    kind: str
    count: int
    p50_ms: float | None
    p90_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    p999_ms: float | None
    max_ms: float | None
    mean_ms: float | None


@dataclass(frozen=True)
class StepLatency:
    """A production window's latency as the exporter gave it: one value per step.

    Quantiles of steps cannot be merged into the window's percentiles, so the
    window is told by its median step and its worst step (the one the SLO verdict
    judges), with the source named.
    """

    source: str  # e.g. "Triton summary quantiles (each over the last 60 s)"
    step_s: float
    median_ms: dict[str, float | None]  # by "p50", "p95", "p99", "p999", "mean"
    worst_ms: dict[str, float | None]


@dataclass(frozen=True)
class OverallStats:
    """Whole-run totals and percentiles."""

    duration_s: float
    offered: int
    completed: int  # ok + errors
    ok: int
    errors: int
    dropped: int
    out_of_range: int
    error_pct: float | None
    dropped_pct: float | None  # of offered
    throughput_rps: float | None
    offered_rps: float | None
    corrected: LatencySummary
    service: LatencySummary
    error_kinds: dict[str, int] = field(default_factory=dict)
    # The server's own words, first few distinct per error kind (from events.jsonl).
    error_messages: dict[str, list[str]] = field(default_factory=dict)
    # Production windows only: what the exporter measured per step (`corrected` is unknown).
    step_latency: StepLatency | None = None


@dataclass(frozen=True)
class NinesDistribution:
    """Latency at each percentile of the whole run (a "nines" plot)."""

    percentiles: tuple[float, ...]  # e.g. 50, 90, 99, 99.9, 99.99, 100
    corrected_ms: Series
    service_ms: Series


# --- episodes and periodicity -----------------------------------------------


@dataclass(frozen=True)
class SpikeEpisode:
    """A run of windows where a percentile rose well above its robust baseline."""

    episode_id: str  # "<percentile>#<n>", e.g. "p99#3"
    percentile: str  # "p50", "p95", "p99", "p999"
    kind: str  # latency kind, "corrected"
    start_ns: int
    end_ns: int  # end of the last window in the episode
    start_s: float  # seconds since run start
    duration_s: float
    peak_ns: int
    peak_ms: float
    baseline_ms: float  # robust baseline at the peak
    excess_ms: float  # peak - baseline
    excess_area_ms_s: float  # sum over windows of (value - baseline) * window_s
    peak_ratio: float  # peak / baseline
    peak_z: float  # (peak - baseline) / robust scale
    windows: int
    causes: tuple[str, ...] = ()  # cause identifiers attributed to this episode
    # Where the time went: the latency component that grew most in this episode
    # (LatencyBreakdown names) and by how much over its baseline (ms); None: unknown.
    grew: str | None = None
    grew_ms: float | None = None


@dataclass(frozen=True)
class Periodicity:
    """Is this percentile's spiking periodic (a sawtooth)? If so, how regular."""

    percentile: str
    periodic: bool
    period_s: float | None = None
    jitter_s: float | None = None  # circular std of episode starts around the period
    strength: float | None = None  # autocorrelation at the period (0..1)
    p_value: float | None = None  # Rayleigh test of episode start phases
    cycles: float | None = None  # run length / period
    episodes_used: int = 0
    reason: str = ""  # why not periodic (one phrase), or how it was confirmed
    # Each candidate period tried and why it was not confirmed, once per period and
    # reason (the report's periodicity table and analysis.json; the summary names one).
    rejected: tuple[str, ...] = ()


# --- attribution --------------------------------------------------------------


@dataclass(frozen=True)
class LatencyComponent:
    """One part of a request's latency, per window (ms)."""

    name: str  # generator_lag, client_network, server_queue, server_compute, server_side
    label: str
    ms: Series
    baseline_ms: float | None  # median over baseline windows


@dataclass(frozen=True)
class LatencyBreakdown:
    """Where the time goes, per window: generator, client + network, server queue, compute.

    generator_lag = corrected P50 - service P50 (the send was late);
    client_network = service P50 - Triton's request time per request;
    server_queue, server_compute (input + infer + output) from Triton's statistics.
    Without Triton statistics only generator_lag and server_side (= service
    P50: the server and the network, not split) are known.
    """

    components: tuple[LatencyComponent, ...]
    source: str  # "triton statistics" or "client only"


@dataclass(frozen=True)
class Evidence:
    """One named number behind a finding, with its unit."""

    name: str
    value: float | None
    unit: str
    note: str = ""


@dataclass(frozen=True)
class AlignedSignal:
    """A cause's signal averaged over episodes, aligned at each episode's start (t = 0).

    Shows whether the cause leads the symptom: `p99_ms` is P99 averaged the same way.
    """

    signal: str  # the series averaged, e.g. "telemetry.gpu_sm_clock_mhz"
    label: str  # axis label, e.g. "SM clock (MHz)"
    offsets_s: tuple[float, ...]  # seconds from the episode start, one per window
    mean: Series  # mean over the episodes at each offset
    low: Series | None = None  # 10th percentile over the episodes at each offset
    high: Series | None = None  # 90th percentile
    baseline: float | None = None  # median of the signal over matched baseline windows
    p99_ms: Series | None = None  # corrected P99 averaged the same way
    episodes_used: int = 0  # episodes behind the average
    anchor: str = ""  # which episodes: the finding's own, or all episodes (standing condition)


# What an episode cause's `Finding.baseline_rate` counts, as a reader sees it beside the
# rate: stretches of the baseline as long as the episodes and their lead (issue 51).
STRETCHES = "same-length stretches of the run"


@dataclass(frozen=True)
class Finding:
    """A cause that explains spike episodes, with its statistics and what to do."""

    cause: str  # a cause id (loadkit/analysis/causes REGISTRY)
    title: str  # e.g. "GPU thermal throttling"
    confidence: str  # "strong", "moderate", "weak"
    episodes: tuple[str, ...]  # episode ids explained
    episodes_total: int  # episodes tested
    coincidence: float  # fraction of tested episodes where the signature holds
    # fraction of STRETCHES (the episodes shifted around the baseline) where it holds
    baseline_rate: float
    lift: float | None  # coincidence / baseline_rate (None: baseline rate 0)
    p_value: float | None  # episodes vs those stretches (attribution._stretch_null)
    cliffs_delta: float | None  # effect size of the signature's metric, episode vs baseline
    lag_s: float | None  # median signature onset minus episode start (<0: cause leads)
    evidence: tuple[Evidence, ...]
    summary: str  # one sentence with the key numbers
    action: str  # recommended action
    aligned: AlignedSignal | None = None  # the cause's signal around its episodes
    # An error finding whose failures fell in a found cause's windows (a stall's
    # timeouts): that cause's id; it is listed right after it (None: on its own).
    consequence_of: str | None = None


@dataclass(frozen=True)
class CauseCheck:
    """Outcome of testing one cause: found, not found, or not assessable (and why)."""

    cause: str
    status: str  # "found", "not_found", "not_assessable"
    reason: str


# --- verdicts and figures -----------------------------------------------------


@dataclass(frozen=True)
class SloVerdict:
    """One SLO threshold against the whole run."""

    name: str  # "p99", "p95", "errors", ...
    threshold: float
    unit: str  # "ms" or "%"
    observed: float | None
    passed: bool | None  # None: not measurable (no data)
    detail: str = ""
    label: str = ""  # what the verdict's line calls it ("errors + dropped arrivals"); else name


@dataclass(frozen=True)
class Verdict:
    """Overall SLO pass/fail (all thresholds must pass) and where the thresholds came from."""

    passed: bool
    slos: tuple[SloVerdict, ...]
    source: str  # "command line", "scenario", "default" (or a mix, e.g. "command line+default")
    summary: str


@dataclass(frozen=True)
class Alert:
    """An operational alert raised over the run (P99 ceiling, idle GPU, hot GPU)."""

    name: str
    severity: str  # "warn" or "critical"
    message: str
    start_ns: int | None = None
    end_ns: int | None = None
    value: float | None = None
    unit: str = ""


@dataclass(frozen=True)
class BurstRecovery:
    """How a burst hurt P99 and how long P99 took to settle back afterwards."""

    burst_start_ns: int
    burst_end_ns: int | None
    rate: float | None
    pre_burst_p99_ms: float | None
    band_upper_ms: float | None  # P99 counts as recovered while within this band
    recovered: bool
    recovery_s: float | None  # from burst end to the first time P99 stays in band for 10 s
    recovered_at_ns: int | None
    peak_p99_ms: float | None
    peak_excess_ms: float | None
    excess_area_ms_s: float | None
    batch_size_mean_before: float | None = None
    batch_size_mean_during: float | None = None
    queue_ms_before: float | None = None
    queue_ms_during: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class StepResult:
    """One load step of a steps/ramp run, judged for the saturation knee."""

    start_ns: int
    end_ns: int
    offered_rps: float | None
    achieved_rps: float | None
    p99_ms: float | None
    error_pct: float | None
    queue_growing: bool
    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class SaturationKnee:
    """Highest sustainable step: achieved ≥ 97% of offered, P99 in SLO, few errors, no queue growth."""

    found: bool
    knee_offered_rps: float | None
    knee_achieved_rps: float | None
    steps: tuple[StepResult, ...]
    reason: str


@dataclass(frozen=True)
class DriftTrend:
    """A robust (Theil-Sen) trend of one resource over a soak, and when it runs out."""

    metric: str  # "gpu_mem_used_bytes", "server_rss_bytes", "latency_floor_ms", "compute_capacity_rps", "served_pct"
    unit: str
    slope_per_hour: float | None
    slope_low_per_hour: float | None  # confidence interval (loadkit.analysis.drift.CONFIDENCE)
    slope_high_per_hour: float | None
    start_value: float | None
    end_value: float | None
    limit: float | None  # capacity, where known
    hours_to_exhaustion: float | None
    significant: bool
    detail: str = ""


@dataclass(frozen=True)
class DriftFinding:
    """A drift that matters before launch (loadkit.analysis.drift), with evidence and action.

    Not a spike cause: it judges the whole run, not episodes.
    """

    drift: str  # one of DRIFTS
    title: str
    severity: str  # "critical", "warn"
    summary: str  # one sentence with the key numbers
    action: str
    evidence: tuple[Evidence, ...]
    metric: str  # the DriftTrend.metric (or series) behind it
    onset_s: float | None = None  # errors_onset: seconds from the run start


@dataclass(frozen=True)
class SoakDrift:
    """Drift over a long run: robust trends, and the findings among them that matter."""

    duration_s: float
    trends: tuple[DriftTrend, ...]
    summary: str
    findings: tuple[DriftFinding, ...] = ()


@dataclass(frozen=True)
class PhaseBatchHistogram:
    """Executions per batch size within one phase of the run (steady, burst, recovery)."""

    phase: str  # "steady", "burst", "recovery" (only phases with executions)
    sizes: tuple[int, ...]  # the same sizes for every phase (BatchSizeMatrix.sizes)
    executions: tuple[int, ...]  # executions at each size within the phase
    share: tuple[float, ...]  # executions / all executions of the phase
    mean_batch_size: float | None
    windows: int = 0  # windows in the phase


@dataclass(frozen=True)
class Interval:
    """A span to shade on timelines: GPU throttling, cgroup throttling, an injected fault.

    `kind`: "gpu_thermal", "gpu_power", "gpu_clock_other", "cgroup_throttled" (from
    the per-window telemetry) or "fault:<name>" (ground truth from events.jsonl:
    shown, never used for attribution).
    """

    kind: str
    start_s: float  # seconds since run start
    end_s: float
    start_ns: int
    end_ns: int
    label: str = ""
    ground_truth: bool = False  # True for injected faults (events.jsonl)


@dataclass(frozen=True)
class CapacityProbe:
    """One probe of `loadkit capacity`: its rate, what it measured, and its verdict."""

    index: int
    rate_rps: float
    trial: int
    start_s: float  # seconds since run start
    measure_start_s: float  # after the settle windows
    end_s: float
    offered_rps: float | None
    achieved_rps: float | None
    goodput_rps: float | None  # completions within the SLO's latency, per second
    corrected_ms: float | None  # the SLO's percentile, coordinated-omission corrected
    p50_ms: float | None
    service_ms: float | None  # the SLO's percentile from the actual send
    errors_pct: float | None
    dropped: int
    in_flight_growing: bool
    generator_cpu_pct: float | None  # the busiest Locust process, % of one core
    windows: int  # measure windows judged (more when they disagreed)
    stable: bool
    passed: bool
    generator_limited: bool
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class CapacityPrediction:
    """A ceiling from Triton's statistics: compute time per batch at the best batch size."""

    batch_size: int
    compute_ms: float
    executions: int
    instances: int
    rps_per_instance: float
    rps: float
    basis: str


@dataclass(frozen=True)
class LimitedBy:
    """What bound the capacity (`generator`, `model_instances`, `cpu`, `latency`, ...)."""

    resource: str
    evidence: str


@dataclass(frozen=True)
class CapacityResult:
    """A capacity run's answer (`analysis.json` `capacity`; see analysis/capacity.py)."""

    slo_percentile: str
    slo_ms: float
    errors_pct: float
    found: bool  # a bracket: a passing rate below a failing (or generator-limited) one
    rate_rps: float | None  # the capacity: the highest rate that passed every trial
    low_rps: float | None
    high_rps: float | None  # the lowest rate that failed (or the generator's limit)
    resolution: float
    trials: int
    limited_by: str
    limited_by_evidence: str
    generator_limited: bool
    peak_rps: float | None
    headroom: float | None
    replicas: int | None  # ceil(peak / (low x (1 - headroom)))
    replicas_low: int | None  # the same with the bracket's high end
    replicas_high: int | None
    scale_out_assumption: str
    prediction: CapacityPrediction | None
    gap_pct: float | None  # measured vs predicted, % of the prediction
    answer: str
    stopped_by: str | None
    probes: tuple[CapacityProbe, ...]


# The percentiles whose episodes causes are tested against, the highest first.
PRIMARY_PERCENTILES = ("p99", "p95", "p50")


@dataclass(frozen=True)
class Analysis:
    """Everything `loadkit analyze` concluded about one run (analysis.json)."""

    schema_version: int
    run: RunInfo
    window_s: float
    windows: WindowSeries
    telemetry: TelemetryWindows
    phases: tuple[PhaseMark, ...]
    overall: OverallStats
    nines: NinesDistribution
    episodes: tuple[SpikeEpisode, ...]
    periodicity: tuple[Periodicity, ...]
    findings: tuple[Finding, ...]
    causes_checked: tuple[CauseCheck, ...]
    verdict: Verdict
    alerts: tuple[Alert, ...]
    recoveries: tuple[BurstRecovery, ...]
    knee: SaturationKnee | None
    soak: SoakDrift | None
    headline: str  # one sentence: verdict and the top finding
    notes: tuple[str, ...]  # warnings and choices made (window widening, missing sources)
    batch_by_phase: tuple[PhaseBatchHistogram, ...] = ()  # batch-size histogram per phase
    intervals: tuple[Interval, ...] = ()  # throttle / cgroup / fault spans, by start time
    overview: Overview | None = None  # minute resolution, for runs longer than 2 h
    breakdown: LatencyBreakdown | None = None  # where the time goes, per window
    # The percentile whose episodes the findings explain (pipeline.primary_percentile);
    # None in analysis.json files written before it was recorded.
    primary: str | None = None
    capacity: CapacityResult | None = None  # runs of kind `capacity` (loadkit capacity)

    def to_dict(self) -> dict[str, Any]:
        return typing.cast(dict[str, Any], to_jsonable(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Analysis:
        version = data.get("schema_version")
        if version not in KNOWN_SCHEMA_VERSIONS:
            known = ", ".join(str(v) for v in KNOWN_SCHEMA_VERSIONS)
            raise RunFormatError(
                f"analysis.json has schema_version {version!r}; this loadkit reads {known}",
                hint="re-run `loadkit analyze RUN` with this loadkit to rewrite it",
            )
        return from_jsonable(cls, data)

    def to_json(self) -> str:
        # Not indented: the json module's C encoder runs only without `indent`; the
        # Python one took ~50 s for a 24 h run's per-window series (`python -m
        # json.tool` shows the file indented).
        return json.dumps(self.to_dict(), allow_nan=False, separators=(",", ":"))

    def save(self, path: str | Path) -> None:
        """Write atomically so a reader never sees half a file (OSError: the old file is kept)."""
        from loadkit.rundir.atomic import write_atomic

        write_atomic(path, self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Analysis:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RunFormatError(
                f"cannot read {path} ({exc})", hint="re-run `loadkit analyze RUN`"
            ) from exc
        return cls.from_dict(data)

    def primary_episodes(self) -> tuple[SpikeEpisode, ...]:
        """The episodes the findings explain (older files: the highest percentile with any)."""
        if self.primary is not None:
            return self.episodes_for(self.primary)
        for pct in PRIMARY_PERCENTILES:
            if self.episodes_for(pct):
                return self.episodes_for(pct)
        return ()

    def episodes_for(self, percentile: str) -> tuple[SpikeEpisode, ...]:
        return tuple(e for e in self.episodes if e.percentile == percentile)

    def periodicity_for(self, percentile: str) -> Periodicity | None:
        return next((p for p in self.periodicity if p.percentile == percentile), None)


# --- generic (de)serialization -------------------------------------------------

T = TypeVar("T")


def to_jsonable(value: Any) -> Any:
    """Dataclasses to dicts, tuples to lists, NaN/inf to None, numpy scalars to Python."""
    kind = type(value)
    # Most values are the floats of per-window series: the cheap checks first.
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is int or kind is str or value is None or kind is bool:
        return value
    if kind is tuple or kind is list:
        return [to_jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if hasattr(value, "item"):  # numpy scalar
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_jsonable(tp: Any, value: Any) -> Any:
    """Rebuild a value of type `tp` from `to_jsonable` output (unknown keys ignored)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return from_jsonable(arg, value)
            except (TypeError, ValueError, KeyError):
                continue
        raise ValueError(f"{value!r} matches none of {tp}")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, dict):
            raise TypeError(f"expected an object for {tp.__name__}, got {type(value).__name__}")
        hints = _hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in value:
                kwargs[f.name] = from_jsonable(hints[f.name], value[f.name])
        return tp(**kwargs)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            raise TypeError(f"expected a list, got {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_jsonable(args[0], v) for v in value)
        return tuple(from_jsonable(a, v) for a, v in zip(args, value, strict=True))
    if origin is dict:
        _, vt = typing.get_args(tp)
        if not isinstance(value, dict):
            raise TypeError(f"expected an object, got {type(value).__name__}")
        return {str(k): from_jsonable(vt, v) for k, v in value.items()}
    if tp is float:
        if value is None:
            return math.nan
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise TypeError(f"expected true/false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise TypeError(f"expected a string, got {value!r}")
        return value
    return value
