"""CpuBurn bookkeeping with fake burners (spawn count, kill by PID, reaping), and one real
burner whose parent is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from loadkit.faults import cpu_burn as cpu_burn_module
from loadkit.faults.cpu_burn import CpuBurn
from loadkit.faults.schedule import FaultSchedule, FaultUnavailable
from tests.unit.faults_fakes import FakeClock


class FakeBurner:
    next_pid = 9000

    def __init__(self) -> None:
        FakeBurner.next_pid += 1
        self.pid = FakeBurner.next_pid
        self.alive = True
        self.reaped = False
        self.stdout = self

    def read(self, n: int) -> bytes:
        return b"1"

    def close(self) -> None:
        pass

    def poll(self) -> int | None:
        return None if self.alive else -9

    def wait(self, timeout: float | None = None) -> int:
        self.reaped = True
        return -9


def test_each_window_spawns_n_burners_and_kills_them_by_pid(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spawned: list[FakeBurner] = []
    killed: list[tuple[int, int]] = []
    by_pid: dict[int, FakeBurner] = {}

    def fake_spawn(self: CpuBurn) -> Any:
        burner = FakeBurner()
        spawned.append(burner)
        by_pid[burner.pid] = burner
        return burner

    def fake_kill(pid: int, sig: int) -> None:
        killed.append((pid, sig))
        by_pid[pid].alive = False

    monkeypatch.setattr(CpuBurn, "_spawn", fake_spawn)
    monkeypatch.setattr(cpu_burn_module.os, "kill", fake_kill)
    monkeypatch.setattr(cpu_burn_module.select, "select", lambda r, w, x, t: (r, [], []))
    fault = CpuBurn(
        FaultSchedule(duration_s=2, period_s=5, count=2),
        processes=3,
        run_dir=tmp_path,
        clock=FakeClock(),
    )
    with fault:
        assert fault.join(5.0)
    assert len(spawned) == 6
    assert sorted(killed) == sorted((b.pid, signal.SIGKILL) for b in spawned)
    assert all(b.reaped for b in spawned)
    assert fault.pids == []
    text = (tmp_path / "events.jsonl").read_text()
    assert text.count('"action":"start"') == 2 and '"processes":3' in text


def test_default_is_one_burner_per_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_burn_module.os, "cpu_count", lambda: 4)
    assert CpuBurn(FaultSchedule(duration_s=1)).processes == 4


def test_negative_nice_needs_the_privilege(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_burn_module, "_may_raise_priority", lambda: False)
    with pytest.raises(FaultUnavailable, match="nice -5"):
        CpuBurn(FaultSchedule(duration_s=1), nice=-5)
    assert CpuBurn(FaultSchedule(duration_s=1), nice=5).nice == 5
    monkeypatch.setattr(cpu_burn_module, "_may_raise_priority", lambda: True)
    assert CpuBurn(FaultSchedule(duration_s=1), nice=-5).describe()["nice"] == -5


def test_zero_processes_is_refused() -> None:
    with pytest.raises(FaultUnavailable):
        CpuBurn(FaultSchedule(duration_s=1), processes=0)


# A parent that starts one real burner, prints its PID and waits to be killed.
PARENT_SCRIPT = """\
import sys, time
from loadkit.faults.cpu_burn import CpuBurn
from loadkit.faults.schedule import FaultSchedule
fault = CpuBurn(FaultSchedule(duration_s=60.0), processes=1).start()
deadline = time.monotonic() + 20
while not fault.active and time.monotonic() < deadline:
    time.sleep(0.01)
print(fault.pids[0] if fault.active else -1, flush=True)
time.sleep(60)
"""


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie (an orphan's reaper may be slow)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_burner_dies_with_its_parent_on_sigkill() -> None:
    # GIVEN a real burner, busy, started by a parent process
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT_SCRIPT], stdout=subprocess.PIPE, text=True
    )
    burner_pid = -1
    try:
        assert parent.stdout is not None
        burner_pid = int(parent.stdout.readline() or -1)
        assert burner_pid > 0, "the parent did not start its burner"
        assert psutil.Process(burner_pid).ppid() == parent.pid
        # WHEN the parent is SIGKILLed (no atexit, no stop() runs)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(5)
        # THEN the kernel kills the burner too, within 2 s
        deadline = time.monotonic() + 2.0
        while not _gone(burner_pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _gone(burner_pid), (
            f"burner PID {burner_pid} still running 2 s after its parent was SIGKILLed"
        )
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(5)
        if burner_pid > 0 and not _gone(burner_pid):
            os.kill(burner_pid, signal.SIGKILL)


def _start_and_wait(fault: CpuBurn) -> None:
    """Start a window of real burners and wait until they run (at most 20 s)."""
    fault.start()
    deadline = time.monotonic() + 20
    while not fault.active and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fault.active, "the burner did not start"


def test_an_idle_burner_runs_under_sched_idle_and_a_normal_one_does_not() -> None:
    # GIVEN one real burner of each policy (a window of 60 s, stopped as soon as seen)
    for sched_idle, policy in ((True, os.SCHED_IDLE), (False, os.SCHED_OTHER)):
        fault = CpuBurn(FaultSchedule(duration_s=60.0), processes=1, sched_idle=sched_idle)
        try:
            _start_and_wait(fault)
            # THEN the kernel runs it under the policy asked for
            assert os.sched_getscheduler(fault.pids[0]) == policy
            assert fault.describe()["sched_idle"] is sched_idle
        finally:
            fault.stop()
        assert fault.pids == []


def test_a_burner_runs_only_on_the_cores_it_was_given() -> None:
    # GIVEN a real burner pinned to the last core this process may use
    last = max(os.sched_getaffinity(0))
    fault = CpuBurn(FaultSchedule(duration_s=60.0), processes=1, cpus=[last])
    try:
        _start_and_wait(fault)
        # THEN the kernel lets it run on that core only, and the fault says which
        assert os.sched_getaffinity(fault.pids[0]) == {last}
        assert fault.describe()["cpus"] == [last]
    finally:
        fault.stop()
    assert fault.pids == []


def test_cores_this_process_may_not_use_are_refused_up_front() -> None:
    beyond = max(os.sched_getaffinity(0)) + 1
    with pytest.raises(FaultUnavailable, match="may run only on"):
        CpuBurn(FaultSchedule(duration_s=1.0), processes=1, cpus=[beyond])
