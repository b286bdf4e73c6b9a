"""Open-model dispatch: hand scheduled arrivals to a bounded pool of Locust users.

One scheduler greenlet per process walks `arrival_times(...)`, waits for each
intended time and queues the arrival; idle users take arrivals from the
queue. An arrival that waits longer than `max_start_delay_s` for a free user
is counted as dropped (never sent, never silently skipped). Latency is
measured from the intended time, so a slow server (or a saturated generator)
shows up in the corrected latency instead of lowering the offered rate.

Idle users block without a timeout (a pool of 1,000 users polling every
0.1 s cost a quarter of the process's CPU) and are woken one per arrival,
most recently idle first; stopping wakes them all.

Each pass of the scheduler queues every arrival already due at once (one
wake-up of the scheduler per due time, not per arrival: at 2,000/s gevent's
1 ms timer finds two or more due per pass), and a user that finishes a
request takes the next queued arrival without going back to the hub.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

import gevent
from gevent.hub import Waiter, get_hub

from loadkit.load.generator.arrivals import arrival_times
from loadkit.load.generator.recorder import LatencyRecorder
from loadkit.load.shapes import Phase, Shape

# Longest single sleep of the scheduler: it wakes this often to emit phases and drop stale arrivals.
_MAX_SLEEP_S = 0.05
# gevent's timers fire up to ~1 ms late (libev rounds a poll's timeout up to whole ms): the
# scheduler sleeps to this much before an arrival and yields to the event loop for the rest.
EARLY_WAKE_S = 0.0011
# The yielding loop (a spin that still serves every ready socket) may take at most this share
# of wall time, averaged over SPIN_WINDOW_S; past it the scheduler sleeps on the timer.
SPIN_SHARE = 0.5
SPIN_WINDOW_S = 0.1


class Arrival(NamedTuple):
    intended_mono: float  # time.monotonic() of the intended send
    intended_ns: int  # wall clock of the intended send


PhaseCallback = Callable[[Phase, int], None]


class ArrivalQueue:
    """Arrivals waiting for a user, and idle users waiting for an arrival.

    `put` wakes the most recently idle user (LIFO): with a pool larger than
    the concurrency, the same few users (their connections, their memory)
    stay busy and the rest sleep, at no cost per second. `take` blocks
    without a timeout until an arrival comes or the queue is closed; only
    greenlets may block in it. Arrivals stay in the queue until a user runs,
    so a user killed while being woken loses nothing.
    """

    def __init__(self) -> None:
        self._pending: deque[Arrival] = deque()
        self._idle: list[Waiter] = []  # a stack: the last to go idle is woken first
        self._hub = get_hub()
        self.closed = False

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def idle_users(self) -> int:
        return len(self._idle)

    def peek(self) -> Arrival | None:
        return self._pending[0] if self._pending else None

    def put(self, arrival: Arrival) -> None:
        self._pending.append(arrival)
        if self._idle:
            self._hub.loop.run_callback(self._idle.pop().switch, None)

    def put_many(self, arrivals: list[Arrival]) -> None:
        """Queue arrivals due together; wakes one idle user per arrival, as `put` does."""
        self._pending.extend(arrivals)
        idle = self._idle
        run_callback = self._hub.loop.run_callback
        for _ in range(min(len(arrivals), len(idle))):
            run_callback(idle.pop().switch, None)

    def pop(self) -> Arrival:
        return self._pending.popleft()

    def take(self) -> Arrival | None:
        """The oldest arrival; blocks while there is none; None once closed and empty."""
        pending = self._pending
        while not pending:
            if self.closed:
                return None
            waiter = Waiter(self._hub)
            self._idle.append(waiter)
            try:
                waiter.get()
            except BaseException:
                # Killed while idle. If a put had already picked this user, pick another.
                if waiter in self._idle:
                    self._idle.remove(waiter)
                elif pending and self._idle:
                    self._hub.loop.run_callback(self._idle.pop().switch, None)
                raise
        return pending.popleft()

    def close(self) -> None:
        """No more arrivals: wake every idle user (their `take` returns None once empty)."""
        self.closed = True
        idle, self._idle = self._idle, []
        for waiter in idle:
            self._hub.loop.run_callback(waiter.switch, None)


class SpinBudget:
    """How much of the last `window_s` the scheduler may spend yielding instead of sleeping.

    A leaky bucket: yielding adds its wall time, which drains at `share` per second;
    it allows yielding while the level stays under `share * window_s`.
    """

    def __init__(self, share: float = SPIN_SHARE, window_s: float = SPIN_WINDOW_S):
        self.share = share
        self.cap = share * window_s
        self.level = 0.0
        self._at = 0.0

    def allows(self, now: float) -> bool:
        self.level = max(0.0, self.level - (now - self._at) * self.share)
        self._at = now
        return self.level < self.cap

    def spent(self, start: float, end: float) -> None:
        self.level += end - start


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
        self.queue = ArrivalQueue()
        self.t0_mono: float | None = None
        self.t0_ns: int | None = None
        self.finished = False  # all arrivals handed out (or stopped)
        self._stopping = False
        self._greenlet: gevent.Greenlet | None = None
        self._spin = SpinBudget()

    @property
    def started(self) -> bool:
        return self._greenlet is not None

    def start(self) -> None:
        if self._greenlet is None:
            self.t0_mono = time.monotonic()
            self.t0_ns = time.time_ns()
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        """No more arrivals; queued ones that no user took are counted as dropped.

        Stopped before the shape ended (Ctrl-C, an `--abort-on` condition), it
        writes a `load-stopped` phase: the moment the last arrival was scheduled.
        """
        stopped_early = self.started and not self.finished and not self._stopping
        self._stopping = True
        if stopped_early and self.on_phase is not None and self.t0_mono is not None:
            elapsed = time.monotonic() - self.t0_mono
            self.on_phase(Phase(elapsed, "load-stopped", {}), time.time_ns())
        if self._greenlet is not None and not self._greenlet.dead:
            self._greenlet.join(timeout=1.0)
        self._drop_all()
        self._finish()

    def take(self) -> Arrival | None:
        """The next arrival for an idle user (blocks until one is due); None once finished."""
        queue = self.queue
        bound = self.max_start_delay_s
        while True:
            arrival = queue.take()
            if arrival is None:
                return None
            if time.monotonic() - arrival.intended_mono > bound:
                self.recorder.dropped(self.request_name)
                continue
            return arrival

    def _finish(self) -> None:
        self.finished = True
        self.queue.close()

    # --- scheduler ------------------------------------------------------
    def _drop_stale(self, now: float) -> None:
        queue = self.queue
        head = queue.peek()
        while head is not None and now - head.intended_mono > self.max_start_delay_s:
            queue.pop()
            self.recorder.dropped(self.request_name)
            head = queue.peek()

    def _drop_all(self) -> None:
        while len(self.queue):
            self.queue.pop()
            self.recorder.dropped(self.request_name)

    def _emit_phases(self, phases: list[Phase], elapsed: float) -> list[Phase]:
        while phases and phases[0].t_s <= elapsed:
            phase = phases.pop(0)
            if self.on_phase is not None and self.t0_ns is not None:
                self.on_phase(phase, self.t0_ns + round(phase.t_s * 1e9))
        return phases

    def _wait_until(self, target: float, phases: list[Phase]) -> None:
        """Return at `target` (monotonic), emitting phases and dropping stale arrivals meanwhile.

        gevent's timer alone sends 0.65-0.9 ms late (P50): a poll's timeout is rounded up
        to whole milliseconds. So the scheduler sleeps on the timer to `EARLY_WAKE_S`
        before `target` and then yields to the event loop (`gevent.sleep(0)`: every
        ready socket and woken user runs first) until `target`. The yielding is
        bounded: not while arrivals wait for a free user (`_users_behind`: they would
        wait anyway), and at most `SPIN_SHARE` of wall time (`SpinBudget`), so a fast
        rate cannot buy precision with a whole core; past the bound it sleeps on the
        timer as before.
        """
        assert self.t0_mono is not None
        t0 = self.t0_mono
        queue = self.queue
        budget = self._spin
        while not self._stopping:
            now = time.monotonic()
            if phases and phases[0].t_s <= now - t0:
                self._emit_phases(phases, now - t0)
            if len(queue):
                self._drop_stale(now)
            remaining = target - now
            if remaining <= 0:
                return
            if remaining > EARLY_WAKE_S:
                gevent.sleep(min(remaining - EARLY_WAKE_S, _MAX_SLEEP_S))
            elif not self._users_behind(now) and budget.allows(now):
                gevent.sleep(0)
                budget.spent(now, time.monotonic())
            else:
                gevent.sleep(remaining)

    def _users_behind(self, now: float) -> bool:
        """An arrival has waited for a free user longer than the early wake-up: all are busy.

        (Arrivals just queued wait for the users woken for them to run: that is not behind.)
        """
        head = self.queue.peek()
        return head is not None and now - head.intended_mono > EARLY_WAKE_S

    def _run(self) -> None:
        assert self.t0_mono is not None and self.t0_ns is not None
        # load-start / load-end bracket the shape's own phases: t = 0 of the shape in wall time.
        phases = [Phase(0.0, "load-start", {"rate": self.shape.rate_at(0.0)})]
        phases += sorted(self.shape.phases(), key=lambda p: p.t_s)
        times = iter(
            arrival_times(
                self.shape,
                spacing=self.spacing,
                seed=self.seed,
                worker_index=self.worker_index,
                worker_count=self.worker_count,
            )
        )
        t0 = self.t0_mono
        t0_ns = self.t0_ns
        offered = self.recorder.offered
        name = self.request_name
        t = next(times, None)
        while t is not None:
            self._wait_until(t0 + t, phases)
            if self._stopping:
                break
            # Every arrival already due goes out in this pass; each keeps its own lag.
            now = time.monotonic()
            due: list[Arrival] = []
            while t is not None and t0 + t <= now:
                target = t0 + t
                intended_ns = t0_ns + round(t * 1e9)
                offered(name, intended_ns, max(0, round((now - target) * 1e9)))
                due.append(Arrival(target, intended_ns))
                t = next(times, None)
            self.queue.put_many(due)
        # Keep emitting phases and dropping stale arrivals until the shape ends.
        self._wait_until(self.t0_mono + self.shape.end_s(), phases)
        if not self._stopping:
            self._emit_phases([Phase(self.shape.end_s(), "load-end", {})], self.shape.end_s())
        while not self._stopping and len(self.queue):
            self._drop_stale(time.monotonic())
            gevent.sleep(_MAX_SLEEP_S)
        self._finish()
