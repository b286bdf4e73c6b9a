"""Open-model dispatch: hand scheduled arrivals to a bounded pool of Locust users.

One scheduler greenlet per process walks `arrival_times(...)`, waits for each
intended time and queues the arrival; idle users take arrivals from the
queue. An arrival that waits longer than `max_start_delay_s` for a free user
is counted as dropped (never sent, never silently skipped). Latency is
measured from the intended time, so a slow server (or a saturated generator)
shows up in the corrected latency instead of lowering the offered rate.

Idle users block without a timeout (a pool of 1,000 users polling every
0.1 s cost a quarter of the process's CPU) and are woken one per arrival,
most recently idle first, and none while the process's own loop is behind and
a busy user will come back for the arrival (`ArrivalQueue`); stopping wakes
them all.

Each pass of the scheduler queues every arrival already due at once, and
arrivals closer together than `COALESCE_S` share one wake-up; a user that
finishes a request takes the next queued arrival without going back to the hub. The scheduler
sleeps to each due time on a timerfd (`hrtimer`), ~0.1 ms late instead of
gevent's ~1 ms, at the same CPU per wake-up.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import NamedTuple

import gevent
from gevent.hub import Waiter, get_hub

from loadkit.load.generator import hrtimer
from loadkit.load.generator.arrivals import arrival_times
from loadkit.load.generator.hrtimer import MonotonicTimer
from loadkit.load.generator.recorder import LatencyRecorder
from loadkit.load.shapes import Phase, Shape

# Longest single sleep of the scheduler: it wakes this often to emit phases and drop stale arrivals.
_MAX_SLEEP_S = 0.05
# Arrivals closer together than this share one wake-up of the scheduler (`_schedule`):
# at most 2,000 wake-ups a second, half of gevent's 1 ms timer; at 1,000/s and below
# (constant spacing) every arrival still has its own.
COALESCE_S = 0.0005
# The scheduler woke this much later than it asked: the process's own loop is behind (its
# CPU is the bottleneck), so no idle user is woken while a busy one can take the
# arrival (`ArrivalQueue`). Well above the timer's own lateness (~0.1 ms on a timerfd, ~1 ms
# on gevent's), and far below the 10 ms at which a run is told the generator held it back.
CONGESTED_S = 0.002


class Arrival(NamedTuple):
    intended_mono: float  # time.monotonic() of the intended send
    intended_ns: int  # wall clock of the intended send


PhaseCallback = Callable[[Phase, int], None]


class ArrivalQueue:
    """Arrivals waiting for a user, and idle users waiting for an arrival.

    An arrival wakes the most recently idle user (LIFO): with a pool larger than
    the concurrency, the same few users (their connections, their memory) stay
    busy and the rest sleep, at no cost per second. `take` blocks without a
    timeout until an arrival comes or the queue is closed; only greenlets may
    block in it. Arrivals stay in the queue until a user runs, so a user killed
    while being woken loses nothing.

    A user without a connection (`cold`) is woken only when no warm user is
    idle. No user is woken while the process is `congested` (its scheduler
    wakes late: the CPU, not the server, is what the arrivals wait for) as long
    as a busy user will come back for them: each more user in a congested loop
    makes every request in it dearer. At 3,500/s against nginx a 0.1 s stall
    used to wake a user per late arrival, ~400 at once, and the process never
    caught up; a pool capped at 100 caught up within a second (issue 31).
    """

    def __init__(self) -> None:
        self._pending: deque[Arrival] = deque()
        self._warm: list[Waiter] = []  # idle users with a connection; a stack
        self._cold: list[Waiter] = []  # idle users without one; a stack
        self._waking = 0  # users woken for an arrival that have not run yet
        self._hub = get_hub()
        self.closed = False
        self.serving = 0  # users sending an arrival (`OpenModelDispatcher.take`/`served`)
        self.congested = False  # set by the scheduler (`OpenModelDispatcher._schedule`)

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def idle_users(self) -> int:
        return len(self._warm) + len(self._cold)

    def peek(self) -> Arrival | None:
        return self._pending[0] if self._pending else None

    def put(self, arrival: Arrival) -> None:
        self._pending.append(arrival)
        self._wake(1)

    def put_many(self, arrivals: list[Arrival]) -> None:
        """Queue arrivals due together; wakes an idle user for each, as `put` does."""
        self._pending.extend(arrivals)
        self._wake(len(arrivals))

    def pop(self) -> Arrival:
        return self._pending.popleft()

    def _wake(self, arrivals: int) -> None:
        """Idle users for `arrivals` new arrivals: warm users first, none while congested.

        Congested, the arrivals wait for the busy users, who take them as they finish,
        unless there are none (nobody else would come for them).
        """
        busy = self.serving or self._waking
        if self.congested and busy:
            return
        warm, cold = self._warm, self._cold
        n = min(1 if self.congested else arrivals, len(warm) + len(cold))
        run_callback = self._hub.loop.run_callback
        for _ in range(n):
            run_callback((warm or cold).pop().switch, None)
        self._waking += n

    def take(self, cold: bool = False) -> Arrival | None:
        """The oldest arrival; blocks while there is none; None once closed and empty.

        A `cold` user (no connection yet) waits on its own stack (`_wake`).
        Otherwise each user Locust spawns would go idle on top, take the next
        arrival and open a connection of its own: at 2,500/s the pool's 1,250
        users opened ~1,200 connections in 10 s, a third of the process's CPU
        (connect + the resolver's thread), for a concurrency of ~5.
        """
        pending = self._pending
        while not pending:
            if self.closed:
                return None
            waiter = Waiter(self._hub)
            idle = self._cold if cold else self._warm
            idle.append(waiter)
            try:
                waiter.get()
            except BaseException:
                # Killed while idle. If an arrival had already picked this user, pick another.
                if waiter in idle:
                    idle.remove(waiter)
                elif not self.closed:
                    self._waking -= 1
                    if pending:
                        self._wake(1)
                raise
            if not self.closed:
                self._waking -= 1
        return pending.popleft()

    def close(self) -> None:
        """No more arrivals: wake every idle user (their `take` returns None once empty)."""
        self.closed = True
        idle = self._warm + self._cold
        self._warm, self._cold = [], []
        for waiter in idle:
            self._hub.loop.run_callback(waiter.switch, None)


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
        precise: bool = True,
        coalesce_s: float = COALESCE_S,
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
        self.coalesce_s = coalesce_s
        self.precise = precise  # sub-millisecond wake-ups (hrtimer), where the platform has them

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

    def take(self, cold: bool = False) -> Arrival | None:
        """The next arrival for an idle user (blocks until one is due); None once finished.

        `cold`: the user has no connection yet (`ArrivalQueue.take`).
        """
        queue = self.queue
        bound = self.max_start_delay_s
        while True:
            arrival = queue.take(cold)
            if arrival is None:
                return None
            if time.monotonic() - arrival.intended_mono > bound:
                self.recorder.dropped(self.request_name)
                continue
            queue.serving += 1
            return arrival

    def served(self) -> None:
        """The user that took an arrival is done with it (sent, failed or cancelled)."""
        self.queue.serving -= 1

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

    def _wait_until(
        self, target: float, phases: list[Phase], timer: MonotonicTimer | None = None
    ) -> None:
        """Return at `target` (monotonic), emitting phases and dropping stale arrivals meanwhile.

        The last stretch (under `_MAX_SLEEP_S`) is slept on `timer` (a timerfd: ~0.1 ms
        late) when there is one, else on gevent's timer (0.65-0.9 ms late at the median:
        libev rounds a poll's timeout up to whole milliseconds).
        """
        assert self.t0_mono is not None
        t0 = self.t0_mono
        queue = self.queue
        while not self._stopping:
            now = time.monotonic()
            if phases and phases[0].t_s <= now - t0:
                self._emit_phases(phases, now - t0)
            if len(queue):
                self._drop_stale(now)
            remaining = target - now
            if remaining <= 0:
                return
            if remaining > _MAX_SLEEP_S:
                gevent.sleep(_MAX_SLEEP_S)
            elif timer is not None:
                timer.sleep_until(target)
            else:
                gevent.sleep(remaining)

    def _timer(self) -> MonotonicTimer | None:
        if not (self.precise and hrtimer.available()):
            return None
        try:
            return MonotonicTimer()
        except OSError:
            return None

    def _schedule(
        self, times: Iterator[float], phases: list[Phase], timer: MonotonicTimer | None
    ) -> None:
        """Queue each arrival at its time, one wake-up for every arrival due within `coalesce_s`.

        The scheduler sleeps to the last arrival of a cluster (arrivals less than
        `coalesce_s` after the cluster's first), so none is sent early and each keeps
        its own measured lag: the cluster's first is up to `coalesce_s` late. A wake-up
        from idle costs ~30-40 us of CPU on a VM whatever the timer (`bench/wake_cost.py`):
        one per arrival was 0.1-0.2 cores at 3,000-5,000/s.
        """
        assert self.t0_mono is not None and self.t0_ns is not None
        t0, t0_ns = self.t0_mono, self.t0_ns
        offered = self.recorder.offered
        name = self.request_name
        window = self.coalesce_s
        t = next(times, None)
        ahead: deque[float] = deque()  # arrivals read past `t`, in order
        while t is not None:
            while not ahead or ahead[-1] - t < window:  # read past this cluster
                nxt = next(times, None)
                if nxt is None:
                    break
                ahead.append(nxt)
            last = t
            for later in ahead:
                if later - t >= window:
                    break
                last = later
            self._wait_until(t0 + last, phases, timer)
            if self._stopping:
                return
            now = time.monotonic()
            self.queue.congested = now - (t0 + last) > CONGESTED_S
            due: list[Arrival] = []
            while t is not None and t0 + t <= now:  # each keeps its own lag
                target = t0 + t
                intended_ns = t0_ns + round(t * 1e9)
                offered(name, intended_ns, max(0, round((now - target) * 1e9)))
                due.append(Arrival(target, intended_ns))
                t = ahead.popleft() if ahead else next(times, None)
            self.queue.put_many(due)

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
        timer = self._timer()
        try:
            self._schedule(times, phases, timer)
        finally:
            if timer is not None:
                timer.close()
        # Keep emitting phases and dropping stale arrivals until the shape ends.
        self._wait_until(self.t0_mono + self.shape.end_s(), phases)
        if not self._stopping:
            self._emit_phases([Phase(self.shape.end_s(), "load-end", {})], self.shape.end_s())
        while not self._stopping and len(self.queue):
            self._drop_stale(time.monotonic())
            gevent.sleep(_MAX_SLEEP_S)
        self._finish()
