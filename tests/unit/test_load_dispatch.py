"""Open-model hand-off of arrivals to idle users, and payload blocks (greenlets, no processes)."""

from __future__ import annotations

import time

import gevent
import pytest

from loadkit.load.generator import hrtimer
from loadkit.load.generator.dispatch import Arrival, ArrivalQueue, OpenModelDispatcher
from loadkit.load.shapes import Constant


def _arrival(age_s: float = 0.0) -> Arrival:
    return Arrival(time.monotonic() - age_s, time.time_ns())


def _idle_users(queue: ArrivalQueue, names: list[str], got: list[tuple[str, Arrival | None]]):
    def user(name: str) -> None:
        got.append((name, queue.take()))

    greenlets = []
    for name in names:
        greenlets.append(gevent.spawn(user, name))
        gevent.sleep(0)  # each blocks in turn: "c" is the most recently idle
    return greenlets


def test_idle_users_block_without_polling_and_the_last_idle_is_woken_first() -> None:
    # GIVEN three idle users
    queue = ArrivalQueue()
    got: list[tuple[str, Arrival | None]] = []
    greenlets = _idle_users(queue, ["a", "b", "c"], got)
    # THEN they stay blocked, with nothing scheduled (no timeouts)
    gevent.sleep(0.05)
    assert queue.idle_users == 3 and got == []
    # WHEN one arrival comes, the most recently idle user takes it
    first = _arrival()
    queue.put(first)
    gevent.sleep(0)
    assert got == [("c", first)] and queue.idle_users == 2 and len(queue) == 0
    # WHEN the queue closes, every idle user is released with None
    queue.close()
    gevent.joinall(greenlets, timeout=1)
    assert sorted(got[1:], key=lambda g: g[0]) == [("a", None), ("b", None)]
    assert queue.take() is None  # closed and empty: never blocks again


def test_a_user_without_a_connection_is_woken_only_when_every_warm_user_is_busy() -> None:
    # GIVEN two warm users (connected) and, idle after them, a new one without a connection
    queue = ArrivalQueue()
    got: list[tuple[str, Arrival | None]] = []
    greenlets = _idle_users(queue, ["warm1", "warm2"], got)
    greenlets.append(gevent.spawn(lambda: got.append(("cold", queue.take(cold=True)))))
    gevent.sleep(0)
    # WHEN two arrivals come, the warm users take them (the newest idle one would be "cold")
    queue.put_many([_arrival(), _arrival()])
    gevent.sleep(0)
    assert sorted(name for name, _ in got) == ["warm1", "warm2"]
    # ... and only a third, with every warm user busy, opens a connection
    queue.put(_arrival())
    gevent.sleep(0)
    assert [name for name, _ in got][-1] == "cold"
    queue.close()
    gevent.joinall(greenlets, timeout=1)


def test_a_congested_process_wakes_no_idle_user_while_a_busy_one_will_come_back() -> None:
    # GIVEN two idle users, one user busy sending, and a scheduler that woke late
    queue = ArrivalQueue()
    got: list[tuple[str, Arrival | None]] = []
    greenlets = _idle_users(queue, ["a", "b"], got)
    queue.serving = 1
    queue.congested = True
    # WHEN an arrival comes, no idle user is woken for it: the busy one takes it when done
    late = _arrival()
    queue.put(late)
    gevent.sleep(0)
    assert got == [] and queue.idle_users == 2
    queue.serving = 0
    assert queue.take() == late
    # WHEN nobody is busy, one idle user is woken, congested or not (nobody else would come)
    queue.put_many([_arrival(), _arrival()])
    gevent.sleep(0)
    assert [name for name, _ in got] == ["b"] and len(queue) == 1
    queue.close()
    gevent.joinall(greenlets, timeout=1)


def test_arrivals_queued_before_close_are_still_handed_out() -> None:
    queue = ArrivalQueue()
    arrival = _arrival()
    queue.put(arrival)
    queue.close()
    assert queue.take() == arrival
    assert queue.take() is None


def test_a_user_killed_while_being_woken_passes_the_arrival_on() -> None:
    # GIVEN two idle users; "b" (the last idle) is being killed (a run stopping it)
    queue = ArrivalQueue()
    got: list[tuple[str, Arrival | None]] = []
    a, b = _idle_users(queue, ["a", "b"], got)
    b.kill(block=False)
    # WHEN an arrival picks "b" before the kill has run
    arrival = _arrival()
    queue.put(arrival)
    gevent.sleep(0)
    gevent.sleep(0)
    # THEN "a" gets the arrival: nothing is lost
    assert got == [("a", arrival)]
    assert b.dead and a.dead and queue.idle_users == 0


class _Counts:
    def __init__(self) -> None:
        self.dropped_count = 0

    def dropped(self, name: str, now_ns: int | None = None) -> None:
        self.dropped_count += 1


def test_dispatcher_drops_arrivals_older_than_the_bound_and_stop_releases_users() -> None:
    counts = _Counts()
    dispatcher = OpenModelDispatcher(
        Constant(rate=1.0, duration_s=1.0),
        counts,  # type: ignore[arg-type]
        request_name="infer",
        max_start_delay_s=0.5,
    )
    fresh = _arrival()
    dispatcher.queue.put(_arrival(age_s=2.0))  # waited too long for a free user
    dispatcher.queue.put(fresh)
    assert dispatcher.take() == fresh
    assert counts.dropped_count == 1
    # GIVEN an idle user, and two arrivals queued that no user has run with yet
    waiting = gevent.spawn(dispatcher.take)
    gevent.sleep(0)
    dispatcher.queue.put(_arrival())
    dispatcher.queue.put(_arrival())
    # WHEN the dispatcher stops before the user runs
    dispatcher.stop()
    # THEN the queued arrivals count as dropped, and the user is released empty-handed
    assert counts.dropped_count == 1 + 2
    assert len(dispatcher.queue) == 0
    assert waiting.get(timeout=1) is None
    assert dispatcher.finished
    assert dispatcher.take() is None


class _Offered(_Counts):
    def __init__(self) -> None:
        super().__init__()
        self.lags_ns: list[int] = []
        self.intended_ns: list[int] = []

    def offered(self, name: str, intended_ns: int, dispatch_lag_ns: int = 0) -> None:
        self.intended_ns.append(intended_ns)
        self.lags_ns.append(dispatch_lag_ns)


def _run_dispatcher(rate: float, duration_s: float, precise: bool):
    """Run a dispatcher to the shape's end; (recorder, scheduler passes, arrivals queued)."""
    recorder = _Offered()
    dispatcher = OpenModelDispatcher(
        Constant(rate=rate, duration_s=duration_s),
        recorder,  # type: ignore[arg-type]
        request_name="infer",
        precise=precise,
    )
    passes: list[int] = []
    put_many = dispatcher.queue.put_many

    def counted(arrivals: list[Arrival]) -> None:
        passes.append(len(arrivals))
        put_many(arrivals)

    dispatcher.queue.put_many = counted  # type: ignore[method-assign]
    queued: list[Arrival] = []

    def user() -> None:  # takes every arrival as soon as it is queued
        while (arrival := dispatcher.take()) is not None:
            queued.append(arrival)
            dispatcher.served()

    consumer = gevent.spawn(user)
    dispatcher.start()
    dispatcher._greenlet.join(timeout=duration_s + 5)  # type: ignore[union-attr]
    consumer.join(timeout=1)
    return recorder, passes, queued


def test_the_scheduler_queues_every_due_arrival_in_one_pass_and_keeps_each_ones_lag() -> None:
    # GIVEN 2,000 arrivals/s, faster than gevent's 1 ms timer (no timerfd)
    recorder, passes, queued = _run_dispatcher(2000.0, 0.25, precise=False)
    # THEN every arrival is offered once, in order, each with its own lag
    assert len(recorder.intended_ns) == len(queued) == 500
    assert recorder.intended_ns == sorted(recorder.intended_ns)
    assert [a.intended_ns for a in queued] == recorder.intended_ns
    assert all(lag >= 0 for lag in recorder.lags_ns)
    assert recorder.dropped_count == 0
    # AND the scheduler woke fewer times than there were arrivals (several per pass)
    assert sum(passes) == 500
    assert len(passes) < 500 * 0.75


@pytest.mark.skipif(not hrtimer.available(), reason="no timerfd on this platform")
@pytest.mark.platform_skip
@pytest.mark.quiet_host  # a median within 0.2 ms: a busy core delays the wake-up itself
@pytest.mark.parametrize("rate", [100.0, 200.0, 1000.0])
def test_the_timerfd_sends_on_time_where_gevents_timer_is_late(rate: float) -> None:
    # GIVEN arrivals 10, 5 and 1 ms apart (gevent's timer alone: 0.65-0.9 ms late at the median)
    recorder, _, _ = _run_dispatcher(rate, 0.5, precise=True)
    # THEN the median arrival is queued within 0.2 ms of its intended time
    lags = sorted(recorder.lags_ns)
    assert len(lags) == int(rate * 0.5)
    assert lags[len(lags) // 2] <= 200_000


@pytest.mark.skipif(not hrtimer.available(), reason="no timerfd on this platform")
@pytest.mark.platform_skip
def test_close_arrivals_share_a_wake_up_and_none_is_queued_before_its_time() -> None:
    # GIVEN arrivals 0.25 ms apart, closer than the scheduler's coalescing window (0.5 ms)
    recorder = _Offered()
    dispatcher = OpenModelDispatcher(
        Constant(rate=4000.0, duration_s=0.25),
        recorder,  # type: ignore[arg-type]
        request_name="infer",
        coalesce_s=0.0005,
    )
    passes: list[tuple[float, list[Arrival]]] = []
    dispatcher.queue.put_many = lambda due: passes.append((time.monotonic(), due))  # type: ignore[method-assign]
    dispatcher.start()
    dispatcher._greenlet.join(timeout=5)  # type: ignore[union-attr]
    # THEN every arrival is queued once, none before its intended time
    queued = [a for _, due in passes for a in due]
    assert len(queued) == len(recorder.lags_ns) == 1000
    assert all(a.intended_mono <= at for at, due in passes for a in due)
    # AND the scheduler woke at most once per two arrivals
    assert len(passes) <= 500


def test_put_many_wakes_one_idle_user_per_arrival() -> None:
    queue = ArrivalQueue()
    got: list[tuple[str, Arrival | None]] = []
    greenlets = _idle_users(queue, ["a", "b", "c"], got)
    arrivals = [_arrival(), _arrival()]
    queue.put_many(arrivals)
    gevent.sleep(0)
    assert [name for name, _ in got] == ["c", "b"]  # the two most recently idle
    assert queue.idle_users == 1
    queue.close()
    gevent.joinall(greenlets, timeout=1)
