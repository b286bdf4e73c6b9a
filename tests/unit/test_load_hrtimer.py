"""The timerfd sleep: on time below gevent's 1 ms timer, other greenlets run meanwhile."""

from __future__ import annotations

import time

import gevent
import pytest

from loadkit.load.generator import hrtimer

pytestmark = [
    pytest.mark.skipif(not hrtimer.available(), reason="no timerfd on this platform"),
    pytest.mark.platform_skip,
]


@pytest.mark.quiet_host  # a median within 0.2 ms: a busy core delays the wake-up itself
def test_sleep_until_wakes_at_the_target_not_before_and_lets_other_greenlets_run() -> None:
    timer = hrtimer.MonotonicTimer()
    ticks = []
    other = gevent.spawn(lambda: [ticks.append(gevent.sleep(0.001)) for _ in range(1000)])
    lags = []
    target = time.monotonic()
    try:
        for _ in range(200):
            target += 0.0013  # off gevent's millisecond grid
            timer.sleep_until(target)
            lags.append(time.monotonic() - target)
    finally:
        other.kill()
        timer.close()
    assert min(lags) >= 0.0  # never early
    assert sorted(lags)[len(lags) // 2] <= 0.0002  # gevent's timer: 0.65-0.9 ms late
    assert len(ticks) >= 100  # the loop kept serving everyone else


def test_a_target_in_the_past_returns_at_once() -> None:
    timer = hrtimer.MonotonicTimer()
    start = time.monotonic()
    timer.sleep_until(start - 1.0)
    assert time.monotonic() - start < 0.05
    timer.close()
    assert timer.fd == -1
