"""When a fault is on: a seeded periodic schedule, and the thread that follows it.

Every injector in `loadkit.faults` is a `ScheduledFault`: `start()` prepares
it (spawns nothing that acts yet) and starts one background thread that waits
for each window of its `FaultSchedule`, switches the fault on (`_begin`),
waits, and switches it off (`_end`). Each real switch is logged as ground
truth in the run's events log (`kind: fault`, `action: start|end`) with the
wall-clock time taken right after the switch took effect, so analysis is
scored against what happened, not against the plan.

The clock is injectable (`Clock`): tests drive the loop with a fake clock
whose `wait` advances time instantly instead of sleeping.
"""

from __future__ import annotations

import atexit
import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from loadkit.errors import UsageError
from loadkit.rundir.writer import append_event, now_ns


class FaultUnavailable(UsageError):
    """This fault cannot be injected on this host (permissions, missing cgroup controller).

    Callers that can do without the fault (the diagnosis benchmark, tests)
    catch it and record a skip with `message` as the reason.
    """


@dataclass(frozen=True)
class FaultSchedule:
    """Fault windows: `duration_s` long, every `period_s`, the first at `first_start_s`.

    Each window's start is shifted by a seeded uniform jitter in
    [-jitter_s, +jitter_s] (same seed, same windows). Windows stop at `count`
    windows or when a window would end after `until_s` (seconds from the
    schedule start), whichever comes first; with neither, it runs until stopped.
    `period_s=None` means a single window.
    """

    duration_s: float
    period_s: float | None = None
    first_start_s: float = 0.0
    jitter_s: float = 0.0
    seed: int = 0
    until_s: float | None = None
    count: int | None = None

    def __post_init__(self) -> None:
        if self.duration_s <= 0:
            raise UsageError(f"fault duration must be > 0 s, got {self.duration_s}")
        if self.first_start_s < 0 or self.jitter_s < 0:
            raise UsageError("fault first start and jitter must be >= 0 s")
        if self.period_s is not None and self.duration_s + 2 * self.jitter_s >= self.period_s:
            raise UsageError(
                f"fault windows overlap: duration {self.duration_s:g} s + 2 x jitter "
                f"{self.jitter_s:g} s must be shorter than the period {self.period_s:g} s",
                hint="lengthen the period or shorten the duration/jitter",
            )
        if self.count is not None and self.count < 1:
            raise UsageError(f"fault count must be >= 1, got {self.count}")

    def windows(self) -> Iterator[tuple[float, float]]:
        """(start, end) offsets in seconds from the schedule start, in order."""
        rng = random.Random(self.seed)
        index = 0
        last_end = 0.0
        while self.count is None or index < self.count:
            if index > 0 and self.period_s is None:
                return
            nominal = self.first_start_s + index * (self.period_s or 0.0)
            shift = rng.uniform(-self.jitter_s, self.jitter_s) if self.jitter_s else 0.0
            start = max(nominal + shift, last_end, 0.0)
            end = start + self.duration_s
            if self.until_s is not None and end > self.until_s:
                return
            yield start, end
            last_end = end
            index += 1

    def describe(self) -> dict[str, Any]:
        return asdict(self)


class Clock(Protocol):
    """What the schedule loop needs from time: a monotonic reading, wall time, a wait."""

    def monotonic(self) -> float: ...

    def wall_ns(self) -> int: ...

    def wait(self, stop: threading.Event, timeout_s: float) -> bool:
        """Wait up to `timeout_s` or until `stop` is set; True if it was set."""
        ...


class RealClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ns(self) -> int:
        return now_ns()

    def wait(self, stop: threading.Event, timeout_s: float) -> bool:
        return stop.wait(max(0.0, timeout_s))


@dataclass(frozen=True)
class FaultWindow:
    """One window as it really happened (wall-clock ns), for callers and tests."""

    index: int
    start_ns: int
    end_ns: int | None = None


class ScheduledFault(ABC):
    """Base of the injectors: a schedule, a thread, ground truth, a context manager.

    Subclasses set `name` (the event name) and implement `_begin()` (switch
    the fault on; return extra ground-truth attributes) and `_end()` (switch
    it off; must be safe to call whatever state `_begin` left). They may
    override `_prepare()` / `_cleanup()` for set-up done once per `start()` /
    `stop()`.
    """

    name: str = "fault"

    def __init__(
        self,
        schedule: FaultSchedule,
        *,
        run_dir: str | Path | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.schedule = schedule
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.clock: Clock = clock or RealClock()
        self.history: list[FaultWindow] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()  # _begin/_end against stop()
        self._active: FaultWindow | None = None
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    # ---------------------------------------------------------------- hooks
    def _prepare(self) -> None:
        """Once, in start(), before the thread runs (may raise FaultUnavailable)."""
        return None

    def _cleanup(self) -> None:
        """Once, in stop(), after the last window ended."""
        return None

    @abstractmethod
    def _begin(self) -> dict[str, Any]:
        """Switch the fault on; return attributes for the ground-truth event."""

    @abstractmethod
    def _end(self) -> None:
        """Switch the fault off."""

    def describe(self) -> dict[str, Any]:
        """Parameters for the run manifest (`scenario.params`)."""
        return {"fault": self.name, "schedule": self.schedule.describe()}

    # ------------------------------------------------------------- lifecycle
    @property
    def active(self) -> bool:
        return self._active is not None

    def start(self) -> ScheduledFault:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} injector already started")
        self._prepare()
        self._stop.clear()
        self._t0 = self.clock.monotonic()
        atexit.register(self.stop)
        self._thread = threading.Thread(
            target=self._run, name=f"loadkit-fault-{self.name}", daemon=True
        )
        self._thread.start()
        return self

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the schedule to run out; True if it did (the fault stays prepared)."""
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def stop(self) -> None:
        """End an active window now, stop the schedule and clean up; idempotent."""
        atexit.unregister(self.stop)
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(10.0)
        with self._lock:
            self._switch_off()
        self._cleanup()

    def __enter__(self) -> ScheduledFault:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ----------------------------------------------------------------- loop
    def _sleep_until(self, offset_s: float) -> bool:
        """Wait until `offset_s` after start; False if stopped meanwhile."""
        while not self._stop.is_set():
            remaining = self._t0 + offset_s - self.clock.monotonic()
            if remaining <= 0:
                return True
            if self.clock.wait(self._stop, remaining):
                return False
        return False

    def _run(self) -> None:
        try:
            for index, (start_s, end_s) in enumerate(self.schedule.windows()):
                if not self._sleep_until(start_s):
                    return
                with self._lock:
                    if self._stop.is_set():
                        return
                    self._switch_on(index, start_s, end_s)
                self._sleep_until(end_s)
                with self._lock:
                    self._switch_off()
        except BaseException as exc:  # the thread must not die silently
            self.error = exc
            with self._lock:
                try:
                    if self._active is not None:
                        self._switch_off()
                    else:
                        self._end()  # undo a half-done _begin
                except Exception:
                    pass
            self._log("error", "fault-injector", source=self.name, message=str(exc))

    def _switch_on(self, index: int, start_s: float, end_s: float) -> None:
        attrs = self._begin()
        t_ns = self.clock.wall_ns()
        self._active = FaultWindow(index, t_ns)
        self._log(
            "fault",
            self.name,
            t_ns=t_ns,
            action="start",
            window=index,
            planned_start_s=round(start_s, 3),
            planned_duration_s=round(end_s - start_s, 3),
            period_s=self.schedule.period_s,
            **attrs,
        )

    def _switch_off(self) -> None:
        if self._active is None:
            return
        self._end()
        t_ns = self.clock.wall_ns()
        window = FaultWindow(self._active.index, self._active.start_ns, t_ns)
        self._active = None
        self.history.append(window)
        self._log("fault", self.name, t_ns=t_ns, action="end", window=window.index)

    def _log(self, kind: str, name: str, **attrs: Any) -> None:
        if self.run_dir is not None:
            append_event(self.run_dir, kind, name, **attrs)
