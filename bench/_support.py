"""Shared pieces of the peer benchmarks: a trivial nginx endpoint and a CPU meter.

Not part of loadkit: the benchmarks in `bench/` run on demand, never in CI.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
import psutil

from loadkit.rundir import RunWriter, new_histogram
from loadkit.rundir.layout import LATENCY_DIR, LOAD_DIR
from loadkit.rundir.schema import REASON_COLUMNS, THERMAL_REASONS
from loadkit.rundir.writer import append_event, dumps_row, write_manifest

NGINX_STATUS_PATH = "/nginx_status"
REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "bench" / ".cache"

NGINX_CONF = """daemon off;
master_process off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    keepalive_requests 10000000;
    keepalive_timeout 120s;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location = /nginx_status {{ stub_status; }}
        location / {{
            default_type application/json;
            return 200 '{{}}';
        }}
    }}
}}
"""


def bare_body() -> str:
    """The request body bare Locust and wrk send: KServe v2 JSON with one candidate,
    the same size as what loadkit's JSON user sends with `candidates=1`."""
    from loadkit.load.sources import build_source
    from loadkit.load.transports import kserve_v2_json
    from loadkit.target.requests import ranker_plan

    return json.dumps(kserve_v2_json(build_source(ranker_plan(1), seed=0).next()))


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout_s:.0f} s")


@contextmanager
def nginx_endpoint() -> Iterator[tuple[int, int]]:
    """nginx (Debian) answering any request with 200 `{}`: yields (port, pid).

    One process (`master_process off`), so the PID we stop is the server.
    """
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(binary):
        raise RuntimeError("nginx is not installed: apt-get install -y nginx")
    prefix = Path(tempfile.mkdtemp(prefix="loadkit-bench-nginx-"))
    port = free_port()
    conf = prefix / "nginx.conf"
    conf.write_text(NGINX_CONF.format(prefix=prefix, port=port))
    proc = subprocess.Popen(
        [binary, "-c", str(conf), "-p", str(prefix), "-e", str(prefix / "error.log")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port)
        yield port, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        shutil.rmtree(prefix, ignore_errors=True)


def cpu_probe(select: Callable[[], list[psutil.Process]]) -> Callable[[], float]:
    """A probe: summed CPU seconds (user + system) of the processes `select()` returns.

    An exited process keeps its last reading, so the sum never drops.
    """
    last: dict[int, float] = {}

    def probe() -> float:
        for proc in select():
            try:
                t = proc.cpu_times()
                last[proc.pid] = float(t.user + t.system)
            except psutil.Error:
                pass
        return sum(last.values())

    return probe


def nginx_requests_probe(port: int) -> Callable[[], float]:
    """A probe: requests nginx has handled (its `stub_status` counter)."""
    url = f"http://127.0.0.1:{port}{NGINX_STATUS_PATH}"

    def probe() -> float:
        with urllib.request.urlopen(url, timeout=2) as resp:
            text = resp.read().decode()
        # "Active connections: N\nserver accepts handled requests\n A H R\n..."
        return float(text.splitlines()[2].split()[2])

    return probe


class Meter:
    """Polls named probes (CPU seconds, request counters) in a thread.

    `between(name, t0, t1)` interpolates a probe's increase between two
    wall-clock times (ns), so the measurement window is chosen after the
    fact, and every figure of one window comes from the same instants.
    """

    def __init__(self, probes: dict[str, Callable[[], float]], interval_s: float = 0.2):
        self._probes = probes
        self._interval_s = interval_s
        self.samples: list[tuple[int, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Meter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            row: dict[str, float] = {}
            for name, probe in self._probes.items():
                try:
                    row[name] = probe()
                except Exception:
                    row[name] = self.samples[-1][1][name] if self.samples else 0.0
            self.samples.append((time.time_ns(), row))
            self._stop.wait(self._interval_s)

    def at(self, name: str, t_ns: int) -> float:
        s = self.samples
        if not s:
            return 0.0
        if t_ns <= s[0][0]:
            return s[0][1][name]
        for (t0, r0), (t1, r1) in zip(s, s[1:], strict=False):
            if t0 <= t_ns <= t1:
                return r0[name] + (r1[name] - r0[name]) * (t_ns - t0) / max(1, t1 - t0)
        return s[-1][1][name]

    def between(self, name: str, t0_ns: int, t1_ns: int) -> float:
        return self.at(name, t1_ns) - self.at(name, t0_ns)

    def active_window(
        self, name: str, skip_s: float, tail_s: float, min_step: float = 0.0
    ) -> tuple[int, int] | None:
        """From `skip_s` after `name` first rises by more than `min_step` per poll
        to `tail_s` before it last does (`min_step` ignores the probe's own traffic)."""
        s = self.samples
        rising = [s[i][0] for i in range(1, len(s)) if s[i][1][name] - s[i - 1][1][name] > min_step]
        if len(rising) < 2:
            return None
        t0 = rising[0] + int(skip_s * 1e9)
        t1 = rising[-1] - int(tail_s * 1e9)
        return (t0, t1) if t1 > t0 else None


def nginx_meter(port: int, **cpu: Callable[[], list[psutil.Process]]) -> Meter:
    """A Meter of nginx's request counter (`requests`) and of each named group's CPU seconds."""
    probes = {"requests": nginx_requests_probe(port)}
    probes.update({name: cpu_probe(select) for name, select in cpu.items()})
    return Meter(probes)


def load_window(meter: Meter) -> tuple[int, int, float]:
    """(t0, t1, seconds) while the generator's requests reached nginx, start-up and tail left out."""
    # min_step: each poll of nginx's status page is one request of the meter's own.
    window = meter.active_window("requests", skip_s=2.0, tail_s=1.0, min_step=3)
    if window is None:
        raise RuntimeError("no requests reached nginx: the generator did not run")
    t0, t1 = window
    return t0, t1, (t1 - t0) / 1e9


def children_matching(word: str) -> Callable[[], list[psutil.Process]]:
    """Selector: descendants of this process whose command line contains `word`."""
    me = psutil.Process()

    def select() -> list[psutil.Process]:
        out = []
        for child in me.children(recursive=True):
            try:
                if any(word in part for part in child.cmdline()):
                    out.append(child)
            except psutil.Error:
                continue
        return out

    return select


def table(headers: list[str], rows: list[list[object]]) -> str:
    """A Markdown table (what the benchmarks print and the docs hold)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --- long, busy run directories built fast (analysis_scale.py, soak.py) -------------------
#
# Not simulated request by request (`loadkit.testing.synthetic` is minutes and
# gigabytes at these sizes): every second gets its two HDR histograms picked from
# a pool, a load counter row and a request sample; GPU telemetry at 10 Hz, host
# at 5 Hz, Triton statistics at 1 Hz. Every 5 minutes a 20 s GPU thermal
# throttle (clock halved, thermal reason bits, ground-truth fault events)
# triples latency, so the analysis has episodes, a period and a cause to find.

NS = 1_000_000_000
START_NS = 1_764_449_000 * NS
EPISODE_PERIOD_S = 300
EPISODE_LENGTH_S = 20
SLOWEST = 5  # request samples: the reservoir plus the slowest few of each second
BINS_US = np.geomspace(500, 5_000_000, 600).round().astype(int)

Row = dict[str, Any]
# Where a series' row for time t (seconds into the run) goes: one file, or an hour's segment.
SeriesAt = Callable[[float], IO[str]]


def _histogram(rng: np.random.Generator, n: int, median_us: float, sigma: float) -> Any:
    """A latency histogram of `n` values from a lognormal, recorded per bin with counts."""
    edges = np.log(BINS_US)
    p = np.exp(-0.5 * ((edges - np.log(median_us)) / sigma) ** 2)
    counts = rng.multinomial(n, p / p.sum())
    hist = new_histogram()
    for value, count in zip(BINS_US[counts > 0], counts[counts > 0], strict=True):
        hist.record_value(int(value), int(count))
    return hist


def hist_pool(rng: np.random.Generator, rate: int, spike: bool, size: int) -> list[tuple[str, str]]:
    """(corrected line tail, service line tail) pairs: `max_ms,payload` per kind."""
    scale = 3.0 if spike else 1.0
    pool = []
    for _ in range(size):
        pair = []
        for extra in (1.08, 1.0):  # corrected is the service time plus a little send lag
            hist = _histogram(rng, rate, 8000 * scale * extra, 0.35 if not spike else 0.5)
            max_ms = hist.get_max_value() / 1000.0
            pair.append(f"{max_ms:.3f},{hist.encode().decode('ascii')}")
        pool.append((pair[0], pair[1]))
    return pool


def throttled(s: float) -> bool:
    """Inside one of the periodic 20 s thermal throttles."""
    return s % EPISODE_PERIOD_S >= EPISODE_PERIOD_S - EPISODE_LENGTH_S


def start_scale_run(
    out_dir: Path, run_id: str, duration_s: int, rate: int, host: Row, command: str
) -> RunWriter:
    """The run directory with its manifest and events (phases, ground-truth throttles)."""
    writer = RunWriter.create(
        out_dir=out_dir,
        run_id=run_id,
        kind="load",
        scenario={"name": "soak", "path": None, "params": {"rate": float(rate)}, "model": "open"},
        target={"url": "http://127.0.0.1:8000", "protocol": "http", "model": "ranker"},
        slo={"p99_ms": 50.0, "errors_pct": 1.0},
        environment={
            "host": host,
            "gpu": {"kind": "simulated", "devices": [{"index": 0, "name": "Simulated GPU"}]},
            "server": {"name": "triton", "version": "2.51.0", "extensions": [], "models": {}},
        },
        command_line=[command],
    )
    path = writer.path
    (path / "events.jsonl").unlink()  # RunWriter stamps "now"; this run lives at START_NS
    append_event(path, "phase", "run-start", t_ns=START_NS)
    append_event(path, "phase", "load-start", t_ns=START_NS, rate=float(rate))
    for s0 in range(EPISODE_PERIOD_S - EPISODE_LENGTH_S, duration_s, EPISODE_PERIOD_S):
        t0, t1 = START_NS + s0 * NS, START_NS + (s0 + EPISODE_LENGTH_S) * NS
        append_event(path, "fault", "thermal-throttle", t_ns=t0, action="start", simulated=True)
        append_event(path, "fault", "thermal-throttle", t_ns=t1, action="end", simulated=True)
    return writer


def write_latency_load_samples(
    path: Path,
    duration_s: int,
    rate: int,
    rng: np.random.Generator,
    requests_at: SeriesAt,
    reservoir: Callable[[int], int],
) -> None:
    """Per second: the HDR interval log's two lines, a load counter row, the request sample.

    The rows are formatted by hand (a 24 h run has 3 M request rows), as schema.LoadRow and
    schema.RequestRow; tests/unit/test_rundir_schema.py holds them (and the telemetry) to those.
    """
    normal = hist_pool(rng, rate, spike=False, size=48)
    spiky = hist_pool(rng, rate, spike=True, size=16)
    (path / LATENCY_DIR).mkdir(exist_ok=True)
    (path / LOAD_DIR).mkdir(exist_ok=True)
    base_s = START_NS / NS
    with (
        open(path / LATENCY_DIR / "local.hlog", "w", encoding="ascii") as hlog,
        open(path / LOAD_DIR / "local.jsonl", "w", encoding="utf-8") as load,
    ):
        hlog.write("#[loadkit interval log v1: values in microseconds]\n")
        hlog.write(f"#[StartTime: {base_s:.3f} (seconds since epoch)]\n")
        hlog.write(f"#[BaseTime: {base_s:.3f} (seconds since epoch)]\n")
        hlog.write(
            '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n'
        )
        for s in range(duration_s):
            spike = throttled(s)
            corrected, service = (spiky if spike else normal)[int(rng.integers(0, 16))]
            hlog.write(f"Tag=corrected:infer,{s:.3f},1.000,{corrected}\n")
            hlog.write(f"Tag=service:infer,{s:.3f},1.000,{service}\n")
            t_ns = START_NS + s * NS
            load.write(
                f'{{"t_ns": {t_ns}, "interval_ns": {NS}, "process": "local", "name": "infer", '
                f'"offered": {rate}, "started": {rate}, "ok": {rate}, "errors": 0, '
                f'"dropped": 0, "in_flight": {rate // 100}, "out_of_range": 0, '
                f'"error_kinds": {{}}, "dispatch_lag_max_ms": {rng.uniform(0.5, 3):.3f}}}\n'
            )
            kept = reservoir(s)
            n = kept + SLOWEST
            intended = t_ns + np.sort(rng.integers(0, NS, n))
            sent = intended + rng.integers(20_000, 400_000, n)
            service_ns = rng.lognormal(np.log(8e6 * (3 if spike else 1)), 0.35, n).astype(np.int64)
            done = sent + service_ns
            requests_at(s).write(
                "".join(
                    f'{{"t_ns": {i}, "sent_ns": {a}, "done_ns": {d}, "name": "infer", '
                    f'"ok": true, "error_kind": null, "connection_new": false, '
                    f'"sampled": "{"slowest" if k >= kept else "reservoir"}"}}\n'
                    for k, (i, a, d) in enumerate(
                        zip(intended.tolist(), sent.tolist(), done.tolist(), strict=True)
                    )
                )
            )


def write_telemetry(
    gpu_at: SeriesAt,
    host_at: SeriesAt,
    stats_at: SeriesAt,
    duration_s: int,
    rate: int,
    rng: np.random.Generator,
    gpu_mem_noise_bytes: float = 0.0,
    server_rss: Callable[[float], float] | None = None,
) -> None:
    """GPU (10 Hz, thermal bits while throttled), host (5 Hz) and Triton statistics (1 Hz)."""
    energy = 0.0
    for k in range(duration_s * 10):
        t = k / 10
        hot = throttled(t)
        power = 250.0 + rng.normal(0, 4)
        energy += power * 100
        util = round(float(rng.uniform(55, 70)), 1)
        util_mem = round(float(rng.uniform(20, 30)), 1)
        mem = 20 * 2**30 + (int(rng.normal(0, gpu_mem_noise_bytes)) if gpu_mem_noise_bytes else 0)
        row: Row = {
            "t_ns": START_NS + k * NS // 10,
            "gpu": 0,
            "util_gpu_pct": util,
            "util_mem_pct": util_mem,
            "mem_used_bytes": mem,
            "mem_total_bytes": 80 * 2**30,
            "sm_clock_mhz": 990 if hot else 1980,
            "sm_clock_max_mhz": 1980,
            "mem_clock_mhz": 2619,
            "mem_clock_max_mhz": 2619,
            "temp_c": round(91.0 if hot else 70.0 + float(rng.normal(0, 0.3)), 1),
            "temp_slowdown_c": 90,
            "temp_shutdown_c": 95,
            "power_w": round(power, 1),
            "power_limit_w": 350.0,
            "energy_mj": int(energy),
            "clocks_event_reasons": THERMAL_REASONS if hot else 0,
            **{
                column: bool(THERMAL_REASONS & bit) and hot
                for column, bit in REASON_COLUMNS.items()
                if column in BENCH_REASON_COLUMNS
            },
            "pcie_tx_kbps": None,
            "pcie_rx_kbps": None,
            "proc_mem_bytes": None,
            "simulated": True,
        }
        gpu_at(t).write(dumps_row(row) + "\n")
    periods = 0
    for k in range(duration_s * 5):
        t = k / 5
        cores = np.clip(rng.normal(35.0, 8.0, 8), 0, 100).round(1)
        periods += 2
        rss = server_rss(t) if server_rss is not None else 3 * 2**30
        row = {
            "t_ns": START_NS + k * NS // 5,
            "cpu_pct": round(float(cores.mean()), 1),
            "cpu_per_core_pct": cores.tolist(),
            "cores": 8,
            "load1": round(float(cores.sum() / 100), 2),
            "psi_cpu_some_avg10": 0.5,
            "server_cpu_pct": round(float(cores.mean() * 1.5), 1),
            "server_rss_bytes": int(rss),
            "cgroup_nr_periods": periods,
            "cgroup_nr_throttled": 0,
            "cgroup_throttled_ns": 0,
            "tcp_new_connections": 0,
            "mem_used_bytes": 40 * 2**30,
        }
        host_at(t).write(dumps_row(row) + "\n")
    cum = {"success_count": 0, "execution_count": 0, "queue_ns": 0, "compute_infer_ns": 0}
    for s in range(duration_s):
        execs = rate // 8
        delta = {
            "success_count": rate,
            "execution_count": execs,
            "queue_ns": int(rate * 2e6),
            "compute_infer_ns": int(execs * (8e6 if throttled(s) else 4e6)),
        }
        for key, value in delta.items():
            cum[key] += value
        row = {"t_ns": START_NS + s * NS, "interval_ns": NS, "model": "ranker", "version": "1"}
        row.update(cum)
        row["inference_count"] = cum["success_count"]
        row.update({f"{k}_delta": v for k, v in delta.items()})
        row["inference_count_delta"] = rate
        row["batch_sizes"] = {"8": execs}
        stats_at(s).write(dumps_row(row) + "\n")


# The reason columns these runs write (the bits loadkit's recorders had when they were written).
BENCH_REASON_COLUMNS = (
    "reason_gpu_idle",
    "reason_sw_power_cap",
    "reason_hw_slowdown",
    "reason_sw_thermal",
    "reason_hw_thermal",
    "reason_hw_power_brake",
)


def finish_scale_run(writer: RunWriter, duration_s: int, host_simulated: bool, note: str) -> Path:
    """End events, the status and the telemetry sources in the manifest; the run's path."""
    path = writer.path
    end_ns = START_NS + duration_s * NS
    append_event(path, "phase", "load-end", t_ns=end_ns)
    append_event(path, "phase", "run-end", t_ns=end_ns, status="complete")
    writer.manifest.update(status="complete", start_ns=START_NS, end_ns=end_ns)
    writer.manifest["sources"] = [
        {"name": "gpu", "file": "telemetry/gpu.jsonl", "interval_s": 0.1, "simulated": True},
        {
            "name": "host",
            "file": "telemetry/host.jsonl",
            "interval_s": 0.2,
            "simulated": host_simulated,
        },
        {"name": "triton_stats", "file": "telemetry/triton_stats.jsonl", "interval_s": 1.0},
    ]
    for source in writer.manifest["sources"]:
        source.setdefault("simulated", False)
        source["warning"] = None
    writer.manifest["notes"].append(note)
    write_manifest(path, writer.manifest)
    return path
