"""Host sampler: cgroup v1/v2/hybrid resolution, PSI, TCP churn, process tree CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from loadkit.rundir.schema import HostRow, row_problems
from loadkit.telemetry.host import (
    HostSampler,
    cpu_stat_candidates,
    parse_proc_net_tcp,
    parse_psi_some_avg10,
    parse_tcp_opens,
    server_connections,
    throttle_from_cpu_stat,
)

T = 1_764_449_000_000_000_000

V1_CPU_STAT = (
    "nr_periods 1200\nnr_throttled 340\nthrottled_time 8812345678\nnr_bursts 0\nburst_time 0\n"
)
V2_CPU_STAT = (
    "usage_usec 93812345\nuser_usec 70000000\nsystem_usec 23812345\n"
    "nr_periods 500\nnr_throttled 20\nthrottled_usec 1500000\nnr_bursts 0\nburst_usec 0\n"
)
PSI = "some avg10=12.50 avg60=3.10 avg300=0.80 total=2733274\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
SNMP = (
    "Ip: Forwarding DefaultTTL InReceives\nIp: 1 64 1000\n"
    "Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets "
    "CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors\n"
    "Tcp: 1 200 120000 -1 297 55 225 0 0 18905 14047 0 0 241 0\n"
)
HYBRID_CGROUP = "9:name=systemd:/\n4:memory:/\n2:cpuacct:/\n1:cpu:/loadkit-quota\n0::/\n"


def _burn_counted_cpu(at_least_s: float = 0.05) -> None:
    """Burn CPU until the kernel has counted some to this process.

    CPU time is counted in clock ticks (10 ms): a fixed ~15 ms of work read as 0 % on a
    busy machine (three pytest workers on two cores). Bounded: at most 5 s.
    """
    me = psutil.Process()
    start = sum(me.cpu_times()[:2])
    deadline = time.monotonic() + 5.0
    while sum(me.cpu_times()[:2]) - start < at_least_s and time.monotonic() < deadline:
        sum(i * i for i in range(20_000))


def test_cpu_stat_v1_and_v2() -> None:
    v1 = throttle_from_cpu_stat(V1_CPU_STAT, 1, "/x")
    assert v1 is not None and (v1.nr_periods, v1.nr_throttled, v1.throttled_ns) == (
        1200,
        340,
        8812345678,
    )
    v2 = throttle_from_cpu_stat(V2_CPU_STAT, 2, "/y")
    assert v2 is not None and v2.throttled_ns == 1_500_000_000
    # A v2 cpu.stat without the cpu controller has only usage: no throttle counters.
    assert throttle_from_cpu_stat("usage_usec 1\nuser_usec 1\nsystem_usec 0\n", 2, "/z") is None


def test_cgroup_candidates_prefer_the_v1_cpu_controller(tmp_path: Path) -> None:
    paths = cpu_stat_candidates(HYBRID_CGROUP, tmp_path)
    assert paths[0] == (1, tmp_path / "cpu" / "loadkit-quota" / "cpu.stat")
    assert (2, tmp_path / "unified" / "cpu.stat") in paths
    pure_v2 = cpu_stat_candidates("0::/system.slice/triton.service\n", tmp_path)
    assert pure_v2[0] == (2, tmp_path / "system.slice" / "triton.service" / "cpu.stat")


def test_psi_and_tcp_parsers() -> None:
    assert parse_psi_some_avg10(PSI) == (12.5, 2733274)
    assert parse_psi_some_avg10("") == (None, None)
    assert parse_tcp_opens(SNMP) == (297, 55)
    assert parse_tcp_opens("Ip: a\nIp: 1\n") is None


def fake_system(root: Path, cpu_stat: str, snmp: str = SNMP) -> tuple[Path, Path]:
    proc, cg = root / "proc", root / "cgroup"
    (proc / "net").mkdir(parents=True)
    (proc / "pressure").mkdir()
    (proc / str(os.getpid())).mkdir()
    (proc / str(os.getpid()) / "cgroup").write_text(HYBRID_CGROUP)
    (proc / "pressure" / "cpu").write_text(PSI)
    (proc / "net" / "snmp").write_text(snmp)
    (cg / "cpu" / "loadkit-quota").mkdir(parents=True)
    (cg / "cpu" / "loadkit-quota" / "cpu.stat").write_text(cpu_stat)
    return proc, cg


def test_sampler_deltas_from_a_fake_proc_and_cgroup_tree(tmp_path: Path) -> None:
    proc, cg = fake_system(tmp_path, V1_CPU_STAT)
    sampler = HostSampler(server_pid=os.getpid(), proc_root=proc, cgroup_root=cg)
    sampler.open()
    (first,) = sampler.sample(T)
    assert first["cgroup_version"] == 1 and first["cgroup_nr_throttled"] == 340
    assert first["cgroup_nr_throttled_delta"] is None  # no previous sample
    assert first["psi_cpu_some_avg10"] == 12.5
    (cg / "cpu" / "loadkit-quota" / "cpu.stat").write_text(
        "nr_periods 1300\nnr_throttled 390\nthrottled_time 9812345678\n"
    )
    (proc / "net" / "snmp").write_text(SNMP.replace(" 297 55 ", " 307 60 "))
    _burn_counted_cpu()  # in the "server"
    (second,) = sampler.sample(T + 500_000_000)
    assert second["cgroup_nr_periods_delta"] == 100
    assert second["cgroup_nr_throttled_delta"] == 50
    assert second["cgroup_throttled_ns_delta"] == 1_000_000_000
    assert second["tcp_new_connections"] == 15
    assert second["server_cpu_pct"] is not None and second["server_cpu_pct"] > 0
    assert second["server_ctx_vol_delta"] is not None
    assert len(second["cpu_per_core_pct"]) == second["cores"] >= 1


def test_moving_to_another_cgroup_starts_a_new_counter_series(tmp_path: Path) -> None:
    proc, cg = fake_system(tmp_path, V1_CPU_STAT)
    sampler = HostSampler(server_pid=os.getpid(), proc_root=proc, cgroup_root=cg)
    sampler.open()
    sampler.sample(T)
    (cg / "cpu" / "other").mkdir()
    (cg / "cpu" / "other" / "cpu.stat").write_text(
        "nr_periods 5\nnr_throttled 1\nthrottled_time 7\n"
    )
    (proc / str(os.getpid()) / "cgroup").write_text(HYBRID_CGROUP.replace("loadkit-quota", "other"))
    (row,) = sampler.sample(T + 1)
    assert row["cgroup_path"].endswith("other") and row["cgroup_nr_throttled_delta"] is None


def test_missing_sources_are_null_with_one_warning_each(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    sampler = HostSampler(server_pid=None, proc_root=tmp_path / "proc", cgroup_root=tmp_path)
    sampler.open()
    rows = [sampler.sample(T + i)[0] for i in range(2)]
    assert all(r["psi_cpu_some_avg10"] is None and r["cgroup_nr_throttled"] is None for r in rows)
    assert rows[1]["tcp_new_connections"] is None and rows[1]["server_cpu_pct"] is None
    warnings = sampler.drain_warnings()
    assert len(warnings) == 3  # PSI, cgroup, TCP: once each
    assert sampler.drain_warnings() == []


@pytest.mark.skipif(not Path("/proc/net/snmp").exists(), reason="needs Linux /proc")
@pytest.mark.platform_skip
def test_on_this_machine() -> None:
    sampler = HostSampler(server_pid=os.getpid())
    sampler.open()
    sampler.sample(T)
    (row,) = sampler.sample(T + 500_000_000)
    assert row["tcp_active_opens"] is not None and row["mem_used_bytes"] > 0
    assert row["server_processes"] >= 1
    assert row_problems(row, HostRow) == []


# /proc/net/tcp: a listener on 8000 (0x1F40), a client connection to it (both
# ends, as on one host), a client TIME_WAIT socket of a closed one, and another
# process's connection to port 443 (0x01BB), which must not count.
PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1
   1: 0100007F:1F40 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1
   2: 0100007F:9C40 0100007F:1F40 01 00000000:00000000 00:00000000 00000000     0        0 3 1
   3: 0100007F:9C41 0100007F:1F40 06 00000000:00000000 03:00001000 00000000     0        0 0 3
   4: 0A00000F:D000 5DB8D822:01BB 01 00000000:00000000 00:00000000 00000000     0        0 4 1
"""


def test_server_connections_count_each_connection_to_the_servers_ports_once() -> None:
    sockets = parse_proc_net_tcp(PROC_NET_TCP)
    assert len(sockets) == 5 and sockets[0][2] == "0A"
    conns = server_connections(sockets, {8000})
    assert conns == {
        (("0100007F", 8000), ("0100007F", 40000)),
        (("0100007F", 8000), ("0100007F", 40001)),
    }


def test_sampler_counts_new_connections_to_the_servers_listening_port(tmp_path: Path) -> None:
    import socket

    proc, cg = fake_system(tmp_path, V1_CPU_STAT)
    with socket.socket() as listener:  # this process plays the server: it listens
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        tcp = PROC_NET_TCP.replace(":1F40", f":{port:04X}")
        (proc / "net" / "tcp").write_text(tcp)
        sampler = HostSampler(server_pid=os.getpid(), proc_root=proc, cgroup_root=cg)
        sampler.open()
        (first,) = sampler.sample(T)
        assert first["server_tcp_ports"] == [port]
        assert first["server_new_connections"] is None  # nothing to compare with yet
        # GIVEN one more connection to the server and a new one to port 443 elsewhere
        extra = (
            f"   5: 0100007F:9C42 0100007F:{port:04X} 01 0 00:0 0 0 0 5 1\n"
            "   6: 0A00000F:D001 5DB8D822:01BB 01 0 00:0 0 0 0 6 1\n"
        )
        (proc / "net" / "tcp").write_text(tcp + extra)
        (second,) = sampler.sample(T + 500_000_000)
    assert second["server_new_connections"] == 1


def _schedstat(proc: Path, tid: int, run_delay_ns: int) -> None:
    task = proc / str(os.getpid()) / "task" / str(tid)
    task.mkdir(parents=True, exist_ok=True)
    (task / "schedstat").write_text(f"123456 {run_delay_ns} 7\n")


def test_run_delay_sums_what_each_thread_waited_and_an_exiting_thread_takes_nothing_back(
    tmp_path: Path,
) -> None:
    # GIVEN a server with two threads that have waited 5 ms and 1 ms for a CPU so far
    proc, cg = fake_system(tmp_path, V1_CPU_STAT)
    _schedstat(proc, 11, 5_000_000)
    _schedstat(proc, 12, 1_000_000)
    sampler = HostSampler(server_pid=os.getpid(), proc_root=proc, cgroup_root=cg)
    sampler.open()
    (first,) = sampler.sample(T)
    assert first["server_run_delay_ns"] == 0 and first["server_run_delay_ns_delta"] is None
    # WHEN one waits 40 ms more, the other exits, and a new thread appears
    _schedstat(proc, 11, 45_000_000)
    (proc / str(os.getpid()) / "task" / "12" / "schedstat").unlink()
    (proc / str(os.getpid()) / "task" / "12").rmdir()
    _schedstat(proc, 13, 2_000_000)
    (second,) = sampler.sample(T + 500_000_000)
    # THEN the counter grew by what the surviving thread waited, and never went down
    assert second["server_run_delay_ns"] == 40_000_000
    assert second["server_run_delay_ns_delta"] == 40_000_000
    _schedstat(proc, 13, 12_000_000)
    (third,) = sampler.sample(T + 1_000_000_000)
    assert third["server_run_delay_ns_delta"] == 10_000_000


def test_run_delay_of_real_processes_grows_when_they_outnumber_the_cores() -> None:
    # GIVEN twice as many busy children as this machine has cores: each waits for a CPU
    # about half the time, whatever the machine (the kernel's schedstat, not a model)
    cores = len(os.sched_getaffinity(0))
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * cores)
    ]
    try:
        sampler = HostSampler(server_pid=os.getpid())
        sampler.open()
        sampler.sample(T)
        time.sleep(0.5)
        (second,) = sampler.sample(T + 500_000_000)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    # THEN their threads waited, in all, at least a fifth of the 0.5 s per core
    assert second["server_run_delay_ns_delta"] >= 0.1 * 0.5e9 * cores
