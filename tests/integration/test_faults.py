"""Fault injectors against real processes: SIGSTOP/SIGCONT, CPU burners, a real CFS quota.

Each test uses one short window (about 1-2 s) and waits on conditions with deadlines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from loadkit.faults import CgroupQuota, CpuBurn, FaultSchedule, FaultUnavailable, ProcessStall

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def spawn(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-S", "-c", code], stdin=subprocess.DEVNULL, start_new_session=True
    )


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = spawn("import time\nwhile True: time.sleep(0.05)")
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def spinner() -> Iterator[subprocess.Popen[bytes]]:
    proc = spawn("while True: pass")
    yield proc
    proc.kill()
    proc.wait()


def fault_events(run_dir: Path, name: str) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == "fault" and r["name"] == name]


def test_stall_stops_the_process_and_always_resumes_it(
    sleeper: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    target = psutil.Process(sleeper.pid)
    fault = ProcessStall(
        sleeper.pid, FaultSchedule(duration_s=1.0, first_start_s=0.2), run_dir=tmp_path
    )
    with fault:
        assert wait_for(lambda: fault.active)
        assert target.status() == psutil.STATUS_STOPPED
        assert fault.join(5.0)
        assert target.status() in (psutil.STATUS_SLEEPING, psutil.STATUS_RUNNING)
        # a second stall, interrupted by stop(): the process must still run afterwards
    fault2 = ProcessStall(sleeper.pid, FaultSchedule(duration_s=30.0), run_dir=tmp_path)
    fault2.start()
    assert wait_for(lambda: target.status() == psutil.STATUS_STOPPED)
    fault2.stop()
    assert target.status() != psutil.STATUS_STOPPED
    starts = [r for r in fault_events(tmp_path, "stall") if r["action"] == "start"]
    ends = [r for r in fault_events(tmp_path, "stall") if r["action"] == "end"]
    assert len(starts) == 2 and len(ends) == 2
    assert 0.9e9 <= ends[0]["t_ns"] - starts[0]["t_ns"] <= 2.0e9


def test_cpu_burn_saturates_the_host_and_leaves_no_process(tmp_path: Path) -> None:
    fault = CpuBurn(FaultSchedule(duration_s=2.0, first_start_s=0.0), run_dir=tmp_path)
    with fault:
        assert wait_for(lambda: fault.active)
        pids = fault.pids
        assert len(pids) == fault.processes
        procs = [psutil.Process(pid) for pid in pids]
        psutil.cpu_percent(None)  # the first reading is meaningless
        time.sleep(1.0)
        host_pct = psutil.cpu_percent(None)
        burned_s = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
        assert fault.join(5.0)
    assert host_pct >= 80.0, f"host CPU only {host_pct}% with {len(pids)} burners"
    assert burned_s >= 0.5, f"burners used only {burned_s:.2f} s of CPU"
    assert not any(psutil.pid_exists(pid) for pid in pids)
    assert [r["action"] for r in fault_events(tmp_path, "cpu-burn")] == ["start", "end"]


def test_cpu_burn_at_a_higher_priority_gets_its_own_autogroup(tmp_path: Path) -> None:
    try:
        fault = CpuBurn(
            FaultSchedule(duration_s=1.0, first_start_s=0.0), processes=1, nice=-5, run_dir=tmp_path
        )
    except FaultUnavailable as exc:
        pytest.skip(exc.message)
    with fault:
        assert wait_for(lambda: fault.active)
        (pid,) = fault.pids
        assert psutil.Process(pid).nice() == -5
        assert os.getsid(pid) == pid  # a session, and so an autogroup, of its own
        autogroup = Path(f"/proc/{pid}/autogroup")
        if autogroup.exists():
            assert autogroup.read_text().split()[-1] == "-5"
        assert fault.join(5.0)
    assert not psutil.pid_exists(pid)


def test_cgroup_quota_really_throttles_or_skips_with_reason(
    spinner: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    fault = CgroupQuota(
        spinner.pid,
        FaultSchedule(duration_s=1.5, first_start_s=0.3),
        quota_cores=0.2,
        run_dir=tmp_path,
    )
    try:
        fault.start()
    except FaultUnavailable as exc:
        pytest.skip(f"cgroup quota not possible on this host: {exc.message}")
    try:
        child = fault.child
        assert child is not None and child.exists()
        before = fault.cpu_stat().get("nr_throttled", 0)
        assert wait_for(lambda: fault.active)
        assert wait_for(lambda: fault.cpu_stat().get("nr_throttled", 0) >= before + 3, 3.0)
        assert fault.join(5.0)
        quota_file = "cpu.cfs_quota_us" if fault.layout and fault.layout.version == 1 else "cpu.max"
        assert (child / quota_file).read_text().split()[0] in ("-1", "max")
    finally:
        fault.stop()
    # moved back and cleaned up
    assert not child.exists()
    text = Path(f"/proc/{spinner.pid}/cgroup").read_text()
    assert child.name not in text
    assert [r["action"] for r in fault_events(tmp_path, "cgroup-quota")] == ["start", "end"]
