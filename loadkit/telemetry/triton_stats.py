"""Triton's statistics extension (`/v2/models/<m>/stats`), differenced per interval.

Triton's statistics are cumulative since the model loaded. Each interval row
keeps the raw cumulative counters and adds `*_delta`, the per-request queue
and compute times, the compute time per batch (execution) and the batch-size
distribution from differenced `batch_stats` (entries have no count of their
own: the executions of a size are `compute_infer.count`), whose counts sum to
`execution_count_delta`. A counter that goes down means the server or model
restarted: the row is marked `reset` and its deltas are the counts since the
restart.

Queue-full rejections (HTTP 503 "Exceeds maximum queue size") are counted in
none of these counters (nor in `nv_inference_request_failure`): only the
client sees them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import quote

from loadkit.rundir.schema import TRITON_COUNTERS, TritonStatsRow, delta_key
from loadkit.telemetry.base import (
    Sampler,
    SamplerOptions,
    SamplerSpec,
    SourcePlan,
    SourceUnavailable,
    TelemetrySource,
    WarnOnce,
    the_server,
)
from loadkit.telemetry.http import HttpGetError, KeepAliveGetter

DEFAULT_TRITON_STATS_INTERVAL_S = 1.0


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def flatten_model_stats(
    entry: dict[str, Any], batch_ns: dict[int, int] | None = None
) -> tuple[dict[str, int], dict[int, int]]:
    """(cumulative counters, {batch size: cumulative executions}) of one model_stats entry.

    With `batch_ns`, also fills {batch size: cumulative compute_infer ns}.
    """
    inf = entry.get("inference_stats") or {}

    def stat(name: str, part: str) -> int:
        return _int((inf.get(name) or {}).get(part))

    counters = {
        "inference_count": _int(entry.get("inference_count")),
        "execution_count": _int(entry.get("execution_count")),
        "success_count": stat("success", "count"),
        "success_ns": stat("success", "ns"),
        "fail_count": stat("fail", "count"),
        "fail_ns": stat("fail", "ns"),
        "queue_count": stat("queue", "count"),
        "queue_ns": stat("queue", "ns"),
        "compute_input_ns": stat("compute_input", "ns"),
        "compute_infer_ns": stat("compute_infer", "ns"),
        "compute_output_ns": stat("compute_output", "ns"),
    }
    batches: dict[int, int] = {}
    total_ns = 0
    for b in entry.get("batch_stats") or []:
        size = _int(b.get("batch_size"))
        infer = b.get("compute_infer") or {}
        batches[size] = batches.get(size, 0) + _int(infer.get("count"))
        total_ns += _int(infer.get("ns"))
        if batch_ns is not None:
            batch_ns[size] = batch_ns.get(size, 0) + _int(infer.get("ns"))
    counters["batch_compute_infer_ns"] = total_ns
    return counters, batches


@dataclass
class _Snapshot:
    t_ns: int
    counters: dict[str, int]
    batches: dict[int, int] = field(default_factory=dict)
    batch_ns: dict[int, int] = field(default_factory=dict)


def _per(num: int, den: int, scale: float = 1e-3) -> float | None:
    return round(num / den * scale, 3) if den > 0 else None


class StatsDifferencer:
    """Turns successive cumulative snapshots per (model, version) into interval rows."""

    def __init__(self) -> None:
        self._prev: dict[tuple[str, str], _Snapshot] = {}

    def update(self, t_ns: int, model_stats: list[dict[str, Any]]) -> list[TritonStatsRow]:
        rows: list[TritonStatsRow] = []
        for entry in model_stats:
            key = (str(entry.get("name", "")), str(entry.get("version", "")))
            batch_ns: dict[int, int] = {}
            counters, batches = flatten_model_stats(entry, batch_ns)
            snap = _Snapshot(t_ns, counters, batches, batch_ns)
            prev = self._prev.get(key)
            self._prev[key] = snap
            if prev is not None and t_ns > prev.t_ns:
                rows.append(self._row(key, prev, snap))
        return rows

    @staticmethod
    def _row(key: tuple[str, str], prev: _Snapshot, cur: _Snapshot) -> TritonStatsRow:
        reset = any(cur.counters[k] < prev.counters.get(k, 0) for k in TRITON_COUNTERS) or any(
            cur.batches.get(size, 0) < n for size, n in prev.batches.items()
        )
        base = {k: 0 for k in TRITON_COUNTERS} if reset else prev.counters
        base_batches: dict[int, int] = {} if reset else prev.batches
        base_ns: dict[int, int] = {} if reset else prev.batch_ns
        deltas = {k: cur.counters[k] - base.get(k, 0) for k in TRITON_COUNTERS}
        batch_sizes = {
            str(size): n - base_batches.get(size, 0)
            for size, n in sorted(cur.batches.items())
            if n - base_batches.get(size, 0) > 0
        }
        row: TritonStatsRow = {
            "t_ns": prev.t_ns,
            "interval_ns": cur.t_ns - prev.t_ns,
            "model": key[0],
            "version": key[1],
            "reset": reset,
        }
        cells = cast(dict[str, Any], row)  # the counters' columns (schema.TRITON_COUNTERS)
        cells.update({k: cur.counters[k] for k in TRITON_COUNTERS})
        cells.update({delta_key(k): deltas[k] for k in TRITON_COUNTERS})
        executions = sum(batch_sizes.values())
        row["batch_sizes"] = batch_sizes
        row["batch_size_mean"] = (
            round(sum(int(s) * n for s, n in batch_sizes.items()) / executions, 3)
            if executions
            else None
        )
        row["queue_us_per_request"] = _per(deltas["queue_ns"], deltas["queue_count"])
        row["compute_infer_us_per_request"] = _per(
            deltas["compute_infer_ns"], deltas["success_count"]
        )
        row["compute_infer_us_per_batch"] = _per(deltas["batch_compute_infer_ns"], executions)
        # Per batch size, so a slowdown can be told apart from a shift to bigger batches.
        row["compute_infer_us_by_batch_size"] = {
            size: _per(cur.batch_ns.get(int(size), 0) - base_ns.get(int(size), 0), n)
            for size, n in batch_sizes.items()
        }
        row["request_us_per_request"] = _per(deltas["success_ns"], deltas["success_count"])
        return row


class TritonStatsSampler:
    """Polls Triton's statistics extension; rows per model per interval."""

    source = "triton_stats"

    def __init__(
        self, url: str, models: list[str] | None = None, *, connect_timeout_s: float = 2.0
    ) -> None:
        self.url = url
        self.models = models
        self.connect_timeout_s = connect_timeout_s
        self._http = KeepAliveGetter(url, timeout_s=2.0)
        self._diff = StatsDifferencer()
        self._warn = WarnOnce()
        self._down = False

    def _fetch(self) -> list[dict[str, Any]]:
        if not self.models:
            return list(self._http.get_json("/v2/models/stats").get("model_stats") or [])
        stats: list[dict[str, Any]] = []
        for model in self.models:
            data = self._http.get_json(f"/v2/models/{quote(model, safe='')}/stats")
            stats.extend(data.get("model_stats") or [])
        return stats

    def open(self) -> None:
        deadline = time.monotonic() + self.connect_timeout_s
        while True:
            try:
                self._fetch()
                return
            except HttpGetError as exc:
                if time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                raise SourceUnavailable(
                    f"Triton statistics at {self.url} not readable ({exc}); no per-model stats",
                    hint="check --triton URL (the HTTP port, e.g. http://127.0.0.1:8000) "
                    "and the model names",
                ) from exc

    def sample(self, t_ns: int) -> list[TritonStatsRow]:
        try:
            stats = self._fetch()
        except HttpGetError as exc:
            if not self._down:
                self._warn.warn(f"down:{exc}", f"Triton statistics unreachable ({exc}); retrying")
            self._down = True
            return []
        self._down = False
        return self._diff.update(t_ns, stats)

    def close(self) -> None:
        self._http.close()

    def drain_warnings(self) -> list[str]:
        return self._warn.drain()


def _stats_sampler(spec: SamplerSpec) -> Sampler:
    return TritonStatsSampler(spec.options["url"], spec.options.get("models"))


def plan_triton_stats(options: SamplerOptions, interval_s: float) -> SourcePlan:
    """Sampled when the run names a Triton HTTP URL."""
    if not options.triton_url:
        return SourcePlan(None)
    opts = {"url": options.triton_url, "models": options.triton_models}
    return SourcePlan(
        SamplerSpec("triton_stats", "triton_stats", interval_s, opts),
        place=the_server(options, options.triton_url),
    )


SOURCE = TelemetrySource(
    name="triton_stats",
    label="Triton statistics",
    default_interval_s=DEFAULT_TRITON_STATS_INTERVAL_S,
    row_type=TritonStatsRow,
    samplers={"triton_stats": _stats_sampler},
    plan=plan_triton_stats,
)
