"""`loadkit run --serve-metrics PORT`: the live snapshot in Prometheus text format.

Built with `prometheus_client` (its own HTTP server thread and exposition
format): a custom collector turns the latest `LiveSnapshot` (replaced whole,
never mutated, so the server thread needs no lock) into metric families at
each scrape. The names and labels are documented in docs/metrics.md; the
Grafana dashboard in docs/grafana/ uses them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from loadkit import percentile_names
from loadkit.errors import UsageError
from loadkit.load.live import WINDOW_S, LiveSnapshot

QUANTILE_LABELS = {name: f"{percentile_names.quantile(name):g}" for name in percentile_names.WINDOW}


def metric_families(snapshot: LiveSnapshot | None, info: Mapping[str, str]) -> Iterator[Metric]:
    """The metric families of one snapshot (everything the endpoint serves)."""
    run = GaugeMetricFamily(
        "loadkit_run_info", "The run being served (always 1)", labels=sorted(info)
    )
    run.add_metric([info[k] for k in sorted(info)], 1.0)
    yield run
    if snapshot is None:
        return
    latency = GaugeMetricFamily(
        "loadkit_request_latency_seconds",
        f"Latency quantiles over the last {WINDOW_S} complete seconds, all Locust processes "
        "merged; kind=corrected: from the intended send (coordinated-omission corrected), "
        "kind=service: from the actual send",
        labels=["kind", "quantile"],
    )
    for kind, values in (("corrected", snapshot.corrected_s), ("service", snapshot.service_s)):
        for key, label in QUANTILE_LABELS.items():
            value = values.get(key)
            if value is not None:
                latency.add_metric([kind, label], value)
    yield latency
    yield _gauge(
        "loadkit_window_seconds",
        "Complete 1 s intervals behind the windowed values (up to 10)",
        snapshot.window_s,
    )
    if snapshot.window_end_ns is not None and snapshot.window_start_ns is not None:
        yield _gauge(
            "loadkit_window_start_timestamp_seconds",
            "Start of the first interval of the window (Unix time)",
            snapshot.window_start_ns / 1e9,
        )
        yield _gauge(
            "loadkit_window_end_timestamp_seconds",
            "End of the last complete interval of the window (Unix time)",
            snapshot.window_end_ns / 1e9,
        )
    yield _gauge(
        "loadkit_offered_requests_per_second",
        "Arrivals scheduled per second over the window (the offered load)",
        snapshot.offered_per_s,
    )
    yield _gauge(
        "loadkit_achieved_requests_per_second",
        "Requests completed (ok or failed) per second over the window",
        snapshot.achieved_per_s,
    )
    yield _counter("loadkit_requests_offered", "Arrivals scheduled so far", snapshot.offered_total)
    completed = CounterMetricFamily(
        "loadkit_requests_completed", "Requests completed so far, by outcome", labels=["outcome"]
    )
    completed.add_metric(["ok"], snapshot.ok_total)
    completed.add_metric(["error"], snapshot.errors_total)
    yield completed
    errors = CounterMetricFamily(
        "loadkit_request_errors", "Failed requests so far, by kind", labels=["kind"]
    )
    for kind, count in sorted(snapshot.error_kinds_total.items()):
        errors.add_metric([kind], count)
    yield errors
    yield _counter(
        "loadkit_arrivals_dropped",
        "Arrivals that found no free user within the bound (never sent) so far",
        snapshot.dropped_total,
    )
    yield _gauge(
        "loadkit_requests_in_flight",
        "Requests sent and not yet completed, at the end of the last complete interval",
        snapshot.in_flight,
    )
    yield _gauge(
        "loadkit_dispatch_lag_max_seconds",
        "Worst lateness of the arrival scheduler over the window (the generator's own lag)",
        snapshot.dispatch_lag_max_s,
    )
    phase = GaugeMetricFamily(
        "loadkit_scenario_phase_info",
        "The scenario phase that began last (load-start, burst-start, ...): always 1",
        labels=["phase"],
    )
    if snapshot.phase is not None:
        phase.add_metric([snapshot.phase], 1.0)
    yield phase
    yield _gauge(
        "loadkit_run_elapsed_seconds",
        "Seconds since the Locust processes were started",
        snapshot.elapsed_s,
    )
    yield _gauge("loadkit_run_planned_seconds", "Planned length of the scenario", snapshot.total_s)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=float(value))


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=float(value))


class _SnapshotCollector(Collector):
    def __init__(self, endpoint: MetricsEndpoint):
        self.endpoint = endpoint

    def collect(self) -> Iterator[Metric]:
        return metric_families(self.endpoint.snapshot, self.endpoint.info)


class MetricsEndpoint:
    """An HTTP server thread serving `/metrics` for one run."""

    def __init__(self, host: str, port: int, info: Mapping[str, str] | None = None):
        self.info: dict[str, str] = dict(info or {})
        self.snapshot: LiveSnapshot | None = None
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_SnapshotCollector(self))
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise UsageError(
                f"--serve-metrics: cannot listen on {host}:{port} ({exc.strerror or exc})",
                hint="pick a free port, or 0 for any free one",
            ) from exc
        self.host = host
        self.port = int(self._server.server_port)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def publish(self, snapshot: LiveSnapshot, **info: Any) -> None:
        """Serve `snapshot` from now on (replaced whole: scrapes see one or the other)."""
        if info:
            self.info = {**self.info, **{k: str(v) for k, v in info.items()}}
        self.snapshot = snapshot

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
