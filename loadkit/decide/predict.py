"""Triton's dynamic batcher simulated from a batch profile (SimPy): latency and capacity
of a configuration without running it.

The model (docs/capacity.md, "`loadkit tune`"), after Triton core's
DynamicBatchScheduler::GetDynamicBatch: requests arrive at the scenario's
intended times and wait in one queue. The batcher takes the largest preferred
size the queue holds (an empty preferred list is max_batch_size); without one
it takes what waits at once when there is no queue delay, else once the oldest
queued request has waited max_queue_delay_us (up to max_batch_size), and
otherwise waits; an arrival wakes it only when the queue reaches the next
preferred size. A formed
batch (a payload) waits for a free instance, and while it waits it keeps
growing by the same rules until it reaches the largest preferred size (it is
saturated) or an instance picks it up; only saturated batches queue behind one
another, up to two per instance (the rate limiter's cap on queued payloads).
So under load a batch holds what arrived during the execution before it, and
a request waits about half an execution, not behind whole formed batches.
With preferred sizes [4, 8] and no delay, batches are 4 or 8 (or 1-3 when
fewer wait); with a delay, requests older than it go together up to
max_batch_size.
A batch of b runs on one instance for the profile's compute at b for that
instance count. Each request's latency is
its wait, its batch's compute and one draw of the measured overhead (HTTP,
client, network, compute jitter).

It leaves out what the profile did not measure: CPU contention beyond the
profiled load (a CPU backend's instances, the load generator), PCIe copies
that grow with other traffic, the network beyond the profiling client's,
and compute variance beyond the overhead's jitter.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from loadkit.decide.profile import BatchProfile

SETTLE_S = 2.0  # the search's settle: not judged
MEASURE_S = 12.0  # ... then about its three measure windows
MIN_REQUESTS = 3000  # per simulated probe, so its P99 means something
MAX_REQUESTS = 60_000  # per simulation: a long scenario is cut here (said in the prediction)
ACHIEVED_SHARE = 0.97  # the search's pass rule: achieved >= 97 % of offered
RESOLUTION = 0.02  # the capacity bisection stops at 2 % of its low end
# Triton's rate limiter keeps up to this many payloads per instance queued for one
# (RateLimiter::PayloadSlotAvailable: 2 x instances for a per-model batcher). Only the
# newest of them still grows; the others are full.
PENDING_PER_INSTANCE = 2


@dataclass(frozen=True)
class Config:
    """One point of the space: the batching settings the prediction varies."""

    max_batch_size: int
    max_queue_delay_us: int = 0
    instances: int = 1
    preferred_batch_sizes: tuple[int, ...] = ()

    @classmethod
    def of(cls, settings: Mapping[str, Any], defaults: Mapping[str, Any]) -> Config:
        """A point of the space over the server's own configuration (`defaults`).

        A point that sets `preferred_batch_size` (a sweep's one value) replaces the
        list; otherwise the configuration's whole list (`preferred_batch_sizes`) holds.
        """
        merged = {**{k: v for k, v in defaults.items() if v is not None}, **settings}
        if settings.get("preferred_batch_size"):
            preferred: Sequence[Any] = [settings["preferred_batch_size"]]
        else:
            listed = merged.get("preferred_batch_sizes")
            one = merged.get("preferred_batch_size")
            preferred = listed if listed else [one] if one else []
        return cls(
            max_batch_size=max(1, int(merged.get("max_batch_size") or 1)),
            max_queue_delay_us=int(merged.get("max_queue_delay_us") or 0),
            instances=max(1, int(merged.get("instances") or 1)),
            preferred_batch_sizes=tuple(sorted({int(p) for p in preferred})),
        )


@dataclass(frozen=True)
class Simulated:
    """One simulation: per-request latency (ms, by arrival order) and the batches formed."""

    arrivals_s: np.ndarray
    latency_ms: np.ndarray  # NaN: not finished when the simulation ended
    batch_sizes: dict[int, int]

    def window(self, start_s: float) -> np.ndarray:
        return self.latency_ms[self.arrivals_s >= start_s]


class _Payload:
    """A formed batch waiting for an instance: it grows until full or picked up."""

    __slots__ = ("members", "saturated")

    def __init__(self, members: list[int], saturated: bool) -> None:
        self.members = members
        self.saturated = saturated


class _Batcher:
    """The dynamic batcher and the instances, as SimPy processes."""

    def __init__(
        self,
        env: simpy.Environment,
        config: Config,
        profile: BatchProfile,
        arrivals: np.ndarray,
        overhead: np.ndarray,
    ) -> None:
        self.env = env
        self.config = config
        self.delay_s = config.max_queue_delay_us / 1e6
        table = profile.table(config.instances)
        self.compute_s = [0.0] + [
            profile.compute(config.instances, b) / 1e3 if b not in table else table[b] / 1e3
            for b in range(1, config.max_batch_size + 1)
        ]
        self.arrivals = arrivals
        self.overhead_ms = overhead
        self.queue: deque[int] = deque()
        self.pending: deque[_Payload] = deque()  # formed, waiting for an instance
        self.slots = PENDING_PER_INSTANCE * config.instances
        self.wake = env.event()  # the batcher's: a request arrived or a payload was picked up
        self.work = env.event()  # the instances': a payload was formed
        self.done = np.full(len(arrivals), np.nan)
        self.batches: dict[int, int] = {}
        self.wake_at = 0  # queued requests that make an arrival wake the batcher
        top = config.max_batch_size
        # Triton refuses a preferred size above the max, and fills an empty list with the max
        self.preferred = [p for p in config.preferred_batch_sizes if 0 < p <= top] or [top]
        self.preferred_set = frozenset(self.preferred)
        self.max_preferred = self.preferred[-1]

    def _signal(self) -> None:
        if not self.wake.triggered:
            self.wake.succeed()

    def arrive(self) -> Any:
        for i, t in enumerate(self.arrivals):
            if t > self.env.now:
                yield self.env.timeout(t - self.env.now)
            self.queue.append(i)
            if len(self.queue) >= self.wake_at:
                self._signal()

    def _take(self, size: int) -> tuple[int, bool]:
        """How many queued requests a payload of `size` takes now (0: wait), and whether it
        is then saturated: Triton core's DynamicBatchScheduler::GetDynamicBatch, step by step.

        Walk the queue: crossing the largest preferred size with no preferred size reached
        marks the batch there and saturates it; past max_batch_size the walk stops; each
        preferred size reached (payload included) is the best so far.
        """
        top, most = self.config.max_batch_size, self.max_preferred
        best, send_now, saturated, pending = 0, False, False, 0
        for _ in range(len(self.queue)):
            if size + pending > 0:
                if size + pending + 1 > most and best == 0:
                    best, saturated = pending, True
                if size + pending + 1 > top:
                    send_now = True
                    break
            pending += 1
            if size + pending in self.preferred_set:
                best = pending
        no_delay = self.delay_s <= 0
        over = not no_delay and (
            self.env.now >= self.arrivals[self.queue[0]] + self.delay_s - 1e-12
        )
        if best and not over:  # the best preferred size, within the delay (or none set)
            return best, saturated or no_delay
        if pending == 0:  # the payload is full: nothing more fits (Triton starts a new one)
            return 0, True
        if send_now or size + pending >= most:  # it cannot grow any larger: all that waits
            return pending, True
        if over or no_delay:
            return pending, saturated
        if not saturated and size and size not in self.preferred_set:
            return pending, False  # a payload not at a preferred size takes what is there
        return 0, saturated

    def _wait(self, size: int) -> Any:
        """Wait out the delay; an arrival wakes the batcher once a preferred size is queued."""
        above = [p for p in self.preferred if p > size + len(self.queue)]
        self.wake_at = max(1, (above[0] if above else self.preferred[0]) - size)
        oldest = self.arrivals[self.queue[0]]
        yield self.wake | self.env.timeout(max(0.0, oldest + self.delay_s - self.env.now))
        if self.wake.triggered:
            self.wake = self.env.event()

    def batch(self) -> Any:
        env = self.env
        while True:
            if not self.queue or len(self.pending) >= self.slots:
                yield self.wake
                self.wake = env.event()
                continue
            newest = self.pending[-1] if self.pending else None
            growing = newest is not None and not newest.saturated
            size = len(newest.members) if growing and newest is not None else 0
            take, saturated = self._take(size)
            if take == 0 and saturated and growing and newest is not None:
                newest.saturated = True  # full: the next arrivals start a new payload
                self.wake_at = 0
                continue
            if take == 0:
                yield from self._wait(size)
                continue
            members = [self.queue.popleft() for _ in range(take)]
            if growing and newest is not None:
                newest.members.extend(members)
                newest.saturated = saturated
            else:
                self.pending.append(_Payload(members, saturated))
            if self.pending[-1].saturated:
                self.wake_at = 0
            if not self.work.triggered:
                self.work.succeed()

    def instance(self) -> Any:
        """One model instance: runs the formed payloads in order, as they are when picked up."""
        while True:
            while not self.pending:
                if self.work.triggered:
                    self.work = self.env.event()
                yield self.work
            members = self.pending.popleft().members
            self.batches[len(members)] = self.batches.get(len(members), 0) + 1
            self.wake_at = 0  # Triton starts a new payload (NewPayload) ...
            self._signal()  # ... at once: the payload's callback wakes the batcher
            yield self.env.timeout(self.compute_s[len(members)])
            now = self.env.now
            for i in members:
                self.done[i] = now


def simulate(
    config: Config,
    profile: BatchProfile,
    arrivals_s: Sequence[float] | np.ndarray,
    seed: int = 0,
    until_s: float | None = None,
) -> Simulated:
    """Run the batcher over these arrivals; latencies include a draw of the overhead."""
    arrivals = np.asarray(arrivals_s, dtype=float)
    env = simpy.Environment()
    rng = np.random.default_rng(seed)
    quantiles = np.asarray(profile.overhead_ms, dtype=float)
    draws = (
        np.interp(rng.random(len(arrivals)), np.linspace(0, 1, len(quantiles)), quantiles)
        if len(quantiles) > 1
        else np.full(len(arrivals), float(quantiles[0]) if len(quantiles) else 0.0)
    )
    model = _Batcher(env, config, profile, arrivals, draws)
    env.process(model.arrive())
    env.process(model.batch())
    for _ in range(config.instances):
        env.process(model.instance())
    end = until_s if until_s is not None else (float(arrivals[-1]) if len(arrivals) else 0.0) + 30.0
    env.run(until=end)
    latency = (model.done - arrivals) * 1e3 + draws
    latency = np.where(np.isnan(model.done), np.nan, np.maximum(latency, 0.0))
    return Simulated(arrivals, latency, dict(sorted(model.batches.items())))


def steady_arrivals(rate_rps: float, duration_s: float, spacing: str, seed: int) -> np.ndarray:
    """Arrival times at a constant rate (constant or Poisson spacing), as a capacity probe."""
    n = int(rate_rps * duration_s)
    if spacing == "poisson":
        rng = np.random.default_rng(seed)
        return np.cumsum(rng.exponential(1.0 / rate_rps, size=n))
    return (np.arange(n) + 0.5) / rate_rps


def percentile(values: np.ndarray, pct: float) -> float | None:
    finite = values[np.isfinite(values)]
    return float(np.percentile(finite, pct)) if len(finite) else None


@dataclass(frozen=True)
class ProbeVerdict:
    rate_rps: float
    latency_ms: float | None
    achieved_share: float
    passed: bool


def probe(
    config: Config,
    profile: BatchProfile,
    rate_rps: float,
    slo_pct: float,
    slo_ms: float,
    spacing: str = "constant",
    seed: int = 0,
) -> ProbeVerdict:
    """A simulated capacity probe: settle, then measure; judged as the search judges it."""
    measure = max(MEASURE_S, MIN_REQUESTS / rate_rps)
    total = SETTLE_S + measure
    arrivals = steady_arrivals(rate_rps, total, spacing, seed)
    sim = simulate(config, profile, arrivals, seed, until_s=total + 1.0)
    window = sim.window(SETTLE_S)
    if not len(window):
        return ProbeVerdict(rate_rps, None, 0.0, False)
    finished = window[np.isfinite(window)]
    achieved = len(finished) / len(window)
    # a request still queued at the end counts at the latency it has so far, as the corrected
    # latency of an open-model run would (its intended send time is the clock)
    waited = np.where(
        np.isfinite(window),
        window,
        (total + 1.0 - sim.arrivals_s[sim.arrivals_s >= SETTLE_S]) * 1e3,
    )
    latency = percentile(waited, slo_pct)
    passed = latency is not None and latency <= slo_ms and achieved >= ACHIEVED_SHARE
    return ProbeVerdict(rate_rps, latency, achieved, passed)


def ceiling_rps(config: Config, profile: BatchProfile) -> float:
    """What the instances serve at best (every batch full): the bisection's upper end."""
    b = config.max_batch_size
    return config.instances * b / (profile.compute(config.instances, b) / 1e3)


def capacity(
    config: Config,
    profile: BatchProfile,
    slo_pct: float,
    slo_ms: float,
    spacing: str = "constant",
    seed: int = 0,
) -> tuple[float, list[ProbeVerdict]]:
    """The highest steady rate whose simulated probe passes (bisection on the rate)."""
    high = ceiling_rps(config, profile) * 1.05
    low = 0.0
    probes: list[ProbeVerdict] = []
    first = probe(config, profile, high, slo_pct, slo_ms, spacing, seed)
    probes.append(first)
    if first.passed:
        return high, probes
    low_probe = probe(config, profile, max(1.0, high * 0.01), slo_pct, slo_ms, spacing, seed)
    probes.append(low_probe)
    if not low_probe.passed:
        return 0.0, probes
    low = low_probe.rate_rps
    while high - low > RESOLUTION * max(low, 1.0):
        mid = math.sqrt(low * high) if high > 4 * low else (low + high) / 2
        verdict = probe(config, profile, mid, slo_pct, slo_ms, spacing, seed)
        probes.append(verdict)
        if verdict.passed:
            low = mid
        else:
            high = mid
    return low, probes


@dataclass(frozen=True)
class Prediction:
    """What the simulation says of one configuration."""

    config: Config
    capacity_rps: float
    p50_ms: float | None  # at the scenario's arrivals
    p99_ms: float | None
    slo_pct_ms: float | None  # the SLO's percentile at the scenario's arrivals
    batch_mean: float | None
    scenario_requests: int
    scenario_cut_s: float | None  # the scenario's arrivals were cut here (MAX_REQUESTS)

    def to_json(self) -> dict[str, Any]:
        def r(v: float | None) -> float | None:
            return None if v is None or not math.isfinite(v) else round(v, 3)

        return {
            "capacity_rps": r(self.capacity_rps),
            "p50_ms": r(self.p50_ms),
            "p99_ms": r(self.p99_ms),
            "slo_percentile_ms": r(self.slo_pct_ms),
            "batch_mean": r(self.batch_mean),
            "scenario_requests": self.scenario_requests,
            "scenario_cut_s": self.scenario_cut_s,
        }


def predict(
    config: Config,
    profile: BatchProfile,
    scenario_arrivals: np.ndarray,
    slo_pct: float,
    slo_ms: float,
    spacing: str = "constant",
    seed: int = 0,
) -> Prediction:
    """Capacity (steady probes, as the search) and P50/P99 at the scenario's own arrivals."""
    cap, _ = capacity(config, profile, slo_pct, slo_ms, spacing, seed)
    arrivals = scenario_arrivals
    cut: float | None = None
    if len(arrivals) > MAX_REQUESTS:
        arrivals = arrivals[:MAX_REQUESTS]
        cut = round(float(arrivals[-1]), 3)
    p50 = p99 = at_slo = mean = None
    if len(arrivals):
        sim = simulate(config, profile, arrivals, seed)
        lat = sim.latency_ms
        p50, p99, at_slo = percentile(lat, 50), percentile(lat, 99), percentile(lat, slo_pct)
        total = sum(sim.batch_sizes.values())
        mean = sum(k * v for k, v in sim.batch_sizes.items()) / total if total else None
    return Prediction(config, cap, p50, p99, at_slo, mean, len(arrivals), cut)


__all__ = [
    "Config",
    "Prediction",
    "ProbeVerdict",
    "Simulated",
    "capacity",
    "ceiling_rps",
    "predict",
    "probe",
    "simulate",
    "steady_arrivals",
]
