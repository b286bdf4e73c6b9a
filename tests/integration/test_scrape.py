"""`loadkit run --scrape node=URL`: a real node-exporter scraped during a real load test.

Debian's `prometheus-node-exporter` is started by the test on 127.0.0.1 (an
ephemeral port) and stopped by PID; a short `loadkit run` against the embedded
Triton scrapes it every second. The run's `host` series must be the exporter's
(place `server`, its host), with CPU per core from successive scrapes, and this
machine's own host sampler beside it as `host-local`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadkit import lifeline
from loadkit.rundir import load_run
from loadkit.target.server import EmbeddedTriton
from tests.integration.prometheus_server import free_port, stop, wait_ok

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NODE_EXPORTER = shutil.which("prometheus-node-exporter")


@pytest.fixture
def node_exporter(tmp_path: Path) -> Iterator[str]:
    if NODE_EXPORTER is None:
        pytest.skip("Debian's prometheus-node-exporter is not installed (scripts/setup.sh)")
    port = free_port()
    log = (tmp_path / "node.log").open("wb")
    proc = lifeline.popen(
        [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        wait_ok(url)
        yield url
    finally:
        stop(proc)
        log.close()


def test_a_load_test_records_the_servers_host_from_its_node_exporter(
    node_exporter: str, tmp_path: Path
) -> None:
    with EmbeddedTriton(log_path=tmp_path / "triton.log") as triton:
        run = subprocess.run(
            [sys.executable, "-m", "loadkit.cli", "run", str(REPO / "scenarios" / "soak.py"),
             "--target", triton.http_url, "--set", "rate=20", "--duration", "5",
             "--scrape", f"node={node_exporter}", "--gpu", "none",
             "--out", str(tmp_path), "--run-id", "scraped", "--no-progress"],
            capture_output=True, text=True, timeout=90, check=False,
        )  # fmt: skip
    assert run.returncode in (0, 1), run.stderr[-2000:]
    recorded = load_run(tmp_path / "scraped")
    sources = {s["name"]: s for s in recorded.manifest["sources"]}
    # THEN `host` came from the scrape: the server's, named after the exporter's host
    # (on loopback beside a local target: the target's machine)
    assert sources["host"]["file"] == "telemetry/host.jsonl"
    assert sources["host"]["place"] == "server"
    assert sources["host"]["host"] == recorded.info.environment.target_location.host
    host = recorded.series("host")
    assert len(host) >= 4 and set(host["scraped_from"]) == {"node"}
    assert host["load1"].notna().all()
    per_core = [v for v in host["cpu_per_core_pct"] if isinstance(v, list)]
    assert len(per_core) >= 3 and all(0 <= c <= 100 for row in per_core for c in row)
    # AND this machine's sampler wrote its own copy beside it
    assert sources["host-local"]["file"] == "telemetry/host-local.jsonl"
    assert "tcp_active_opens" in recorded.series("host-local").columns
    assert json.loads((tmp_path / "scraped" / "manifest.json").read_text())["status"] == "complete"
