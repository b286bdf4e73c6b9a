"""A real Prometheus for integration tests: Debian's binary on 127.0.0.1, stopped by PID.

Started with temporary storage and 1 s scrapes of the targets given; every
process dies with the test (`lifeline.popen`).
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from loadkit import lifeline

PROMETHEUS = shutil.which("prometheus")
NODE_EXPORTER = shutil.which("prometheus-node-exporter")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None or NODE_EXPORTER is None,
    reason="Debian's prometheus and prometheus-node-exporter are not installed "
    "(scripts/setup.sh --with-prometheus installs them as root)",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ok(url: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1.0) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {timeout_s} s")


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextmanager
def running_prometheus(
    tmp_path: Path, triton_metrics_url: str, extra_config: str = "", *, node: bool = True
) -> Iterator[str]:
    """Prometheus (and a node exporter) scraping Triton every second; yields its URL.

    `extra_config`: more top-level keys of prometheus.yml (`rule_files`, `alerting`).
    `node=False`: no node exporter, so the window has no host series (the test's host
    is shared with the other tests of pass 1, which its CPU causes would read)."""
    assert PROMETHEUS is not None and NODE_EXPORTER is not None
    node_port, prom_port = free_port(), free_port()
    with ExitStack() as stack:
        node_log = stack.enter_context((tmp_path / "node.log").open("wb"))
        prom_log = stack.enter_context((tmp_path / "prometheus.log").open("wb"))
        if node:
            exporter = lifeline.popen(
                [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{node_port}"],
                stdout=subprocess.DEVNULL,
                stderr=node_log,
            )
            stack.callback(stop, exporter)
        triton_target = triton_metrics_url.removeprefix("http://").removesuffix("/metrics")
        config = tmp_path / "prometheus.yml"
        node_job = (
            f"  - job_name: node\n    static_configs: [{{targets: ['127.0.0.1:{node_port}']}}]\n"
            if node
            else ""
        )
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            f"  - job_name: triton\n    static_configs: [{{targets: ['{triton_target}']}}]\n"
            + node_job
            + f"  - job_name: prometheus\n    static_configs: [{{targets: ['127.0.0.1:{prom_port}']}}]\n"
            + extra_config
        )
        prom = lifeline.popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=prom_log,
        )
        stack.callback(stop, prom)
        url = f"http://127.0.0.1:{prom_port}"
        wait_ok(f"{url}/-/ready")
        yield url
