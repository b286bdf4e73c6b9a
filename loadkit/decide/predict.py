"""Triton's dynamic batcher simulated from a batch profile (SimPy): latency and capacity
of a configuration without running it.

The model (docs/capacity.md, "`loadkit tune`"): requests arrive at the
scenario's intended times and wait in one queue. The batcher forms a batch
(a payload): at once when max_batch_size requests (or a preferred size) wait
or when there is no queue delay, otherwise when the oldest request has waited
max_queue_delay_us or the batch fills, whichever comes first. A formed batch
waits for a free instance, and while it waits it keeps taking the requests
that arrive, at once, until it is full (Triton's DynamicBatchScheduler grows
its current payload until an instance picks it up or it saturates); only
full batches queue behind one another, up to two per instance (the rate
limiter's cap on queued payloads). So under load a batch holds what arrived
during the execution before it, and a request waits about half an execution,
not behind whole formed batches. With a queue delay, once the batcher has
waited one out, an arrival wakes it only when the queue holds a preferred
batch (Triton fills an empty preferred list with max_batch_size): the others
wait for the next payload, which starts when an instance picks this one up. A batch of b runs on one instance for the
profile's compute at b for that instance count. Each request's latency is
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
    preferred_batch_size: int | None = None

    @classmethod
    def of(cls, settings: Mapping[str, Any], defaults: Mapping[str, Any]) -> Config:
        merged = {**{k: v for k, v in defaults.items() if v is not None}, **settings}
        return cls(
            max_batch_size=max(1, int(merged.get("max_batch_size") or 1)),
            max_queue_delay_us=int(merged.get("max_queue_delay_us") or 0),
            instances=max(1, int(merged.get("instances") or 1)),
            preferred_batch_size=(
                int(merged["preferred_batch_size"]) if merged.get("preferred_batch_size") else None
            ),
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
        preferred = config.preferred_batch_size
        self.preferred = preferred if preferred and preferred <= config.max_batch_size else None

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

    def _ready_size(self) -> int:
        """How many to take now into a new payload (0: keep waiting)."""
        n = len(self.queue)
        top = self.config.max_batch_size
        if n >= top:
            return top
        if self.preferred is not None and n >= self.preferred:
            return self.preferred
        if self.delay_s <= 0:
            return n
        oldest = self.arrivals[self.queue[0]]
        if self.env.now >= oldest + self.delay_s - 1e-12:
            return n
        return 0

    def _full(self, size: int) -> bool:
        """A payload this big takes no more (a preferred size goes as it is)."""
        return size >= self.config.max_batch_size or (
            self.preferred is not None and size >= self.preferred
        )

    def _grow(self, payload: _Payload) -> None:
        """The waiting payload takes the queued requests at once, up to full."""
        top = self.config.max_batch_size
        if self.preferred is not None and len(payload.members) < self.preferred:
            top = self.preferred
        while self.queue and len(payload.members) < top:
            payload.members.append(self.queue.popleft())
        payload.saturated = self._full(len(payload.members))
        if payload.saturated:
            self.wake_at = 0

    def batch(self) -> Any:
        env = self.env
        while True:
            if not self.queue or len(self.pending) >= self.slots:
                yield self.wake
                self.wake = env.event()
                continue
            newest = self.pending[-1] if self.pending else None
            if newest is not None and not newest.saturated:
                self._grow(newest)
                continue
            size = self._ready_size()
            if size == 0:
                # waiting out the delay: from now on an arrival wakes the batcher only once
                # the queue holds a preferred batch (next_preferred_batch_size_)
                self.wake_at = self.preferred or self.config.max_batch_size
                oldest = self.arrivals[self.queue[0]]
                yield self.wake | env.timeout(max(0.0, oldest + self.delay_s - env.now))
                if self.wake.triggered:
                    self.wake = env.event()
                continue
            members = [self.queue.popleft() for _ in range(size)]
            self.pending.append(_Payload(members, self._full(size)))
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
