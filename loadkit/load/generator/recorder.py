"""Per-process latency recording into the run directory (docs/run-format.md).

Each Locust process owns one `LatencyRecorder`. Completions go into 1 s
intervals aligned to wall-clock seconds (so intervals from several workers
line up and merge exactly), by completion time; per interval and request
name it keeps a corrected histogram (from the intended send time), a service
histogram (from the actual send), load counters and a bounded request
sample. `tick()` writes every interval that has ended; `close()` writes the
rest, so a stopped run loses nothing it recorded.

Where the records go is a `RecordSink`: `FileSink` writes one process's files
into the run directory (a local process, and the master for each worker);
a Locust worker's sink ships them to the master instead (`channel.py`), so a
worker needs no view of the run directory.

Only successful requests enter the latency histograms; failures are counted
by kind in `load/<process>.jsonl`, and the first few distinct messages of
each kind (the server's own words) go to `events.jsonl` as `server_error`
events, bounded per process so a million errors cost nothing. A third
histogram per interval, `pending`, holds the age (from the intended send) of
every request still in flight when the interval ends: a lower bound of its
latency, so a stalled target that completes nothing still shows how late its
requests are (the run guard uses it; see docs/run-format.md). No gevent or
Locust here: the clock is
injected, so tests drive it by hand.
"""

from __future__ import annotations

import heapq
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hdrh.histogram import HdrHistogram

from loadkit.load.handoff import EXIT_WRITE_FAILED
from loadkit.rundir import IntervalLogWriter, JsonlWriter, append_event, new_histogram
from loadkit.rundir.layout import LATENCY_DIR, LOAD_DIR, REQUESTS_DIR
from loadkit.rundir.schema import LoadRow, RequestRow
from loadkit.rundir.segments import SEGMENT_S

INTERVAL_NS = 1_000_000_000
DEFAULT_SAMPLE_SIZE = 200  # uniform reservoir per interval per request name
DEFAULT_SLOWEST_KEPT = 5  # plus the slowest requests of each interval, for drill-down
MESSAGES_PER_KIND = 3  # distinct error messages kept per error kind per process
MESSAGE_KINDS = 20  # error kinds with messages kept per process
# The reservoir keeps its full size for the first 10 minutes, then shrinks as
# sqrt(10 min / elapsed), never under 10: a 24 h run at any rate keeps ~3 M rows
# (~0.5 GB before compression) instead of 17 M; the slowest are always kept.
SAMPLE_FULL_FOR_S = 600.0
SAMPLE_MIN_SIZE = 10


def reservoir_size(elapsed_s: float, full_size: int = DEFAULT_SAMPLE_SIZE) -> int:
    """Reservoir size per interval per request name, `elapsed_s` into the recording."""
    if elapsed_s <= SAMPLE_FULL_FOR_S or full_size <= SAMPLE_MIN_SIZE:
        return full_size
    return max(SAMPLE_MIN_SIZE, round(full_size * (SAMPLE_FULL_FOR_S / elapsed_s) ** 0.5))


# Completion gaps (no request completed while some were in flight) this long or
# longer are written exactly: a stall of a few hundred ms hides in a 1 s count.
GAP_RECORDED_NS = 50_000_000
# Sample rows written between two pauses of `tick` (~0.5 ms of JSON encoding).
_ROWS_PER_PAUSE = 25


class RecordSink(Protocol):
    """Where one process's per-interval records go (files, or the master)."""

    def histogram(self, tag: str, start_ns: int, end_ns: int, histogram: HdrHistogram) -> None: ...
    def load(self, row: LoadRow) -> None: ...
    def request(self, row: RequestRow) -> None: ...
    def event(self, kind: str, name: str, **attrs: Any) -> None: ...
    def interval_done(self) -> None:
        """One interval's records are all given: histograms, load rows, requests."""

    def flush(self) -> None: ...
    def close(self) -> None: ...


# A Locust process started by `loadkit run` exits with EXIT_WRITE_FAILED (the hand-off's)
# when it cannot write the run directory (a full disk, a read-only or removed directory):
# the load stops at once, and the orchestrator says so in one line
# (`orchestrator.RunDirectoryFailure`).


def _guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    """A FileSink method whose OSError ends the process when `exit_on_write_error` is set."""

    def call(self: FileSink, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            if not FileSink.exit_on_write_error:
                raise
            where = Path(exc.filename) if isinstance(exc.filename, str) else self.run_dir
            sys.stderr.write(f"ERROR: cannot write {where} ({exc.strerror or exc}); stopping\n")
            sys.stderr.flush()
            os._exit(EXIT_WRITE_FAILED)

    call.__name__ = method.__name__
    call.__doc__ = method.__doc__
    return call


class FileSink:
    """One process's files in the run directory (docs/run-format.md)."""

    # Set in the Locust processes `loadkit run` starts (runtime.py): a write that fails
    # stops the process instead of leaving tracebacks in every greenlet that writes.
    exit_on_write_error = False

    def __init__(self, run_dir: str | Path, process: str):
        self.run_dir = Path(run_dir)
        self.process = process
        self._hlog: IntervalLogWriter | None = None
        self._hlog_dirty = False
        self._load = JsonlWriter(self.run_dir / LOAD_DIR / f"{process}.jsonl")
        self._requests = JsonlWriter(
            self.run_dir / REQUESTS_DIR / f"{process}.jsonl", segment_s=SEGMENT_S
        )

    @_guarded
    def histogram(self, tag: str, start_ns: int, end_ns: int, histogram: HdrHistogram) -> None:
        if self._hlog is None:
            self._hlog = IntervalLogWriter(
                self.run_dir / LATENCY_DIR / f"{self.process}.hlog", base_time_ns=start_ns
            )
        self._hlog.write(tag, start_ns, end_ns, histogram)
        self._hlog_dirty = True

    @_guarded
    def histogram_encoded(
        self, tag: str, start_ns: int, end_ns: int, max_us: int, payload: str
    ) -> None:
        """A histogram as another process encoded it (no decode/re-encode on the master)."""
        if self._hlog is None:
            self._hlog = IntervalLogWriter(
                self.run_dir / LATENCY_DIR / f"{self.process}.hlog", base_time_ns=start_ns
            )
        self._hlog.write_encoded(tag, start_ns, end_ns, max_us, payload)
        self._hlog_dirty = True

    @_guarded
    def load(self, row: LoadRow) -> None:
        # Histograms before the load rows that announce them: a live reader that
        # sees an interval's load rows (docs/run-format.md) has its histograms.
        if self._hlog is not None and self._hlog_dirty:
            self._hlog.flush()
            self._hlog_dirty = False
        self._load.write(row)

    @_guarded
    def request(self, row: RequestRow) -> None:
        self._requests.write(row)

    @_guarded
    def event(self, kind: str, name: str, **attrs: Any) -> None:
        append_event(self.run_dir, kind, name, **attrs)

    def interval_done(self) -> None:
        pass

    @_guarded
    def flush(self) -> None:
        if self._hlog is not None:  # histograms before the load rows that announce them
            self._hlog.flush()
        self._requests.flush()
        self._load.flush()

    @_guarded
    def close(self) -> None:
        self._load.close()
        self._requests.close()
        if self._hlog is not None:
            self._hlog.close()


@dataclass
class _Sample:
    intended_ns: int
    sent_ns: int
    done_ns: int
    name: str
    ok: bool
    error_kind: str | None
    connection_new: bool
    request_bytes: int | None = None

    def row(self, why: str) -> RequestRow:
        row: RequestRow = {
            "t_ns": self.intended_ns,
            "sent_ns": self.sent_ns,
            "done_ns": self.done_ns,
            "name": self.name,
            "ok": self.ok,
            "error_kind": self.error_kind,
            "connection_new": self.connection_new,
            "sampled": why,
        }
        if self.request_bytes is not None:
            row["request_bytes"] = self.request_bytes
        return row


@dataclass
class _NameInterval:
    """Counters and sample of one request name in one interval."""

    offered: int = 0
    started: int = 0
    ok: int = 0
    errors: int = 0
    dropped: int = 0
    out_of_range: int = 0
    error_kinds: Counter[str] = field(default_factory=Counter)
    dispatch_lag_max_ns: int = 0
    seen: int = 0
    reservoir_size: int = DEFAULT_SAMPLE_SIZE
    reservoir: list[_Sample] = field(default_factory=list)
    slowest: list[tuple[int, int, _Sample]] = field(default_factory=list)  # min-heap
    gaps: list[list[int]] = field(default_factory=list)  # [start_ns, end_ns] ending here


class LatencyRecorder:
    """Collects one process's requests and writes them per interval."""

    def __init__(
        self,
        run_dir: str | Path,
        process: str,
        *,
        clock_ns: Callable[[], int] = time.time_ns,
        sample_size: int = DEFAULT_SAMPLE_SIZE,
        slowest_kept: int = DEFAULT_SLOWEST_KEPT,
        seed: int = 0,
        sink: RecordSink | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.process = process
        self._clock_ns = clock_ns
        self._sample_size = sample_size
        self._slowest_kept = slowest_kept
        self._rng = random.Random(f"{seed}:{process}")
        self.sink: RecordSink = sink if sink is not None else FileSink(self.run_dir, process)
        # Added to every timestamp given: a worker records in its master's clock (channel.py).
        self.clock_offset_ns = 0
        # interval index -> name -> counters; histograms are per name, reused.
        self._intervals: dict[int, dict[str, _NameInterval]] = {}
        self._hists: dict[tuple[int, str, str], HdrHistogram] = {}
        self._names: list[str] = []
        self._first_open: int | None = None  # lowest interval index not yet written
        self._first_index: int | None = None  # the first interval recorded
        self._seq = 0
        self.in_flight = 0
        # Since when requests have been in flight with none completing (None: idle).
        self._waiting_since_ns: int | None = None
        # name -> intended_ns -> requests in flight with that intended send time
        self._in_flight_intended: dict[str, Counter[int]] = {}
        self.closed = False
        # A tick is inside a write that pauses (yields to other greenlets): close waits for it.
        self._writing = False
        self.totals: Counter[str] = Counter()
        self.messages: dict[str, list[str]] = {}  # error kind -> first distinct messages
        # This process's CPU since the last interval written (wall, CPU seconds): whether the
        # generator itself was the limit (loadkit.rundir.generator_check).
        self._cpu_mark = (time.monotonic(), time.process_time())

    def align_clock(self, offset_ns: int) -> bool:
        """Record in a clock `offset_ns` ahead of ours; only before the first record.

        Fixed once: a request started in one clock and completed in another would
        leave its in-flight entry behind. Returns whether the offset was applied.
        """
        if self._first_open is not None or self.in_flight:
            return False
        self.clock_offset_ns = int(offset_ns)
        return True

    # --- recording ------------------------------------------------------
    def _bucket(self, t_ns: int) -> int:
        index = t_ns // INTERVAL_NS
        if self._first_open is None:
            self._first_open = index
            self._first_index = index
        # Something for an interval already written goes into the oldest open one.
        return max(index, self._first_open)

    def _slot(self, name: str, t_ns: int) -> tuple[int, _NameInterval]:
        index = self._bucket(t_ns)
        if name not in self._names:
            self._names.append(name)
        by_name = self._intervals.setdefault(index, {})
        if name not in by_name:
            assert self._first_index is not None
            size = reservoir_size(index - self._first_index, self._sample_size)
            by_name[name] = _NameInterval(reservoir_size=size)
        return index, by_name[name]

    def _hist(self, index: int, kind: str, name: str) -> HdrHistogram:
        key = (index, kind, name)
        if key not in self._hists:
            self._hists[key] = new_histogram()
        return self._hists[key]

    def offered(self, name: str, intended_ns: int, dispatch_lag_ns: int = 0) -> None:
        """An arrival was scheduled (open model) at its intended time."""
        intended_ns += self.clock_offset_ns
        _, slot = self._slot(name, intended_ns)
        slot.offered += 1
        slot.dispatch_lag_max_ns = max(slot.dispatch_lag_max_ns, dispatch_lag_ns)
        self.totals["offered"] += 1

    def dropped(self, name: str, now_ns: int | None = None) -> None:
        """An arrival found no free user within the bound and was never sent."""
        _, slot = self._slot(name, self._now() if now_ns is None else now_ns + self.clock_offset_ns)
        slot.dropped += 1
        self.totals["dropped"] += 1

    def started(
        self,
        name: str,
        sent_ns: int,
        closed_model: bool = False,
        intended_ns: int | None = None,
    ) -> None:
        sent_ns += self.clock_offset_ns
        if intended_ns is not None:
            intended_ns += self.clock_offset_ns
        _, slot = self._slot(name, sent_ns)
        slot.started += 1
        if closed_model:  # the closed model offers what it starts
            slot.offered += 1
            self.totals["offered"] += 1
        if self.in_flight == 0:
            self._waiting_since_ns = sent_ns
        self.in_flight += 1
        pending = self._in_flight_intended.setdefault(name, Counter())
        pending[sent_ns if intended_ns is None else intended_ns] += 1
        self.totals["started"] += 1

    def completed(
        self,
        name: str,
        *,
        intended_ns: int,
        sent_ns: int,
        done_ns: int,
        ok: bool,
        error_kind: str | None = None,
        connection_new: bool = False,
        error_message: str | None = None,
        request_bytes: int | None = None,
    ) -> None:
        """A request finished (successfully or not); call once per `started`."""
        offset = self.clock_offset_ns
        intended_ns, sent_ns, done_ns = intended_ns + offset, sent_ns + offset, done_ns + offset
        self.in_flight = max(0, self.in_flight - 1)
        pending = self._in_flight_intended.get(name)
        if pending is not None:
            key = intended_ns if pending[intended_ns] > 0 else sent_ns
            if pending[key] > 1:
                pending[key] -= 1
            else:
                pending.pop(key, None)
        index, slot = self._slot(name, done_ns)
        since = self._waiting_since_ns
        if since is not None and done_ns - since >= GAP_RECORDED_NS:
            slot.gaps.append([since, done_ns])
        self._waiting_since_ns = done_ns if self.in_flight > 0 else None
        if ok:
            slot.ok += 1
            self.totals["ok"] += 1
            corrected_us = max(1, (done_ns - intended_ns) // 1000)
            service_us = max(1, (done_ns - sent_ns) // 1000)
            in_range = self._hist(index, "corrected", name).record_value(corrected_us)
            in_range &= self._hist(index, "service", name).record_value(service_us)
            if not in_range:
                slot.out_of_range += 1
                self.totals["out_of_range"] += 1
        else:
            kind = error_kind or "other"
            slot.errors += 1
            slot.error_kinds[kind] += 1
            self.totals["errors"] += 1
            if error_message:
                self._keep_message(kind, error_message, done_ns)
        sample = _Sample(
            intended_ns, sent_ns, done_ns, name, ok, error_kind, connection_new, request_bytes
        )
        self._sample(slot, sample)

    def _keep_message(self, kind: str, message: str, t_ns: int) -> None:
        kept = self.messages.get(kind)
        if kept is None:
            if len(self.messages) >= MESSAGE_KINDS:
                return
            kept = self.messages[kind] = []
        if len(kept) >= MESSAGES_PER_KIND or message in kept:
            return
        kept.append(message)
        self.sink.event("server_error", kind, t_ns=t_ns, message=message, process=self.process)

    def _sample(self, slot: _NameInterval, sample: _Sample) -> None:
        slot.seen += 1
        if len(slot.reservoir) < slot.reservoir_size:
            slot.reservoir.append(sample)
        else:
            j = self._rng.randrange(slot.seen)
            if j < slot.reservoir_size:
                slot.reservoir[j] = sample
        if self._slowest_kept:
            self._seq += 1
            entry = (sample.done_ns - sample.intended_ns, self._seq, sample)
            if len(slot.slowest) < self._slowest_kept:
                heapq.heappush(slot.slowest, entry)
            elif entry[0] > slot.slowest[0][0]:
                heapq.heapreplace(slot.slowest, entry)

    # --- writing --------------------------------------------------------
    def _now(self) -> int:
        return self._clock_ns() + self.clock_offset_ns

    def tick(self, now_ns: int | None = None, pause: Callable[[], None] | None = None) -> None:
        """Write every interval that ended before `now_ns`, then flush.

        `pause` (the load generator's cooperative yield) is called between
        pieces of the writing: encoding an interval's histograms and ~200
        sample rows takes milliseconds, and a response that arrives meanwhile
        would otherwise wait in the event loop and be timed that much slower.
        What is recorded meanwhile goes into the next interval.
        """
        now_ns = self._now() if now_ns is None else now_ns + self.clock_offset_ns
        if pause is None:
            self._tick_at(now_ns)
            return
        self._writing = True
        try:
            self._tick_at(now_ns, pause)
        finally:
            self._writing = False

    def _tick_at(self, now_ns: int, pause: Callable[[], None] | None = None) -> None:
        current = now_ns // INTERVAL_NS
        while self._first_open is not None and self._first_open < current:
            index = self._first_open
            self._first_open = index + 1  # from here on, nothing new lands in `index`
            self._write_interval(index, INTERVAL_NS, pause)
        self.flush()

    def close(
        self,
        now_ns: int | None = None,
        wait: Callable[[], None] | None = None,
        wait_limit_s: float = 5.0,
    ) -> None:
        """Write all intervals, the current one as a partial interval; idempotent.

        A tick that paused mid-write holds that interval's records: closing the
        files under it would lose them (and fail the tick). So a close from
        another greenlet first calls `wait` (its cooperative yield) until that
        write is done, for at most `wait_limit_s`.
        """
        if self.closed:
            return
        if self._writing:
            if wait is None:
                raise RuntimeError("LatencyRecorder.close during a paused tick: pass `wait`")
            deadline = time.monotonic() + wait_limit_s
            while self._writing and time.monotonic() < deadline:
                wait()
        now_ns = self._now() if now_ns is None else now_ns + self.clock_offset_ns
        self._tick_at(now_ns)
        last = max(self._intervals, default=None)
        while self._first_open is not None and last is not None and self._first_open <= last:
            start = self._first_open * INTERVAL_NS
            length = min(INTERVAL_NS, max(1, now_ns - start))
            self._write_interval(self._first_open, length)
            self._first_open += 1
        self.closed = True
        self.sink.close()

    def flush(self) -> None:
        self.sink.flush()

    def _pending_histogram(self, name: str, end_ns: int) -> HdrHistogram | None:
        """Ages at `end_ns` of the requests still in flight then (a lower bound of their latency)."""
        pending = self._in_flight_intended.get(name)
        if not pending:
            return None
        hist: HdrHistogram | None = None
        for intended_ns, count in pending.items():
            if intended_ns >= end_ns:
                continue  # sent after the interval ended
            if hist is None:
                hist = new_histogram()
            hist.record_value(max(1, (end_ns - intended_ns) // 1000), count)
        return hist

    def _cpu_pct(self) -> float | None:
        """This process's CPU since the last call, in % of one core (None: too short to say)."""
        wall, cpu = time.monotonic(), time.process_time()
        wall0, cpu0 = self._cpu_mark
        self._cpu_mark = (wall, cpu)
        return round(100.0 * (cpu - cpu0) / (wall - wall0), 1) if wall - wall0 >= 0.2 else None

    def _write_interval(
        self, index: int, length_ns: int, pause: Callable[[], None] | None = None
    ) -> None:
        by_name = self._intervals.pop(index, {})
        start_ns = index * INTERVAL_NS
        end_ns = start_ns + length_ns
        names = list(self._names)
        in_flight = self.in_flight
        # Everything this interval holds is taken now, before any pause.
        hists = [
            (f"{kind}:{name}", self._hists.pop((index, kind, name), None))
            for name in names
            for kind in ("corrected", "service")
        ]
        hists += [(f"pending:{name}", self._pending_histogram(name, end_ns)) for name in names]
        # Histograms first: a live reader that sees an interval's load rows has its histograms.
        for tag, hist in hists:
            if hist is not None and hist.get_total_count() > 0:
                self.sink.histogram(tag, start_ns, end_ns, hist)
                if pause is not None:
                    pause()
        written = 0
        cpu_pct = self._cpu_pct()
        for name in names:
            slot = by_name.get(name) or _NameInterval()
            self.sink.load(
                {
                    "t_ns": start_ns,
                    "interval_ns": length_ns,
                    "process": self.process,
                    "name": name,
                    "offered": slot.offered,
                    "started": slot.started,
                    "ok": slot.ok,
                    "errors": slot.errors,
                    "dropped": slot.dropped,
                    "in_flight": in_flight,
                    "out_of_range": slot.out_of_range,
                    "error_kinds": dict(slot.error_kinds),
                    "dispatch_lag_max_ms": round(slot.dispatch_lag_max_ns / 1e6, 3),
                    "completion_gaps": slot.gaps,
                    "generator_cpu_pct": cpu_pct,
                }
            )
            kept = {id(s) for s in slot.reservoir}
            rows = [s.row("reservoir") for s in slot.reservoir]
            rows += [
                sample.row("slowest")
                for _, _, sample in sorted(slot.slowest, key=lambda e: e[1])
                if id(sample) not in kept
            ]
            for row in rows:
                self.sink.request(row)
                written += 1
                if pause is not None and written % _ROWS_PER_PAUSE == 0:
                    pause()
        self.sink.interval_done()
