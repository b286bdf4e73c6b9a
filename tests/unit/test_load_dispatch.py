"""Open-model hand-off of arrivals to idle users, and payload blocks (greenlets, no processes)."""

from __future__ import annotations

import time

import gevent

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
