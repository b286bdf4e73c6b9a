"""Traffic shapes: a target arrival rate r(t) over a run, as plain pure objects.

A shape knows three things: `rate_at(t_s)` (arrivals per second at `t_s`
seconds after the start), `duration_s` (when arrivals stop) and `phases()`
(named moments, e.g. `burst-start`, that go to the run's events log). Shapes
import nothing from Locust or gevent, so they can be unit-tested and used by
the orchestrator to show the offered rate.

Times are seconds from the start of the load; rates are arrivals per second
summed over all generator processes.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from loadkit.errors import UsageError

# Resolution used to find a shape's peak rate numerically.
_PEAK_GRID_S = 0.05


class Phase(NamedTuple):
    """A named moment of a shape: written as a `phase` event when the load passes it."""

    t_s: float
    name: str
    attrs: dict[str, Any]


class Shape(ABC):
    """A target arrival rate over time; subclasses are frozen dataclasses."""

    duration_s: float

    @abstractmethod
    def rate_at(self, t_s: float) -> float:
        """Target arrivals per second at `t_s` (0 outside [0, duration_s))."""

    def phases(self) -> list[Phase]:
        return []

    def peak_rate(self) -> float:
        """Highest target rate (numerically, on a 50 ms grid plus the phase times)."""
        n = max(1, int(math.ceil(self.duration_s / _PEAK_GRID_S)))
        times = [i * _PEAK_GRID_S for i in range(n)] + [p.t_s for p in self.phases()]
        return max((self.rate_at(t) for t in times if 0 <= t < self.duration_s), default=0.0)

    def end_s(self) -> float:
        """When arrivals stop: `duration_s`, or sooner for a shape steered while it runs."""
        return self.duration_s

    def explicit_arrivals(self) -> Sequence[float] | None:
        """Exact arrival times, for shapes replayed from request timestamps; else None."""
        return None

    def describe(self) -> dict[str, Any]:
        """Kind and parameters, for the manifest."""
        params = asdict(self) if hasattr(self, "__dataclass_fields__") else {}  # type: ignore[call-overload]
        params = {k: v for k, v in params.items() if not k.startswith("_")}
        return {"kind": type(self).__name__, **params}


def _number(text: str) -> int | float:
    """An int when the text is one (epoch nanoseconds lose precision as floats)."""
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        return float(text)


def _check(condition: bool, message: str, hint: str | None = None) -> None:
    if not condition:
        raise UsageError(message, hint=hint)


def _inside(t_s: float, duration_s: float) -> bool:
    return 0.0 <= t_s < duration_s


@dataclass(frozen=True)
class Constant(Shape):
    """The same rate for the whole run (soak tests, rate-accuracy checks)."""

    rate: float
    duration_s: float

    def __post_init__(self) -> None:
        _check(self.rate >= 0, f"rate must be >= 0 arrivals/s, got {self.rate}")
        _check(self.duration_s > 0, f"duration must be > 0 s, got {self.duration_s}")

    def rate_at(self, t_s: float) -> float:
        return self.rate if _inside(t_s, self.duration_s) else 0.0


@dataclass(frozen=True)
class Ramp(Shape):
    """A linear change from `start_rate` to `end_rate` over the run."""

    start_rate: float
    end_rate: float
    duration_s: float

    def __post_init__(self) -> None:
        _check(min(self.start_rate, self.end_rate) >= 0, "ramp rates must be >= 0 arrivals/s")
        _check(self.duration_s > 0, f"duration must be > 0 s, got {self.duration_s}")

    def rate_at(self, t_s: float) -> float:
        if not _inside(t_s, self.duration_s):
            return 0.0
        return self.start_rate + (self.end_rate - self.start_rate) * t_s / self.duration_s


@dataclass(frozen=True)
class Steps(Shape):
    """A staircase: `start_rate`, then `+ step_rate` every `step_s`, for `steps` steps.

    Used to find the knee: the step after which latency stops being flat.
    Each step is a `step` phase with its `rate`.
    """

    start_rate: float
    step_rate: float
    step_s: float
    steps: int

    def __post_init__(self) -> None:
        _check(self.start_rate >= 0, "steps: start_rate must be >= 0 arrivals/s")
        _check(self.step_s > 0, f"steps: step_s must be > 0 s, got {self.step_s}")
        _check(self.steps >= 1, f"steps: need at least 1 step, got {self.steps}")
        _check(
            self.start_rate + self.step_rate * (self.steps - 1) >= 0,
            "steps: the last step's rate would be negative",
        )

    @property
    def duration_s(self) -> float:  # type: ignore[override]
        return self.step_s * self.steps

    def rate_at(self, t_s: float) -> float:
        if not _inside(t_s, self.duration_s):
            return 0.0
        index = min(int(t_s // self.step_s), self.steps - 1)
        return self.start_rate + self.step_rate * index

    def phases(self) -> list[Phase]:
        return [
            Phase(
                i * self.step_s, "step", {"rate": self.start_rate + self.step_rate * i, "step": i}
            )
            for i in range(self.steps)
        ]


def _trapezoid(t: float, start: float, rise: float, hold: float, fall: float) -> float:
    """0..1 level of one burst: linear rise, flat hold, linear fall."""
    t -= start
    if t < 0:
        return 0.0
    if t < rise:
        return t / rise
    t -= rise
    if t < hold:
        return 1.0
    t -= hold
    if t < fall:
        return 1.0 - t / fall
    return 0.0


@dataclass(frozen=True)
class Burst(Shape):
    """Steady `base_rate`, then `multiplier` x within `rise_s`, hold, fall back, observe.

    Timeline: `steady_s` at base, `rise_s` linear rise to peak, `hold_s` at
    peak, `fall_s` linear fall to base, `recover_s` at base (watch whether
    latency comes back or queues pile up). Phases: `burst-start` (rise
    begins), `burst-peak` (peak reached), `burst-fall` (fall begins),
    `burst-end` (back at base: recovery is measured from here).
    """

    base_rate: float
    multiplier: float = 2.0
    steady_s: float = 30.0
    rise_s: float = 10.0
    hold_s: float = 30.0
    fall_s: float = 10.0
    recover_s: float = 60.0

    def __post_init__(self) -> None:
        _check(self.base_rate >= 0, "burst: base_rate must be >= 0 arrivals/s")
        _check(self.multiplier > 0, f"burst: multiplier must be > 0, got {self.multiplier}")
        for name in ("steady_s", "rise_s", "hold_s", "fall_s", "recover_s"):
            _check(getattr(self, name) >= 0, f"burst: {name} must be >= 0 s")

    @property
    def duration_s(self) -> float:  # type: ignore[override]
        return self.steady_s + self.rise_s + self.hold_s + self.fall_s + self.recover_s

    @property
    def peak_rate_value(self) -> float:
        return self.base_rate * self.multiplier

    def rate_at(self, t_s: float) -> float:
        if not _inside(t_s, self.duration_s):
            return 0.0
        level = _trapezoid(t_s, self.steady_s, self.rise_s, self.hold_s, self.fall_s)
        return self.base_rate * (1.0 + (self.multiplier - 1.0) * level)

    def phases(self) -> list[Phase]:
        peak = self.peak_rate_value
        t_peak = self.steady_s + self.rise_s
        t_fall = t_peak + self.hold_s
        return [
            Phase(self.steady_s, "burst-start", {"rate": peak, "multiplier": self.multiplier}),
            Phase(t_peak, "burst-peak", {"rate": peak}),
            Phase(t_fall, "burst-fall", {"rate": self.base_rate}),
            Phase(t_fall + self.fall_s, "burst-end", {"rate": self.base_rate}),
        ]


@dataclass(frozen=True)
class PeriodicBursts(Shape):
    """A spike train: every `period_s`, `multiplier` x base for `duty` of the period.

    `rise_s` (default 0: a square wave) ramps each spike up and down. The first
    spike starts at `offset_s`. Phases: `burst-start` / `burst-end` per spike.
    """

    base_rate: float
    multiplier: float
    period_s: float
    duty: float
    duration_s: float
    rise_s: float = 0.0
    offset_s: float = 0.0

    def __post_init__(self) -> None:
        _check(self.base_rate >= 0, "periodic bursts: base_rate must be >= 0 arrivals/s")
        _check(self.period_s > 0, f"periodic bursts: period_s must be > 0, got {self.period_s}")
        _check(0 < self.duty < 1, f"periodic bursts: duty must be in (0, 1), got {self.duty}")
        _check(self.duration_s > 0, "periodic bursts: duration_s must be > 0")
        _check(
            2 * self.rise_s <= self.duty * self.period_s,
            "periodic bursts: rise_s too long for the spike",
            hint="use rise_s <= duty * period_s / 2",
        )
        _check(0 <= self.offset_s, "periodic bursts: offset_s must be >= 0")

    @property
    def _on_s(self) -> float:
        return self.duty * self.period_s

    def _level(self, t_s: float) -> float:
        if t_s < self.offset_s:
            return 0.0
        within = (t_s - self.offset_s) % self.period_s
        if self.rise_s == 0:
            return 1.0 if within < self._on_s else 0.0
        hold = self._on_s - 2 * self.rise_s
        return _trapezoid(within, 0.0, self.rise_s, hold, self.rise_s)

    def rate_at(self, t_s: float) -> float:
        if not _inside(t_s, self.duration_s):
            return 0.0
        return self.base_rate * (1.0 + (self.multiplier - 1.0) * self._level(t_s))

    def phases(self) -> list[Phase]:
        out: list[Phase] = []
        peak = self.base_rate * self.multiplier
        start = self.offset_s
        while start < self.duration_s:
            out.append(Phase(start, "burst-start", {"rate": peak, "multiplier": self.multiplier}))
            end = start + self._on_s
            if end < self.duration_s:
                out.append(Phase(end, "burst-end", {"rate": self.base_rate}))
            start += self.period_s
        return out


@dataclass(frozen=True)
class Sine(Shape):
    """Diurnal-like traffic: `mean_rate * (1 + amplitude * sin(2 pi (t / period_s) + phase))`.

    `amplitude` is a fraction of the mean (0..1). Phases: `peak` and `trough`.
    """

    mean_rate: float
    amplitude: float
    period_s: float
    duration_s: float
    phase_rad: float = 0.0

    def __post_init__(self) -> None:
        _check(self.mean_rate >= 0, "sine: mean_rate must be >= 0 arrivals/s")
        _check(0 <= self.amplitude <= 1, f"sine: amplitude must be in [0, 1], got {self.amplitude}")
        _check(
            self.period_s > 0 and self.duration_s > 0, "sine: period_s and duration_s must be > 0"
        )

    def rate_at(self, t_s: float) -> float:
        if not _inside(t_s, self.duration_s):
            return 0.0
        angle = 2 * math.pi * t_s / self.period_s + self.phase_rad
        return self.mean_rate * (1.0 + self.amplitude * math.sin(angle))

    def phases(self) -> list[Phase]:
        out: list[Phase] = []
        # sin peaks at angle pi/2 + 2 pi k, troughs at 3 pi/2 + 2 pi k.
        for name, angle in (("peak", math.pi / 2), ("trough", 3 * math.pi / 2)):
            t = ((angle - self.phase_rad) / (2 * math.pi)) % 1.0 * self.period_s
            while t < self.duration_s:
                out.append(Phase(t, name, {"rate": self.rate_at(t)}))
                t += self.period_s
        return sorted(out)


@dataclass(frozen=True)
class TraceReplay(Shape):
    """A recorded trace: per-second rates, or request timestamps, time-scaled.

    `time_scale` > 1 replays faster (a 10-minute trace in 5 minutes with 2);
    `rate_scale` multiplies the rate (per-second traces) or thins/repeats
    nothing (timestamp traces keep their exact requests, so `rate_scale` must
    be 1 for them). Build one with `TraceReplay.from_csv(path)`.
    """

    source: str
    rates: tuple[float, ...] = ()  # per-second rates of the original trace
    timestamps: tuple[float, ...] = ()  # request times (s) relative to the first
    time_scale: float = 1.0
    rate_scale: float = 1.0
    _arrivals: tuple[float, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        _check(self.time_scale > 0, f"trace: time_scale must be > 0, got {self.time_scale}")
        _check(self.rate_scale > 0, f"trace: rate_scale must be > 0, got {self.rate_scale}")
        _check(bool(self.rates) != bool(self.timestamps), "trace: give rates or timestamps")
        if self.timestamps:
            _check(
                self.rate_scale == 1.0,
                "trace: rate_scale applies to per-second rate traces only",
                hint="replay timestamps faster with time_scale",
            )
            scaled = tuple(t / self.time_scale for t in self.timestamps)
            object.__setattr__(self, "_arrivals", scaled)

    @classmethod
    def from_csv(
        cls, path: str | Path, *, time_scale: float = 1.0, rate_scale: float = 1.0
    ) -> TraceReplay:
        """Read a CSV with a `rate` column (one row per second) or a `timestamp` column.

        Timestamps are seconds (float) or epoch nanoseconds/milliseconds (int,
        detected by size); they are sorted and made relative to the first one.
        """
        path = Path(path)
        try:
            with open(path, encoding="utf-8", newline="") as f:
                rows = list(csv.DictReader(f))
        except OSError as exc:
            raise UsageError(f"cannot read trace {path}: {exc.strerror}") from exc
        columns = set(rows[0]) if rows else set()
        hint = "a trace CSV needs a header with a 'rate' column or a 'timestamp' column"
        try:
            if "rate" in columns:
                rates = tuple(float(r["rate"]) for r in rows)
                _check(all(r >= 0 for r in rates), f"trace {path}: negative rate")
                return cls(str(path), rates=rates, time_scale=time_scale, rate_scale=rate_scale)
            if "timestamp" in columns:
                raw = sorted(_number(r["timestamp"]) for r in rows)
                unit = 1e9 if raw[0] > 1e15 else 1e3 if raw[0] > 1e11 else 1.0
                times = tuple((t - raw[0]) / unit for t in raw)  # int - int stays exact
                return cls(
                    str(path), timestamps=times, time_scale=time_scale, rate_scale=rate_scale
                )
        except (ValueError, TypeError) as exc:
            raise UsageError(f"trace {path}: bad number ({exc})", hint=hint) from exc
        raise UsageError(f"trace {path} has no 'rate' or 'timestamp' column", hint=hint)

    @property
    def duration_s(self) -> float:  # type: ignore[override]
        if self.rates:
            return len(self.rates) / self.time_scale
        last = self._arrivals[-1] if self._arrivals else 0.0
        return math.floor(last) + 1.0

    def rate_at(self, t_s: float) -> float:
        if not _inside(t_s, self.duration_s):
            return 0.0
        if self.rates:
            index = min(int(t_s * self.time_scale), len(self.rates) - 1)
            return self.rates[index] * self.rate_scale * self.time_scale
        # Timestamp traces: the per-second count of the (scaled) requests.
        second = math.floor(t_s)
        return float(sum(1 for a in self._arrivals if second <= a < second + 1))

    def explicit_arrivals(self) -> Sequence[float] | None:
        return self._arrivals or None

    def describe(self) -> dict[str, Any]:
        kind = "rates" if self.rates else "timestamps"
        return {
            "kind": "TraceReplay",
            "source": self.source,
            "trace_kind": kind,
            "points": len(self.rates or self.timestamps),
            "time_scale": self.time_scale,
            "rate_scale": self.rate_scale,
            "duration_s": self.duration_s,
        }


@dataclass(frozen=True)
class Truncated(Shape):
    """Another shape cut off (or extended at its last rate) at `duration_s` (`--duration`)."""

    inner: Shape
    duration_s: float

    def __post_init__(self) -> None:
        _check(self.duration_s > 0, f"duration must be > 0 s, got {self.duration_s}")

    def rate_at(self, t_s: float) -> float:
        if not _inside(t_s, self.duration_s):
            return 0.0
        last = max(self.inner.duration_s - 1e-9, 0.0)
        return self.inner.rate_at(min(t_s, last))

    def phases(self) -> list[Phase]:
        return [p for p in self.inner.phases() if p.t_s < self.duration_s]

    def explicit_arrivals(self) -> Sequence[float] | None:
        inner = self.inner.explicit_arrivals()
        return None if inner is None else [t for t in inner if t < self.duration_s]

    def describe(self) -> dict[str, Any]:
        return {"kind": "Truncated", "duration_s": self.duration_s, "inner": self.inner.describe()}


class RateSchedule:
    """A JSON Lines file of rate changes that a controller appends to while the load runs.

    Each line is `{"t_s": T, "rate": R}` (from T seconds after the start, R
    arrivals/s) or `{"t_s": T, "end": true}` (no arrivals from T: the load ends
    there). Lines are appended in time order, each with one O_APPEND write, so
    a reader sees whole lines. The file is re-read at most every 50 ms, when it
    has grown: `rate_at` runs once per millisecond of schedule time.
    """

    REREAD_S = 0.05

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self.changes: list[tuple[float, float]] = []  # (t_s, rate), ascending
        self.end_s: float | None = None
        self._size = -1
        self._checked = -math.inf

    @staticmethod
    def append(path: str | Path, t_s: float, rate: float | None) -> None:
        """Add one change (`rate` None: the end) from a controller process."""
        row: dict[str, Any] = {"t_s": round(t_s, 6)}
        if rate is None:
            row["end"] = True
        else:
            row["rate"] = float(rate)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(row) + "\n").encode("utf-8"))
        finally:
            os.close(fd)

    def refresh(self) -> None:
        if self.path is None:
            return
        now = time.monotonic()
        if now - self._checked < self.REREAD_S:
            return
        self._checked = now
        try:
            size = self.path.stat().st_size
            if size == self._size:
                return
            text = self.path.read_text(encoding="utf-8")
        except OSError:
            return
        changes: list[tuple[float, float]] = []
        end: float | None = None
        for line in text.split("\n")[:-1]:  # complete lines only
            try:
                row = json.loads(line)
                t = float(row["t_s"])
            except (ValueError, KeyError, TypeError):
                continue
            if row.get("end"):
                end = t if end is None else min(end, t)
            elif isinstance(row.get("rate"), int | float):
                changes.append((t, max(0.0, float(row["rate"]))))
        changes.sort(key=lambda c: c[0])
        self.changes, self.end_s, self._size = changes, end, size


@dataclass(frozen=True)
class Steered(Shape):
    """A rate a controller sets while the load runs (`loadkit capacity`'s probes).

    The rate comes from a `RateSchedule` file; before its first change the
    rate is `idle_rate`. The idle rate is never 0: arrival times are computed
    one arrival ahead, so the controller's change must be written at least one
    gap (1 / rate) before it takes effect. The load lasts until the schedule's
    end, at most `duration_s`; the user pool is sized for `max_rate`.
    """

    schedule_path: str
    max_rate: float
    duration_s: float  # the bound; the schedule's end may come sooner
    idle_rate: float = 1.0
    _schedule: RateSchedule = field(default=None, compare=False, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        _check(self.max_rate > 0, f"steered: max_rate must be > 0, got {self.max_rate}")
        _check(self.idle_rate > 0, "steered: idle_rate must be > 0 arrivals/s")
        _check(self.duration_s > 0, f"duration must be > 0 s, got {self.duration_s}")
        object.__setattr__(self, "_schedule", RateSchedule(self.schedule_path or None))

    def end_s(self) -> float:
        self._schedule.refresh()
        end = self._schedule.end_s
        return self.duration_s if end is None else min(end, self.duration_s)

    def rate_at(self, t_s: float) -> float:
        schedule = self._schedule
        schedule.refresh()
        if not 0.0 <= t_s < self.duration_s or (
            schedule.end_s is not None and t_s >= schedule.end_s
        ):
            return 0.0
        rate = self.idle_rate
        for t, r in schedule.changes:
            if t > t_s:
                break
            rate = r
        return min(rate, self.max_rate)

    def peak_rate(self) -> float:
        return self.max_rate

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "Steered",
            "max_rate": self.max_rate,
            "duration_s": self.duration_s,
            "idle_rate": self.idle_rate,
        }


def integral(shape: Shape, t0: float, t1: float, step_s: float = 0.001) -> float:
    """Expected arrivals in [t0, t1): the integral of r(t) (midpoint rule)."""
    n = max(1, int(round((t1 - t0) / step_s)))
    h = (t1 - t0) / n
    return sum(shape.rate_at(t0 + (i + 0.5) * h) for i in range(n)) * h
