"""CPU per wake-up of a sleeping gevent process, by timer and gap (issue 31).

    .venv/bin/python bench/wake_cost.py      # a few seconds

Why the open-model scheduler shares wake-ups between close arrivals
(`loadkit/load/generator/dispatch.py`, `COALESCE_S`): on a VM a wake-up from
idle costs tens of microseconds of the process's CPU, whichever timer ends
the sleep, so one wake-up per arrival costs a share of a core at thousands/s.
"""

from __future__ import annotations

import resource
import time

import gevent

from loadkit.load.generator import hrtimer


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timerfd_us(gap_s: float, count: int) -> float:
    timer = hrtimer.MonotonicTimer()
    try:
        start, due = _cpu_s(), time.monotonic()
        for _ in range(count):
            due += gap_s
            timer.sleep_until(due)
        return (_cpu_s() - start) / count * 1e6
    finally:
        timer.close()


def gevent_sleep_us(gap_s: float, count: int) -> float:
    start = _cpu_s()
    for _ in range(count):
        gevent.sleep(gap_s)
    return (_cpu_s() - start) / count * 1e6


def main() -> int:
    print("timer            gap ms   CPU us per wake-up")
    for gap_s in (0.0002, 0.0005, 0.001):
        count = int(1.0 / gap_s)
        if hrtimer.available():
            print(
                f"timerfd          {gap_s * 1e3:6.1f}   {gevent.spawn(timerfd_us, gap_s, count).get():6.1f}"
            )
        print(
            f"gevent.sleep     {gap_s * 1e3:6.1f}   {gevent.spawn(gevent_sleep_us, gap_s, count).get():6.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
