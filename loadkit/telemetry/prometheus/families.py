"""Exporter families: what each exporter exposes, and which run-directory field it fills.

One `ExporterFamily` per exporter. Each of its `MetricMap`s names a metric as the
exporter exposes it, the row field it fills (the same fields the live samplers
write, docs/run-format.md), the unit conversion, and how Prometheus is asked
for it (the bare metric, or a PromQL expression when the field is a rate), and,
for a rate, how two successive scrapes give it (`LiveRate`).

The same entries read a scrape (`rows_from_exposition`, for a file or a test),
successive scrapes during a run (`rows_from_scrapes`: `loadkit run --scrape`)
and a window of Prometheus (`rows_from_series`). Adding an exporter is adding
one entry to `FAMILIES`; nothing else names exporters.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from loadkit import percentile_names
from loadkit.rundir.schema import decode_reasons
from loadkit.telemetry.importers import dcgm_value

Row = dict[str, Any]
MIB = 1024 * 1024

# The run-directory series a family fills (telemetry/<series>.jsonl).
SERIES_GPU = "gpu"
SERIES_HOST = "host"
SERIES_TRITON = "triton_stats"
SERIES_LATENCY = "production_latency"


@dataclass(frozen=True)
class PromSeries:
    """One time series: its labels (`__name__` included) and (t_ns, value) points."""

    labels: Mapping[str, str]
    points: Sequence[tuple[int, float]]


@dataclass(frozen=True)
class LiveRate:
    """A rate field from two scrapes, as its PromQL `query` takes it from Prometheus:
    `offset + scale * increase / seconds`, the increase summed over the samples of one
    row (and one `cpu` for a per-core field) whose labels are in `only`.

    A counter that went down (a restart) gives no value for that interval.
    `per_interval`: the increase itself, not per second (`offset + scale * increase`):
    a count per sample, as the host sampler writes new connections.
    `bounds`: the range the field can take (a core's busy share, 0-100 %), in the live
    rate and in the field's PromQL alike. The seconds are between our two scrapes, the
    counters are read when the exporter answers: that jitter puts an idle core a little
    above 100 % idle (seen: -1.6 % busy).
    """

    scale: float
    offset: float = 0.0
    only: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    per_interval: bool = False
    bounds: tuple[float, float] | None = None

    def takes(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) in values for k, values in self.only.items())


@dataclass(frozen=True)
class MetricMap:
    """One exposed metric -> one row field.

    `match`: label values a sample must carry (e.g. `quantile="0.99"`).
    `query`: the PromQL for a window, `{sel}` standing for the label matchers and
    `{rate}` for the rate window; None asks for the bare metric. A map with a
    query that computes a rate has no meaning in one scrape (`scrape=False`).
    `kind`: "gauge", "counter" (stored raw: analysis takes the rate and handles
    resets), "reasons" (a clocks-event bitmask, decoded into `reason_*`),
    "per_core" (one value per `cpu` label, into a list), "label" (the value of the
    sample's label `label`, as text: the cgroup a counter belongs to).
    `sum_over`: labels summed away (e.g. the failure `reason`).
    `live`: how a rate field (`scrape=False`) is taken from two successive scrapes.
    `window`: asked of Prometheus for a window; False for a live count per scrape
    interval, which no PromQL over the import's steps gives exactly.
    """

    metric: str
    field: str
    kind: str = "gauge"
    scale: float = 1.0
    match: Mapping[str, str] = dataclasses.field(default_factory=dict)
    query: str | None = None
    sum_over: tuple[str, ...] = ()
    scrape: bool = True
    live: LiveRate | None = None
    label: str | None = None
    window: bool = True

    def promql(self, matchers: str, rate_window: str) -> str:
        """The query for this field; `matchers` are label matchers without braces."""
        own = [f'{k}="{v}"' for k, v in self.match.items()]
        sel = ",".join(m for m in (*own, matchers) if m)
        if self.query is not None:
            query = self.query.format(sel=sel, rate=rate_window)
            if self.live is not None and self.live.bounds is not None:
                # Prometheus's rate has the live rate's jitter (its scrape's timestamp,
                # the exporter's read), so the same bounds hold. clamp_min/clamp_max, not
                # clamp: servers before Prometheus 2.26 have only those.
                lo, hi = self.live.bounds
                query = f"clamp_max(clamp_min({query}, {lo:g}), {hi:g})"
            return query
        bare = f"{self.metric}{{{sel}}}"
        if self.sum_over:
            return f"sum without ({', '.join(self.sum_over)}) ({bare})"
        return bare

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        return name == self.metric and all(labels.get(k) == v for k, v in self.match.items())


@dataclass(frozen=True)
class ExporterFamily:
    """One exporter: the series it fills, the labels that tell its rows apart, its metrics."""

    name: str
    series: str
    key_labels: tuple[str, ...]
    metrics: tuple[MetricMap, ...]
    doc: str
    # Exporter-specific "no value" sentinels -> None (DCGM's blank values).
    clean: Callable[[float], float | None] | None = None

    def maps_for(self, name: str, labels: Mapping[str, str]) -> list[MetricMap]:
        """Every field one scraped sample fills (a value and its label: the agent's cgroup)."""
        return [m for m in self.metrics if m.scrape and m.matches(name, labels)]

    def rate_for(self, name: str, labels: Mapping[str, str]) -> MetricMap | None:
        """The rate field (`live`) this counter sample feeds, if any."""
        for metric_map in self.metrics:
            live = metric_map.live
            if live is not None and metric_map.matches(name, labels) and live.takes(labels):
                return metric_map
        return None


def _quantile_maps(metric: str, prefix: str) -> tuple[MetricMap, ...]:
    """A Triton summary's quantiles as `<prefix>p50_ms` ... (µs -> ms)."""
    return tuple(
        MetricMap(
            metric,
            f"{prefix}{name}_ms",
            scale=1e-3,
            match={"quantile": f"{percentile_names.quantile(name):g}"},
        )
        for name in percentile_names.PERCENTILES
    )


TRITON = ExporterFamily(
    name="triton",
    series=SERIES_TRITON,
    key_labels=("model", "version", "instance"),
    doc="Triton /metrics (port 8002): per-model request, inference and execution counters",
    metrics=(
        MetricMap("nv_inference_request_success", "success_count", "counter"),
        MetricMap("nv_inference_request_failure", "fail_count", "counter", sum_over=("reason",)),
        MetricMap("nv_inference_count", "inference_count", "counter"),
        MetricMap("nv_inference_exec_count", "execution_count", "counter"),
        MetricMap("nv_inference_request_duration_us", "success_ns", "counter", scale=1e3),
        MetricMap("nv_inference_queue_duration_us", "queue_ns", "counter", scale=1e3),
        MetricMap("nv_inference_compute_input_duration_us", "compute_input_ns", "counter", 1e3),
        MetricMap("nv_inference_compute_infer_duration_us", "compute_infer_ns", "counter", 1e3),
        MetricMap("nv_inference_compute_output_duration_us", "compute_output_ns", "counter", 1e3),
        MetricMap("nv_inference_pending_request_count", "pending_requests"),
    ),
)

TRITON_SUMMARY = ExporterFamily(
    name="triton-summary",
    series=SERIES_LATENCY,
    key_labels=("model", "version", "instance"),
    doc=(
        "Triton latency summaries (tritonserver --metrics-config summary_latencies=true): "
        "request, queue and compute quantiles"
    ),
    metrics=(
        *_quantile_maps("nv_inference_request_summary_us", ""),
        *_quantile_maps("nv_inference_queue_summary_us", "queue_"),
        *_quantile_maps("nv_inference_compute_infer_summary_us", "compute_infer_"),
    ),
)

# Triton's duration/count counters: only a mean per request. Never a percentile.
TRITON_MEAN = ExporterFamily(
    name="triton-mean",
    series=SERIES_LATENCY,
    key_labels=("model", "version", "instance"),
    doc="mean request time from Triton's duration and success counters (not a percentile)",
    metrics=(
        MetricMap(
            "nv_inference_request_duration_us",
            "mean_ms",
            scale=1e-3,
            scrape=False,
            query=(
                "sum without (reason) (rate(nv_inference_request_duration_us{{{sel}}}[{rate}]))"
                " / sum without (reason) (rate(nv_inference_request_success{{{sel}}}[{rate}]))"
            ),
        ),
    ),
)

DCGM = ExporterFamily(
    name="dcgm",
    series=SERIES_GPU,
    key_labels=("Hostname", "gpu"),
    doc="dcgm-exporter (port 9400): clocks, temperature, power, utilization, memory, reasons",
    clean=dcgm_value,
    metrics=(
        MetricMap("DCGM_FI_DEV_SM_CLOCK", "sm_clock_mhz"),
        MetricMap("DCGM_FI_DEV_MEM_CLOCK", "mem_clock_mhz"),
        MetricMap("DCGM_FI_DEV_MAX_SM_CLOCK", "sm_clock_max_mhz"),
        MetricMap("DCGM_FI_DEV_GPU_TEMP", "temp_c"),
        MetricMap("DCGM_FI_DEV_MEMORY_TEMP", "mem_temp_c"),
        MetricMap("DCGM_FI_DEV_POWER_USAGE", "power_w"),
        MetricMap("DCGM_FI_DEV_POWER_MGMT_LIMIT", "power_limit_w"),
        MetricMap("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "energy_mj", "counter"),
        MetricMap("DCGM_FI_DEV_GPU_UTIL", "util_gpu_pct"),
        MetricMap("DCGM_FI_DEV_MEM_COPY_UTIL", "util_mem_pct"),
        MetricMap("DCGM_FI_DEV_FB_USED", "mem_used_bytes", scale=MIB),
        MetricMap("DCGM_FI_DEV_FB_FREE", "mem_free_bytes", scale=MIB),
        MetricMap("DCGM_FI_DEV_POWER_VIOLATION", "violation_power_ns", "counter", 1e3),
        MetricMap("DCGM_FI_DEV_THERMAL_VIOLATION", "violation_thermal_ns", "counter", 1e3),
        MetricMap("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "clocks_event_reasons", "reasons"),
        MetricMap("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "clocks_event_reasons", "reasons"),
    ),
)

TRITON_GPU = ExporterFamily(
    name="triton-gpu",
    series=SERIES_GPU,
    key_labels=("instance", "gpu_uuid"),
    doc="Triton's own GPU metrics (nv_gpu_*, --allow-gpu-metrics=true): no clocks or reasons",
    metrics=(
        MetricMap("nv_gpu_utilization", "util_gpu_pct", scale=100.0),  # 0..1
        MetricMap("nv_gpu_power_usage", "power_w"),
        MetricMap("nv_gpu_power_limit", "power_limit_w"),
        MetricMap("nv_energy_consumption", "energy_mj", "counter", scale=1e3),  # J
        MetricMap("nv_gpu_memory_total_bytes", "mem_total_bytes"),
        MetricMap("nv_gpu_memory_used_bytes", "mem_used_bytes"),
    ),
)

NODE = ExporterFamily(
    name="node",
    series=SERIES_HOST,
    key_labels=("instance",),
    doc="node-exporter (port 9100): CPU per core, PSI, load, memory, TCP opens",
    metrics=(
        MetricMap(
            "node_cpu_seconds_total",
            "cpu_per_core_pct",
            "per_core",
            scrape=False,
            live=LiveRate(-100.0, 100.0, {"mode": ("idle", "iowait")}, bounds=(0.0, 100.0)),
            query=(
                '100 * (1 - sum by (instance, cpu) (rate(node_cpu_seconds_total{{mode=~"idle|iowait",'
                "{sel}}}[{rate}])))"
            ),
        ),
        MetricMap(
            "node_pressure_cpu_waiting_seconds_total", "psi_cpu_some_total_us", "counter", 1e6
        ),
        MetricMap("node_load1", "load1"),
        MetricMap("node_netstat_Tcp_ActiveOpens", "tcp_active_opens", "counter"),
        MetricMap("node_netstat_Tcp_PassiveOpens", "tcp_passive_opens", "counter"),
        MetricMap("node_memory_MemAvailable_bytes", "mem_available_bytes"),
    ),
)

CADVISOR = ExporterFamily(
    name="cadvisor",
    series=SERIES_HOST,
    key_labels=("namespace", "pod", "container", "name"),
    doc="cAdvisor / kubelet: CFS periods and throttling, CPU and memory per container",
    metrics=(
        MetricMap("container_cpu_cfs_periods_total", "cgroup_nr_periods", "counter"),
        MetricMap("container_cpu_cfs_throttled_periods_total", "cgroup_nr_throttled", "counter"),
        MetricMap(
            "container_cpu_cfs_throttled_seconds_total", "cgroup_throttled_ns", "counter", 1e9
        ),
        MetricMap(
            "container_cpu_usage_seconds_total",
            "server_cpu_pct",
            scrape=False,
            live=LiveRate(100.0),
            query="100 * sum without (cpu) (rate(container_cpu_usage_seconds_total{{{sel}}}[{rate}]))",
        ),
        MetricMap("container_memory_working_set_bytes", "server_rss_bytes"),
    ),
)

PROCESS = ExporterFamily(
    name="process",
    series=SERIES_HOST,
    key_labels=("job", "instance"),
    doc="a client library's process_* metrics of the serving process (CPU, RSS, threads)",
    metrics=(
        MetricMap(
            "process_cpu_seconds_total",
            "server_cpu_pct",
            scrape=False,
            live=LiveRate(100.0),
            query="100 * rate(process_cpu_seconds_total{{{sel}}}[{rate}])",
        ),
        MetricMap("process_resident_memory_bytes", "server_rss_bytes"),
    ),
)


# `loadkit agent`'s own metric: `{host, server_pid, gpu, version} 1`, read when a run plans.
AGENT_INFO = "loadkit_agent_info"
# `loadkit agent` (loadkit/telemetry/agent.py) on the server's host: its GPU collector
# exposes exactly these maps (the row field over `scale`), so the two cannot drift apart.
AGENT_GPU = ExporterFamily(
    name="agent-gpu",
    series=SERIES_GPU,
    key_labels=("instance", "gpu"),
    doc="loadkit agent's GPU (NVML read on each scrape): clocks, reasons, temperature, power",
    metrics=(
        MetricMap("loadkit_gpu_utilization_percent", "util_gpu_pct"),
        MetricMap("loadkit_gpu_memory_utilization_percent", "util_mem_pct"),
        MetricMap("loadkit_gpu_memory_used_bytes", "mem_used_bytes"),
        MetricMap("loadkit_gpu_memory_total_bytes", "mem_total_bytes"),
        MetricMap("loadkit_gpu_sm_clock_mhz", "sm_clock_mhz"),
        MetricMap("loadkit_gpu_mem_clock_mhz", "mem_clock_mhz"),
        MetricMap("loadkit_gpu_sm_clock_max_mhz", "sm_clock_max_mhz"),
        MetricMap("loadkit_gpu_mem_clock_max_mhz", "mem_clock_max_mhz"),
        MetricMap("loadkit_gpu_temperature_celsius", "temp_c"),
        MetricMap("loadkit_gpu_slowdown_temperature_celsius", "temp_slowdown_c"),
        MetricMap("loadkit_gpu_shutdown_temperature_celsius", "temp_shutdown_c"),
        MetricMap("loadkit_gpu_max_operating_temperature_celsius", "temp_max_operating_c"),
        MetricMap("loadkit_gpu_power_watts", "power_w"),
        MetricMap("loadkit_gpu_power_limit_watts", "power_limit_w"),
        MetricMap("loadkit_gpu_energy_joules_total", "energy_mj", "counter", scale=1e3),
        MetricMap("loadkit_gpu_clocks_event_reasons", "clocks_event_reasons", "reasons"),
        MetricMap(
            "loadkit_gpu_power_violation_seconds_total", "violation_power_ns", "counter", 1e9
        ),
        MetricMap(
            "loadkit_gpu_thermal_violation_seconds_total", "violation_thermal_ns", "counter", 1e9
        ),
        MetricMap("loadkit_gpu_pcie_tx_kilobytes_per_second", "pcie_tx_kbps"),
        MetricMap("loadkit_gpu_pcie_rx_kilobytes_per_second", "pcie_rx_kbps"),
        MetricMap("loadkit_gpu_server_memory_bytes", "proc_mem_bytes"),
    ),
)

AGENT_HOST = ExporterFamily(
    name="agent-host",
    series=SERIES_HOST,
    key_labels=("instance",),
    doc=(
        "loadkit agent's host: CPU per core, PSI, the server's CPU, context switches, "
        "run delay and cgroup throttling"
    ),
    metrics=(
        MetricMap(
            "loadkit_host_cpu_seconds_total",
            "cpu_per_core_pct",
            "per_core",
            scrape=False,
            live=LiveRate(-100.0, 100.0, {"mode": ("idle", "iowait")}, bounds=(0.0, 100.0)),
            query=(
                "100 * (1 - sum by (instance, cpu) (rate(loadkit_host_cpu_seconds_total"
                '{{mode=~"idle|iowait",{sel}}}[{rate}])))'
            ),
        ),
        MetricMap("loadkit_host_load1", "load1"),
        MetricMap("loadkit_host_memory_used_bytes", "mem_used_bytes"),
        MetricMap("loadkit_host_memory_available_bytes", "mem_available_bytes"),
        MetricMap("loadkit_host_cpu_pressure_some_avg10", "psi_cpu_some_avg10"),
        MetricMap(
            "loadkit_host_cpu_pressure_some_seconds_total", "psi_cpu_some_total_us", "counter", 1e6
        ),
        MetricMap(
            "loadkit_host_tcp_opens_total",
            "tcp_new_connections",
            scrape=False,
            live=LiveRate(1.0, per_interval=True),
            window=False,
        ),
        MetricMap(
            "loadkit_server_cpu_seconds_total",
            "server_cpu_pct",
            scrape=False,
            live=LiveRate(100.0),
            query="100 * rate(loadkit_server_cpu_seconds_total{{{sel}}}[{rate}])",
        ),
        MetricMap("loadkit_server_resident_memory_bytes", "server_rss_bytes"),
        MetricMap("loadkit_server_threads", "server_threads"),
        MetricMap("loadkit_server_processes", "server_processes"),
        MetricMap(
            "loadkit_server_context_switches_total",
            "server_ctx_vol",
            "counter",
            match={"kind": "voluntary"},
        ),
        MetricMap(
            "loadkit_server_context_switches_total",
            "server_ctx_invol",
            "counter",
            match={"kind": "involuntary"},
        ),
        MetricMap("loadkit_server_run_delay_seconds_total", "server_run_delay_ns", "counter", 1e9),
        MetricMap(
            "loadkit_server_connections_total",
            "server_new_connections",
            scrape=False,
            live=LiveRate(1.0, per_interval=True),
            window=False,
        ),
        MetricMap("loadkit_server_cgroup_periods_total", "cgroup_nr_periods", "counter"),
        MetricMap(
            "loadkit_server_cgroup_throttled_periods_total", "cgroup_nr_throttled", "counter"
        ),
        MetricMap(
            "loadkit_server_cgroup_throttled_seconds_total", "cgroup_throttled_ns", "counter", 1e9
        ),
        MetricMap("loadkit_server_cgroup_version", "cgroup_version"),
        MetricMap("loadkit_server_cgroup_version", "cgroup_path", "label", label="cgroup"),
    ),
)


def application_histogram(name: str, *, native: bool = False) -> ExporterFamily:
    """An application's latency histogram (seconds, the Prometheus convention): P50..P99.9
    per step by `histogram_quantile` over the rate of its `<name>_bucket` series, or of
    `<name>` itself for a native histogram (`native=True`)."""
    quantiles = {name: percentile_names.quantile(name) for name in percentile_names.PERCENTILES}
    series = name if native else f"{name}_bucket"
    by = "" if native else " by (le)"
    metrics = tuple(
        MetricMap(
            series,
            f"{label}_ms",
            scale=1e3,
            scrape=False,
            query=f"histogram_quantile({q}, sum{by} (rate({series}{{{{{{sel}}}}}}[{{rate}}])))",
        )
        for label, q in quantiles.items()
    )
    kind = "native histogram" if native else "histogram"
    return ExporterFamily(
        name="app-histogram",
        series=SERIES_LATENCY,
        key_labels=(),
        doc=f"the application's latency {kind} {name} (histogram_quantile per step)",
        metrics=metrics,
    )


# The registry: every exporter loadkit reads. Order matters only for latency,
# where the first family with data is used (summaries, then a histogram, then the mean).
FAMILIES: dict[str, ExporterFamily] = {
    f.name: f
    for f in (
        TRITON,
        TRITON_SUMMARY,
        TRITON_MEAN,
        DCGM,
        TRITON_GPU,
        NODE,
        CADVISOR,
        PROCESS,
        AGENT_GPU,
        AGENT_HOST,
    )
}


# --- rows ------------------------------------------------------------------------------
def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() and abs(value) < 2**53 else value


def _cpu_index(label: str | None) -> int | None:
    digits = "".join(ch for ch in (label or "") if ch.isdigit())
    return int(digits) if digits else None


Key = tuple[str | None, ...]


def rows_from_series(
    family: ExporterFamily, fetched: Iterable[tuple[MetricMap, Sequence[PromSeries]]]
) -> dict[Key, list[Row]]:
    """Rows per key (the family's key labels) from each map's series, sorted by time.

    Values of several series for one key, time and field are summed (a `sum_over`
    the query did not do); NaN points (a histogram with no requests) are null.
    """
    out: dict[Key, list[Row]] = {}
    for key, rows in _unfinished_rows(family, fetched).items():
        ordered = [rows[t] for t in sorted(rows)]
        for row in ordered:
            _finish(row)
        out[key] = ordered
    return out


def _unfinished_rows(
    family: ExporterFamily, fetched: Iterable[tuple[MetricMap, Sequence[PromSeries]]]
) -> dict[Key, dict[int, Row]]:
    by_key: dict[Key, dict[int, Row]] = {}
    for metric_map, series_list in fetched:
        for series in series_list:
            key = tuple(series.labels.get(k) for k in family.key_labels)
            rows = by_key.setdefault(key, {})
            for t_ns, value in series.points:
                row = rows.setdefault(t_ns, {"t_ns": t_ns})
                cleaned = family.clean(value) if family.clean is not None else value
                _fill(row, metric_map, series.labels, cleaned)
    return by_key


def _fill(row: Row, metric_map: MetricMap, labels: Mapping[str, str], value: float | None) -> None:
    if metric_map.kind == "label":
        row[metric_map.field] = labels.get(metric_map.label or "")
        return
    scaled = _finite(value * metric_map.scale) if value is not None else None
    if metric_map.kind == "per_core":
        cpu = _cpu_index(labels.get("cpu"))
        if cpu is not None:
            row.setdefault("_cores", {})[cpu] = scaled
        return
    if metric_map.kind == "reasons":
        row[metric_map.field] = None if scaled is None else int(scaled)
        return
    if scaled is None:
        row.setdefault(metric_map.field, None)
        return
    previous = row.get(metric_map.field)
    row[metric_map.field] = _number(
        scaled + previous if isinstance(previous, int | float) else scaled
    )


def _finish(row: Row) -> None:
    cores = row.pop("_cores", None)
    if cores:
        row["cpu_per_core_pct"] = [cores[i] for i in sorted(cores)]
        row["cores"] = len(cores)
        known = [v for v in cores.values() if v is not None]
        row["cpu_pct"] = sum(known) / len(known) if known else None
    if "clocks_event_reasons" in row:
        row.update(decode_reasons(row["clocks_event_reasons"]))


# One sample of a scrape: (name as parsed, labels, value).
Sample = tuple[str, dict[str, str], float]


def parse_exposition(text: str) -> list[Sample]:
    """Every sample of a scrape (Prometheus text format), by prometheus_client's parser.

    A torn last line (a name without a value) would fail the whole parse: it is dropped.
    Raises ValueError for text that is not the exposition format.
    """
    whole = [
        line
        for line in text.splitlines()
        if not line.strip() or line.startswith("#") or len(line.rsplit(maxsplit=1)) == 2
    ]
    return [
        (sample.name, dict(sample.labels), float(sample.value))
        for metric_family in text_string_to_metric_families("\n".join(whole) + "\n")
        for sample in metric_family.samples
    ]


def _lookup(
    find: Callable[[str, Mapping[str, str]], MetricMap | None], name: str, labels: Mapping[str, str]
) -> MetricMap | None:
    # The parser names counter samples `<family>_total` even where the exporter
    # did not (Triton's nv_inference_count): try the name as exposed too.
    return find(name, labels) or find(name.removesuffix("_total"), labels)


@dataclass(frozen=True)
class Scrape:
    """What a scrape leaves for the next one: its time and the counters its rate fields read,
    summed per (field, row key, cpu)."""

    t_ns: int
    totals: Mapping[tuple[str, Key, str | None], float]


def rows_from_scrapes(
    family: ExporterFamily, samples: Sequence[Sample], t_ns: int, previous: Scrape | None
) -> tuple[dict[Key, Row], Scrape]:
    """One scrape's rows at `t_ns`, one per key, and what the next scrape needs.

    The fields one scrape gives (gauges, raw counters, reasons) as `rows_from_exposition`;
    the rate fields (`MetricMap.live`: CPU from node-exporter's, cAdvisor's or a process's
    CPU seconds) from the counters' increase since `previous`, as Prometheus's `rate`
    would give them over the interval between the two scrapes.
    """
    fetched: dict[int, tuple[MetricMap, list[PromSeries]]] = {}
    totals: dict[tuple[str, Key, str | None], float] = {}
    rate_maps: dict[str, MetricMap] = {}
    for name, labels, value in samples:
        maps = family.maps_for(name, labels) or family.maps_for(name.removesuffix("_total"), labels)
        for metric_map in maps:
            entry = fetched.setdefault(id(metric_map), (metric_map, []))
            entry[1].append(PromSeries({**labels, "__name__": name}, [(t_ns, value)]))
        if maps:
            continue
        rate_map = _lookup(family.rate_for, name, labels)
        if rate_map is not None and math.isfinite(value):
            key = tuple(labels.get(k) for k in family.key_labels)
            cpu = labels.get("cpu") if rate_map.kind == "per_core" else None
            group = (rate_map.field, key, cpu)
            totals[group] = totals.get(group, 0.0) + value
            rate_maps[rate_map.field] = rate_map
    by_key = {key: rows[t_ns] for key, rows in _unfinished_rows(family, fetched.values()).items()}
    seconds = (t_ns - previous.t_ns) / 1e9 if previous is not None else 0.0
    if previous is not None and seconds > 0:
        for (field, key, cpu), total in sorted(totals.items(), key=lambda i: str(i[0])):
            before = previous.totals.get((field, key, cpu))
            if before is None:
                continue
            rate_map = rate_maps[field]
            assert rate_map.live is not None
            increase = total - before
            per = 1.0 if rate_map.live.per_interval else seconds
            rate = (
                None
                if increase < 0  # a restart: no rate for this interval
                else rate_map.live.offset + rate_map.live.scale * increase / per
            )
            if rate is not None and rate_map.live.bounds is not None:
                rate = min(max(rate, rate_map.live.bounds[0]), rate_map.live.bounds[1])
            row = by_key.setdefault(key, {"t_ns": t_ns})
            _fill(row, rate_map, {"cpu": cpu or ""}, rate)
    for row in by_key.values():
        _finish(row)
    return by_key, Scrape(t_ns, totals)


def sorted_keys(keys: Iterable[Key]) -> list[Key]:
    return sorted(keys, key=lambda k: tuple(v or "" for v in k))


def rows_from_exposition(family: ExporterFamily, text: str, t_ns: int) -> list[Row]:
    """One scrape (Prometheus text format) as the family's rows at `t_ns`, one per key.

    Only the maps that mean something in one scrape (not rates) are filled.
    """
    rows, _ = rows_from_scrapes(family, parse_exposition(text), t_ns, None)
    return [rows[key] for key in sorted_keys(rows)]


def bucket_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus's `histogram_quantile` on cumulative (upper bound, count) buckets:
    linear interpolation inside the bucket the rank falls in; None without counts."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][0] != math.inf or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in ordered:
        if count >= rank:
            if upper == math.inf:
                return lower  # in the +Inf bucket: the highest finite bound
            if count == below:
                return upper
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return None
