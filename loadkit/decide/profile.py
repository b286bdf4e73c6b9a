"""A model's batch profile: compute time per execution at each batch size, per instance count.

`loadkit tune` predicts every configuration of a space from this profile
instead of running it. It is measured once: for each instance count, the
model is loaded with the largest max_batch_size of the space and no queue
delay, and closed loops of 1, 2, 4, ... clients each run a few seconds
(`loadkit.load.closed_loop`). Triton's statistics, read before and after each
step and differenced, give executions and compute time (input + infer +
output) per batch size. A CPU backend's compute grows with the load (its
instances and the load generator share the cores), so each batch size keeps
its mean from the busiest step that ran it often enough; sizes never formed
are interpolated, and extrapolated along a weighted straight-line fit.

The overhead outside Triton's queue and compute (HTTP, client, network) is
the clients' latency at one client minus the compute there: kept as
quantiles, so its jitter reaches the predicted P99.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MIN_EXECUTIONS = 5  # executions at a size in one step before its mean is used
OVERHEAD_QUANTILES = 101  # 0, 1, ..., 100 %


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def model_entry(stats: Mapping[str, Any], model: str) -> Mapping[str, Any]:
    """The model's entry of a `/v2/models/<m>/stats` answer (the newest version if several)."""
    entries = [e for e in stats.get("model_stats") or [] if e.get("name") == model]
    if not entries:
        return {}
    return max(entries, key=lambda e: _int(e.get("version")))


@dataclass(frozen=True)
class StepDelta:
    """What one profiling step added to Triton's cumulative statistics."""

    executions: dict[int, int]  # batch size -> executions
    compute_ns: dict[int, int]  # batch size -> compute input + infer + output, ns
    requests: int
    queue_ns: int

    def mean_ms(self, size: int) -> float | None:
        n = self.executions.get(size, 0)
        return self.compute_ns.get(size, 0) / n / 1e6 if n > 0 else None

    @property
    def queue_ms(self) -> float:
        return self.queue_ns / self.requests / 1e6 if self.requests else 0.0

    @property
    def busy_ms_per_s(self) -> float:
        return sum(self.compute_ns.values()) / 1e6


def stats_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> StepDelta:
    """Two model_stats entries (cumulative since the model loaded) differenced.

    `batch_stats` entries carry no count of their own: `compute_infer.count` is
    the executions at that size. A size whose counters went down (the model was
    reloaded between the snapshots) counts from zero.
    """

    def per_size(entry: Mapping[str, Any]) -> dict[int, tuple[int, int]]:
        out: dict[int, tuple[int, int]] = {}
        for b in entry.get("batch_stats") or []:
            size = _int(b.get("batch_size"))
            count = _int((b.get("compute_infer") or {}).get("count"))
            ns = sum(
                _int((b.get(part) or {}).get("ns"))
                for part in ("compute_input", "compute_infer", "compute_output")
            )
            n0, ns0 = out.get(size, (0, 0))
            out[size] = (n0 + count, ns0 + ns)
        return out

    def stat(entry: Mapping[str, Any], name: str, part: str) -> int:
        return _int(((entry.get("inference_stats") or {}).get(name) or {}).get(part))

    old, new = per_size(before), per_size(after)
    executions: dict[int, int] = {}
    compute: dict[int, int] = {}
    for size, (n, ns) in new.items():
        n0, ns0 = old.get(size, (0, 0))
        if n < n0 or ns < ns0:
            n0, ns0 = 0, 0
        if n - n0 > 0:
            executions[size] = n - n0
            compute[size] = ns - ns0
    requests = stat(after, "success", "count") - stat(before, "success", "count")
    queue = stat(after, "queue", "ns") - stat(before, "queue", "ns")
    if requests < 0 or queue < 0:
        requests, queue = stat(after, "success", "count"), stat(after, "queue", "ns")
    return StepDelta(dict(sorted(executions.items())), compute, requests, queue)


def compute_table(steps: Sequence[StepDelta], max_batch_size: int) -> dict[int, float]:
    """Compute ms per execution at 1..max_batch_size from the steps, busiest first.

    Each size takes its mean from the busiest step (most compute per second)
    that ran it at least MIN_EXECUTIONS times (else from the step that ran it
    most); the sizes between are interpolated; those beyond the measured ones
    follow a straight line fitted to them (weighted by executions).
    """
    measured: dict[int, float] = {}
    weight: dict[int, int] = {}
    for size in range(1, max_batch_size + 1):
        ran = [s for s in steps if s.executions.get(size, 0) > 0]
        if not ran:
            continue
        enough = [s for s in ran if s.executions[size] >= MIN_EXECUTIONS]
        best = (
            max(enough, key=lambda s: s.busy_ms_per_s)
            if enough
            else max(ran, key=lambda s: s.executions[size])
        )
        mean = best.mean_ms(size)
        if mean is not None:
            measured[size] = mean
            weight[size] = best.executions[size]
    if not measured:
        return {}
    sizes = np.array(sorted(measured), dtype=float)
    means = np.array([measured[int(s)] for s in sizes])
    if len(sizes) >= 2:
        w = np.sqrt(np.array([weight[int(s)] for s in sizes], dtype=float))
        slope = max(float(np.polyfit(sizes, means, 1, w=w)[0]), 0.0)
    else:
        slope = 0.0
    table: dict[int, float] = {}
    lo, hi = int(sizes[0]), int(sizes[-1])
    for size in range(1, max_batch_size + 1):
        if size in measured:
            value = measured[size]
        elif lo < size < hi:
            value = float(np.interp(size, sizes, means))
        elif size > hi:  # the line's slope from the last measured mean
            value = measured[hi] + slope * (size - hi)
        else:
            value = measured[lo] - slope * (lo - size)
        table[size] = round(max(value, 1e-3), 4)
    # never faster per execution for a bigger batch: noise at rare sizes otherwise decides
    running = 0.0
    for size in sorted(table):
        running = max(running, table[size])
        table[size] = running
    return table


def overhead_quantiles(latencies_ms: Sequence[float], triton_ms: float) -> list[float]:
    """Quantiles 0..100 % of the latency outside Triton's queue and compute (may dip below 0:
    compute jitter around its mean)."""
    if not latencies_ms:
        return [0.0] * OVERHEAD_QUANTILES
    residual = np.asarray(latencies_ms, dtype=float) - triton_ms
    qs = np.quantile(residual, np.linspace(0.0, 1.0, OVERHEAD_QUANTILES))
    return [round(float(q), 4) for q in qs]


@dataclass(frozen=True)
class BatchProfile:
    """Compute ms per execution by instance count and batch size; the overhead's quantiles."""

    model: str
    max_batch_size: int
    compute_ms: dict[int, dict[int, float]]  # instances -> batch size -> ms per execution
    overhead_ms: list[float] = field(default_factory=lambda: [0.0] * OVERHEAD_QUANTILES)
    steps: list[dict[str, Any]] = field(default_factory=list)  # what was run, for tune.json

    def instance_counts(self) -> list[int]:
        return sorted(self.compute_ms)

    def table(self, instances: int) -> dict[int, float]:
        """The table measured at this instance count, or at the nearest one measured.

        A count never profiled borrows the nearest one's (said in the docs: on a
        CPU backend more instances than cores slow each execution, which this misses).
        """
        if instances in self.compute_ms:
            return self.compute_ms[instances]
        nearest = min(self.compute_ms, key=lambda n: (abs(n - instances), -n))
        return self.compute_ms[nearest]

    def compute(self, instances: int, size: int) -> float:
        table = self.table(instances)
        if size in table:
            return table[size]
        top = max(table)
        if size <= 0:
            return table[min(table)]
        slope = (table[top] - table[1]) / (top - 1) if top > 1 and 1 in table else 0.0
        return table[top] + slope * (size - top)

    def overhead_mean_ms(self) -> float:
        return float(np.mean(self.overhead_ms)) if self.overhead_ms else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "max_batch_size": self.max_batch_size,
            "compute_ms": {
                str(n): {str(b): v for b, v in sorted(t.items())}
                for n, t in sorted(self.compute_ms.items())
            },
            "overhead_ms_quantiles": list(self.overhead_ms),
            "steps": list(self.steps),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchProfile:
        return cls(
            model=str(data["model"]),
            max_batch_size=int(data["max_batch_size"]),
            compute_ms={
                int(n): {int(b): float(v) for b, v in t.items()}
                for n, t in (data.get("compute_ms") or {}).items()
            },
            overhead_ms=[float(v) for v in data.get("overhead_ms_quantiles") or [0.0]],
            steps=list(data.get("steps") or []),
        )


def concurrency_ladder(instances: int, max_batch_size: int) -> list[int]:
    """Clients per step: 1, 2, 4, ... up to twice what fills every instance's largest batch."""
    top = max(2, 2 * instances * max_batch_size)
    out, c = [], 1
    while c < top:
        out.append(c)
        c *= 2
    out.append(top)
    return out


def step_record(
    instances: int, clients: int, delta: StepDelta, throughput: float
) -> dict[str, Any]:
    """One profiling step as tune.json keeps it."""
    return {
        "instances": instances,
        "clients": clients,
        "throughput_rps": round(throughput, 2),
        "executions": {str(k): v for k, v in delta.executions.items()},
        "compute_ms": {
            str(k): round(m, 4) for k in delta.executions if (m := delta.mean_ms(k)) is not None
        },
        "queue_ms": round(delta.queue_ms, 4),
    }


def measure_profile(
    repo: Any,
    original: Mapping[str, Any],
    plan: Any,
    instance_counts: Sequence[int],
    max_batch_size: int,
    step_s: float,
    log: Any = None,
) -> BatchProfile:
    """Load the model once per instance count (the largest batch, no queue delay) and run
    the closed-loop ladder; the profile from Triton's statistics around each step."""
    from loadkit.decide.sweep import load_settings
    from loadkit.load.closed_loop import run_closed_loop

    tables: dict[int, dict[int, float]] = {}
    records: list[dict[str, Any]] = []
    overhead: list[float] | None = None
    for n in sorted(set(instance_counts)):
        settings = {"max_batch_size": max_batch_size, "max_queue_delay_us": 0, "instances": n}
        load_settings(repo, original, settings)
        run_closed_loop(repo.url, plan, n, min(1.0, step_s))  # a model just loaded is slower
        deltas = []
        for clients in concurrency_ladder(n, max_batch_size):
            before = model_entry(repo.stats(), repo.model)
            result = run_closed_loop(repo.url, plan, clients, step_s)
            delta = stats_delta(before, model_entry(repo.stats(), repo.model))
            deltas.append(delta)
            records.append(step_record(n, clients, delta, result.throughput_rps))
            if log is not None:
                log(
                    f"  profile: {n} instance(s), {clients} client(s): "
                    f"{result.throughput_rps:.0f} req/s, batches "
                    + ", ".join(f"{k}x{v}" for k, v in list(delta.executions.items())[:6])
                )
            if clients == 1 and overhead is None:
                one = delta.mean_ms(1) or 0.0
                overhead = overhead_quantiles(result.latencies_ms, one + delta.queue_ms)
        tables[n] = compute_table(deltas, max_batch_size)
    return BatchProfile(
        model=repo.model,
        max_batch_size=max_batch_size,
        compute_ms=tables,
        overhead_ms=overhead or [0.0] * OVERHEAD_QUANTILES,
        steps=records,
    )


__all__ = [
    "BatchProfile",
    "StepDelta",
    "compute_table",
    "concurrency_ladder",
    "measure_profile",
    "model_entry",
    "overhead_quantiles",
    "stats_delta",
    "step_record",
]
