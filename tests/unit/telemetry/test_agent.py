"""`loadkit agent` (loadkit/telemetry/agent.py) and `loadkit run --agent URL` (scrape.py).

The agent's collectors read a fake /proc and cgroup tree (the host sampler's own
test double) and the fake NVML; their exposition, parsed back through the
`agent-host` and `agent-gpu` families, must give the rows the live samplers write.
An in-process agent on 127.0.0.1 checks the HTTP side and a run's plan.
"""

from __future__ import annotations

import http.client
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.registry import Collector

from loadkit.cli import build_parser, main
from loadkit.commands import agent as agent_command
from loadkit.errors import UsageError
from loadkit.rundir.schema import (
    LOCATION_OTHER_HOST,
    PLACE_SERVER,
    GpuRow,
    HostRow,
    TargetLocation,
    row_problems,
)
from loadkit.telemetry import fake_nvml
from loadkit.telemetry.agent import (
    DEFAULT_BIND,
    IDLE_TIMEOUT_S,
    AgentExposition,
    AgentServer,
    GpuCollector,
    HostCollector,
    InfoCollector,
)
from loadkit.telemetry.base import SamplerOptions, SourceUnavailable
from loadkit.telemetry.gpu import GpuSampler
from loadkit.telemetry.host import HostSampler
from loadkit.telemetry.prometheus.families import (
    AGENT_GPU,
    AGENT_HOST,
    parse_exposition,
    rows_from_scrapes,
)
from loadkit.telemetry.scrape import (
    ScrapeSampler,
    ScrapeTarget,
    parse_agent,
    parse_scrapes,
    plan_scrapes,
)
from loadkit.telemetry.simgpu import CoolingFaultSchedule, SimGpuModel
from loadkit.telemetry.simgpu_runner import write_state
from loadkit.telemetry.supervisor import plan_sources, sampling_rates
from tests.unit.telemetry.test_host import V1_CPU_STAT, fake_system

S = 1_000_000_000
T = 1_764_449_000 * S
REMOTE = TargetLocation(False, LOCATION_OTHER_HOST, "198.18.0.2", "198.18.0.2")


def _rows(family: Any, text: str, t_ns: int, previous: Any = None) -> tuple[dict[str, Any], Any]:
    rows, scrape = rows_from_scrapes(family, parse_exposition(text), t_ns, previous)
    assert len(rows) <= 1
    return (next(iter(rows.values())) if rows else {}), scrape


def _expose(collector: Collector) -> str:
    return AgentExposition({"host": collector}).render().decode()


# --- the host collector ----------------------------------------------------------------
def test_the_host_collector_exposes_the_servers_counters_as_the_host_rows_hold_them(
    tmp_path: Path,
) -> None:
    proc, cg = fake_system(tmp_path, V1_CPU_STAT)
    collector = HostCollector(
        HostSampler(server_pid=os.getpid(), proc_root=proc, cgroup_root=cg), warn=lambda m: None
    )
    collector.sampler.open()
    # WHEN it is scraped twice, the cgroup's counters growing between the scrapes
    first, scrape = _rows(AGENT_HOST, _expose(collector), T)
    (cg / "cpu" / "loadkit-quota" / "cpu.stat").write_text(
        "nr_periods 1300\nnr_throttled 390\nthrottled_time 9812345678\n"
    )
    second, _ = _rows(AGENT_HOST, _expose(collector), T + S, scrape)
    # THEN the rows carry the cgroup's counters raw, as the host sampler writes them
    assert first["cgroup_nr_periods"] == 1200 and first["cgroup_nr_throttled"] == 340
    assert second["cgroup_nr_periods"] == 1300 and second["cgroup_nr_throttled"] == 390
    assert second["cgroup_throttled_ns"] == pytest.approx(9812345678)
    assert second["cgroup_version"] == 1
    assert second["cgroup_path"] == str(cg / "cpu" / "loadkit-quota")
    # AND the PSI counter in µs, the server's tree, its run delay and CPU from its counter
    assert second["psi_cpu_some_total_us"] == 2733274 and second["psi_cpu_some_avg10"] == 12.5
    assert second["server_processes"] >= 1 and second["server_ctx_invol"] is not None
    assert second["server_cpu_pct"] is not None and "server_cpu_pct" not in first
    assert len(second["cpu_per_core_pct"]) == second["cores"] == os.cpu_count()
    assert row_problems(second, HostRow) == []


def test_without_a_server_pid_no_server_or_cgroup_is_exposed(tmp_path: Path) -> None:
    proc, cg = fake_system(tmp_path, V1_CPU_STAT)
    collector = HostCollector(HostSampler(proc_root=proc, cgroup_root=cg), warn=lambda m: None)
    text = _expose(collector)
    # The agent's own cgroup is not the server's: nothing of it.
    assert "loadkit_server_" not in text and "loadkit_agent_server_up" not in text
    assert "loadkit_host_cpu_seconds_total{" in text


def test_a_server_that_exits_is_said_once_and_its_counters_stop(tmp_path: Path) -> None:
    proc, cg = fake_system(tmp_path, V1_CPU_STAT)
    said: list[str] = []
    gone = 2**22 + 12345  # above pid_max's default: no such process
    collector = HostCollector(
        HostSampler(server_pid=gone, proc_root=proc, cgroup_root=cg), warn=said.append
    )
    texts = [_expose(collector) for _ in range(3)]
    assert all("loadkit_agent_server_up 0.0" in t for t in texts)
    assert all("loadkit_server_cgroup" not in t for t in texts)
    assert len([m for m in said if "gone" in m]) == 1


def test_live_rates_and_counts_from_two_agent_scrapes() -> None:
    def text(idle: float, server_s: float, opens: int, conns: int) -> str:
        return (
            "# TYPE loadkit_host_cpu_seconds_total counter\n"
            f'loadkit_host_cpu_seconds_total{{cpu="0",mode="idle"}} {idle}\n'
            'loadkit_host_cpu_seconds_total{cpu="0",mode="iowait"} 1.0\n'
            'loadkit_host_cpu_seconds_total{cpu="0",mode="user"} 50.0\n'
            "# TYPE loadkit_host_tcp_opens_total counter\n"
            f'loadkit_host_tcp_opens_total{{direction="active"}} {opens}\n'
            'loadkit_host_tcp_opens_total{direction="passive"} 10\n'
            "# TYPE loadkit_server_cpu_seconds_total counter\n"
            f"loadkit_server_cpu_seconds_total {server_s}\n"
            "# TYPE loadkit_server_connections_total counter\n"
            f"loadkit_server_connections_total {conns}\n"
            "# TYPE loadkit_server_run_delay_seconds_total counter\n"
            "loadkit_server_run_delay_seconds_total 0.25\n"
        )

    _, scrape = _rows(AGENT_HOST, text(100.0, 3.0, 40, 7), T)
    # GIVEN half a second later: idle 0.1 s more, the server used 0.4 s, 6 + 0 TCP opens
    row, _ = _rows(AGENT_HOST, text(100.1, 3.4, 46, 9), T + S // 2, scrape)
    assert row["cpu_per_core_pct"] == [pytest.approx(80.0)]
    assert row["server_cpu_pct"] == pytest.approx(80.0)
    # counts per interval, not per second (the host sampler's `tcp_new_connections`)
    assert row["tcp_new_connections"] == 6 and row["server_new_connections"] == 2
    assert row["server_run_delay_ns"] == pytest.approx(250_000_000)


# --- the GPU collector -----------------------------------------------------------------
PINNED_GPU = {
    "power_w": 212.5,
    "power_limit_w": 700.0,
    "energy_mj": 4_321_000,
    "thermal_violation_ns": 2_500_000_000,
    "mem_used_bytes": 3 * 2**30,
    "sm_clock_mhz": 1089,
    "pcie_rx_kbps": 1_000_000,
}


@pytest.fixture
def sim_gpu(tmp_path: Path) -> Iterator[GpuSampler]:
    path = tmp_path / "state.json"
    model = SimGpuModel(faults=CoolingFaultSchedule(period_s=20, duration_s=10, offset_s=1))
    for _ in range(40):  # 4 s of load into a cooling fault: throttled
        model.step(0.1, 0.5)
    # NVML's own units, round numbers: the exposition's are known without the family's map
    write_state(path, replace(model.state, **PINNED_GPU))
    fake_nvml.configure(path)
    sampler = GpuSampler(fake_nvml, pcie_every=1)
    sampler.open()
    yield sampler
    sampler.close()
    fake_nvml.configure(None)


def test_the_gpu_collector_gives_the_gpu_samplers_row_through_the_family(
    sim_gpu: GpuSampler,
) -> None:
    direct = sim_gpu.sample(T)[0]
    collector = GpuCollector(sim_gpu, warn=lambda m: None)
    text = AgentExposition({"gpu": collector}).render().decode()
    assert 'gpu="0",uuid="' in text
    rows, _ = rows_from_scrapes(AGENT_GPU, parse_exposition(text), T, None)
    (row,) = rows.values()
    # THEN the exposition is in the exporter's units (joules, seconds, watts), written here
    # by hand: a wrong scale in the family's map fails here though it round-trips below
    exposed = {
        name: value for name, labels, value in parse_exposition(text) if labels["gpu"] == "0"
    }
    assert exposed["loadkit_gpu_energy_joules_total"] == pytest.approx(4321.0)
    assert exposed["loadkit_gpu_thermal_violation_seconds_total"] == pytest.approx(2.5)
    assert exposed["loadkit_gpu_power_watts"] == pytest.approx(212.5)
    assert exposed["loadkit_gpu_power_limit_watts"] == pytest.approx(700.0)
    assert exposed["loadkit_gpu_memory_used_bytes"] == 3 * 2**30
    assert exposed["loadkit_gpu_sm_clock_mhz"] == 1089.0
    assert exposed["loadkit_gpu_pcie_rx_kilobytes_per_second"] == 1_000_000.0
    # AND the row parsed back is in the GPU sampler's units (mJ, ns), again by hand ...
    assert row["energy_mj"] == pytest.approx(4_321_000)
    assert row["violation_thermal_ns"] == pytest.approx(2_500_000_000)
    assert row["power_w"] == pytest.approx(212.5) and row["sm_clock_mhz"] == 1089
    # ... and every field the family maps is the sampler's value, in the sampler's units
    mapped = {m.field for m in AGENT_GPU.metrics}
    for field in mapped - {"clocks_event_reasons"}:
        if direct.get(field) is not None:
            assert row[field] == pytest.approx(direct[field]), field
    assert row["clocks_event_reasons"] == direct["clocks_event_reasons"] != 0
    assert row["reason_hw_thermal"] is True and row["reason_gpu_idle"] is False
    assert row["sm_clock_mhz"] < row["sm_clock_max_mhz"]
    assert row_problems({**row, "gpu": 0}, GpuRow) == []


# --- the HTTP side ---------------------------------------------------------------------
@pytest.fixture
def agent_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[AgentServer]:
    """An agent on 127.0.0.1 of the machine `gpu-box`, with no GPU (or the one it says:
    `@pytest.mark.parametrize("agent_server", ["nvml"], indirect=True)`)."""
    proc, cg = fake_system(tmp_path, V1_CPU_STAT)
    gpu = getattr(request, "param", "none")
    exposition = AgentExposition(
        {
            "info": InfoCollector("gpu-box", os.getpid(), gpu),
            "host": HostCollector(
                HostSampler(server_pid=os.getpid(), proc_root=proc, cgroup_root=cg),
                warn=lambda m: None,
            ),
        }
    )
    server = AgentServer("127.0.0.1", 0, exposition)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    yield server
    server.shutdown()
    server.server_close()


def test_the_agent_binds_loopback_unless_told_and_takes_a_bind_address() -> None:
    args = build_parser("agent").parse_args(["agent"])
    assert args.bind == DEFAULT_BIND == "127.0.0.1" and args.port == 9477
    assert args.gpu == "auto" and args.server_pid is None
    args = build_parser("agent").parse_args(["agent", "--bind", "0.0.0.0", "--port", "0"])
    assert (args.bind, args.port) == ("0.0.0.0", 0)


def test_one_keep_alive_connection_serves_each_collector_by_collect(
    agent_server: AgentServer,
) -> None:
    host, port = agent_server.server_address[:2]
    assert agent_server.url == f"http://127.0.0.1:{port}/metrics"
    conn = http.client.HTTPConnection(str(host), port, timeout=5)
    try:
        bodies = []
        for path in ("/metrics?collect[]=info", "/metrics?collect[]=host", "/metrics"):
            conn.request("GET", path)
            answer = conn.getresponse()
            assert answer.status == 200 and answer.getheader("Connection") != "close"
            bodies.append(answer.read().decode())
        sock = conn.sock
        conn.request("GET", "/nope")
        answer = conn.getresponse()
        assert answer.status == 404 and answer.read()
        assert conn.sock is sock  # every GET on the one connection
    finally:
        conn.close()
    info, host_only, both = bodies
    assert 'loadkit_agent_info{gpu="none",host="gpu-box"' in info
    assert "loadkit_host_" not in info
    assert "loadkit_agent_info" not in host_only and "loadkit_server_cgroup_periods" in host_only
    assert "loadkit_agent_info" in both and "loadkit_host_load1" in both


# --- `loadkit run --agent URL` ---------------------------------------------------------
def test_the_agent_flag_is_a_gpu_and_a_host_target() -> None:
    gpu, host = parse_agent("gpu-host:9477")
    assert gpu == ScrapeTarget("agent-gpu", "http://gpu-host:9477/metrics?collect[]=gpu")
    assert host == ScrapeTarget("agent-host", "http://gpu-host:9477/metrics?collect[]=host")
    # the agent first: its host fields win over node-exporter's
    targets = parse_scrapes(["node=gpu-host:9100"], ["http://gpu-host:9477/metrics"])
    assert [t.family for t in targets] == ["agent-gpu", "agent-host", "node"]


@pytest.mark.parametrize(
    ("scrapes", "agents", "message"),
    [
        (["dcgm=h:9400"], ["h:9477"], "--agent and --scrape dcgm: one GPU exporter"),
        ([], ["h:9477", "g:9477"], "--agent given twice"),
        (["agent-host=h:9477"], [], "read with --agent URL"),
        ([], ["http://h:9477/metrics?collect[]=gpu"], "--agent"),
        ([], ["ftp://h:9477"], "scheme 'ftp'"),
    ],
)
def test_agent_flags_that_cannot_work_are_refused(
    scrapes: list[str], agents: list[str], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        parse_scrapes(scrapes, agents)


@pytest.mark.parametrize(
    "command",
    [
        ["run", "burst_2x"],
        ["capacity", "--slo", "p99=50ms"],
        ["sweep", "soak", "--vary", "instances=1,2"],
        ["tune", "soak", "--space", "instances=1,2", "--slo", "p99=50ms"],
    ],
)
def test_every_recording_command_reads_the_servers_exporters_and_refuses_two_gpu_sources(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # the flags are checked before the (unreachable) target is touched
    argv = [*command, "--target", "http://127.0.0.1:1", "--agent", "127.0.0.1:1"]
    assert main([*argv, "--scrape", "dcgm=127.0.0.1:2"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("ERROR: --agent and --scrape dcgm") and err[1].startswith("HINT:")


def _options(tmp_path: Path, agents: list[str], **kw: Any) -> SamplerOptions:
    # `--gpu auto` for a remote target: this machine's GPUs are not even probed
    return SamplerOptions(
        run_dir=tmp_path,
        gpu="auto",
        target=REMOTE,
        extra={"scrape": parse_scrapes([], agents)},
        **kw,
    )


def test_a_run_names_the_agents_host_and_reads_no_gpu_it_does_not_serve(
    agent_server: AgentServer, tmp_path: Path
) -> None:
    port = agent_server.server_address[1]
    plans = plan_scrapes(_options(tmp_path, [f"127.0.0.1:{port}"]), 1.0)
    # THEN only the host (the agent serves no GPU), named after the agent's machine
    assert [p.spec.source for p in plans if p.spec] == ["host"]
    (host,) = plans
    assert host.place is not None and host.holds_series
    assert (host.place.place, host.place.host) == (PLACE_SERVER, "gpu-box")
    # AND with Triton's metrics given, its nv_gpu_* fill the server's gpu series instead
    with_metrics = _options(tmp_path, [f"127.0.0.1:{port}"], metrics_url="http://198.18.0.2:8002")
    families = {
        p.spec.source: [t["family"] for t in p.spec.options["targets"]]
        for p in plan_scrapes(with_metrics, 1.0)
        if p.spec
    }
    assert families == {"gpu": ["triton-gpu"], "host": ["agent-host"]}


@pytest.mark.parametrize("agent_server", ["nvml"], indirect=True)
def test_the_agents_gpu_is_scraped_at_the_gpu_rate(
    agent_server: AgentServer, tmp_path: Path
) -> None:
    port = agent_server.server_address[1]
    plans = {
        p.spec.source: p
        for p in plan_scrapes(_options(tmp_path, [f"127.0.0.1:{port}"]), 1.0)
        if p.spec
    }
    assert plans["gpu"].spec is not None and plans["gpu"].spec.interval_s == 0.1
    assert plans["host"].spec is not None and plans["host"].spec.interval_s == 1.0
    assert plans["gpu"].place is not None and plans["gpu"].place.host == "gpu-box"


def test_an_agent_that_does_not_answer_is_one_warning(tmp_path: Path) -> None:
    # GIVEN nothing listens on the port (bound and closed)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    planned = dict(plan_sources(_options(tmp_path, [f"127.0.0.1:{port}"]), sampling_rates(None)))
    # THEN the agent's host is planned (its sampler's start says it does not answer), its
    # GPU is not, and this machine's host is recorded as its own copy
    assert planned["host"].spec is not None and planned["host-local"].spec is not None
    assert [t["family"] for t in planned["host"].spec.options["targets"]] == ["agent-host"]
    assert "gpu" not in planned or planned["gpu"].spec is None
    sampler = ScrapeSampler(
        "host", [ScrapeTarget(**t) for t in planned["host"].spec.options["targets"]], 1.0
    )
    with pytest.raises(SourceUnavailable) as caught:
        sampler.open()
    assert caught.value.message.startswith(
        f"loadkit agent http://127.0.0.1:{port}/metrics not answering"
    )
    assert caught.value.hint is None


def test_a_run_scrapes_the_agents_gpu_over_http_into_gpu_rows(sim_gpu: GpuSampler) -> None:
    exposition = AgentExposition({"gpu": GpuCollector(sim_gpu, warn=lambda m: None)})
    server = AgentServer("127.0.0.1", 0, exposition)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        gpu_target, _ = parse_agent(server.url)
        sampler = ScrapeSampler("gpu", [gpu_target], 0.1)
        sampler.open()
        rows = [sampler.sample(T + i * S // 10) for i in range(3)]
        sampler.close()
    finally:
        server.shutdown()
        server.server_close()
    assert [len(r) for r in rows] == [1, 1, 1]
    row = rows[-1][0]
    assert row["gpu"] == 0 and row["scraped_from"] == "agent-gpu"
    assert row["reason_hw_thermal"] is True and row["temp_slowdown_c"] is not None
    assert row_problems(row, GpuRow) == ["not in GpuRow: scraped_from"]  # said by every scrape


# --- hardened for a long life: idle connections, a token, a bind beyond loopback ------
def _host_agent(tmp_path: Path, **kw: Any) -> AgentServer:
    """A started agent on 127.0.0.1 serving the fake host (and who it is)."""
    proc, cg = fake_system(tmp_path, V1_CPU_STAT)
    exposition = AgentExposition(
        {
            "info": InfoCollector("gpu-box", os.getpid(), "none"),
            "host": HostCollector(
                HostSampler(server_pid=os.getpid(), proc_root=proc, cgroup_root=cg),
                warn=lambda m: None,
            ),
        }
    )
    server = AgentServer("127.0.0.1", 0, exposition, **kw)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    return server


def _stop(server: AgentServer) -> None:
    server.shutdown()
    server.server_close()


def _handler_threads() -> int:
    return sum("process_request_thread" in t.name for t in threading.enumerate())


def test_an_idle_keep_alive_connection_is_closed_and_its_thread_freed(tmp_path: Path) -> None:
    server = _host_agent(tmp_path, idle_timeout_s=0.3)
    before = _handler_threads()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
        conn.request("GET", "/metrics?collect[]=info")
        answer = conn.getresponse()
        assert answer.status == 200 and answer.read()
        assert _handler_threads() == before + 1  # kept alive: its thread waits for more
        # WHEN the scraper sends nothing more
        assert conn.sock is not None
        started = time.monotonic()
        assert conn.sock.recv(1) == b""  # THEN the agent closes the connection ...
        assert 0.2 <= time.monotonic() - started < 2.0
        deadline = time.monotonic() + 2.0
        while _handler_threads() > before and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _handler_threads() == before  # ... and its thread ends
        conn.close()
    finally:
        _stop(server)


def test_the_agents_idle_timeout_is_the_one_its_help_states() -> None:
    assert (
        IDLE_TIMEOUT_S == 30.0 and f"nothing for {IDLE_TIMEOUT_S:g} s" in agent_command.DESCRIPTION
    )


@pytest.mark.parametrize(
    ("authorization", "status", "challenge"),
    [
        (None, 401, 'Bearer realm="loadkit agent"'),
        ("Bearer not-the-token", 401, 'Bearer realm="loadkit agent", error="invalid_token"'),
        ("Bearer s3cret-t0ken", 200, None),
    ],
    ids=["without", "wrong", "right"],
)
def test_an_agent_with_a_token_answers_only_requests_that_carry_it(
    tmp_path: Path, authorization: str | None, status: int, challenge: str | None
) -> None:
    server = _host_agent(tmp_path, token="s3cret-t0ken")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
        headers = {"Authorization": authorization} if authorization else {}
        conn.request("GET", "/metrics?collect[]=info", headers=headers)
        answer = conn.getresponse()
        body = answer.read().decode()
        conn.close()
    finally:
        _stop(server)
    assert answer.status == status
    assert answer.getheader("WWW-Authenticate") == challenge
    assert ("loadkit_agent_info" in body) == (status == 200)


def test_a_run_sends_the_agents_token_from_agent_token_file(tmp_path: Path) -> None:
    server = _host_agent(tmp_path, token="s3cret-t0ken")
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-t0ken\n")
    try:
        _, host = parse_scrapes([], [server.url], agent_token_file=str(token_file))
        assert host.token_file == str(token_file)
        assert "s3cret" not in str(host.to_option())  # a sampler's options hold no secret
        sampler = ScrapeSampler("host", [host], 1.0)
        sampler.open()
        rows = sampler.sample(T)
        sampler.close()
        # AND without the token, the agent's refusal is one line that says what to give
        _, bare = parse_agent(server.url)
        with pytest.raises(SourceUnavailable, match="HTTP 401.*--agent-token-file"):
            ScrapeSampler("host", [bare], 1.0).open()
    finally:
        _stop(server)
    assert len(rows) == 1 and rows[0]["scraped_from"] == "agent-host"


@pytest.mark.parametrize(
    ("agents", "token_file", "message"),
    [
        ([], "token", "--agent-token-file without --agent"),
        (["h:9477"], "missing", "--agent-token-file cannot read"),
        (["h:9477"], "empty", "holds no token"),
    ],
)
def test_an_agent_token_file_that_cannot_work_is_refused(
    tmp_path: Path, agents: list[str], token_file: str, message: str
) -> None:
    (tmp_path / "token").write_text("t\n")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(UsageError, match=message):
        parse_scrapes([], agents, agent_token_file=str(tmp_path / token_file))


def test_a_bind_beyond_loopback_warns_once_what_it_exposes() -> None:
    said: list[str] = []
    exposition = AgentExposition({"info": InfoCollector("gpu-box", None, "none")})
    AgentServer("0.0.0.0", 0, exposition, warn=said.append).server_close()
    AgentServer("127.0.0.1", 0, exposition, warn=said.append).server_close()
    (line,) = said  # loopback says nothing
    assert line.startswith("listening on 0.0.0.0 port ")
    assert "not loopback" in line and "server's PID, process and cgroup" in line
    assert "give --token-file FILE" in line and "\n" not in line
    AgentServer("0.0.0.0", 0, exposition, token="t", warn=said.append).server_close()
    assert "must carry the bearer token" in said[-1]


def test_the_agent_command_refuses_a_token_file_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["agent", "--gpu", "none", "--token-file", str(tmp_path / "nope")]) == 2
    assert "ERROR: --token-file cannot read" in capsys.readouterr().err
