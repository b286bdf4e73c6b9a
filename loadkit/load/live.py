"""The run as it happens: merged per-interval histograms and counters of every Locust process.

Read from the files the Locust processes write (docs/run-format.md), the
same way on one host and with `--workers N`: `load/*.jsonl` and
`latency/*.hlog` are tailed (complete lines only, from where the last poll
stopped) and merged per 1 s interval across processes and request names.
An interval is *complete* once every process has written its load rows for
it; the recorder writes (and flushes) an interval's histograms before its
load rows, so a complete interval has all its histograms.

`LiveRunReader.snapshot()` is the one set of numbers the progress line, the
Prometheus endpoint and Locust's web UI tab all show; the run guard
(`guard.py`) reads the complete intervals themselves. No Locust or gevent
here: the orchestrator (a plain process) and a Locust master both use it.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

from loadkit import percentile_names
from loadkit.rundir import new_histogram
from loadkit.rundir.hlog import IntervalLineReader
from loadkit.rundir.layout import EVENTS_FILE, LATENCY_DIR, LOAD_DIR

SECOND_NS = 1_000_000_000
WINDOW_S = 10  # the live percentiles and rates cover the last 10 complete intervals
QUANTILES = tuple((name, percentile_names.PERCENTILES[name]) for name in percentile_names.WINDOW)
KINDS = ("corrected", "service", "pending")


class _Tail:
    """Complete new lines of a growing file."""

    def __init__(self, path: Path):
        self.path = path
        self._offset = 0
        self._partial = ""

    def new_lines(self) -> list[str]:
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                f.seek(self._offset)
                data = f.read()
                self._offset = f.tell()
        except OSError:
            return []
        text = self._partial + data
        lines = text.split("\n")
        self._partial = lines.pop()
        return lines


@dataclass
class IntervalView:
    """One 1 s interval merged over processes and request names."""

    t_ns: int
    length_ns: int = 0
    offered: int = 0
    started: int = 0
    ok: int = 0
    errors: int = 0
    dropped: int = 0
    in_flight: int = 0  # summed over processes, at the interval's end
    dispatch_lag_max_ms: float = 0.0
    error_kinds: Counter[str] = field(default_factory=Counter)
    hists: dict[str, HdrHistogram] = field(default_factory=dict)
    _in_flight_by_process: dict[str, int] = field(default_factory=dict)

    @property
    def completed(self) -> int:
        return self.ok + self.errors

    def add_row(self, row: dict[str, Any]) -> None:
        for key in ("offered", "started", "ok", "errors", "dropped"):
            setattr(self, key, getattr(self, key) + int(row.get(key) or 0))
        self.length_ns = max(self.length_ns, int(row.get("interval_ns") or 0))
        lag = row.get("dispatch_lag_max_ms")
        if isinstance(lag, int | float):
            self.dispatch_lag_max_ms = max(self.dispatch_lag_max_ms, float(lag))
        for kind, count in (row.get("error_kinds") or {}).items():
            self.error_kinds[str(kind)] += int(count)
        # in_flight is per process (repeated on each of its request names' rows)
        self._in_flight_by_process[str(row.get("process"))] = int(row.get("in_flight") or 0)
        self.in_flight = sum(self._in_flight_by_process.values())

    def add_histogram(self, kind: str, hist: HdrHistogram) -> None:
        merged = self.hists.get(kind)
        if merged is None:
            merged = self.hists[kind] = new_histogram()
        merged.add(hist)


def percentiles_s(hist: HdrHistogram | None) -> dict[str, float | None]:
    """P50/P95/P99/P99.9 of a microsecond histogram, in seconds (None when empty)."""
    if hist is None or hist.get_total_count() == 0:
        return {name: None for name, _ in QUANTILES}
    # One pass over the counts for all four (each get_value_at_percentile walks them again).
    values = hist.get_percentile_to_value_dict([q for _, q in QUANTILES])
    return {name: values[q] / 1e6 for name, q in QUANTILES}


def merge(hists: list[HdrHistogram]) -> HdrHistogram | None:
    if not hists:
        return None
    out = new_histogram()
    for h in hists:
        out.add(h)
    return out


@dataclass(frozen=True)
class LiveSnapshot:
    """What the run looks like now: the last `window_s` complete intervals, and totals."""

    elapsed_s: float
    total_s: float
    window_s: int  # complete intervals merged (up to WINDOW_S)
    window_start_ns: int | None  # first interval of the window
    window_end_ns: int | None  # end of the last complete interval
    corrected_s: dict[str, float | None]  # p50, p95, p99, p999 over the window
    service_s: dict[str, float | None]
    offered_per_s: float  # over the window
    achieved_per_s: float  # completions (ok + errors) per second over the window
    offered_total: int
    ok_total: int
    errors_total: int
    dropped_total: int
    error_kinds_total: dict[str, int]
    in_flight: int  # at the end of the last complete interval, all processes
    dispatch_lag_max_s: float  # worst scheduler lateness in the window
    phase: str | None  # the last shape phase that began (burst-start, ...)

    @property
    def requests(self) -> int:
        return self.ok_total + self.errors_total

    def to_dict(self) -> dict[str, Any]:
        return {
            "elapsed_s": self.elapsed_s,
            "total_s": self.total_s,
            "window_s": self.window_s,
            "window_start_ns": self.window_start_ns,
            "window_end_ns": self.window_end_ns,
            "corrected_s": dict(self.corrected_s),
            "service_s": dict(self.service_s),
            "offered_per_s": self.offered_per_s,
            "achieved_per_s": self.achieved_per_s,
            "offered_total": self.offered_total,
            "ok_total": self.ok_total,
            "errors_total": self.errors_total,
            "dropped_total": self.dropped_total,
            "error_kinds_total": dict(self.error_kinds_total),
            "in_flight": self.in_flight,
            "dispatch_lag_max_s": self.dispatch_lag_max_s,
            "phase": self.phase,
        }


class LiveRunReader:
    """Incremental, merged view of a run directory that Locust processes are writing.

    Keeps the last `keep_s` intervals (enough for the window and the longest
    guard condition) and running totals; older intervals are let go.
    """

    def __init__(self, run_dir: str | Path, keep_s: int = 120):
        self.run_dir = Path(run_dir)
        self.keep_s = max(keep_s, WINDOW_S + 2)
        self._load_tails: dict[Path, _Tail] = {}
        self._hlog_tails: dict[Path, _Tail] = {}
        self._events_tail = _Tail(self.run_dir / EVENTS_FILE)
        self._hlog_readers: dict[Path, IntervalLineReader] = {}
        self._latest_by_file: dict[Path, int] = {}
        self.intervals: dict[int, IntervalView] = {}
        self.totals: Counter[str] = Counter()
        self.error_kinds: Counter[str] = Counter()
        self.phase: str | None = None
        self.phase_t_ns: int | None = None

    # --- reading ---------------------------------------------------------
    def _interval(self, t_ns: int) -> IntervalView:
        view = self.intervals.get(t_ns)
        if view is None:
            view = self.intervals[t_ns] = IntervalView(t_ns)
        return view

    def poll(self) -> None:
        """Read what the processes wrote since the last poll."""
        # Load rows first, histograms after: an interval's histograms are on disk before
        # its load rows, so every histogram of a complete interval is read in this poll.
        for path in sorted((self.run_dir / LOAD_DIR).glob("*.jsonl")):
            self._load_tails.setdefault(path, _Tail(path))
        for path, tail in self._load_tails.items():
            for line in tail.new_lines():
                self._load_line(path, line)
        for path in sorted((self.run_dir / LATENCY_DIR).glob("*.hlog")):
            self._hlog_tails.setdefault(path, _Tail(path))
        for path, tail in self._hlog_tails.items():
            for line in tail.new_lines():
                self._hlog_line(path, line)
        for line in self._events_tail.new_lines():
            self._event_line(line)
        self._forget_old()

    def _load_line(self, path: Path, line: str) -> None:
        try:
            row: dict[str, Any] = json.loads(line)
            t = int(row["t_ns"])
        except (ValueError, KeyError, TypeError):
            return
        self._interval(t).add_row(row)
        for key in ("offered", "ok", "errors", "dropped"):
            self.totals[key] += int(row.get(key) or 0)
        for kind, count in (row.get("error_kinds") or {}).items():
            self.error_kinds[str(kind)] += int(count)
        self._latest_by_file[path] = max(self._latest_by_file.get(path, t), t)

    def _hlog_line(self, path: Path, line: str) -> None:
        reader = self._hlog_readers.get(path)
        if reader is None:
            reader = self._hlog_readers[path] = IntervalLineReader(path.stem, kinds=KINDS)
        try:
            interval = reader.feed(line)
        except Exception:  # a torn line: the next poll's complete lines go on
            return
        if interval is None:
            return
        # Interval starts are whole seconds; round away float noise.
        start_ns = round(interval.start_ns / SECOND_NS) * SECOND_NS
        self._interval(start_ns).add_histogram(interval.kind, interval.histogram)

    def _event_line(self, line: str) -> None:
        try:
            row = json.loads(line)
        except ValueError:
            return
        if not isinstance(row, dict) or row.get("kind") != "phase":
            return
        t = row.get("t_ns")
        if isinstance(t, int) and (self.phase_t_ns is None or t >= self.phase_t_ns):
            self.phase, self.phase_t_ns = str(row.get("name")), t

    def _forget_old(self) -> None:
        last = self.last_complete_interval()
        if last is None:
            return
        horizon = last - self.keep_s * SECOND_NS
        for t in [t for t in self.intervals if t < horizon]:
            del self.intervals[t]

    # --- views -----------------------------------------------------------
    def last_complete_interval(self) -> int | None:
        """Start of the latest interval every process has written (its sums are whole).

        A process counts once it has written its first interval (a process with
        nothing to record yet must not hold the others back).
        """
        if not self._latest_by_file:
            return None
        return min(self._latest_by_file.values())

    def complete_intervals(self, count: int) -> list[IntervalView]:
        """The last `count` complete intervals, oldest first (missing seconds are skipped)."""
        last = self.last_complete_interval()
        if last is None:
            return []
        out = []
        for i in range(count - 1, -1, -1):
            view = self.intervals.get(last - i * SECOND_NS)
            if view is not None:
                out.append(view)
        return out

    def snapshot(self, elapsed_s: float = 0.0, total_s: float = 0.0) -> LiveSnapshot:
        """Poll, then the numbers over the last `WINDOW_S` complete intervals."""
        self.poll()
        window = self.complete_intervals(WINDOW_S)
        seconds = sum(v.length_ns for v in window) / SECOND_NS
        last = window[-1] if window else None

        def kind(name: str) -> HdrHistogram | None:
            return merge([v.hists[name] for v in window if name in v.hists])

        return LiveSnapshot(
            elapsed_s=elapsed_s,
            total_s=total_s,
            window_s=len(window),
            window_start_ns=window[0].t_ns if window else None,
            window_end_ns=(last.t_ns + (last.length_ns or SECOND_NS)) if last else None,
            corrected_s=percentiles_s(kind("corrected")),
            service_s=percentiles_s(kind("service")),
            offered_per_s=sum(v.offered for v in window) / seconds if seconds else 0.0,
            achieved_per_s=sum(v.completed for v in window) / seconds if seconds else 0.0,
            offered_total=self.totals["offered"],
            ok_total=self.totals["ok"],
            errors_total=self.totals["errors"],
            dropped_total=self.totals["dropped"],
            error_kinds_total=dict(self.error_kinds),
            in_flight=last.in_flight if last else 0,
            dispatch_lag_max_s=max((v.dispatch_lag_max_ms for v in window), default=0.0) / 1e3,
            phase=self.phase,
        )
