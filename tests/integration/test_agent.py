"""`loadkit agent` beside a real Triton, read by a real `loadkit run --agent URL`.

The test starts the agent (watching Triton's PID, no GPU, an ephemeral port) and
reads the URL it prints. A short run must record the server's `host` series from
the agent (place `server`, the server's CPU, run delay and cgroup counters, which
the cgroup-throttling cause reads as the server's), with this machine's own host
series beside it as `host-local`. A second run is killed outright once its
samplers run: none of its processes may outlive it, and the agent (the test's,
not the run's) must still serve.
"""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from loadkit import lifeline
from loadkit.analysis import pipeline
from loadkit.analysis.places import SERVER_SIDE, sampled_at, series_places, sources_at
from loadkit.placement import this_hostname
from loadkit.rundir import load_run
from loadkit.target.server import EmbeddedTriton
from tests.integration.prometheus_server import stop

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _read_url(proc: subprocess.Popen[str], timeout_s: float = 20.0) -> str:
    """The URL of the agent's first line (`loadkit agent: serving URL (...)`)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline()
            assert line.startswith("loadkit agent: serving http://"), line
            return line.split()[3]
        assert proc.poll() is None, f"the agent exited ({proc.returncode})"
    raise AssertionError(f"the agent printed no URL within {timeout_s} s")


@pytest.fixture
def triton(tmp_path: Path) -> Iterator[EmbeddedTriton]:
    with EmbeddedTriton(log_path=tmp_path / "triton.log") as server:
        yield server


@pytest.fixture
def agent(triton: EmbeddedTriton, tmp_path: Path) -> Iterator[tuple[str, int]]:
    log = (tmp_path / "agent.log").open("w")
    proc = lifeline.popen(
        [sys.executable, "-m", "loadkit.cli", "agent", "--server-pid", str(triton.pid),
         "--gpu", "none", "--port", "0"],
        stdout=subprocess.PIPE, stderr=log, text=True,
    )  # fmt: skip
    try:
        yield _read_url(proc), proc.pid
    finally:
        stop(proc)
        log.close()


def _run_argv(triton: EmbeddedTriton, url: str, out: Path, run_id: str, seconds: int) -> list[str]:
    return [
        sys.executable, "-m", "loadkit.cli", "run", str(REPO / "scenarios" / "soak.py"),
        "--target", triton.http_url, "--set", "rate=20", "--duration", str(seconds),
        "--agent", url, "--gpu", "none", "--out", str(out), "--run-id", run_id, "--no-progress",
    ]  # fmt: skip


def _serves(url: str) -> bool:
    with urllib.request.urlopen(f"{url}?collect[]=info", timeout=5) as answer:
        return answer.status == 200 and b"loadkit_agent_info{" in answer.read()


def test_a_run_records_the_servers_host_from_the_agent(
    triton: EmbeddedTriton, agent: tuple[str, int], tmp_path: Path
) -> None:
    url, agent_pid = agent
    # GIVEN an agent that listens on loopback only (no --bind)
    listening = [
        c.laddr for c in psutil.Process(agent_pid).net_connections("tcp") if c.status == "LISTEN"
    ]
    assert listening and {a.ip for a in listening} == {"127.0.0.1"}
    # WHEN a load test reads it
    run = subprocess.run(
        _run_argv(triton, url, tmp_path, "agent", 5),
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert run.returncode in (0, 1), run.stderr[-2000:]
    recorded = load_run(tmp_path / "agent")
    sources = {s["name"]: s for s in recorded.manifest["sources"]}
    # THEN `host` is the agent's: the server's, named by the agent itself
    assert sources["host"]["file"] == "telemetry/host.jsonl"
    assert sources["host"]["place"] == "server" and sources["host"]["host"] == this_hostname()
    host = recorded.series("host")
    assert len(host) >= 4 and set(host["scraped_from"]) == {"agent-host"}
    # ... with the server's process tree and cgroup, as the run's own sampler reads them
    assert host["server_processes"].min() >= 1
    assert host["server_cpu_pct"].notna().sum() >= 3
    assert host["server_ctx_invol"].is_monotonic_increasing
    assert host["server_run_delay_ns"].notna().all()
    assert host["cgroup_nr_periods"].notna().all() and host["cgroup_path"].notna().all()
    per_core = [v for v in host["cpu_per_core_pct"] if isinstance(v, list)]
    assert len(per_core) >= 3 and all(0 <= c <= 100 for row in per_core for c in row)
    # AND this machine's own sampler wrote its copy beside it
    assert sources["host-local"]["file"] == "telemetry/host-local.jsonl"
    assert "tcp_active_opens" in recorded.series("host-local").columns
    # AND the analysis reads the server's cgroup and run delay from the agent's series
    places = series_places(recorded.info)
    assert sampled_at(places, "host.process", SERVER_SIDE)
    server_host = sources_at(pipeline.align(recorded).sources, places, SERVER_SIDE)["host"]
    assert server_host.has_cgroup and server_host.server_run_delay_ms_per_s is not None
    assert json.loads((tmp_path / "agent" / "manifest.json").read_text())["status"] == "complete"


def test_a_capacity_search_records_the_servers_host_from_the_agent(
    triton: EmbeddedTriton, agent: tuple[str, int], tmp_path: Path
) -> None:
    url, _ = agent
    # WHEN a short capacity search (two probes, up to a low --max-rate) reads the agent
    search = subprocess.run(
        [sys.executable, "-m", "loadkit.cli", "capacity", "--target", triton.http_url,
         "--slo", "p99=1s", "--start", "10", "--max-rate", "20", "--settle", "1",
         "--window", "1", "--max-duration", "30", "--agent", url, "--gpu", "none",
         "--no-report", "--out", str(tmp_path), "--run-id", "cap"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert search.returncode == 0, search.stderr[-2000:]
    recorded = load_run(tmp_path / "cap")
    assert recorded.info.kind == "capacity" and recorded.info.status == "complete"
    # THEN its `host` series is the agent's, the server's place, as a load test's is
    sources = {s["name"]: s for s in recorded.manifest["sources"]}
    assert sources["host"]["place"] == "server", sources["host"]
    host = recorded.series("host")
    assert len(host) >= 3 and set(host["scraped_from"]) == {"agent-host"}
    assert host["server_run_delay_ns"].notna().all()


def test_a_killed_run_leaves_no_process_and_the_agent_serves_on(
    triton: EmbeddedTriton, agent: tuple[str, int], tmp_path: Path
) -> None:
    url, _ = agent
    log = (tmp_path / "run.log").open("w")
    # A run far longer than the test: it is killed, never left to end on its own first.
    run = lifeline.popen(
        _run_argv(triton, url, tmp_path, "killed", 600), stdout=log, stderr=subprocess.STDOUT
    )
    try:
        # GIVEN the run records (its first load interval is written) and its samplers run;
        # waiting on a state the run reports, not on the agent's rows, which a busy host
        # can hold back past any fixed time
        first_interval = tmp_path / "killed" / "load" / "local.jsonl"
        deadline = time.monotonic() + 60
        while not (first_interval.exists() and first_interval.read_text().count("\n") >= 1):
            assert time.monotonic() < deadline, (tmp_path / "run.log").read_text()[-2000:]
            assert run.poll() is None, (tmp_path / "run.log").read_text()[-2000:]
            time.sleep(0.2)
        started = psutil.Process(run.pid).children(recursive=True)
        assert any("loadkit.telemetry.process" in " ".join(p.cmdline()) for p in started)
        # WHEN it is killed outright
        run.send_signal(signal.SIGKILL)
        run.wait(10)
        # THEN every process it started is gone soon after
        _, alive = psutil.wait_procs(started, timeout=15)
        assert not alive, [p.info if hasattr(p, "info") else p.pid for p in alive]
    finally:
        stop(run)
        log.close()
    # AND the agent, which the run did not start, still serves, and said nothing of it
    assert _serves(url)
    assert "Traceback" not in (tmp_path / "agent.log").read_text()
