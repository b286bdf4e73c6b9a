"""Exporter families (loadkit/telemetry/prometheus/families.py), one test per family on an
exposition sample: real scrapes where one could be taken (Triton 2.51 with summary
latencies, node-exporter 1.5, Prometheus 2.42's own histogram and process_* metrics,
the dcgm-exporter sample of tests/data/import); cAdvisor's is hand-written in its format."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadkit.rundir.schema import GpuRow, HostRow, TritonStatsRow, row_fields
from loadkit.telemetry.prometheus.families import (
    CADVISOR,
    DCGM,
    FAMILIES,
    NODE,
    PROCESS,
    SERIES_LATENCY,
    TRITON,
    TRITON_GPU,
    TRITON_SUMMARY,
    PromSeries,
    application_histogram,
    bucket_quantile,
    rows_from_exposition,
    rows_from_series,
)

DATA = Path(__file__).resolve().parents[2] / "data"
T = 1_764_000_000_000_000_000


def scrape(name: str) -> str:
    return (DATA / name).read_text()


def test_every_family_fills_only_fields_the_run_format_knows() -> None:
    known = {
        "gpu": set(row_fields(GpuRow)),
        "host": set(row_fields(HostRow)),
        "triton_stats": set(row_fields(TritonStatsRow)) | {"pending_requests"},
    }
    for family in [*FAMILIES.values(), application_histogram("http_seconds")]:
        for metric_map in family.metrics:
            if family.series == SERIES_LATENCY:
                assert metric_map.field.endswith("_ms"), (family.name, metric_map.field)
            else:
                assert metric_map.field in known[family.series], (family.name, metric_map.field)


def test_triton_counters_from_a_real_triton_2_51_scrape() -> None:
    [row] = rows_from_exposition(TRITON, scrape("telemetry/triton_2.51_summary_metrics.txt"), T)
    assert row["t_ns"] == T
    assert row["success_count"] == 60 and row["inference_count"] == 60
    assert row["execution_count"] == 60
    assert row["fail_count"] == 0  # summed over the four failure reasons
    assert row["success_ns"] == 464_800_000  # µs -> ns
    assert row["queue_ns"] == 133_143_000
    assert row["compute_infer_ns"] == 261_339_000
    assert row["pending_requests"] == 0


def test_triton_summary_quantiles_in_ms_and_the_mean_is_not_among_them() -> None:
    [row] = rows_from_exposition(
        TRITON_SUMMARY, scrape("telemetry/triton_2.51_summary_metrics.txt"), T
    )
    assert row["p50_ms"] == pytest.approx(5.971)
    assert row["p99_ms"] == pytest.approx(9.942)
    assert row["p999_ms"] == pytest.approx(9.942)
    assert row["queue_p99_ms"] == pytest.approx(2.449)
    assert row["compute_infer_p95_ms"] == pytest.approx(4.794)
    assert "mean_ms" not in row  # _sum/_count are counters, never read as a quantile


def test_triton_without_summaries_gives_no_latency_rows() -> None:
    # The scrape of a Triton started without --metrics-config summary_latencies=true.
    assert (
        rows_from_exposition(TRITON_SUMMARY, scrape("telemetry/triton_2.51_metrics.txt"), T) == []
    )


def test_dcgm_rows_per_gpu_with_blank_sentinels_as_null_and_reasons_decoded() -> None:
    rows = rows_from_exposition(DCGM, scrape("import/dcgm_exporter.txt"), T)
    by_gpu = {r["sm_clock_mhz"]: r for r in rows}
    hot = by_gpu[1110]
    assert hot["temp_c"] == 88 and hot["power_w"] == pytest.approx(455.123)
    assert hot["clocks_event_reasons"] == 72
    assert hot["reason_hw_slowdown"] is True and hot["reason_hw_thermal"] is True
    cool = by_gpu[1980]
    assert cool["energy_mj"] is None  # DCGM's int64 blank, not 9.2e18 mJ
    assert cool["reason_hw_slowdown"] is False


def test_node_exporter_1_5_real_scrape() -> None:
    [row] = rows_from_exposition(NODE, scrape("telemetry/node_exporter_1.5_metrics.txt"), T)
    assert row["load1"] == pytest.approx(1.79)
    assert row["mem_available_bytes"] == 24_096_497_664
    assert row["psi_cpu_some_total_us"] == pytest.approx(331_493_607)  # s -> µs
    # Per-core CPU is a rate: it needs a window, not one scrape, and Prometheus computes it.
    assert "cpu_per_core_pct" not in row
    query = NODE.metrics[0].promql('job="node"', "4s")
    # ... kept within 0-100 % busy, as the live rate is (the exporter reads its counters
    # after the scrape's timestamp: an idle core can read a little above 100 % idle)
    assert query == (
        "clamp_max(clamp_min("
        '100 * (1 - sum by (instance, cpu) (rate(node_cpu_seconds_total{mode=~"idle|iowait",'
        'job="node"}[4s])))'
        ", 0), 100)"
    )


def test_node_per_core_rows_from_prometheus_series() -> None:
    per_core = NODE.metrics[0]
    series = [
        PromSeries({"instance": "h:9100", "cpu": str(cpu)}, [(T, 10.0 * (cpu + 1)), (T + 1, 50.0)])
        for cpu in (1, 0, 10, 2)
    ]
    rows = rows_from_series(NODE, [(per_core, series)])[("h:9100",)]
    assert rows[0]["cpu_per_core_pct"] == [10.0, 20.0, 30.0, 110.0]  # ordered by core number
    assert rows[0]["cores"] == 4
    assert rows[1]["cpu_pct"] == 50.0


def test_cadvisor_rows_per_container() -> None:
    rows = rows_from_exposition(CADVISOR, scrape("telemetry/cadvisor_format_metrics.txt"), T)
    triton = next(r for r in rows if r.get("server_rss_bytes"))
    assert triton["cgroup_nr_periods"] == 184213
    assert triton["cgroup_nr_throttled"] == 20417
    assert triton["cgroup_throttled_ns"] == pytest.approx(1893.417e9)
    assert len(rows) == 2  # one per container: the import keeps one and says which


def test_process_metrics_of_a_real_prometheus_2_42() -> None:
    [row] = rows_from_exposition(PROCESS, scrape("telemetry/prometheus_2.42_self_metrics.txt"), T)
    assert row["server_rss_bytes"] == 43_974_656
    assert "server_cpu_pct" not in row  # a rate: from Prometheus, not from one scrape


def test_application_histogram_query_and_quantile_on_a_real_histogram() -> None:
    family = application_histogram("prometheus_http_request_duration_seconds")
    p99 = next(m for m in family.metrics if m.field == "p99_ms")
    assert p99.promql('job="api"', "20s") == (
        "histogram_quantile(0.99, sum by (le) (rate("
        'prometheus_http_request_duration_seconds_bucket{job="api"}[20s])))'
    )
    assert p99.scale == 1000.0  # seconds -> ms
    buckets: list[tuple[float, float]] = []
    for line in scrape("telemetry/prometheus_2.42_self_metrics.txt").splitlines():
        if line.startswith("prometheus_http_request_duration_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float(le), float(line.rsplit(" ", 1)[1])))
    # All 5 requests in the first bucket (<= 0.1 s): Prometheus interpolates inside it.
    assert bucket_quantile(0.99, buckets) == pytest.approx(0.099)
    assert bucket_quantile(0.5, buckets) == pytest.approx(0.05)


def test_bucket_quantile_matches_prometheus_rules() -> None:
    inf = float("inf")
    assert bucket_quantile(0.5, [(1.0, 0), (2.0, 10), (inf, 10)]) == pytest.approx(1.5)
    assert bucket_quantile(0.99, [(1.0, 0), (2.0, 5), (inf, 10)]) == 2.0  # +Inf: highest bound
    assert bucket_quantile(0.5, [(1.0, 0), (inf, 0)]) is None  # no requests


def test_a_new_exporter_is_one_registry_entry() -> None:
    assert set(FAMILIES) >= {"triton", "triton-summary", "dcgm", "triton-gpu", "node", "cadvisor"}
    for name, family in FAMILIES.items():
        assert family.name == name and family.doc and family.metrics


def test_native_histogram_query() -> None:
    family = application_histogram("http_server_duration_seconds", native=True)
    p99 = next(m for m in family.metrics if m.field == "p99_ms")
    assert p99.promql('job="api"', "20s") == (
        'histogram_quantile(0.99, sum (rate(http_server_duration_seconds{job="api"}[20s])))'
    )


def test_triton_gpu_metrics_per_gpu_uuid() -> None:
    # No GPU where these tests were written, so no real nv_gpu_* scrape: the names and
    # units are those of Triton's metrics documentation (utilization 0..1, energy in J).
    labels = {"instance": "gpu-3:8002", "gpu_uuid": "GPU-5b1e8c2a"}
    fetched = [
        (next(m for m in TRITON_GPU.metrics if m.metric == name), [PromSeries(labels, [(T, v)])])
        for name, v in (
            ("nv_gpu_utilization", 0.87),
            ("nv_gpu_power_usage", 301.5),
            ("nv_gpu_power_limit", 700.0),
            ("nv_energy_consumption", 12.5),
            ("nv_gpu_memory_used_bytes", 2.0e9),
        )
    ]
    [row] = rows_from_series(TRITON_GPU, fetched)[("gpu-3:8002", "GPU-5b1e8c2a")]
    assert row["util_gpu_pct"] == pytest.approx(87.0)
    assert row["power_w"] == 301.5 and row["power_limit_w"] == 700
    assert row["energy_mj"] == 12_500
    assert row["mem_used_bytes"] == 2_000_000_000


def test_node_exporter_tcp_opens_are_raw_counters() -> None:
    text = (
        "# TYPE node_netstat_Tcp_ActiveOpens untyped\nnode_netstat_Tcp_ActiveOpens 73618\n"
        "# TYPE node_netstat_Tcp_PassiveOpens untyped\nnode_netstat_Tcp_PassiveOpens 60155\n"
        "# TYPE node_load1 gauge\nnode_load1 0.5\n"
    )
    [row] = rows_from_exposition(NODE, text, T)
    assert (row["tcp_active_opens"], row["tcp_passive_opens"]) == (73618, 60155)
