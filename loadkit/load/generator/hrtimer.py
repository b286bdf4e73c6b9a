"""A sleep below gevent's 1 ms timer: a Linux timerfd that the event loop watches.

gevent's timers fire up to ~1 ms late: libev rounds a poll's timeout up to
whole milliseconds, so an open-model arrival was sent 0.65-0.9 ms late at the
median whatever the rate (docs/benchmarks.md). A timerfd set to the arrival's
absolute CLOCK_MONOTONIC time (the clock of `time.monotonic()` on Linux)
becomes readable when it expires, and the event loop's poll returns for it at
once: the wait costs two system calls and no spinning, and every other
greenlet runs meanwhile. Python 3.11 has no `os.timerfd_create` (3.13 does),
hence ctypes. Where there is no timerfd (not Linux), `available()` is False and
the caller sleeps on gevent's timer as before.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from typing import Any

from gevent.hub import get_hub

_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = 0o2000000
WARM_UP_AFTER_S = 0.002  # sleeps longer than this end in two steps (`sleep_until`)
WARM_UP_S = 0.0005


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Itimerspec),
            ctypes.c_void_p,
        ]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


def available() -> bool:
    return _LIBC is not None


class MonotonicTimer:
    """`sleep_until(t)`: a greenlet waits until `time.monotonic()` reaches `t`, to ~0.1 ms."""

    def __init__(self) -> None:
        if _LIBC is None:
            raise OSError("no timerfd on this platform")
        fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self.fd = fd
        self._hub = get_hub()
        self._watcher = self._hub.loop.io(fd, 1)  # readable: expired
        self._spec = _Itimerspec()

    def sleep_until(self, target: float) -> None:
        """Block this greenlet (not the loop) until the monotonic clock reaches `target`.

        A long sleep ends in two: to `WARM_UP_S` before `target`, then to `target`.
        A CPU idle for milliseconds wakes slowly (on a VM: 0.17-0.21 ms late at the
        median for a 5-10 ms sleep, 0.05 ms for 1 ms); the second, short sleep starts
        awake (0.05-0.06 ms late), for one more wake-up per arrival at rates under 500/s.
        """
        if target - time.monotonic() > WARM_UP_AFTER_S:
            self._wait(target - WARM_UP_S)
        self._wait(target)

    def _wait(self, target: float) -> None:
        seconds = int(target)
        self._spec.it_value.tv_sec = seconds
        self._spec.it_value.tv_nsec = max(1, int((target - seconds) * 1e9))  # 0 would disarm
        if _LIBC.timerfd_settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) < 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")
        self._hub.wait(self._watcher)
        try:
            os.read(self.fd, 8)  # the expiry count: read, so the fd is not readable again
        except BlockingIOError:
            pass

    def close(self) -> None:
        if self.fd >= 0:
            self._watcher.close()
            os.close(self.fd)
            self.fd = -1
