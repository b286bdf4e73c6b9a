"""A capacity run's answer: the highest rate within the SLO, its bracket, why, and in replicas.

`loadkit capacity` judged each probe while it ran and wrote its numbers as a
`probe-end` phase event; this module reads those back (it does not judge
again), brackets the capacity (highest rate that passed every trial, lowest
that failed), names what bound it from the telemetry of the failing probe's
measure windows, predicts a ceiling from Triton's own statistics (compute
time per batch at each batch size) and turns a peak and a headroom into
replicas, assuming linear scale-out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from loadkit.analysis.model import (
    CapacityPrediction,
    CapacityProbe,
    CapacityResult,
    LimitedBy,
)

BUSY_SHARE = 0.85  # instances computing this share of the time: they are the limit
PINNED_SHARE = 0.9  # mean batch at 90 % of max_batch_size: batches pinned
CPU_BUSY_PCT = 90.0
CGROUP_THROTTLED_PCT = 10.0
GPU_CLOCK_RATIO = 0.9
MIN_EXECUTIONS = 20  # executions at a batch size before its compute time is trusted
SCALE_OUT = (
    "linear scale-out: each replica (GPU) serves the capacity measured here, "
    "and the load balancer spreads the peak evenly"
)


def probes_from_events(events: pd.DataFrame, start_ns: int) -> list[CapacityProbe]:
    """The `probe-end` phase events, in order, as `CapacityProbe`s."""
    if events.empty or "name" not in events.columns:
        return []
    rows = events[(events["kind"] == "phase") & (events["name"] == "probe-end")]
    out = []
    for row in rows.to_dict("records"):

        def num(key: str, row: Mapping[Any, Any] = row) -> float | None:
            value = row.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float):
                return None
            return None if math.isnan(float(value)) else float(value)

        reasons = row.get("reasons")
        out.append(
            CapacityProbe(
                index=int(num("index") or 0),
                rate_rps=num("rate_rps") or 0.0,
                trial=int(num("trial") or 1),
                start_s=((num("start_ns") or start_ns) - start_ns) / 1e9,
                measure_start_s=((num("measure_start_ns") or start_ns) - start_ns) / 1e9,
                end_s=((num("end_ns") or start_ns) - start_ns) / 1e9,
                offered_rps=num("offered_rps"),
                achieved_rps=num("achieved_rps"),
                goodput_rps=num("goodput_rps"),
                corrected_ms=num("corrected_ms"),
                p50_ms=num("p50_ms"),
                service_ms=num("service_ms"),
                errors_pct=num("errors_pct"),
                dropped=int(num("dropped") or 0),
                in_flight_growing=bool(row.get("in_flight_growing")),
                generator_cpu_pct=num("generator_cpu_pct"),
                windows=int(num("windows") or 0),
                stable=bool(row.get("stable", True)),
                passed=bool(row.get("passed")),
                generator_limited=bool(row.get("generator_limited")),
                reasons=tuple(str(r) for r in reasons) if isinstance(reasons, list) else (),
            )
        )
    return sorted(out, key=lambda p: p.index)


def bracket(probes: Sequence[CapacityProbe]) -> tuple[float | None, float | None]:
    """(low, high): the highest rate below every failure that passed each time it was
    probed, and the lowest rate that failed at least once."""
    by_rate: dict[float, list[bool]] = {}
    for p in probes:
        by_rate.setdefault(round(p.rate_rps, 6), []).append(p.passed)
    failed = [r for r, v in by_rate.items() if not all(v)]
    high = min(failed) if failed else None
    passed = [r for r, v in by_rate.items() if all(v) and (high is None or r < high)]
    return (max(passed) if passed else None), high


def replicas_for(peak_rps: float, capacity_rps: float, headroom: float) -> int | None:
    """ceil(peak / (capacity x (1 - headroom))); None when the capacity is 0 or unknown."""
    usable = capacity_rps * (1.0 - headroom)
    if usable <= 0:
        return None
    return max(1, math.ceil(peak_rps / usable - 1e-9))


def predicted_ceiling(
    triton: pd.DataFrame | None, model: str | None, instances: int | None
) -> CapacityPrediction | None:
    """Requests/s from Triton's compute time per batch at the best-served batch size."""
    if triton is None or triton.empty or "batch_sizes" not in triton.columns:
        return None
    frame = triton
    if model is not None and "model" in frame.columns:
        frame = frame[frame["model"] == model]
    count: dict[int, int] = {}
    total_us: dict[int, float] = {}
    by_size_col = "compute_infer_us_by_batch_size"
    for row in frame.to_dict("records"):
        sizes = row.get("batch_sizes")
        means = row.get(by_size_col)
        if not isinstance(sizes, dict) or not isinstance(means, dict):
            continue
        for key, n in sizes.items():
            us = means.get(key)
            if not isinstance(n, int | float) or not isinstance(us, int | float) or n <= 0:
                continue
            if math.isnan(float(us)):
                continue
            size = int(key)
            count[size] = count.get(size, 0) + int(n)
            total_us[size] = total_us.get(size, 0.0) + float(us) * int(n)
    trusted = {b: total_us[b] / n for b, n in count.items() if n >= MIN_EXECUTIONS and total_us[b]}
    if not trusted:
        return None
    best = max(trusted, key=lambda b: b / trusted[b])
    per_instance = best / (trusted[best] / 1e6)
    n_inst = instances or 1
    return CapacityPrediction(
        batch_size=best,
        compute_ms=trusted[best] / 1000.0,
        executions=count[best],
        instances=n_inst,
        rps_per_instance=per_instance,
        rps=per_instance * n_inst,
        basis=(
            f"Triton's compute (infer) time per batch: {best} row(s) in "
            f"{trusted[best] / 1000.0:.2f} ms over {count[best]} executions = "
            f"{per_instance:.0f} req/s per instance x {n_inst} instance(s); "
            "queueing, input/output copies and the network are not in it"
        ),
    )


def instance_load(
    triton: pd.DataFrame | None, model: str | None, start_ns: int, end_ns: int
) -> dict[str, float] | None:
    """Triton's own counters over [start_ns, end_ns) (its 1 s rows, not the analysis windows):
    executions/s, compute per batch, mean batch, queue per request, and compute-busy seconds
    per second (divide by the instances for their busy share)."""
    needed = {"t_ns", "interval_ns", "batch_compute_infer_ns_delta", "execution_count_delta"}
    if triton is None or triton.empty or not needed <= set(triton.columns):
        return None
    frame = triton
    if model is not None and "model" in frame.columns:
        frame = frame[frame["model"] == model]
    t = frame["t_ns"].to_numpy(dtype=float)
    length = frame["interval_ns"].to_numpy(dtype=float)
    inside = frame[(t >= start_ns) & (t + length <= end_ns + 0.5e9)]
    seconds = float(inside["interval_ns"].sum()) / 1e9
    execs = float(inside["execution_count_delta"].sum())
    if seconds <= 0 or execs <= 0:
        return None
    compute_s = float(inside["batch_compute_infer_ns_delta"].sum()) / 1e9
    out = {
        "executions_per_s": execs / seconds,
        "batch_compute_ms": 1000.0 * compute_s / execs,
        "busy": compute_s / seconds,
    }
    if "inference_count_delta" in inside.columns:
        out["batch_size_mean"] = float(inside["inference_count_delta"].sum()) / execs
    if {"queue_ns_delta", "queue_count_delta"} <= set(inside.columns):
        queued = float(inside["queue_count_delta"].sum())
        if queued:
            out["queue_ms"] = float(inside["queue_ns_delta"].sum()) / 1e6 / queued
    return out


def _mean(values: np.ndarray | None, idx: np.ndarray) -> float | None:
    if values is None or idx.size == 0:
        return None
    part = np.asarray(values, dtype=float)[idx]
    if np.all(np.isnan(part)):
        return None
    return float(np.nanmean(part))


def limited_by(
    probe: CapacityProbe | None,
    *,
    idx: np.ndarray,
    triton: Any,
    host: Any,
    gpu: Any,
    instances: int | None,
    max_batch_size: int | None,
    slo_percentile: str,
    slo_ms: float,
    load: Mapping[str, float] | None = None,
) -> LimitedBy:
    """What bound the failing probe: the generator, the model's instances, a resource, or the
    latency SLO itself (the server kept up but its latency did not meet the SLO)."""
    if probe is None:
        return LimitedBy("not_reached", "no probe failed: the capacity is above the highest rate")
    if probe.generator_limited:
        cpu = probe.generator_cpu_pct
        return LimitedBy(
            "generator",
            "loadkit could not send this rate: "
            + (
                f"its Locust process was {cpu:.0f}% busy"
                if cpu is not None and cpu >= 90
                else "arrivals were late or dropped while the server's service time stayed "
                "at its low-load value"
            )
            + "; add --workers, or run loadkit on a larger machine (not the server's capacity)",
        )
    evidence: list[str] = []
    if load is not None or triton is not None:
        if load is not None:
            execs, batch_ms = load.get("executions_per_s"), load.get("batch_compute_ms")
            mean_batch, queue_ms = load.get("batch_size_mean"), load.get("queue_ms")
        else:
            execs = _mean(triton.executions_per_s, idx)
            batch_ms = _mean(triton.batch_compute_ms, idx)
            mean_batch = _mean(triton.batch_size_mean, idx)
            queue_ms = _mean(triton.queue_ms_per_request, idx)
        n = instances or 1
        if execs is not None and batch_ms is not None:
            busy = execs * batch_ms / 1000.0 / n
            pinned = (
                max_batch_size is not None
                and mean_batch is not None
                and mean_batch >= PINNED_SHARE * max_batch_size
            )
            detail = (
                f"Triton's {n} instance(s) computed {busy:.0%} of the time "
                f"({execs:.1f} executions/s x {batch_ms:.1f} ms per batch"
                + (f", mean batch {mean_batch:.1f}" if mean_batch is not None else "")
                + (f" of max {max_batch_size}" if max_batch_size else "")
                + (f"; queue {queue_ms:.1f} ms per request" if queue_ms is not None else "")
                + ")"
            )
            if busy >= BUSY_SHARE:
                action = (
                    "batches pinned at max_batch_size: raise max_batch_size or add instances"
                    if pinned
                    else "add instances (instance_group count) or replicas"
                )
                return LimitedBy("model_instances", f"{detail}; {action}")
            evidence.append(detail)
    if gpu is not None:
        ratio = _mean(gpu.clock_ratio_busy, idx)
        if ratio is not None and ratio < GPU_CLOCK_RATIO:
            return LimitedBy("gpu_clock", f"the GPU's SM clock ran at {ratio:.0%} of its maximum")
    if host is not None:
        throttled = _mean(host.cgroup_throttled_pct, idx) if host.has_cgroup else None
        if throttled is not None and throttled >= CGROUP_THROTTLED_PCT:
            return LimitedBy(
                "cgroup_quota", f"the cgroup's CPU quota throttled {throttled:.0f}% of periods"
            )
        cpu = _mean(host.cpu_mean_pct, idx)
        if cpu is not None and cpu >= CPU_BUSY_PCT:
            return LimitedBy("cpu", f"the host's CPUs were {cpu:.0f}% busy on average")
        if cpu is not None:
            evidence.append(f"host CPU {cpu:.0f}% busy")
    growing = probe.in_flight_growing or (
        probe.achieved_rps is not None
        and probe.offered_rps
        and probe.achieved_rps < 0.97 * probe.offered_rps
    )
    if not growing and probe.corrected_ms is not None and probe.corrected_ms > slo_ms:
        return LimitedBy(
            "latency",
            f"the server kept up with the rate but its corrected {slo_percentile} "
            f"({probe.corrected_ms:.1f} ms) passed the SLO ({slo_ms:g} ms)"
            + (f": {'; '.join(evidence)}" if evidence else ""),
        )
    return LimitedBy(
        "server",
        "the server fell behind ("
        + "; ".join(probe.reasons)
        + ")"
        + (f"; {'; '.join(evidence)}" if evidence else "")
        + "; no resource signal explains it",
    )


def _failing_probe(
    probes: Sequence[CapacityProbe], high: float | None, generator: CapacityProbe | None
) -> CapacityProbe | None:
    """The probe the limit is read from: the generator's own limit, else the failing top."""
    if generator is not None:
        return generator
    if high is not None:
        return next(
            (p for p in probes if round(p.rate_rps, 6) == round(high, 6) and not p.passed), None
        )
    return None


def _probe_windows(
    failing: CapacityProbe | None, window_starts_s: np.ndarray, window_s: float
) -> np.ndarray:
    """The windows of a probe's measurement (after settling), where its signals are read."""
    if failing is None:
        return np.array([], dtype=int)
    centres = window_starts_s + window_s / 2.0  # windows mostly inside the measurement
    idx = np.nonzero((centres >= failing.measure_start_s) & (centres <= failing.end_s))[0]
    if idx.size == 0:  # a measurement shorter than the analysis window: any overlap
        idx = np.nonzero(
            (window_starts_s < failing.end_s)
            & (window_starts_s + window_s > failing.measure_start_s)
        )[0]
    return idx


def _probe_load(
    triton_rows: pd.DataFrame | None,
    model: str | None,
    failing: CapacityProbe | None,
    start_ns: int,
) -> dict[str, float] | None:
    """Triton's own counters over the failing probe's measurement: how busy the instances were."""
    if failing is None:
        return None
    return instance_load(
        triton_rows,
        model,
        start_ns + round(failing.measure_start_s * 1e9),
        start_ns + round(failing.end_s * 1e9),
    )


def _gap_pct(rate: float | None, prediction: CapacityPrediction | None) -> float | None:
    """How far the measured capacity is from the statistics' ceiling, in % of the ceiling."""
    if prediction is None or rate is None or prediction.rps <= 0:
        return None
    return 100.0 * (rate - prediction.rps) / prediction.rps


def _replicas(
    peak: Any, headroom: Any, low: float | None, high: float | None, generator_limited: bool
) -> tuple[int | None, int | None, int | None]:
    """(replicas, fewest, most) for the peak: the bracket's bounds make the range; None unasked."""
    replicas = replicas_low = replicas_high = None
    if isinstance(peak, int | float) and isinstance(headroom, int | float):
        if low is not None:
            replicas = replicas_for(float(peak), low, float(headroom))
            replicas_high = replicas
        if high is not None and not generator_limited:
            replicas_low = replicas_for(float(peak), high, float(headroom))
        elif replicas is not None:
            replicas_low = None  # the capacity may be higher than measured: fewer may do
    return replicas, replicas_low, replicas_high


def capacity_result(
    settings: Mapping[str, Any],
    probes: Sequence[CapacityProbe],
    *,
    window_starts_s: np.ndarray,
    window_s: float,
    triton_rows: pd.DataFrame | None,
    triton: Any,
    host: Any,
    gpu: Any,
    model: str | None,
    instances: int | None,
    max_batch_size: int | None,
    start_ns: int = 0,
) -> CapacityResult:
    """The capacity object of analysis.json (see the module docstring)."""
    pct = str(settings.get("slo_percentile") or "p99")
    slo_ms = float(settings.get("slo_ms") or 50.0)
    low, high = bracket(probes)
    generator = next((p for p in probes if p.generator_limited), None)
    failing = _failing_probe(probes, high, generator)
    idx = _probe_windows(failing, window_starts_s, window_s)
    load = _probe_load(triton_rows, model, failing, start_ns)
    limit = limited_by(
        failing,
        load=load,
        idx=idx,
        triton=triton,
        host=host,
        gpu=gpu,
        instances=instances,
        max_batch_size=max_batch_size,
        slo_percentile=pct,
        slo_ms=slo_ms,
    )
    prediction = predicted_ceiling(triton_rows, model, instances)
    rate = low
    gap = _gap_pct(rate, prediction)
    peak = settings.get("peak_rps")
    headroom = settings.get("headroom")
    replicas, replicas_low, replicas_high = _replicas(
        peak, headroom, low, high, generator is not None
    )
    stopped_by = settings.get("stopped_by")
    answer = (
        "No probe finished (the run ended before the first probe was judged)."
        if not probes
        else _answer(
            pct,
            slo_ms,
            low,
            high,
            limit,
            generator is not None,
            replicas,
            replicas_low,
            peak,
            headroom,
        )
    )
    if stopped_by:
        answer += f" The search was cut short by {stopped_by}."
    return CapacityResult(
        slo_percentile=pct,
        slo_ms=slo_ms,
        errors_pct=float(settings.get("errors_pct") or 0.1),
        found=low is not None and (high is not None or generator is not None),
        rate_rps=rate,
        low_rps=low,
        high_rps=high if generator is None else generator.rate_rps,
        resolution=float(settings.get("resolution") or 0.05),
        trials=int(settings.get("trials") or 1),
        limited_by=limit.resource,
        limited_by_evidence=limit.evidence,
        generator_limited=generator is not None,
        peak_rps=float(peak) if isinstance(peak, int | float) else None,
        headroom=float(headroom) if isinstance(headroom, int | float) else None,
        replicas=replicas,
        replicas_low=replicas_low,
        replicas_high=replicas_high,
        scale_out_assumption=SCALE_OUT,
        prediction=prediction,
        gap_pct=gap,
        answer=answer,
        stopped_by=str(stopped_by) if stopped_by else None,
        probes=tuple(probes),
    )


def _answer(
    pct: str,
    slo_ms: float,
    low: float | None,
    high: float | None,
    limit: LimitedBy,
    generator: bool,
    replicas: int | None,
    replicas_low: int | None,
    peak: Any,
    headroom: Any,
) -> str:
    if low is None:
        return f"No probed rate met the SLO ({pct} <= {slo_ms:g} ms); limited by {limit.resource}."
    if generator:
        text = (
            f"The server met the SLO up to {low:.1f} req/s; above that loadkit itself could "
            "not send the rate (the generator's limit, not the server's capacity)."
        )
    elif high is None:
        text = f"Capacity is at least {low:.1f} req/s (no probe failed)."
    else:
        text = (
            f"Capacity: {low:.1f} req/s within {pct} <= {slo_ms:g} ms (passes at {low:.1f}, "
            f"fails at {high:.1f} req/s); limited by {limit.resource}."
        )
    if replicas is not None:
        span = (
            f" ({replicas_low}-{replicas} over the bracket)"
            if replicas_low is not None and replicas_low != replicas
            else ""
        )
        text += (
            f" For a peak of {float(peak):g} req/s with {float(headroom):.0%} headroom: "
            f"{replicas} replica(s){span}, assuming linear scale-out."
        )
    return text


__all__ = [
    "SCALE_OUT",
    "bracket",
    "capacity_result",
    "instance_load",
    "predicted_ceiling",
    "probes_from_events",
    "replicas_for",
]
