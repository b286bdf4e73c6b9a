"""Differencing Triton's cumulative statistics, and parsing its /metrics."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from loadkit.rundir.schema import TritonStatsRow, row_problems
from loadkit.telemetry.prom_metrics import parse_metrics
from loadkit.telemetry.triton_stats import StatsDifferencer, flatten_model_stats

DATA = Path(__file__).resolve().parents[2] / "data" / "telemetry"
T = 1_764_449_000_000_000_000
S = 1_000_000_000


def real_stats() -> list[dict[str, Any]]:
    """A real /v2/models/ranker/stats answer from Triton 2.51 (30 requests, 29 executions)."""
    data = json.loads((DATA / "triton_2.51_ranker_stats.json").read_text())
    return list(data["model_stats"])


def grown(stats: list[dict[str, Any]], executions: dict[int, int], infer_ns: int = 4_000_000):
    """The same model after `executions` more batches per batch size."""
    out = copy.deepcopy(stats)
    entry = out[0]
    by_size = {b["batch_size"]: b for b in entry["batch_stats"]}
    for size, n in executions.items():
        b = by_size.setdefault(
            size,
            {"batch_size": size, "compute_infer": {"count": 0, "ns": 0}},
        )
        b["compute_infer"]["count"] += n
        b["compute_infer"]["ns"] += n * infer_ns
        entry["execution_count"] += n
        entry["inference_count"] += n * size
        inf = entry["inference_stats"]
        for key in ("success", "queue", "compute_infer"):
            inf[key]["count"] += n * size
        inf["queue"]["ns"] += n * size * 1_000_000
        inf["compute_infer"]["ns"] += n * size * infer_ns
        inf["success"]["ns"] += n * size * (infer_ns + 1_000_000)
    entry["batch_stats"] = sorted(by_size.values(), key=lambda b: b["batch_size"])
    return out


def test_flatten_real_stats() -> None:
    counters, batches = flatten_model_stats(real_stats()[0])
    assert counters["execution_count"] == 29 and counters["inference_count"] == 30
    assert batches == {1: 28, 2: 1}
    assert sum(batches.values()) == counters["execution_count"]


def test_first_snapshot_is_a_baseline_then_interval_rows() -> None:
    diff = StatsDifferencer()
    base = real_stats()
    assert diff.update(T, base) == []
    (row,) = diff.update(T + S, grown(base, {1: 3, 4: 5}))
    assert row["t_ns"] == T and row["interval_ns"] == S
    assert row["model"] == "ranker" and row["version"] == "1" and row["reset"] is False
    assert row["batch_sizes"] == {"1": 3, "4": 5}
    assert sum(row["batch_sizes"].values()) == row["execution_count_delta"] == 8
    assert row["inference_count_delta"] == 23
    assert row["queue_us_per_request"] == pytest.approx(1000.0)
    assert row["compute_infer_us_per_batch"] == pytest.approx(4000.0)
    assert row["compute_infer_us_by_batch_size"] == {"1": 4000.0, "4": 4000.0}
    assert row["batch_size_mean"] == pytest.approx(23 / 8)
    assert row["execution_count"] == 29 + 8  # raw cumulative kept
    assert row_problems(row, TritonStatsRow) == []


def test_idle_interval_has_empty_distribution_and_null_averages() -> None:
    diff = StatsDifferencer()
    diff.update(T, real_stats())
    (row,) = diff.update(T + S, real_stats())
    assert row["batch_sizes"] == {} and row["execution_count_delta"] == 0
    assert row["queue_us_per_request"] is None and row["compute_infer_us_per_batch"] is None


def test_server_restart_is_a_reset_not_a_negative_delta() -> None:
    diff = StatsDifferencer()
    diff.update(T, grown(real_stats(), {4: 100}))
    restarted = copy.deepcopy(real_stats())  # counters back to 29 executions
    (row,) = diff.update(T + S, restarted)
    assert row["reset"] is True
    assert row["execution_count_delta"] == 29
    assert row["batch_sizes"] == {"1": 28, "2": 1}
    assert all(v >= 0 for k, v in row.items() if k.endswith("_delta"))


def test_metrics_keep_exposed_names_and_select_by_pattern() -> None:
    text = (DATA / "triton_2.51_metrics.txt").read_text()
    samples = parse_metrics(text, ["nv_inference_*"])
    names = {name for name, _, _, _ in samples}
    assert "nv_inference_count" in names and "nv_inference_exec_count" in names
    assert not any(n.endswith("_total") for n in names)
    assert not any(n.startswith("nv_cpu") for n in names)
    count = next(s for s in samples if s[0] == "nv_inference_exec_count")
    assert count[1] == {"model": "ranker", "version": "1"} and count[2] == 29.0 and count[3]
    gauge = next(s for s in parse_metrics(text, ["nv_cpu_*"]) if s[0] == "nv_cpu_utilization")
    assert gauge[3] is False


def test_generic_endpoint_histograms_are_counters_and_total_names_kept() -> None:
    text = (
        "# HELP rest_server_requests_total Requests\n"
        "# TYPE rest_server_requests_total counter\n"
        'rest_server_requests_total{method="POST"} 12\n'
        "# HELP model_latency_seconds Latency\n"
        "# TYPE model_latency_seconds histogram\n"
        'model_latency_seconds_bucket{le="0.01"} 3\n'
        'model_latency_seconds_bucket{le="+Inf"} 5\n'
        "model_latency_seconds_count 5\n"
        "model_latency_seconds_sum 0.2\n"
        "# TYPE python_gc_objects_collected counter\n"
        "python_gc_objects_collected_total 7\n"
    )
    samples = {
        (n, tuple(sorted(lab.items()))): (v, c) for n, lab, v, c in parse_metrics(text, ["*"])
    }
    assert samples[("rest_server_requests_total", (("method", "POST"),))] == (12.0, True)
    assert samples[("model_latency_seconds_count", ())] == (5.0, True)
    assert not any(n.startswith("python_gc") for n, _ in samples)
