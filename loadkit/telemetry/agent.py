"""`loadkit agent`: this machine's GPU and host samplers, served as Prometheus metrics.

Load usually comes from another machine than the GPU server, and the server's
host may run no exporter. The agent runs on the server's host (or as a sidecar
in its pod) and reads what the live samplers read, at the moment it is scraped,
the way node-exporter reads /proc: NVML through `GpuSampler` (clocks, reasons,
temperature, power, violation counters) and /proc, schedstat and the cgroup
through `HostSampler` (per-core CPU seconds, PSI, the server's CPU seconds,
context switches, run delay, cgroup CFS counters). Everything that accumulates
is a counter, so any number of scrapers can read it without disturbing each
other: `loadkit run --agent URL` rates them like any exporter (the `agent-gpu`
and `agent-host` families, loadkit/telemetry/prometheus/families.py), and so
does a Prometheus that scrapes the agent.

`?collect[]=gpu` / `host` / `info` (node-exporter's convention) reads only those
collectors: a 10 Hz GPU scrape does not read the server's threads ten times a
second. Exposition is prometheus_client's; the HTTP server keeps connections
alive (HTTP/1.1), so a scrape is one GET on an open connection, and closes one
that sends nothing for `IDLE_TIMEOUT_S` (its thread is freed). With a token, a
request without `Authorization: Bearer <token>` is a 401; bound to an address
other than loopback, the agent says once what it exposes.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psutil
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from loadkit import __version__
from loadkit.telemetry.gpu import GpuSampler
from loadkit.telemetry.host import HostSampler
from loadkit.telemetry.prometheus.families import AGENT_GPU, AGENT_INFO

DEFAULT_PORT = 9477
DEFAULT_BIND = "127.0.0.1"
METRICS_PATH = "/metrics"
# The collectors `?collect[]=NAME` selects; none named: all of them.
COLLECTORS = ("info", "host", "gpu")
# A connection that sends nothing for this long is closed and its thread freed: longer
# than a run's scrapes (10 Hz, 1 s) and a Prometheus's usual 15 s, so theirs stay open.
IDLE_TIMEOUT_S = 30.0
# What a 401 asks for (RFC 6750).
AUTH_CHALLENGE = 'Bearer realm="loadkit agent"'

Warn = Callable[[str], None]
# Linux counts guest time in user time too (node-exporter exposes it apart, as we leave it out).
_GUEST_MODES = frozenset({"guest", "guest_nice"})


def _stderr_warning(message: str) -> None:
    print(f"loadkit agent: WARNING: {message}", file=sys.stderr, flush=True)


class InfoCollector(Collector):
    """`loadkit_agent_info{host, server_pid, gpu, version} 1`: who answers, read at plan time."""

    def __init__(self, host: str, server_pid: int | None, gpu: str) -> None:
        self.labels = {
            "host": host,
            "server_pid": "" if server_pid is None else str(server_pid),
            "gpu": gpu,
            "version": __version__,
        }

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            AGENT_INFO, "The loadkit agent: its host, the server PID it watches, its GPU source",
            labels=list(self.labels),
        )  # fmt: skip
        info.add_metric(list(self.labels.values()), 1)
        yield info


class HostCollector(Collector):
    """The machine and the server's process tree and cgroup, read on each scrape.

    One `HostSampler` does the reading (the same code as a run's host series); its
    counters are exposed raw, as the kernel keeps them, with the cgroup's path as a
    label so a server moved to another cgroup is a new series. Without a server PID
    there is no server and no cgroup to read (the agent's own would mislead).
    """

    def __init__(self, sampler: HostSampler, warn: Warn = _stderr_warning) -> None:
        self.sampler = sampler
        self.warn = warn
        self._lock = threading.Lock()
        self._connections = 0  # new connections to the server's ports since the start

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            row: Mapping[str, Any] = self.sampler.sample(time.time_ns())[0]
            cpu_times = psutil.cpu_times(percpu=True)
            new_connections = row.get("server_new_connections")
            self._connections += new_connections or 0
            connections = self._connections
            server_cpu_s = self.sampler.server_cpu_seconds
            for message in self.sampler.drain_warnings():
                self.warn(message)
        yield from self._machine(row, cpu_times)
        if self.sampler.server_pid is None:
            return
        up = GaugeMetricFamily(
            "loadkit_agent_server_up", "1 while the server PID the agent watches is running"
        )
        up.add_metric([], 0 if row.get("server_processes") is None else 1)
        yield up
        if row.get("server_processes") is None:
            return  # gone: its counters stop, and a scraper sees them stop
        yield from self._server(row, server_cpu_s, connections)
        yield from self._cgroup(row)

    @staticmethod
    def _machine(row: Mapping[str, Any], cpu_times: Sequence[Any]) -> Iterator[Metric]:
        cpu = CounterMetricFamily(
            "loadkit_host_cpu_seconds", "CPU seconds per core and mode", labels=["cpu", "mode"]
        )
        for index, times in enumerate(cpu_times):
            for mode, seconds in times._asdict().items():
                if mode not in _GUEST_MODES:
                    cpu.add_metric([str(index), mode], seconds)
        yield cpu
        yield from _gauges(
            row,
            (
                ("loadkit_host_load1", "load1", "1-minute load average"),
                ("loadkit_host_memory_used_bytes", "mem_used_bytes", "memory used"),
                ("loadkit_host_memory_available_bytes", "mem_available_bytes", "memory available"),
                ("loadkit_host_cpu_pressure_some_avg10", "psi_cpu_some_avg10", "CPU PSI some avg10 (%)"),
            ),
        )  # fmt: skip
        if row.get("psi_cpu_some_total_us") is not None:
            psi = CounterMetricFamily(
                "loadkit_host_cpu_pressure_some_seconds",
                "time some task waited for a CPU (PSI cpu some total)",
            )
            psi.add_metric([], row["psi_cpu_some_total_us"] / 1e6)
            yield psi
        if row.get("tcp_active_opens") is not None:
            tcp = CounterMetricFamily(
                "loadkit_host_tcp_opens", "TCP connections opened (/proc/net/snmp)", labels=["direction"]
            )  # fmt: skip
            tcp.add_metric(["active"], row["tcp_active_opens"])
            tcp.add_metric(["passive"], row["tcp_passive_opens"])
            yield tcp

    @staticmethod
    def _server(row: Mapping[str, Any], cpu_s: float | None, connections: int) -> Iterator[Metric]:
        if cpu_s is not None:
            cpu = CounterMetricFamily(
                "loadkit_server_cpu_seconds", "CPU seconds of the server's process tree"
            )
            cpu.add_metric([], cpu_s)
            yield cpu
        yield from _gauges(
            row,
            (
                ("loadkit_server_resident_memory_bytes", "server_rss_bytes", "RSS of the server's tree"),
                ("loadkit_server_threads", "server_threads", "threads of the server's tree"),
                ("loadkit_server_processes", "server_processes", "processes of the server's tree"),
            ),
        )  # fmt: skip
        if row.get("server_ctx_vol") is not None:
            ctx = CounterMetricFamily(
                "loadkit_server_context_switches",
                "context switches of the server's process tree",
                labels=["kind"],
            )
            ctx.add_metric(["voluntary"], row["server_ctx_vol"])
            ctx.add_metric(["involuntary"], row["server_ctx_invol"])
            yield ctx
        if row.get("server_run_delay_ns") is not None:
            delay = CounterMetricFamily(
                "loadkit_server_run_delay_seconds",
                "time the server's threads were runnable but waited for a CPU (schedstat)",
            )
            delay.add_metric([], row["server_run_delay_ns"] / 1e9)
            yield delay
        if row.get("server_tcp_ports"):
            conns = CounterMetricFamily(
                "loadkit_server_connections", "new connections to the server's listening ports"
            )
            conns.add_metric([], connections)
            yield conns

    @staticmethod
    def _cgroup(row: Mapping[str, Any]) -> Iterator[Metric]:
        path = row.get("cgroup_path")
        if path is None:
            return
        version = GaugeMetricFamily(
            "loadkit_server_cgroup_version", "the server's cgroup: version", labels=["cgroup"]
        )
        version.add_metric([path], row.get("cgroup_version") or 0)
        yield version
        counters = (
            ("loadkit_server_cgroup_periods", "cgroup_nr_periods", 1, "CFS periods (nr_periods)"),
            ("loadkit_server_cgroup_throttled_periods", "cgroup_nr_throttled", 1, "CFS periods throttled"),
            ("loadkit_server_cgroup_throttled_seconds", "cgroup_throttled_ns", 1e9, "time throttled"),
        )  # fmt: skip
        for name, field, scale, help_text in counters:
            if row.get(field) is not None:
                counter = CounterMetricFamily(name, help_text, labels=["cgroup"])
                counter.add_metric([path], row[field] / scale)
                yield counter


class GpuCollector(Collector):
    """Every GPU through one open `GpuSampler`, read on each scrape: the `agent-gpu` family's
    metrics exactly (each field over the map's scale), labelled `gpu` and `uuid`."""

    def __init__(self, sampler: GpuSampler, warn: Warn = _stderr_warning) -> None:
        self.sampler = sampler
        self.warn = warn
        self.uuids = {int(d["index"]): d.get("uuid") or "" for d in sampler.identity()}
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            rows: list[Mapping[str, Any]] = list(self.sampler.sample(time.time_ns()))
            for message in self.sampler.drain_warnings():
                self.warn(message)
        by_metric: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        for metric_map in AGENT_GPU.metrics:
            for row in rows:
                value = row.get(metric_map.field)
                if value is None:
                    continue
                metric = by_metric.get(metric_map.metric)
                if metric is None:
                    metric = _family(metric_map.metric, metric_map.kind, ["gpu", "uuid"])
                    by_metric[metric_map.metric] = metric
                gpu = int(row["gpu"])
                labels = [str(gpu), self.uuids.get(gpu, "")]
                metric.add_metric(labels, float(value) / metric_map.scale)
        yield from by_metric.values()


def _family(metric: str, kind: str, labels: list[str]) -> GaugeMetricFamily | CounterMetricFamily:
    help_text = f"NVML, read on scrape ({metric.removeprefix('loadkit_gpu_')})"
    if kind == "counter":
        return CounterMetricFamily(metric.removesuffix("_total"), help_text, labels=labels)
    return GaugeMetricFamily(metric, help_text, labels=labels)


def _gauges(row: Mapping[str, Any], gauges: Iterable[tuple[str, str, str]]) -> Iterator[Metric]:
    for name, field, help_text in gauges:
        if row.get(field) is not None:
            yield GaugeMetricFamily(name, help_text, value=row[field])


class AgentExposition:
    """The agent's collectors, one registry per `collect[]` choice; renders a scrape."""

    def __init__(self, collectors: Mapping[str, Collector]) -> None:
        self.names = tuple(name for name in COLLECTORS if name in collectors)
        self._collectors = dict(collectors)
        self._registries: dict[tuple[str, ...], CollectorRegistry] = {}

    def registry(self, chosen: Sequence[str] = ()) -> CollectorRegistry:
        """The registry of the chosen collectors (unknown names ignored; none: all)."""
        names = tuple(n for n in self.names if n in chosen) or self.names
        registry = self._registries.get(names)
        if registry is None:
            registry = CollectorRegistry(auto_describe=False)
            for name in names:
                registry.register(self._collectors[name])
            self._registries[names] = registry
        return registry

    def render(self, chosen: Sequence[str] = ()) -> bytes:
        return generate_latest(self.registry(chosen))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a 10 Hz scrape reuses its connection
    exposition: AgentExposition
    token: bytes | None = None  # the bearer token every request must carry, if any
    # `timeout` (StreamRequestHandler's): the connection's idle timeout, set per server

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.token is not None and not self._authorized(self.token):
            return
        parts = urlsplit(self.path)
        if parts.path.rstrip("/") != METRICS_PATH:
            self._send(404, b"loadkit agent: the metrics are at /metrics\n", "text/plain")
            return
        chosen = parse_qs(parts.query).get("collect[]", [])
        try:
            body = self.exposition.render(chosen)
        except Exception as exc:  # noqa: BLE001 - a failed read is a 500, not a dead agent
            self._send(500, f"loadkit agent: {type(exc).__name__}: {exc}\n".encode(), "text/plain")
            return
        self._send(200, body, CONTENT_TYPE_LATEST)

    def _authorized(self, token: bytes) -> bool:
        """Whether the request carries the token; if not, a 401 is sent."""
        scheme, _, given = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token):
            return True
        challenge = AUTH_CHALLENGE + (', error="invalid_token"' if scheme else "")
        body = b"loadkit agent: give its token: Authorization: Bearer <the --token-file's>\n"
        self._send(401, body, "text/plain", {"WWW-Authenticate": challenge})
        return False

    def _send(
        self, status: int, body: bytes, content_type: str, headers: Mapping[str, str] = {}
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - its signature
        pass  # one line per scrape at 10 Hz would drown the agent's own messages


class AgentServer(ThreadingHTTPServer):
    """The agent's HTTP server: one thread per connection, each closed after
    `idle_timeout_s` without a request; `token`: the bearer token requests must carry."""

    daemon_threads = True

    def __init__(
        self,
        bind: str,
        port: int,
        exposition: AgentExposition,
        *,
        token: str | None = None,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        warn: Warn = _stderr_warning,
    ) -> None:
        handler = type(
            "AgentHandler",
            (_Handler,),
            {
                "exposition": exposition,
                "token": token.encode() if token is not None else None,
                "timeout": idle_timeout_s,
            },
        )
        if ":" in bind:
            self.address_family = socket.AF_INET6
        super().__init__((bind, port), handler)
        exposed = exposure_warning(self.host, port=self.server_address[1], token=token)
        if exposed is not None:
            warn(exposed)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a scraper that went away mid-answer (a run killed outright): not news
        super().handle_error(request, client_address)

    @property
    def host(self) -> str:
        host = self.server_address[0]
        return host.decode() if isinstance(host, bytes) else str(host)

    @property
    def url(self) -> str:
        name = self.host
        shown = f"[{name}]" if ":" in name else name
        return f"http://{shown}:{self.server_address[1]}{METRICS_PATH}"


def exposure_warning(address: str, *, port: int, token: str | None) -> str | None:
    """The one line to say when the agent listens on `address` beyond this machine (None:
    loopback only)."""
    try:
        if ipaddress.ip_address(address.split("%", 1)[0]).is_loopback:
            return None
    except ValueError:
        pass  # not an address: say it
    if token is not None:
        return (
            f"listening on {address} port {port}, not loopback: scrapes must carry the "
            "bearer token, sent in clear over plain HTTP; keep the port on a network you trust"
        )
    return (
        f"listening on {address} port {port}, not loopback: anyone who reaches it reads this "
        "machine's GPU, CPU and memory telemetry and the server's PID, process and cgroup, "
        "with no authentication; give --token-file FILE to require a bearer token"
    )


__all__ = [
    "COLLECTORS",
    "DEFAULT_BIND",
    "DEFAULT_PORT",
    "IDLE_TIMEOUT_S",
    "AgentExposition",
    "AgentServer",
    "Collector",
    "GpuCollector",
    "HostCollector",
    "InfoCollector",
    "exposure_warning",
]
