"""`loadkit capacity`'s search: the highest arrival rate that meets an SLO, in one run.

One Locust run of the built-in `_steered` scenario carries every probe: the
search appends the next rate to the run's `capacity/schedule.jsonl`
(`shapes.Steered` reads it), waits for the probe's 1 s intervals to be
complete (`live.LiveRunReader`, as the run guard does), judges them, and
writes the probe as phase events (`probe`, `probe-measure`, `probe-end` with
its numbers), so the analysis and the report read the probes from the run
directory like any phase.

The order of probes: a geometric ramp from `start_rps` (x2) until a probe
fails, then bisection between the highest pass and the lowest failure until
the bracket is narrower than `resolution`; `trials` > 1 probes both ends of
the bracket again (a rate passes only if it passed every time). A probe
whose windows disagree (perf_analyzer's rule: the last 3 windows within
10 %) is lengthened, up to `max_windows`, before it is judged.

A probe that fails because loadkit could not send the rate (its Locust
process saturated, or arrivals late or dropped while the server's own
service time stayed at its low-load value) ends the search: that rate is
the generator's limit, never the server's capacity.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

from loadkit import percentile_names
from loadkit.load.live import SECOND_NS, IntervalView, LiveRunReader, merge
from loadkit.load.shapes import RateSchedule
from loadkit.rundir import generator_check
from loadkit.rundir.layout import EVENTS_FILE

SCHEDULE_FILE = "capacity/schedule.jsonl"  # the `_steered` scenario reads it
ACHIEVED_SHARE = 0.97  # achieved >= 97 % of offered
STABLE_TOLERANCE = 0.10  # the last 3 windows within 10 % of their mean
STABLE_WINDOWS = 3
GENERATOR_CPU_PCT = generator_check.CPU_PCT  # a Locust process this busy is the limit itself
GENERATOR_LAG_MS = 100.0  # scheduler lateness that means the generator fell behind
SERVICE_GROWTH = 1.5  # service time within 1.5 x (+2 ms) its low-load value: the server kept up
IDLE_RPS = 1.0  # between probes (the `_steered` scenario's idle_rate): never 0, see Steered
LEAD_S = 1.5  # a rate change is written this long before it takes effect (> 1 / idle rate)
DRAIN_S = 15.0  # after a failed probe, wait at most this long for the backlog to drain
BACKLOG_MIN = 3.0  # in-flight growth over a probe below this is noise
BACKLOG_SHARE = 0.015  # ... and below 1.5 % of the offered rate per second


@dataclass(frozen=True)
class SearchSettings:
    """What `loadkit capacity` was asked for (recorded as `manifest.capacity`)."""

    slo_percentile: str  # "p99"
    slo_ms: float
    errors_pct: float
    start_rps: float
    max_rps: float
    max_duration_s: float
    resolution: float = 0.05
    trials: int = 1
    settle_s: int = 2
    window_s: int = 5
    windows: int = STABLE_WINDOWS
    max_windows: int = 6
    ramp_factor: float = 2.0
    peak_rps: float | None = None
    headroom: float | None = None

    def to_manifest(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Probe:
    """One probe's measurement and verdict (the `probe-end` event's attributes)."""

    index: int
    rate_rps: float
    trial: int
    start_ns: int
    measure_start_ns: int
    end_ns: int = 0
    windows: int = 0
    offered_rps: float = 0.0
    achieved_rps: float = 0.0
    goodput_rps: float = 0.0  # completions within the SLO's latency, per second
    corrected_ms: float | None = None  # the SLO's percentile, coordinated-omission corrected
    p50_ms: float | None = None
    service_ms: float | None = None  # the SLO's percentile from the actual send
    service_p50_ms: float | None = None
    errors_pct: float = 0.0
    dropped: int = 0
    lag_max_ms: float = 0.0
    in_flight_start: int = 0
    in_flight_end: int = 0
    in_flight_growing: bool = False
    generator_cpu_pct: float | None = None
    stable: bool = True
    passed: bool = False
    generator_limited: bool = False
    reasons: list[str] = field(default_factory=list)

    def to_event(self) -> dict[str, Any]:
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, float):
                out[key] = round(value, 4) if math.isfinite(value) else None
        return out


# --------------------------------------------------------------------- judging
def _pct(hist: HdrHistogram | None, q: float) -> float | None:
    if hist is None or hist.get_total_count() == 0:
        return None
    return float(hist.get_value_at_percentile(q)) / 1000.0  # us -> ms


def windows_of(views: Sequence[IntervalView], window_s: int) -> list[list[IntervalView]]:
    """The measure intervals in whole windows of `window_s` seconds (a partial tail is left out)."""
    n = len(views) // window_s
    return [list(views[i * window_s : (i + 1) * window_s]) for i in range(n)]


def stable(values: Sequence[float | None], *, slo: float | None = None) -> bool:
    """The last 3 values within 10 % of their mean, or (with `slo`) all on one side of it."""
    last = [v for v in values[-STABLE_WINDOWS:] if v is not None]
    if len(last) < STABLE_WINDOWS:
        return len(values) >= STABLE_WINDOWS  # too little data to say: judge what there is
    mean = sum(last) / len(last)
    if mean <= 0 or all(abs(v - mean) <= STABLE_TOLERANCE * mean for v in last):
        return True
    return slo is not None and (all(v <= slo for v in last) or all(v > slo for v in last))


def judge(
    probe: Probe,
    views: Sequence[IntervalView],
    settings: SearchSettings,
    *,
    baseline_service_p50_ms: float | None,
) -> Probe:
    """Fill `probe` from its measure intervals: numbers, stability and verdict."""
    q = percentile_names.percentile(settings.slo_percentile)
    seconds = sum(v.length_ns or SECOND_NS for v in views) / SECOND_NS
    corrected = merge([v.hists["corrected"] for v in views if "corrected" in v.hists])
    service = merge([v.hists["service"] for v in views if "service" in v.hists])
    offered = sum(v.offered for v in views)
    completed = sum(v.completed for v in views)
    errors = sum(v.errors for v in views)
    probe.windows = len(views) // settings.window_s
    probe.offered_rps = offered / seconds if seconds else 0.0
    probe.achieved_rps = completed / seconds if seconds else 0.0
    probe.corrected_ms = _pct(corrected, q)
    probe.p50_ms = _pct(corrected, 50.0)
    probe.service_ms = _pct(service, q)
    probe.service_p50_ms = _pct(service, 50.0)
    probe.errors_pct = 100.0 * errors / completed if completed else 0.0
    probe.dropped = sum(v.dropped for v in views)
    probe.lag_max_ms = max((v.dispatch_lag_max_ms for v in views), default=0.0)
    within = _count_at_or_below(corrected, settings.slo_ms * 1000.0) if corrected else 0
    probe.goodput_rps = within / seconds if seconds else 0.0
    flights = [v.in_flight for v in views]
    probe.in_flight_start, probe.in_flight_end = (flights[0], flights[-1]) if flights else (0, 0)
    probe.in_flight_growing = backlog_growing(flights, probe.offered_rps)
    per_window = windows_of(views, settings.window_s)
    throughputs = [sum(v.completed for v in w) / settings.window_s for w in per_window]
    latencies = [
        _pct(merge([v.hists["corrected"] for v in w if "corrected" in v.hists]), q)
        for w in per_window
    ]
    probe.stable = stable(throughputs) and stable(latencies, slo=settings.slo_ms)

    reasons: list[str] = []
    if probe.offered_rps and probe.achieved_rps < ACHIEVED_SHARE * probe.offered_rps:
        reasons.append(
            f"achieved {probe.achieved_rps:.1f} < 97% of offered {probe.offered_rps:.1f} req/s"
        )
    if probe.dropped:
        reasons.append(f"{probe.dropped} arrival(s) dropped (no free user within the bound)")
    if probe.corrected_ms is None:
        reasons.append("no latency data")
    elif probe.corrected_ms > settings.slo_ms:
        reasons.append(
            f"corrected {settings.slo_percentile} {probe.corrected_ms:.1f} ms > {settings.slo_ms:g} ms"
        )
    if probe.errors_pct > settings.errors_pct:
        reasons.append(f"errors {probe.errors_pct:.2f}% > {settings.errors_pct:g}%")
    if probe.in_flight_growing:
        reasons.append(f"in flight growing ({probe.in_flight_start} -> {probe.in_flight_end})")
    probe.passed = not reasons
    probe.reasons = reasons
    probe.generator_limited = not probe.passed and generator_limited(
        probe, settings, baseline_service_p50_ms
    )
    if probe.generator_limited:
        probe.reasons.append("the generator could not send this rate (see generator_reason)")
    return probe


def backlog_growing(in_flight: Sequence[int], offered_rps: float) -> bool:
    """The requests in flight grew over the measurement: the Theil-Sen slope (per 1 s
    interval) times its length passes 3 requests and 1.5 % of the offered rate's seconds.

    Served at 97-99 % of an offered rate, the backlog grows too slowly for the achieved
    rate to show it in a short probe; 1.5 % of the rate per second catches it.
    """
    n = len(in_flight)
    if n < 3:
        return False
    slopes = sorted(
        (in_flight[j] - in_flight[i]) / (j - i) for i in range(n) for j in range(i + 1, n)
    )
    growth = slopes[len(slopes) // 2] * n
    return growth > max(BACKLOG_MIN, BACKLOG_SHARE * offered_rps * n)


def _count_at_or_below(hist: HdrHistogram, value_us: float) -> int:
    """Requests recorded at or below `value_us` (goodput's numerator)."""
    total = 0
    for item in hist.get_recorded_iterator():
        if item.value_iterated_to <= value_us:
            total += item.count_at_value_iterated_to
    return total


def generator_limited(
    probe: Probe, settings: SearchSettings, baseline_service_p50_ms: float | None
) -> bool:
    """The failure is loadkit's own: a saturated Locust, or late/dropped arrivals while the
    server's service time stayed at its low-load value."""
    if probe.generator_cpu_pct is not None and probe.generator_cpu_pct >= GENERATOR_CPU_PCT:
        return True
    # Sent late: dropped arrivals, a late scheduler, or requests that waited for a free
    # user (corrected minus service P50: with one user busy for 20 ms, arrivals queue in
    # the generator and nothing drops or reaches the scheduler's lag).
    waited = (
        probe.p50_ms is not None
        and probe.service_p50_ms is not None
        and probe.p50_ms - probe.service_p50_ms >= GENERATOR_LAG_MS
    )
    sending = probe.dropped > 0 or probe.lag_max_ms >= GENERATOR_LAG_MS or waited
    if not sending or baseline_service_p50_ms is None or probe.service_p50_ms is None:
        return False
    kept_up = probe.service_p50_ms <= SERVICE_GROWTH * baseline_service_p50_ms + 2.0
    within = probe.service_ms is not None and probe.service_ms <= settings.slo_ms
    return kept_up and within


# --------------------------------------------------------------------- the order of probes
@dataclass
class Bracket:
    """Where the capacity is: passes at `low`, fails at `high` (None: not found yet)."""

    settings: SearchSettings
    results: dict[float, list[bool]] = field(default_factory=dict)
    generator_rate: float | None = None

    def record(self, rate: float, passed: bool) -> None:
        self.results.setdefault(round(rate, 6), []).append(passed)

    @property
    def low(self) -> float | None:
        ok = [r for r, v in self.results.items() if all(v) and r < (self.high or math.inf)]
        return max(ok) if ok else None

    @property
    def high(self) -> float | None:
        bad = [r for r, v in self.results.items() if not all(v)]
        return min(bad) if bad else None

    def narrow(self) -> bool:
        low, high = self.low, self.high
        return low is not None and high is not None and high - low <= self.settings.resolution * low

    def next_rate(self) -> tuple[float, int] | None:
        """(rate, trial) of the next probe, or None when the search is over."""
        s = self.settings
        if self.generator_rate is not None:
            return None
        low, high = self.low, self.high
        if high is None:  # ramp up
            if low is None:
                return (s.start_rps, 1) if not self.results else None
            if low >= s.max_rps:
                return None  # capacity at least max_rps
            return min(low * s.ramp_factor, s.max_rps), 1
        if low is None:  # even the lowest probe failed: ramp down
            rate = high / s.ramp_factor
            return (rate, 1) if rate >= max(0.5, s.start_rps / 64) else None
        if not self.narrow():
            return (low + high) / 2.0, 1
        for rate in (low, high):  # repeat both ends of the bracket
            tries = self.results.get(round(rate, 6), [])
            if len(tries) < s.trials and (rate == low or all(not t for t in tries)):
                return rate, len(tries) + 1
        return None


# --------------------------------------------------------------------- driving the run
class GeneratorCpu:
    """CPU of the Locust processes over a probe, in percent of one core (the busiest)."""

    def __init__(self, pids: Sequence[int]):
        import psutil

        self._procs = []
        for pid in pids:
            try:
                self._procs.append(psutil.Process(pid))
            except psutil.Error:
                continue
        self._start: dict[int, tuple[float, float]] = {}

    def begin(self) -> None:
        self._start = {p.pid: (time.monotonic(), self._cpu(p)) for p in self._procs}

    @staticmethod
    def _cpu(proc: Any) -> float:
        try:
            t = proc.cpu_times()
            return float(t.user + t.system)
        except Exception:  # noqa: BLE001 - a process gone is no CPU
            return math.nan

    def busiest_pct(self) -> float | None:
        out = []
        for p in self._procs:
            if p.pid not in self._start:
                continue
            t0, c0 = self._start[p.pid]
            c1, dt = self._cpu(p), time.monotonic() - t0
            if dt > 0 and math.isfinite(c0) and math.isfinite(c1):
                out.append(100.0 * (c1 - c0) / dt)
        return max(out) if out else None


class SearchStopped(Exception):
    """The run ended under the search (Locust exited, or --max-duration)."""


@dataclass
class CapacitySearch:
    """Drive the probes of one running `LoadRun` (see the module docstring)."""

    run_dir: Path
    settings: SearchSettings
    alive: Callable[[], bool]
    generator_pids: Sequence[int] = ()
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr)
    probes: list[Probe] = field(default_factory=list)
    stopped_by: str | None = None

    def __post_init__(self) -> None:
        self.schedule = self.run_dir / SCHEDULE_FILE
        self.schedule.parent.mkdir(parents=True, exist_ok=True)
        self.reader = LiveRunReader(self.run_dir, keep_s=600)
        self.bracket = Bracket(self.settings)
        self.started = time.monotonic()
        self.cpu = GeneratorCpu(self.generator_pids)
        self.t0_ns: int | None = None

    # --- time -----------------------------------------------------------
    def _load_start_ns(self, timeout_s: float = 60.0) -> int:
        """Wall time of the shape's t = 0 (the `load-start` phase the dispatcher writes)."""
        deadline = time.monotonic() + timeout_s
        path = self.run_dir / EVENTS_FILE
        while time.monotonic() < deadline:
            try:
                for line in path.read_text(encoding="utf-8").splitlines():
                    row = json.loads(line)
                    if row.get("kind") == "phase" and row.get("name") == "load-start":
                        return int(row["t_ns"])
            except (OSError, ValueError):
                pass
            self._check_alive()
            time.sleep(0.1)
        raise SearchStopped("the load did not start within 60 s")

    def _shape_now_s(self) -> float:
        assert self.t0_ns is not None
        return (time.time_ns() - self.t0_ns) / 1e9

    def _wall_ns(self, shape_s: float) -> int:
        assert self.t0_ns is not None
        return self.t0_ns + round(shape_s * 1e9)

    def _check_alive(self) -> None:
        if not self.alive():
            raise SearchStopped("the load generator exited")

    def _remaining_s(self) -> float:
        return self.settings.max_duration_s - (time.monotonic() - self.started)

    # --- probes ---------------------------------------------------------
    def _event(self, name: str, t_ns: int, **attrs: Any) -> None:
        from loadkit.rundir.writer import append_event

        append_event(self.run_dir, "phase", name, t_ns=t_ns, **attrs)

    def _intervals(self, start_ns: int, end_ns: int) -> list[IntervalView] | None:
        """The complete 1 s intervals starting in [start_ns, end_ns), or None if not there yet."""
        self.reader.poll()
        last = self.reader.last_complete_interval()
        if last is None or last + SECOND_NS < end_ns:
            return None
        return [v for t, v in sorted(self.reader.intervals.items()) if start_ns <= t < end_ns]

    def _wait_intervals(self, start_ns: int, end_ns: int) -> list[IntervalView]:
        limit = time.monotonic() + (end_ns - time.time_ns()) / 1e9 + 30.0
        while True:
            views = self._intervals(start_ns, end_ns)
            if views is not None:
                return views
            self._check_alive()
            if time.monotonic() > limit:
                raise SearchStopped("the generator stopped writing intervals")
            time.sleep(0.2)

    def _probe_length_s(self) -> float:
        s = self.settings
        return LEAD_S + s.settle_s + s.windows * s.window_s + 2.0

    def _baseline_service(self) -> float | None:
        passed = [p.service_p50_ms for p in self.probes if p.passed and p.service_p50_ms]
        return min(passed) if passed else None

    def probe(self, rate: float, trial: int) -> Probe:
        s = self.settings
        start_s = math.ceil(self._shape_now_s() + LEAD_S)  # whole seconds: intervals align
        RateSchedule.append(self.schedule, start_s, rate)
        measure_s = start_s + s.settle_s
        probe = Probe(
            index=len(self.probes),
            rate_rps=rate,
            trial=trial,
            start_ns=self._wall_ns(start_s),
            measure_start_ns=self._wall_ns(measure_s),
        )
        self._event("probe", probe.start_ns, rate=rate, probe=probe.index, trial=trial)
        self._event("probe-measure", probe.measure_start_ns, rate=rate, probe=probe.index)
        self._wait_intervals(probe.start_ns, probe.measure_start_ns)
        self.cpu.begin()
        windows = s.windows
        while True:
            end_ns = self._wall_ns(measure_s + windows * s.window_s)
            views = self._wait_intervals(probe.measure_start_ns, end_ns)
            probe.generator_cpu_pct = self.cpu.busiest_pct()
            judge(probe, views, s, baseline_service_p50_ms=self._baseline_service())
            if probe.stable or windows >= s.max_windows or self._remaining_s() < s.window_s:
                break
            windows += 1  # the windows disagree: measure one more before judging
        probe.end_ns = end_ns
        self._event("probe-end", end_ns, **probe.to_event())
        return probe

    def _drain(self) -> None:
        """After a failed probe: idle until the backlog is served (at most DRAIN_S)."""
        t = math.ceil(self._shape_now_s() + LEAD_S)
        RateSchedule.append(self.schedule, t, IDLE_RPS)
        deadline = time.monotonic() + DRAIN_S
        while time.monotonic() < deadline:
            self.reader.poll()
            last = self.reader.last_complete_interval()
            view = self.reader.intervals.get(last) if last is not None else None
            if view is not None and last is not None and last >= self._wall_ns(t):
                if view.in_flight <= 2:
                    return
            self._check_alive()
            time.sleep(0.2)

    def run(self) -> list[Probe]:
        self.t0_ns = self._load_start_ns()
        try:
            while True:
                step = self.bracket.next_rate()
                if step is None:
                    break
                if self._remaining_s() < self._probe_length_s():
                    self.stopped_by = "max-duration"
                    self.say(
                        f"capacity: --max-duration {self.settings.max_duration_s:g} s reached; "
                        "answering from the probes so far"
                    )
                    break
                rate, trial = step
                probe = self.probe(rate, trial)
                self.probes.append(probe)
                self.bracket.record(rate, probe.passed)
                verdict = "pass" if probe.passed else "FAIL: " + "; ".join(probe.reasons)
                self.say(
                    f"probe {probe.index + 1}: {rate:.1f} req/s"
                    + (f" (trial {trial})" if trial > 1 else "")
                    + f" -> achieved {probe.achieved_rps:.1f}, corrected "
                    f"{self.settings.slo_percentile} "
                    + (f"{probe.corrected_ms:.1f} ms" if probe.corrected_ms is not None else "n/a")
                    + f": {verdict}"
                )
                if probe.generator_limited:
                    self.bracket.generator_rate = rate
                if not probe.passed:
                    self._drain()
        finally:
            if self.t0_ns is not None:  # end the load (the scenario's duration bounds it anyway)
                RateSchedule.append(self.schedule, math.ceil(self._shape_now_s() + LEAD_S), None)
        return self.probes


__all__ = [
    "SCHEDULE_FILE",
    "Bracket",
    "CapacitySearch",
    "Probe",
    "SearchSettings",
    "SearchStopped",
    "backlog_growing",
    "generator_limited",
    "judge",
    "stable",
]
