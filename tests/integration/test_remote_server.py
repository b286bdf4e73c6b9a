"""Load tests against a server on another machine (issue 41): a real Triton in a network
namespace of its own (tests/integration/netns.py), loadkit on this side of a veth pair.

What the server's machine recorded is the server's evidence; what this machine recorded
is the load machine's. Each test checks one way the server's side is read (none, its
node-exporter scraped live, its Prometheus joined afterwards) and that nothing of the
load machine is judged as the server's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadkit.analysis import analyze_run
from loadkit.analysis.causes.base import NO_SERVER_TELEMETRY
from loadkit.faults.cgroup_quota import CgroupQuota
from loadkit.faults.cpu_burn import CpuBurn
from loadkit.faults.schedule import FaultSchedule, FaultUnavailable
from loadkit.rundir import load_run
from loadkit.telemetry.simgpu import SimGpuModel
from loadkit.telemetry.simgpu_runner import write_state
from tests.integration.netns import (
    RemoteTriton,
    ServerHost,
    server_host,
    start_triton,
    stop,
    wait_ready,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NODE_EXPORTER = shutil.which("prometheus-node-exporter")
PROMETHEUS = shutil.which("prometheus")
NODE_PORT, PROM_PORT, AGENT_PORT = 9100, 9090, 9477  # in the server's namespace: free


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RemoteTriton]:
    """Triton on 198.18.x.2 in its namespace, for the whole module."""
    logs = tmp_path_factory.mktemp("remote")
    with server_host() as host:
        yield start_triton(host, logs / "triton.log")


@pytest.fixture(scope="module")
def node_exporter(remote: RemoteTriton, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Debian's node-exporter on the server's address: its /metrics URL."""
    if NODE_EXPORTER is None:
        pytest.skip("Debian's prometheus-node-exporter is not installed (scripts/setup.sh)")
    host = remote.host
    log = (tmp_path_factory.mktemp("node") / "node.log").open("wb")
    proc = host.start([NODE_EXPORTER, f"--web.listen-address={host.address}:{NODE_PORT}"], log=log)
    url = host.url(NODE_PORT, "/metrics")
    wait_ready(url, proc=proc)
    return url


def _run(
    remote: RemoteTriton, out: Path, run_id: str, *extra: str, rate: int = 60, duration: int = 30
) -> subprocess.Popen[str]:
    """`loadkit run` on this side against the remote Triton (started, not waited for)."""
    return subprocess.Popen(
        [sys.executable, "-m", "loadkit.cli", "run", str(REPO / "scenarios" / "soak.py"),
         "--target", remote.http_url, "--set", f"rate={rate}", "--duration", str(duration),
         "--out", str(out), "--run-id", run_id, "--no-progress", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _finish(proc: subprocess.Popen[str], timeout_s: float = 150) -> str:
    output, _ = proc.communicate(timeout=timeout_s)
    assert proc.returncode in (0, 1), output[-3000:]
    return output


def _quota_during(run: subprocess.Popen[str], pid: int) -> str:
    """`run`'s output, with `pid`'s cgroup at 0.03 core for 3 s every 8 s while it runs."""
    quota = CgroupQuota(
        pid,
        FaultSchedule(duration_s=3.0, period_s=8.0, first_start_s=10.0, until_s=30.0),
        quota_cores=0.03,
    )
    try:
        with quota:
            return _finish(run)
    except FaultUnavailable as exc:
        run.kill()
        run.wait()
        pytest.skip(f"no CPU quota here: {exc}")


def _sources(run_dir: Path) -> dict[str, dict[str, Any]]:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    return {s["name"]: s for s in manifest["sources"]}


def _checked(analysis: Any) -> dict[str, Any]:
    return {c.cause: c for c in analysis.causes_checked}


def test_a_throttled_load_machine_is_named_and_the_server_is_not_blamed(
    remote: RemoteTriton, tmp_path: Path
) -> None:
    # GIVEN a Triton on another machine, and loadkit's own processes under a periodic CPU
    # quota (the load pod's limit): the load machine throttled, the server untouched
    run = _run(remote, tmp_path, "load-quota", rate=100)
    output = _quota_during(run, run.pid)
    analysis = analyze_run(load_run(tmp_path / "load-quota"))
    findings = analysis.findings
    # THEN the first finding is the load machine's container, by name, with its own action
    assert findings and findings[0].cause == "load_machine_saturated", (
        [f.summary for f in findings],
        output[-1500:],
    )
    top = findings[0]
    assert "container throttled" in top.summary and "load generator's own" in top.summary
    assert "--workers" in top.action
    # AND nothing says the server uses up its quota: that is not assessable from here
    assert not any(f.cause == "cgroup_throttling" for f in findings)
    assert not any("uses up its" in f.summary.lower() for f in findings)
    assert _checked(analysis)["cgroup_throttling"].reason == NO_SERVER_TELEMETRY
    # AND the manifest and the analysis say where each series was sampled
    sources = _sources(tmp_path / "load-quota")
    assert sources["host"]["place"] == "client"
    assert sources["triton_stats"]["place"] == "server"
    assert sources["triton_stats"]["host"] == remote.host.address


def test_a_fake_nvml_on_the_load_machine_is_not_sampled_for_a_remote_target(
    remote: RemoteTriton, tmp_path: Path
) -> None:
    # GIVEN an NVML library on the load machine (the simulated GPU's stand-in for
    # pynvml, found first on the path): a local target would have its GPU sampled
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "pynvml.py").write_text("from loadkit.telemetry.fake_nvml import *  # noqa\n")
    state = tmp_path / "gpu-state.json"
    write_state(state, SimGpuModel().state)
    env = {"PYTHONPATH": f"{shim}:{REPO}", "LOADKIT_SIM_GPU_STATE": str(state)}
    probe = subprocess.run(
        [sys.executable, "-c",
         "from loadkit.telemetry.gpu import probe_nvml; d, why = probe_nvml(); "
         "print(len(d or []), why)"],
        capture_output=True, text=True, timeout=60, env={**_base_env(), **env}, check=True,
    )  # fmt: skip
    assert probe.stdout.startswith("1 "), probe.stdout + probe.stderr
    # WHEN a run with --gpu auto targets the remote Triton
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadkit.cli", "run", str(REPO / "scenarios" / "soak.py"),
         "--target", remote.http_url, "--set", "rate=20", "--duration", "4",
         "--gpu", "auto", "--out", str(tmp_path), "--run-id", "nvml", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**_base_env(), **env},
    )  # fmt: skip
    output = _finish(proc)
    run_dir = tmp_path / "nvml"
    # THEN no GPU series was recorded here, and the manifest says why
    assert not (run_dir / "telemetry" / "gpu.jsonl").exists()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["environment"]["gpu"] == {"kind": "none", "devices": []}
    gpu = _sources(run_dir)["gpu"]
    assert gpu["file"] is None and gpu["place"] == "client", gpu
    assert "not the server's" in gpu["warning"] and remote.host.address in gpu["warning"]
    assert "not the server's" in output


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.mark.quiet_host
def test_the_servers_node_exporter_shows_a_neighbour_on_its_cores(
    remote: RemoteTriton, node_exporter: str, tmp_path: Path
) -> None:
    # GIVEN the server's node-exporter scraped during the run, and a CPU-bound neighbour
    # at a higher priority than the server on all its cores every 9 s
    # (100/s: 1 s windows; 4 s burns: whole windows of saturated cores between the scrapes)
    run = _run(remote, tmp_path, "neighbour", "--scrape", f"node={node_exporter}", rate=100)
    burn = CpuBurn(
        FaultSchedule(duration_s=4.0, period_s=9.0, first_start_s=10.0, until_s=30.0), nice=-10
    )
    try:
        with burn:
            output = _finish(run)
    except FaultUnavailable as exc:
        run.kill()
        run.wait()
        pytest.skip(f"no high-priority neighbour here: {exc}")
    run_dir = tmp_path / "neighbour"
    analysis = analyze_run(load_run(run_dir))
    # THEN CPU saturation is named, from the series of the server's machine
    found = {f.cause: f for f in analysis.findings}
    assert "cpu_saturation" in found, ([f.summary for f in analysis.findings], output[-1500:])
    sources = _sources(run_dir)
    assert sources["host"]["place"] == "server" and sources["host"]["host"] == remote.host.address
    assert sources["host-local"]["place"] == "client"
    # AND the report labels the host timeline with the server's machine
    html = subprocess.run(
        [sys.executable, "-m", "loadkit.cli", "report", str(run_dir)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    report = (run_dir / "report.html").read_text() if (run_dir / "report.html").exists() else ""
    assert report, html.stdout + html.stderr
    assert f"host (server: {remote.host.address}" in report, report[:3000]


@pytest.fixture
def prometheus(remote: RemoteTriton, node_exporter: str, tmp_path: Path) -> Iterator[str]:
    """Debian's Prometheus on the server's machine, scraping its node-exporter and Triton."""
    if PROMETHEUS is None:
        pytest.skip("Debian's prometheus is not installed (scripts/setup.sh --with-prometheus)")
    host: ServerHost = remote.host
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: node\n    static_configs: [{{targets: ['{host.address}:{NODE_PORT}']}}]\n"
        f"  - job_name: triton\n    static_configs: [{{targets: ['{host.address}:8002']}}]\n"
    )
    log = (tmp_path / "prometheus.log").open("wb")
    proc = host.start(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address={host.address}:{PROM_PORT}"],
        log=log,
    )  # fmt: skip
    url = host.url(PROM_PORT)
    wait_ready(f"{url}/-/ready", proc=proc)
    _until_scraped(url, 'count_over_time(up{job="node"}[1m]) >= 3')
    try:
        yield url
    finally:
        host.started.remove(proc)
        stop(proc)
        log.close()


def _until_scraped(url: str, query: str, timeout_s: float = 30.0) -> None:
    """Until Prometheus answers `query` with a sample: it has rates to give from the start."""
    deadline = time.monotonic() + timeout_s
    ask = f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    while time.monotonic() < deadline:
        with urllib.request.urlopen(ask, timeout=5) as answer:
            if json.loads(answer.read())["data"]["result"]:
                return
        time.sleep(0.5)
    raise AssertionError(f"Prometheus at {url} had no answer to {query} within {timeout_s} s")


def test_prometheus_on_the_servers_side_is_joined_to_the_run_as_the_servers(
    remote: RemoteTriton, prometheus: str, tmp_path: Path
) -> None:
    # GIVEN a run with no telemetry from the server's machine: its causes not assessable
    _finish(_run(remote, tmp_path, "joined", "--gpu", "none", rate=30, duration=10))
    run_dir = tmp_path / "joined"
    before = _checked(analyze_run(load_run(run_dir)))
    assert before["cpu_saturation"].reason == NO_SERVER_TELEMETRY
    time.sleep(2.0)  # Prometheus's last scrape of the run's end (1 s interval)
    # WHEN the server's Prometheus is joined for the run's own window
    joined = subprocess.run(
        [sys.executable, "-m", "loadkit.cli", "import", "--prometheus", prometheus,
         "--run", str(run_dir)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert joined.returncode == 0, joined.stdout + joined.stderr
    # THEN the host series is the server's, from its machine, over the run's window
    sources = _sources(run_dir)
    server_hosts = [s for s in sources.values() if s.get("place") == "server"]
    host = next((s for s in server_hosts if s["name"] == "host"), None)
    assert host is not None, sources
    assert host["host"] == remote.host.address, host
    run = load_run(run_dir)
    rows = run.series("host")
    # (Prometheus had scraped the server's node-exporter for seconds: every step has a rate)
    assert len(rows) >= 8 and rows["cpu_per_core_pct"].notna().all(), rows
    # AND `analyze` reads them: the server's causes are now assessed on them
    after = _checked(analyze_run(run))
    assert after["cpu_saturation"].reason != NO_SERVER_TELEMETRY, after["cpu_saturation"]
    assert after["cpu_saturation"].status != "not_assessable", after["cpu_saturation"]


@pytest.fixture
def agent(remote: RemoteTriton, tmp_path: Path) -> Iterator[str]:
    """`loadkit agent --server-pid` on the server's machine, bound to its address."""
    host = remote.host
    log = (tmp_path / "agent.log").open("wb")
    proc = host.start(
        [sys.executable, "-m", "loadkit.cli", "agent", "--server-pid", str(remote.pid),
         "--gpu", "none", "--bind", host.address, "--port", str(AGENT_PORT)],
        log=log,
    )  # fmt: skip
    url = host.url(AGENT_PORT, "/metrics")
    wait_ready(url, proc=proc)
    try:
        yield url
    finally:
        host.started.remove(proc)
        stop(proc)
        log.close()


# Quiet host: the load machine and the server share this machine's cores, so other tests'
# load on them reads as the load machine short of CPU in the spikes (seen in CI).
@pytest.mark.quiet_host
def test_the_agent_on_the_servers_machine_shows_the_servers_own_quota(
    remote: RemoteTriton, agent: str, tmp_path: Path
) -> None:
    # GIVEN loadkit's agent on the server's machine watching Triton, and a periodic CPU
    # quota on Triton's own cgroup (the server's pod limit); the load machine untouched
    # (0.03 core: well below Triton's need at 100/s, about 0.1 core on a quiet host)
    run = _run(remote, tmp_path, "server-quota", "--agent", agent, rate=100)
    output = _quota_during(run, remote.pid)
    run_dir = tmp_path / "server-quota"
    analysis = analyze_run(load_run(run_dir))
    # THEN the server's quota is named, from the agent's series of the server's machine
    causes = [f.cause for f in analysis.findings]
    assert causes[:1] == ["cgroup_throttling"], (
        [f.summary for f in analysis.findings],
        output[-1500:],
    )
    sources = _sources(run_dir)
    assert sources["host"]["place"] == "server", sources["host"]
    assert sources["host-local"]["place"] == "client"
    assert "load_machine_saturated" not in causes
