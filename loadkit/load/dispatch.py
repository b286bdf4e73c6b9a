"""Open-model dispatch: hand scheduled arrivals to a bounded pool of Locust users.

One scheduler greenlet per process walks `arrival_times(...)`, waits for each
intended time and queues the arrival; idle users take arrivals from the
queue. An arrival that waits longer than `max_start_delay_s` for a free user
is counted as dropped (never sent, never silently skipped). Latency is
measured from the intended time, so a slow server (or a saturated generator)
shows up in the corrected latency instead of lowering the offered rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import gevent
from gevent.queue import Empty, Queue

from loadkit.load.arrivals import arrival_times
from loadkit.load.recorder import LatencyRecorder
from loadkit.load.shapes import Phase, Shape

# Longest single sleep of the scheduler: it wakes this often to emit phases and drop stale arrivals.
_MAX_SLEEP_S = 0.05


@dataclass(frozen=True)
class Arrival:
    intended_mono: float  # time.monotonic() of the intended send
    intended_ns: int  # wall clock of the intended send


PhaseCallback = Callable[[Phase, int], None]


class OpenModelDispatcher:
    """Schedules this process's share of a shape's arrivals."""

    def __init__(
        self,
        shape: Shape,
        recorder: LatencyRecorder,
        *,
        request_name: str,
        spacing: str = "constant",
        seed: int = 0,
        worker_index: int = 0,
        worker_count: int = 1,
        max_start_delay_s: float = 1.0,
        on_phase: PhaseCallback | None = None,
    ):
        self.shape = shape
        self.recorder = recorder
        self.request_name = request_name
        self.spacing = spacing
        self.seed = seed
        self.worker_index = worker_index
        self.worker_count = worker_count
        self.max_start_delay_s = max_start_delay_s
        self.on_phase = on_phase
        self.queue: Queue[Arrival] = Queue()
        self.t0_mono: float | None = None
        self.t0_ns: int | None = None
        self.finished = False  # all arrivals handed out (or stopped)
        self._stopping = False
        self._greenlet: gevent.Greenlet | None = None

    @property
    def started(self) -> bool:
        return self._greenlet is not None

    def start(self) -> None:
        if self._greenlet is None:
            self.t0_mono = time.monotonic()
            self.t0_ns = time.time_ns()
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        """No more arrivals; queued ones that no user took are counted as dropped."""
        self._stopping = True
        if self._greenlet is not None and not self._greenlet.dead:
            self._greenlet.join(timeout=1.0)
        self._drop_all()
        self.finished = True

    def take(self, timeout: float) -> Arrival | None:
        """The next arrival for an idle user, or None after `timeout` (or when finished)."""
        while True:
            try:
                arrival = self.queue.get(timeout=timeout)
            except Empty:
                return None
            if time.monotonic() - arrival.intended_mono > self.max_start_delay_s:
                self.recorder.dropped(self.request_name)
                continue
            return arrival

    # --- scheduler ------------------------------------------------------
    def _drop_stale(self, now: float) -> None:
        while not self.queue.empty():
            head = self.queue.peek_nowait()
            if now - head.intended_mono <= self.max_start_delay_s:
                return
            self.queue.get_nowait()
            self.recorder.dropped(self.request_name)

    def _drop_all(self) -> None:
        while not self.queue.empty():
            self.queue.get_nowait()
            self.recorder.dropped(self.request_name)

    def _emit_phases(self, phases: list[Phase], elapsed: float) -> list[Phase]:
        while phases and phases[0].t_s <= elapsed:
            phase = phases.pop(0)
            if self.on_phase is not None and self.t0_ns is not None:
                self.on_phase(phase, self.t0_ns + round(phase.t_s * 1e9))
        return phases

    def _wait_until(self, target: float, phases: list[Phase]) -> None:
        assert self.t0_mono is not None
        while not self._stopping:
            now = time.monotonic()
            self._emit_phases(phases, now - self.t0_mono)
            self._drop_stale(now)
            if now >= target:
                return
            gevent.sleep(min(target - now, _MAX_SLEEP_S))

    def _run(self) -> None:
        assert self.t0_mono is not None and self.t0_ns is not None
        # load-start / load-end bracket the shape's own phases: t = 0 of the shape in wall time.
        phases = [Phase(0.0, "load-start", {"rate": self.shape.rate_at(0.0)})]
        phases += sorted(self.shape.phases(), key=lambda p: p.t_s)
        phases.append(Phase(self.shape.duration_s, "load-end", {}))
        times = arrival_times(
            self.shape,
            spacing=self.spacing,
            seed=self.seed,
            worker_index=self.worker_index,
            worker_count=self.worker_count,
        )
        for t in times:
            target = self.t0_mono + t
            self._wait_until(target, phases)
            if self._stopping:
                break
            lag_ns = max(0, round((time.monotonic() - target) * 1e9))
            intended_ns = self.t0_ns + round(t * 1e9)
            self.recorder.offered(self.request_name, intended_ns, lag_ns)
            self.queue.put(Arrival(target, intended_ns))
        # Keep emitting phases and dropping stale arrivals until the shape ends.
        self._wait_until(self.t0_mono + self.shape.duration_s, phases)
        while not self._stopping and not self.queue.empty():
            self._drop_stale(time.monotonic())
            gevent.sleep(_MAX_SLEEP_S)
        self.finished = True
