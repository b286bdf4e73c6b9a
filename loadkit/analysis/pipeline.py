"""`analyze_run(run, slo) -> Analysis`: the whole pipeline over one loaded run directory.

Four typed stages, each a function that can be tested and timed alone:
`align` (windows on one grid) -> `detect` (episodes, periods, phases) ->
`attribute` (causes, latency breakdown) -> `judge` (verdicts, the `Analysis`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from loadkit import __version__
from loadkit.analysis import attribution as attr
from loadkit.analysis import causes, production
from loadkit.analysis import sources as telemetry_sources
from loadkit.analysis.alerts import alerts
from loadkit.analysis.align import NS, WindowGrid, make_grid, to_series
from loadkit.analysis.breakdown import breakdown, label_episodes
from loadkit.analysis.capacity import capacity_result, probes_from_events
from loadkit.analysis.drift import SoakSignals, soak_drift
from loadkit.analysis.episodes import baseline_windows_for, find_episodes
from loadkit.analysis.figures import with_figure_values
from loadkit.analysis.gaps import CompletionGaps, gaps_from_load, gaps_from_samples
from loadkit.analysis.knee import saturation_knee
from loadkit.analysis.latency_counts import LatencyCounts
from loadkit.analysis.model import (
    PRIMARY_PERCENTILES,
    SCHEMA_VERSION,
    Alert,
    Analysis,
    BurstRecovery,
    CapacityResult,
    Finding,
    LatencyBreakdown,
    LatencyWindows,
    OverallStats,
    Periodicity,
    PhaseMark,
    RunAbort,
    RunInfo,
    SaturationKnee,
    Series,
    SoakDrift,
    SpikeEpisode,
    TelemetryWindows,
    Verdict,
    WindowSeries,
)
from loadkit.analysis.overview import build_overview
from loadkit.analysis.percentiles import (
    MIN_REQUESTS_FOR_P99,
    WINDOW_PERCENTILES,
    IntervalCounts,
    WindowPercentiles,
    choose_window_s,
    collect_intervals,
    histograms_by_window,
    merge,
    nines,
    summarize,
    window_percentiles,
)
from loadkit.analysis.periodicity import detect_periodicity, run_period
from loadkit.analysis.places import SERVER_SIDE, series_places, sources_at, target_place
from loadkit.analysis.recovery import BurstPhase, burst_recovery, rolling_p99
from loadkit.analysis.slo import DEFAULT_SLO, resolve_slo, slo_verdict, step_verdict
from loadkit.analysis.telemetry import (
    LoadSeries,
    RequestSampleSeries,
    align_load,
    align_request_samples,
    events_of,
    new_connections_per_s,
)
from loadkit.errors import RunFormatError
from loadkit.rundir import Run
from loadkit.rundir.generator_check import schedule_shortfall
from loadkit.rundir.schema import LOCAL_SUFFIX, WORKER_SERIES_PREFIX


def primary_percentile(episodes: Sequence[SpikeEpisode], periodicity: Sequence[Periodicity]) -> str:
    """The percentile whose episodes the causes are tested against.

    The highest percentile with episodes, P99 first, unless its episodes are
    not periodic and a lower percentile's are, and more of them: a cause that
    repeats (a GPU throttled every 8 s, lifting P50 from 4.5 to 7.5 ms) shows in
    every cycle of the median, while a P99 set by two requests of a noisy window
    may rise once. The systematic pattern is what needs its cause.
    """
    count = {p: sum(e.percentile == p for e in episodes) for p in PRIMARY_PERCENTILES}
    periodic = {p.percentile for p in periodicity if p.periodic and p.period_s}
    with_episodes = [p for p in PRIMARY_PERCENTILES if count[p]]
    if not with_episodes:
        return "p99"
    top = with_episodes[0]
    if top in periodic:
        return top
    lower = [p for p in with_episodes[1:] if p in periodic and count[p] > count[top]]
    return lower[0] if lower else top


# Seconds at the start of a run left out of spike detection (the scenario may set warmup_s).
DEFAULT_WARMUP_S = 8.0

# The request-sample columns `align_request_samples` reads: the rest (strings, mostly) is
# never loaded. tests/unit/analysis/test_pipeline_scale.py checks nothing else is used.
REQUEST_SAMPLE_COLUMNS = ("t_ns", "sent_ns", "done_ns", "connection_new", "request_bytes")


_series = to_series


def _array(values: Series) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


# The recorder's intervals (latency histograms, load rows): whole wall-clock seconds.
RECORDER_INTERVAL_NS = NS


def _time_bounds(run: Run, intervals: IntervalCounts) -> tuple[int, int] | None:
    """Run start and end: the manifest's, else the data's; the start on the recorder's edges.

    The recorder's intervals are whole wall-clock seconds, and a run starts a
    fraction into one. A grid from the run's own start put each interval (latency,
    load counters) in the window its first instant fell in, up to a whole window
    before the gaps and telemetry of the same moment (issue 51: a stall's spike one
    window before its gap). The grid starts on the interval edge at or before it.
    """
    starts: list[int] = []
    ends: list[int] = []
    if intervals.first_start_ns is not None and intervals.last_end_ns is not None:
        starts.append(intervals.first_start_ns)
        ends.append(intervals.last_end_ns)
    load = run.load_intervals
    if not load.empty and "t_ns" in load.columns:
        starts.append(int(load["t_ns"].min()))
        ends.append(int(load["t_ns"].max()) + NS)
    start = run.start_ns or (min(starts) if starts else None)
    end = run.info.end_ns or (max(ends) if ends else run.end_ns)
    if start is None or end is None or end <= start:
        return None
    if starts:
        start -= (start - starts[0]) % RECORDER_INTERVAL_NS
    return int(start), int(end)


@dataclass(frozen=True)
class ModelConfig:
    """What analysis reads of the target model's configuration (the manifest's Triton config)."""

    name: str | None
    max_batch_size: int | None = None
    max_queue_delay_ms: float | None = None
    # default_queue_policy's limit (None: no limit, proto3's default 0, or not recorded).
    max_queue_size: int | None = None


def model_config(run: Run) -> ModelConfig:
    """The target model's config: the one the run names, else a server's only model."""
    info = run.info
    models = info.environment.server.models
    name = info.target.model if info.target is not None else None
    config = models.get(name) if name is not None else None
    if config is None and len(models) == 1:
        name, config = next(iter(models.items()))
    if config is None:
        return ModelConfig(name)
    max_batch = config.get("max_batch_size")
    batching = config.get("dynamic_batching")
    delay = None
    queue = None
    if isinstance(batching, dict):
        raw = batching.get("max_queue_delay_microseconds", 0)  # proto3 default: 0
        try:
            delay = float(raw) / 1000.0
        except (TypeError, ValueError):
            delay = None
        policy = batching.get("default_queue_policy")
        if isinstance(policy, dict):
            try:
                queue = int(policy.get("max_queue_size", 0)) or None  # proto3 default 0: no limit
            except (TypeError, ValueError):
                queue = None
    try:
        mb = int(max_batch) if max_batch is not None else None
    except (TypeError, ValueError):
        mb = None
    return ModelConfig(name, mb, delay, queue)


def scenario_timeout_s(run: Run) -> float | None:
    """The scenario's request timeout, where recorded."""
    params = run.info.scenario.params if run.info.scenario is not None else {}
    try:
        return float(params["timeout_s"]) if "timeout_s" in params else None
    except (TypeError, ValueError):
        return None


def completion_gaps(load: pd.DataFrame, samples: pd.DataFrame) -> CompletionGaps | None:
    """Completion gaps from the recorder's `completion_gaps`, else from complete request samples."""
    gaps = gaps_from_load(load)
    if gaps is not None:
        return gaps
    if load.empty or "t_ns" not in load.columns:
        return None
    if "ok" not in load.columns:
        return None
    done = load["ok"] + (load["errors"] if "errors" in load.columns else 0)
    per_s = (
        pd.DataFrame({"s": load["t_ns"] // NS, "n": pd.to_numeric(done, errors="coerce")})
        .groupby("s")["n"]
        .sum()
    )
    return gaps_from_samples(samples, {int(str(k)): float(v) for k, v in per_s.items()})


def _run_info(run: Run, start: int, end: int) -> RunInfo:
    info = run.info
    return RunInfo(
        run_id=run.run_id,
        path=str(run.path),
        kind=info.kind,
        status=run.status,
        scenario=info.scenario.name if info.scenario is not None else None,
        target_url=info.target.url if info.target is not None else None,
        model=info.target.model if info.target is not None else None,
        start_ns=start,
        end_ns=end,
        duration_s=(end - start) / NS,
        gpu_kind=info.environment.gpu.kind or "none",
        simulated=info.simulated,
        loadkit_version=info.loadkit_version,
        analyzed_with=__version__,
        abort=_run_abort(info.abort, start),
        target_location=target_place(info),
        sources=series_places(info),
    )


def _stopped_sentence(abort: RunAbort | None) -> str:
    """ "Stopped at 12 s by --abort-on p99>200ms for 3s: ..." for a guard abort, else ""."""
    if abort is None or abort.by not in ("condition", "disk_full"):
        return ""
    at = f" at {abort.t_s:.0f} s" if abort.t_s is not None else ""
    if abort.by == "disk_full":  # the run directory's disk filled: what was written is kept
        return f"Stopped{at}: {abort.message}."
    return f"Stopped{at} by --abort-on {abort.condition}: {abort.message}."


def _run_abort(raw: Any, start: int) -> RunAbort | None:
    """The manifest's `abort` record (docs/run-format.md) as the analysis states it."""
    if not isinstance(raw, dict):
        return None

    def seconds(key: str) -> float | None:
        value = raw.get(key)
        return (value - start) / NS if isinstance(value, int) else None

    by = str(raw.get("by") or "interrupt")
    condition = raw.get("condition")
    message = raw.get("message") or (
        "stopped by Ctrl-C / SIGTERM" if by == "interrupt" else f"stopped by {condition}"
    )
    return RunAbort(
        by=by,
        condition=str(condition) if condition is not None else None,
        t_ns=raw.get("t_ns") if isinstance(raw.get("t_ns"), int) else None,
        t_s=seconds("t_ns"),
        since_s=seconds("since_ns"),
        message=str(message),
    )


def _phases(
    run: Run, start: int
) -> tuple[list[PhaseMark], list[BurstPhase], list[tuple[int, float | None]]]:
    events = events_of(run.events, "phase", ("burst-start", "burst-end", "step"))
    marks: list[PhaseMark] = []
    bursts: list[BurstPhase] = []
    steps: list[tuple[int, float | None]] = []
    open_burst: tuple[int, float | None] | None = None
    for row in events.to_dict("records"):
        t = int(row["t_ns"])
        rate = row.get("rate")
        rate = float(rate) if isinstance(rate, int | float) and not pd.isna(rate) else None
        marks.append(PhaseMark(t, (t - start) / NS, str(row["name"]), rate))
        if row["name"] == "burst-start":
            if open_burst is not None:
                bursts.append(BurstPhase(open_burst[0], t, open_burst[1]))
            open_burst = (t, rate)
        elif row["name"] == "burst-end" and open_burst is not None:
            bursts.append(BurstPhase(open_burst[0], t, open_burst[1]))
            open_burst = None
        elif row["name"] == "step":
            steps.append((t, rate))
    if open_burst is not None:
        bursts.append(BurstPhase(open_burst[0], None, open_burst[1]))
    return marks, bursts, steps


def _warmup_s(run: Run) -> float:
    """Warm-up to leave out of spike detection: the scenario's `warmup_s`, else a default."""
    if run.info.kind == "production":
        return 0.0  # production traffic has no warm-up of ours to leave out
    scenario = run.info.scenario
    params = scenario.params if scenario is not None else {}
    try:
        return max(0.0, float(params.get("warmup_s", DEFAULT_WARMUP_S)))
    except (TypeError, ValueError):
        return DEFAULT_WARMUP_S


@dataclass(frozen=True)
class Aligned(telemetry_sources.SourceAccessors):
    """Stage 1, align: the run's latency, load and telemetry on one window grid."""

    run: Run
    start_ns: int
    end_ns: int
    grid: WindowGrid
    intervals: IntervalCounts
    corrected_h: list[LatencyCounts | None]
    service_h: list[LatencyCounts | None]
    windows: WindowSeries
    load: LoadSeries | None
    ok: np.ndarray  # per window: load counters, else the histograms' counts
    errors: np.ndarray  # per window, NaN without load counters (also offered, dropped, in flight)
    offered: np.ndarray
    in_flight: np.ndarray
    completed: np.ndarray  # ok + errors per window (the histograms' counts without load counters)
    # Each telemetry source's aligned series by source name (analysis/sources.py); None: absent.
    sources: dict[str, Any]
    samples: RequestSampleSeries | None
    gaps: CompletionGaps | None
    max_batch_size: int | None
    max_queue_delay_ms: float | None
    max_queue_size: int | None
    telemetry: TelemetryWindows
    notes: tuple[str, ...]

    @property
    def window_s(self) -> float:
        return self.grid.window_s


@dataclass(frozen=True)
class Detected:
    """Stage 2, detect: spike episodes per percentile, their periodicity, the run's phases."""

    episodes: tuple[SpikeEpisode, ...]
    periodicity: tuple[Periodicity, ...]
    primary: str  # the percentile whose episodes are attributed
    phases: tuple[PhaseMark, ...]
    bursts: tuple[BurstPhase, ...]
    steps: tuple[tuple[int, float | None], ...]
    warmup_end_ns: int
    notes: tuple[str, ...]

    @property
    def episodes_for_primary(self) -> list[SpikeEpisode]:
        return [e for e in self.episodes if e.percentile == self.primary]


@dataclass(frozen=True)
class Attributed:
    """Stage 3, attribute: causes tested against the episodes, and where the time went."""

    signals: attr.Signals
    attribution: attr.Attribution
    episodes: tuple[SpikeEpisode, ...]  # the detected ones, with causes and the part that grew
    breakdown: LatencyBreakdown


_LatencyGrid = tuple[
    WindowGrid,
    float,
    list[LatencyCounts | None],
    list[LatencyCounts | None],
    WindowPercentiles,
    WindowPercentiles,
]


def _histogram_windows(
    intervals: IntervalCounts, start: int, end: int, notes: list[str]
) -> _LatencyGrid:
    """The load test's windows: 1 s (or wider when thin) percentiles from the HDR histograms."""
    grid1 = make_grid(start, end, 1.0)
    counts_1s = [
        0 if h is None else h.total for h in histograms_by_window(intervals, grid1, "corrected")
    ]
    window_s = choose_window_s(counts_1s)
    grid = grid1 if window_s == 1.0 else make_grid(start, end, window_s)
    if window_s != 1.0:
        busy = [c for c in counts_1s if c]
        notes.append(
            f"windows widened to {window_s:.0f} s: a typical 1 s window held "
            f"{int(np.median(busy)) if busy else 0} requests, too few for a P99 "
            f"(need {MIN_REQUESTS_FOR_P99})"
        )
    corrected_h = histograms_by_window(intervals, grid, "corrected")
    service_h = histograms_by_window(intervals, grid, "service")
    corrected = window_percentiles(corrected_h, grid, "corrected")
    service = window_percentiles(service_h, grid, "service")
    thin = sum(1 for b in corrected.basis_s if b > window_s)
    if thin:
        notes.append(
            f"{thin} window(s) had fewer than {MIN_REQUESTS_FOR_P99} requests; their percentiles "
            f"come from the surrounding {max(corrected.basis_s):.0f} s (basis_s)"
        )
    if not intervals.intervals:
        notes.append("no latency histograms: percentiles and episodes are empty")

    return grid, window_s, corrected_h, service_h, corrected, service


def _latency_windows(
    run: Run, intervals: IntervalCounts, start: int, end: int, notes: list[str]
) -> _LatencyGrid:
    """The grid and its percentiles: a production run's own latency series, else the histograms'."""
    if not intervals.intervals and production.is_production(run):
        prod = production.production_latency(run, start, end)
        grid, window_s = prod.grid, prod.grid.window_s
        corrected = service = WindowPercentiles(prod.latency, prod.basis_s)
        corrected_h: list[LatencyCounts | None] = [None] * grid.n
        service_h = corrected_h
        notes.extend(prod.notes)
        return grid, window_s, corrected_h, service_h, corrected, service
    return _histogram_windows(intervals, start, end, notes)


@dataclass(frozen=True)
class _LoadCounts:
    """Load counters per window, or their stand-ins without `load/`: NaN, or the histograms'."""

    load: LoadSeries | None
    ok: np.ndarray
    errors: np.ndarray
    offered: np.ndarray
    dropped: np.ndarray
    in_flight: np.ndarray
    completed: np.ndarray  # ok + errors (the histograms' counts without load counters)
    error_pct: np.ndarray


def _load_counts(
    run: Run, grid: WindowGrid, corrected: WindowPercentiles, notes: list[str]
) -> _LoadCounts:
    """The load counters on the grid; without them, throughput from the histograms' counts."""
    load = align_load(run.load_intervals, grid)
    nan = np.full(grid.n, np.nan)
    hist_counts = np.array(corrected.latency.count, dtype=float)
    if load is None and not production.is_production(run):
        notes.append(
            "no load counters (load/): throughput from histograms; offered, errors and dropped unknown"
        )
    ok = load.ok if load is not None else hist_counts
    errors = load.errors if load is not None else nan
    offered = load.offered if load is not None else nan
    dropped = load.dropped if load is not None else nan
    in_flight = load.in_flight if load is not None else nan
    completed = np.nan_to_num(ok) + np.nan_to_num(errors)
    with np.errstate(invalid="ignore", divide="ignore"):
        error_pct = np.where(completed > 0, 100.0 * np.nan_to_num(errors) / completed, np.nan)
        if load is None:
            error_pct = nan
    return _LoadCounts(
        load=load,
        ok=ok,
        errors=errors,
        offered=offered,
        dropped=dropped,
        in_flight=in_flight,
        completed=completed if load is not None else hist_counts,
        error_pct=error_pct,
    )


def _window_series(
    grid: WindowGrid,
    window_s: float,
    corrected: WindowPercentiles,
    service: WindowPercentiles,
    counts: _LoadCounts,
) -> WindowSeries:
    """The per-window series analysis.json and the report's timelines show, rates per second."""
    return WindowSeries(
        window_s=window_s,
        t_ns=tuple(int(t) for t in grid.starts_ns),
        t_s=tuple(float(t) for t in grid.starts_s),
        corrected=corrected.latency,
        service=service.latency,
        basis_s=corrected.basis_s,
        throughput_rps=_series(counts.ok / window_s) or (),
        offered_rps=_series(counts.offered / window_s) or (),
        errors_per_s=_series(counts.errors / window_s) or (),
        error_pct=_series(counts.error_pct) or (),
        dropped_per_s=_series(counts.dropped / window_s) or (),
        in_flight=_series(counts.in_flight) or (),
    )


def _aligned_sources(
    run: Run, grid: WindowGrid, context: telemetry_sources.AlignContext
) -> dict[str, Any]:
    """Every recorded telemetry series on the grid, by name; a source not recorded: None."""
    sources = {
        source.name: source.align(run.series(source.name), grid, context)
        if run.has_series(source.name)
        else None
        for source in telemetry_sources.REGISTRY
    }
    # This machine's copy beside the server's (`<name>-local`, docs/telemetry.md): the
    # load machine's own causes read it (`places.sources_at`).
    for source in telemetry_sources.REGISTRY:
        local = source.name + LOCAL_SUFFIX
        if run.has_series(local):
            sources[local] = source.align(run.series(local), grid, context)
    # Each worker machine's host series under --master (load/generator/machine.py): load
    # machines too, read by the load machine's cause beside this one's.
    host_source = telemetry_sources.BY_NAME["host"]
    for listed in run.info.sources:
        name = listed.name or ""
        if name.startswith(WORKER_SERIES_PREFIX) and run.has_series(name):
            sources[name] = host_source.align(run.series(name), grid, context)
    return sources


def _telemetry_notes(sources: Mapping[str, Any]) -> list[str]:
    """What the telemetry lacked or had to repair, for the notes a reader checks first."""
    notes = []
    for source in telemetry_sources.REGISTRY:
        if sources[source.name] is None and source.noted_when_missing:
            notes.append(f"no {source.name} telemetry: causes that need it are not assessable")
    resets = sum(
        source.counter_resets(sources[source.name])
        for source in telemetry_sources.REGISTRY
        if sources[source.name] is not None
    )
    if resets:
        notes.append(
            f"{resets} counter reset(s) seen in telemetry (handled: rates restart from the new value)"
        )
    return notes


def align(run: Run) -> Aligned:
    """Window the latency histograms, then put load counters and every telemetry series on the grid."""
    notes: list[str] = []
    # One pass over the interval logs, one decoded histogram at a time.
    intervals = collect_intervals(run.iter_latency_intervals(LatencyCounts.decode))
    bounds = _time_bounds(run, intervals)
    if bounds is None:
        raise RunFormatError(
            f"{run.path} has no latency histograms or load counters to analyze",
            hint="analysis needs a load run (latency/*.hlog); `loadkit watch` runs only have telemetry",
        )
    start, end = bounds
    grid, window_s, corrected_h, service_h, corrected, service = _latency_windows(
        run, intervals, start, end, notes
    )
    counts = _load_counts(run, grid, corrected, notes)
    windows = _window_series(grid, window_s, corrected, service, counts)

    config = model_config(run)
    for missing in run.info.environment.server.not_recorded:
        notes.append(f"not recorded from the server: {missing}")
    context = telemetry_sources.AlignContext(model=config.name)
    sources = _aligned_sources(run, grid, context)
    sample_frame = run.request_sample_columns(REQUEST_SAMPLE_COLUMNS)
    samples = align_request_samples(sample_frame, grid)
    gaps = completion_gaps(run.load_intervals, sample_frame)
    if gaps is None:
        notes.append(
            "no completion gaps (load counters without completion_gaps, and request samples "
            "that do not hold every request): stalls are judged on whole windows"
        )
    notes += _telemetry_notes(sources)
    return Aligned(
        run=run,
        start_ns=start,
        end_ns=end,
        grid=grid,
        intervals=intervals,
        corrected_h=corrected_h,
        service_h=service_h,
        windows=windows,
        load=counts.load,
        ok=counts.ok,
        errors=counts.errors,
        offered=counts.offered,
        in_flight=counts.in_flight,
        completed=counts.completed,
        sources=sources,
        samples=samples,
        gaps=gaps,
        max_batch_size=config.max_batch_size,
        max_queue_delay_ms=config.max_queue_delay_ms,
        max_queue_size=config.max_queue_size,
        telemetry=_telemetry_windows(sources, samples, counts.ok / window_s),
        notes=tuple(notes),
    )


def detect(aligned: Aligned) -> Detected:
    """Spike episodes of each percentile after the warm-up, their period, and the phase events."""
    notes: list[str] = []
    grid, window_s, start = aligned.grid, aligned.window_s, aligned.start_ns
    latency = aligned.windows.corrected
    episodes: list[SpikeEpisode] = []
    periodicity: list[Periodicity] = []
    bw = baseline_windows_for(window_s)
    warmup_s = _warmup_s(aligned.run)
    warming_up = grid.starts_ns < start + int(warmup_s * 1e9)
    if warmup_s > 0:
        notes.append(
            f"the first {warmup_s:g} s (warm-up: connections opening, model warming) are "
            "left out of spike detection; they count in the overall numbers"
        )
    typical = float(np.median([c for c in latency.basis_count if c] or [0]))
    for pct, q in WINDOW_PERCENTILES.items():
        values = latency.percentile(pct)
        needed = int(round(1.0 / (1.0 - q / 100.0)))  # 100 for P99, 1000 for P99.9
        if needed > 2 and typical < needed:
            why = (
                f"not assessed: windows hold about {typical:.0f} requests, too few for a "
                f"{pct.upper()} (need {needed})"
            )
            periodicity.append(Periodicity(percentile=pct, periodic=False, reason=why))
            notes.append(f"{pct} spike episodes {why}")
            continue
        settled = [None if warm else v for v, warm in zip(values, warming_up, strict=True)]
        found, _ = find_episodes(settled, grid.starts_ns, window_s, start, pct, baseline_windows=bw)
        episodes.extend(found)
        periodicity.append(detect_periodicity(settled, window_s, found, pct))
    primary = primary_percentile(episodes, periodicity)
    if latency.mean_ms:  # a production window: the mean per step, labelled as a mean
        primary = _with_mean(latency.mean_ms, warming_up, aligned, episodes, periodicity, primary)
    marks, bursts, steps = _phases(aligned.run, start)
    return Detected(
        episodes=tuple(episodes),
        periodicity=tuple(periodicity),
        primary=primary,
        phases=tuple(marks),
        bursts=tuple(bursts),
        steps=tuple(steps),
        warmup_end_ns=start + int(warmup_s * NS),
        notes=tuple(notes),
    )


def _with_mean(
    mean_ms: Series,
    warming_up: np.ndarray,
    aligned: Aligned,
    episodes: list[SpikeEpisode],
    periodicity: list[Periodicity],
    primary: str,
) -> str:
    """Episodes and period of the mean per step (production windows); the primary becomes
    "mean" only when no percentile is known or none repeats and the mean does."""
    grid, window_s = aligned.grid, aligned.window_s
    settled = [None if warm else v for v, warm in zip(mean_ms, warming_up, strict=True)]
    bw = baseline_windows_for(window_s)
    found, _ = find_episodes(
        settled, grid.starts_ns, window_s, aligned.start_ns, "mean", baseline_windows=bw
    )
    episodes.extend(found)
    mean_period = detect_periodicity(settled, window_s, found, "mean")
    periodicity.append(mean_period)
    has_percentiles = any(v is not None for v in aligned.windows.corrected.p99_ms)
    primary_found = any(e.percentile == primary for e in episodes)
    primary_periodic = any(p.percentile == primary and p.periodic for p in periodicity)
    if found and (
        not has_percentiles or not primary_found or (mean_period.periodic and not primary_periodic)
    ):
        return "mean"
    return primary


def _primary_series(latency: LatencyWindows, primary: str, n: int) -> np.ndarray | None:
    """The attributed percentile's latency per window (a production window's mean), or None."""
    values = latency.mean_ms if primary == "mean" else latency.percentile(primary)
    return _array(values) if values and len(values) == n else None


def attribute(aligned: Aligned, detected: Detected) -> Attributed:
    """Test every cause against the primary percentile's episodes; break latency into parts."""
    grid, window_s = aligned.grid, aligned.window_s
    latency, service = aligned.windows.corrected, aligned.windows.service
    burst_mask = np.zeros(grid.n, dtype=bool)
    for b in detected.bursts:
        burst_mask |= (grid.starts_ns >= b.start_ns) & (grid.starts_ns < (b.end_ns or grid.end_ns))
    load = aligned.load
    signals = attr.Signals(
        window_s=window_s,
        starts_ns=grid.starts_ns,
        p99_ms=_array(latency.p99_ms),
        service_p50_ms=_array(service.p50_ms),
        completed=aligned.completed,
        offered_rps=aligned.offered / window_s,
        throughput_rps=aligned.ok / window_s,
        in_flight=aligned.in_flight,
        sources=dict(aligned.sources),
        samples=aligned.samples,
        max_batch_size=aligned.max_batch_size,
        max_queue_delay_ms=aligned.max_queue_delay_ms,
        burst_mask=burst_mask,
        corrected_p50_ms=_array(latency.p50_ms),
        primary_ms=_primary_series(latency, detected.primary, grid.n),
        dispatch_lag_ms=load.dispatch_lag_max_ms if load is not None else None,
        generator_cpu_cores=load.generator_cpu_cores if load is not None else None,
        gaps=aligned.gaps,
        error_counts=causes.error_counts(
            aligned.run.load_intervals, aligned.start_ns, aligned.end_ns
        ),
        max_queue_size=aligned.max_queue_size,
        timeout_s=scenario_timeout_s(aligned.run),
        places=series_places(aligned.run.info),
    )
    episodes = detected.episodes
    tested, untestable = (
        production.metrics_only(causes.REGISTRY)
        if production.is_production(aligned.run)
        else (list(causes.REGISTRY), [])
    )
    attribution = attr.attribute(signals, detected.episodes_for_primary, episodes, tested)
    if untestable:  # in the registry's order, as every run lists its checks
        order = {cause_id: i for i, cause_id in enumerate(causes.CAUSE_IDS)}
        attribution.checks = sorted(
            [*attribution.checks, *untestable], key=lambda c: order.get(c.cause, len(order))
        )
    # Where the time goes, per window, and which part grew in each episode.
    base = attr.baseline_for(
        grid.n,
        detected.episodes_for_primary,
        episodes,
        grid.starts_ns,
        attr.loaded_windows(signals),
        attr.quiet_by(signals),
    )
    latency_breakdown, parts = breakdown(signals, base)
    grew = label_episodes(episodes, parts, grid.starts_ns, base)
    return Attributed(
        signals=signals,
        attribution=attribution,
        episodes=tuple(
            replace(
                e,
                causes=tuple(attribution.causes_by_episode.get(e.episode_id, ())),
                grew=grew[e.episode_id][0],
                grew_ms=grew[e.episode_id][1],
            )
            for e in episodes
        ),
        breakdown=latency_breakdown,
    )


def judge(
    aligned: Aligned,
    detected: Detected,
    attributed: Attributed,
    slo: Mapping[str, float] | None = None,
) -> Analysis:
    """The verdicts (SLO, alerts, burst recovery, knee, soak drift), headline and the Analysis."""
    run, start, end = aligned.run, aligned.start_ns, aligned.end_ns
    overall = _overall(run, aligned.load, aligned.corrected_h, aligned.service_h, start, end)
    thresholds, source = resolve_slo(slo, run.info.slo)
    if production.is_production(run):  # per-step quantiles: judged step by step
        lat = aligned.windows.corrected
        overall = replace(
            production.with_server_totals(overall, run, aligned.grid),
            step_latency=production.step_latency(run, lat, aligned.window_s),
        )
        steps = {"p50": lat.p50_ms, "p95": lat.p95_ms, "p99": lat.p99_ms, "p999": lat.p999_ms}
        verdict = step_verdict(thresholds, source, overall, steps, aligned.window_s)
    else:
        verdict = slo_verdict(thresholds, source, overall)
    findings = attributed.attribution.findings
    periodic = run_period(list(detected.periodicity), detected.primary)
    # a damaged or incomplete run's warnings first: the summary shows the first notes
    notes = [*run.warnings, *aligned.notes, *detected.notes]
    run_info = _run_info(run, start, end)
    stopped = _stopped_sentence(run_info.abort)
    if stopped:
        notes.append(stopped)
    capacity = _capacity(aligned) if run.info.kind == "capacity" else None
    return Analysis(
        schema_version=SCHEMA_VERSION,
        run=run_info,
        window_s=aligned.window_s,
        windows=aligned.windows,
        telemetry=aligned.telemetry,
        phases=detected.phases,
        overall=overall,
        nines=nines(merge(aligned.corrected_h), merge(aligned.service_h)),
        episodes=attributed.episodes,
        periodicity=detected.periodicity,
        primary=detected.primary,
        findings=tuple(findings),
        causes_checked=tuple(attributed.attribution.checks),
        verdict=verdict,
        alerts=tuple(_alerts(aligned, attributed)),
        recoveries=tuple(_recoveries(aligned, detected, attributed)),
        knee=_knee(aligned, detected, thresholds),
        soak=_soak(aligned),
        headline=capacity.answer
        if capacity is not None
        else headline(
            verdict,
            findings,
            periodic.period_s if periodic else None,
            detected.primary,
            periodic.percentile if periodic else None,
        )
        + (f" {stopped}" if stopped else ""),
        notes=tuple(notes),
        overview=build_overview(aligned.intervals, start, end, aligned.windows, aligned.telemetry),
        breakdown=attributed.breakdown,
        capacity=capacity,
    )


def _server_side(aligned: Aligned) -> dict[str, Any]:
    """The run's aligned series as the server's machine saw them (`places.sources_at`): the
    verdicts about the server (GPU alerts, capacity's limit, memory drift, timeline spans)
    never read a load machine's GPU or cgroup (series of unknown place read as before)."""
    return sources_at(aligned.sources, series_places(aligned.run.info), SERVER_SIDE)


def _alerts(aligned: Aligned, attributed: Attributed) -> list[Alert]:
    """Threshold alerts on the windows, and the generator falling behind its schedule."""
    gpu, grid = _server_side(aligned).get("gpu"), aligned.grid
    found = alerts(
        grid.starts_ns,
        aligned.window_s,
        attributed.signals.p99_ms,
        gpu.util_pct if gpu else None,
        gpu.temp_c if gpu else None,
        np.nan_to_num(aligned.offered),
        gpu.temp_slowdown_c if gpu else None,
    )
    shortfall = schedule_shortfall(aligned.run.load_intervals)
    if shortfall is not None:  # the same line as `loadkit run`'s summary
        found.append(
            Alert("generator_behind", "warn", shortfall.line(), aligned.start_ns, aligned.end_ns)
        )
    return found


def _recoveries(
    aligned: Aligned, detected: Detected, attributed: Attributed
) -> list[BurstRecovery]:
    """How long latency took to recover after each burst."""
    triton, window_s = aligned.triton, aligned.window_s
    p99_5s = rolling_p99(aligned.corrected_h, window_s)
    return [
        burst_recovery(
            b,
            aligned.grid.starts_ns,
            window_s,
            attributed.signals.p99_ms,
            p99_5s,
            triton.batch_size_mean if triton else None,
            triton.queue_ms_per_request if triton else None,
        )
        for b in detected.bursts
    ]


def _knee(
    aligned: Aligned, detected: Detected, thresholds: Mapping[str, float]
) -> SaturationKnee | None:
    """The saturation knee of a run in steps of load (None without steps)."""
    if not detected.steps:
        return None
    window_s = aligned.window_s
    return saturation_knee(
        detected.steps,
        aligned.end_ns,
        aligned.grid.starts_ns,
        window_s,
        aligned.corrected_h,
        aligned.offered / window_s,
        aligned.ok / window_s,
        aligned.errors / window_s,
        aligned.in_flight,
        thresholds.get("p99_ms", DEFAULT_SLO["p99_ms"]),
        thresholds.get("errors_pct", DEFAULT_SLO["errors_pct"]),
    )


def _soak(aligned: Aligned) -> SoakDrift | None:
    """Drift over a long run: latency floor, throughput, memory."""
    server = _server_side(aligned)
    gpu, host, triton = server.get("gpu"), server.get("host"), aligned.triton
    window_s, info = aligned.window_s, aligned.run.info
    # Hours to fill the host's memory: loadkit's machine's, so only when the server runs here
    # (or nobody knows: as before places were).
    local = info.environment.target_location.local
    return soak_drift(
        SoakSignals(
            t_s=aligned.grid.starts_s,
            window_s=window_s,
            p50_ms=_array(aligned.windows.corrected.p50_ms),
            throughput_rps=aligned.ok / window_s,
            offered_rps=aligned.offered / window_s,
            errors=aligned.errors,
            completed=aligned.completed,
            gpu_mem_used_bytes=gpu.mem_used_bytes if gpu else None,
            gpu_mem_total_bytes=gpu.mem_total_bytes if gpu else None,
            server_rss_bytes=host.server_rss_bytes if host else None,
            host_memory_bytes=info.environment.host.memory_bytes if local is not False else None,
            compute_ms_per_request=triton.compute_ms_per_request if triton else None,
        )
    )


def _capacity(aligned: Aligned) -> CapacityResult:
    """A capacity run's answer from its recorded probes and the telemetry of the failing one."""
    run = aligned.run
    settings = dict(run.info.capacity or {})
    model = model_config(run).name
    server = _server_side(aligned)  # "limited by" the server's GPU, quota or CPU only
    return capacity_result(
        settings,
        probes_from_events(run.events, aligned.start_ns),
        window_starts_s=np.asarray(aligned.grid.starts_s, dtype=float),
        window_s=aligned.window_s,
        triton_rows=run.series("triton_stats") if run.has_series("triton_stats") else None,
        triton=aligned.triton,
        host=server.get("host"),
        gpu=server.get("gpu"),
        model=model,
        instances=instance_count(run, model),
        max_batch_size=aligned.max_batch_size,
        start_ns=aligned.start_ns,
    )


def instance_count(run: Run, model: str | None) -> int | None:
    """The model's instances (instance_group counts summed) from the manifest's config."""
    config = run.info.environment.server.models.get(model) if model else None
    groups = config.get("instance_group") if isinstance(config, dict) else None
    if not isinstance(groups, list):
        return None
    counts = [g.get("count", 1) for g in groups if isinstance(g, dict)]
    try:
        return sum(int(c) for c in counts) or None
    except (TypeError, ValueError):
        return None


def analyze_run(run: Run, slo: Mapping[str, float] | None = None) -> Analysis:
    """Analyze a loaded run: align -> detect -> attribute -> judge, then the figures' values.

    `slo`: thresholds from the command line (p99_ms, errors_pct, ...).
    """
    aligned = align(run)
    detected = detect(aligned)
    attributed = attribute(aligned, detected)
    analysis = judge(aligned, detected, attributed, slo)
    # Figure values (aligned signals, batch sizes per phase, shaded intervals, CPU per core).
    server = _server_side(aligned)  # the spans a timeline shades: the server causes' own
    return with_figure_values(
        analysis, aligned.grid, run, server.get("gpu"), server.get("host"), detected.warmup_end_ns
    )


def headline(
    verdict: Verdict,
    findings: list[Finding],
    period_s: float | None,
    percentile: str,
    period_percentile: str | None = None,
) -> str:
    """One sentence: verdict and the top finding, or the spike episodes that no finding explains
    above weak, before a standing condition (`attribution.spikes_lead`)."""
    state = "PASS" if verdict.passed else "FAIL"
    if not findings:
        return f"{state}. No cause found for latency spikes." if not verdict.passed else f"{state}."
    top = findings[0]
    if causes.is_error(top.cause):  # failed requests: what happened, first
        return f"{state}. {top.summary}"
    periodic = f" every {period_s:.0f} s" if period_s else ""
    if period_s and period_percentile and period_percentile != percentile:
        periodic += f" (period seen in {period_percentile.upper()})"
    if attr.spikes_lead(findings):
        return f"{state}. {_open_spikes(findings, percentile, periodic)}."
    n = len(top.episodes)
    scope = (
        f"{n} {percentile.upper()} spike episode{'s' if n != 1 else ''}{periodic}"
        if n
        else "a standing condition"
    )
    made = [f for f in findings if f.consequence_of == top.cause and causes.is_error(f.cause)]
    consequence = "".join(f"; {_failures(f)} as its consequence" for f in made)
    return f"{state}. {top.title} ({top.confidence}) explains {scope}{consequence}."


def _open_spikes(findings: list[Finding], percentile: str, periodic: str) -> str:
    """ "5 P99 spike episodes, no cause above weak; ...; standing condition: ...": the
    spikes no finding explains, their likeliest lead, then the standing conditions."""
    n = findings[0].episodes_total
    text = f"{n} {percentile.upper()} spike episode{'s' if n != 1 else ''}{periodic}"
    lead = next((f for f in findings if f.episodes), None)
    if lead is None:
        text += ", no cause found"
    else:
        where = f"in {len(lead.episodes)} of them" if n != 1 else "in it"
        text += f", no cause above weak; the likeliest: {lead.title} ({lead.confidence}) {where}"
    standing = [f for f in findings if not f.episodes and not causes.is_error(f.cause)]
    listed = ", ".join(f"{f.title} ({f.confidence})" for f in standing)
    return text + f"; standing condition{'s' if len(standing) != 1 else ''}: {listed}"


def _failures(finding: Finding) -> str:
    """ "37 requests failed (Requests timed out)": an error finding in a few words."""
    errors = next((e.value for e in finding.evidence if e.name == "errors"), None)
    count = f"{errors:.0f} requests" if errors is not None else "requests"
    return f"{count} failed ({finding.title.lower()})"


def _overall(
    run: Run,
    load: LoadSeries | None,
    corrected_h: Sequence[LatencyCounts | None],
    service_h: Sequence[LatencyCounts | None],
    start: int,
    end: int,
) -> OverallStats:
    corrected = summarize(merge(corrected_h), "corrected")
    service = summarize(merge(service_h), "service")
    duration = (end - start) / NS
    if load is not None:
        offered = int(np.nansum(load.offered))
        ok = int(np.nansum(load.ok))
        errors = int(np.nansum(load.errors))
        dropped = int(np.nansum(load.dropped))
        out_of_range = int(np.nansum(load.out_of_range))
        kinds = load.error_kinds
    else:
        offered = dropped = errors = out_of_range = 0
        ok = corrected.count
        kinds = {}
    completed = ok + errors
    return OverallStats(
        duration_s=duration,
        offered=offered,
        completed=completed,
        ok=ok,
        errors=errors,
        dropped=dropped,
        out_of_range=out_of_range,
        error_pct=100.0 * errors / completed if completed else None,
        dropped_pct=100.0 * dropped / offered if offered else None,
        throughput_rps=ok / duration if duration > 0 else None,
        offered_rps=offered / duration if duration > 0 and load is not None else None,
        corrected=corrected,
        service=service,
        error_kinds=kinds,
        error_messages=run.error_messages(),
    )


def _telemetry_windows(
    sources: Mapping[str, Any],
    samples: RequestSampleSeries | None,
    throughput: np.ndarray,
) -> TelemetryWindows:
    """Every aligned source's own fields, and new connections (host or request samples)."""
    fields: dict[str, Any] = {}
    for source in telemetry_sources.REGISTRY:
        if sources.get(source.name) is not None:
            fields.update(source.windows(sources[source.name]))
    new_conn, _ = new_connections_per_s(sources.get("host"), samples, throughput)
    fields["new_connections_per_s"] = to_series(new_conn)
    return TelemetryWindows(**fields)
