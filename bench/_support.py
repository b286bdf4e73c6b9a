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

import psutil

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
