"""A fake clock for the fault injectors: `wait` advances time instead of sleeping."""

from __future__ import annotations

import threading

WALL_ORIGIN_NS = 1_764_000_000_000_000_000


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0
        self.waits: list[float] = []

    def monotonic(self) -> float:
        return self.t

    def wall_ns(self) -> int:
        return WALL_ORIGIN_NS + int(round(self.t * 1e9))

    def wait(self, stop: threading.Event, timeout_s: float) -> bool:
        if stop.is_set():
            return True
        self.waits.append(timeout_s)
        self.t += max(0.0, timeout_s)
        return False
