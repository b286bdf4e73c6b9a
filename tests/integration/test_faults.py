"""Fault injectors against real processes: SIGSTOP/SIGCONT, CPU burners, a real CFS quota.

Each test uses one short window (about 1-2 s) and waits on conditions with deadlines.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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
        # SIGSTOP takes effect when the target next runs: on a busy host it was still
        # "running" (runnable) just after the stall began (seen in a parallel pass 1)
        assert wait_for(lambda: target.status() == psutil.STATUS_STOPPED)
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


def _busy_share(before: Any, after: Any) -> float:
    """Share of the host's CPU time that was busy between two psutil.cpu_times() readings."""
    total = sum(after) - sum(before)
    idle = (after.idle - before.idle) + (after.iowait - before.iowait)
    return (total - idle) / total if total > 0 else 0.0


class MeasuredCpuBurn(CpuBurn):
    """CpuBurn that reads the host's CPU times before and during its window, and each
    burner's scheduler statistics just before the window ends (the burners are still alive)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.host_before_pct = self.host_during_pct = math.nan
        self.window_s = math.nan
        self.burners: dict[int, tuple[float, float]] = {}  # pid -> (on CPU, runnable) in s

    def _prepare(self) -> None:
        super()._prepare()
        self._cpu0 = psutil.cpu_times()

    def _begin(self) -> dict[str, Any]:
        cpu = psutil.cpu_times()
        self.host_before_pct = 100 * _busy_share(self._cpu0, cpu)
        attrs = super()._begin()
        self._cpu1, self._t1 = psutil.cpu_times(), time.monotonic()
        return attrs

    def _end(self) -> None:
        if self._burners:
            self.window_s = time.monotonic() - self._t1
            self.host_during_pct = 100 * _busy_share(self._cpu1, psutil.cpu_times())
            for pid in self.pids:
                # /proc/PID/schedstat: ns on a CPU, ns waiting on a run queue, time slices
                on_cpu, waiting, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
                self.burners[pid] = (int(on_cpu) / 1e9, (int(on_cpu) + int(waiting)) / 1e9)
        super()._end()


def test_cpu_burn_saturates_the_host_and_leaves_no_process(tmp_path: Path) -> None:
    # GIVEN one 2 s window, 1 s after the start (the host's CPU is measured in that second)
    fault = MeasuredCpuBurn(FaultSchedule(duration_s=2.0, first_start_s=1.0), run_dir=tmp_path)
    with fault:
        assert wait_for(lambda: fault.active, 10.0)
        pids = fault.pids
        assert fault.join(10.0)
    print(
        f"\nhost CPU busy {fault.host_before_pct:.0f}% before, {fault.host_during_pct:.0f}% "
        f"during a {fault.window_s:.2f} s window; burners (on CPU s, runnable s): {fault.burners}"
    )
    # THEN there was one burner per core, and each wanted a CPU for the whole window:
    # on a CPU or waiting for one, never sleeping (on a busy host its share of the CPU
    # shrinks, the time it was runnable does not)
    assert sorted(fault.burners) == sorted(pids) and len(pids) == fault.processes
    for pid, (on_cpu_s, runnable_s) in fault.burners.items():
        assert runnable_s >= 0.95 * fault.window_s, (
            f"burner {pid} was runnable {runnable_s:.2f} s of a {fault.window_s:.2f} s window"
        )
        assert on_cpu_s > 0.0
    # and the host had no idle CPU during the window, whatever its load before
    assert fault.host_during_pct >= 95.0, (
        f"host CPU {fault.host_during_pct:.0f}% busy during the window "
        f"({fault.host_before_pct:.0f}% before)"
    )
    # and the window lasted its schedule, as logged, and no burner is left
    events = fault_events(tmp_path, "cpu-burn")
    assert [r["action"] for r in events] == ["start", "end"]
    logged_s = (events[1]["t_ns"] - events[0]["t_ns"]) / 1e9
    assert 1.0 <= fault.window_s <= logged_s <= 2.5, (fault.window_s, logged_s)
    assert not any(psutil.pid_exists(pid) for pid in pids)


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
