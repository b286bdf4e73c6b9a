"""ProcessStall: which signals go where, and that SIGCONT always follows (fake clock, fake kill)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from loadkit.faults import stall as stall_module
from loadkit.faults.schedule import FaultSchedule, FaultUnavailable
from loadkit.faults.stall import ProcessStall
from tests.unit.faults_fakes import FakeClock

TARGET = 424242


@pytest.fixture
def signals(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    sent: list[tuple[str, int, int]] = []

    def fake_kill(pid: int, sig: int) -> None:
        if pid != TARGET:
            raise ProcessLookupError
        sent.append(("kill", pid, sig))

    def fake_killpg(pgid: int, sig: int) -> None:
        sent.append(("killpg", pgid, sig))

    monkeypatch.setattr(stall_module.os, "kill", fake_kill)
    monkeypatch.setattr(stall_module.os, "killpg", fake_killpg)
    monkeypatch.setattr(stall_module.os, "getpgid", lambda pid: 5000)
    return sent


def test_stops_and_resumes_the_pid_each_window(
    signals: list[tuple[str, int, int]], tmp_path: Path
) -> None:
    fault = ProcessStall(
        TARGET,
        FaultSchedule(duration_s=1.5, period_s=10, first_start_s=2, count=2),
        run_dir=tmp_path,
        clock=FakeClock(),
    )
    fault.start()
    assert fault.join(5.0)
    fault.stop()
    stops = [s for s in signals if s[2] == signal.SIGSTOP]
    conts = [s for s in signals if s[2] == signal.SIGCONT]
    assert stops == [("kill", TARGET, signal.SIGSTOP)] * 2
    # one SIGCONT per window, plus the unconditional one at stop()
    assert len(conts) == 3 and signals[-1] == ("kill", TARGET, signal.SIGCONT)
    rows = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(r["name"], r["action"]) for r in rows] == [("stall", "start"), ("stall", "end")] * 2
    assert rows[1]["t_ns"] - rows[0]["t_ns"] == 1_500_000_000
    assert rows[0]["pid"] == TARGET


def test_include_group_signals_the_process_group(signals: list[tuple[str, int, int]]) -> None:
    fault = ProcessStall(
        TARGET, FaultSchedule(duration_s=1, count=1), include_group=True, clock=FakeClock()
    )
    fault.start()
    assert fault.join(5.0)
    fault.stop()
    assert ("killpg", 5000, signal.SIGSTOP) in signals
    assert signals[-1] == ("killpg", 5000, signal.SIGCONT)


def test_missing_process_is_unavailable(signals: list[tuple[str, int, int]]) -> None:
    with pytest.raises(FaultUnavailable, match="no such process"):
        ProcessStall(TARGET + 1, FaultSchedule(duration_s=1)).start()


def test_refuses_to_stop_its_own_process_group() -> None:
    fault = ProcessStall(os.getpid(), FaultSchedule(duration_s=1), include_group=True)
    with pytest.raises(FaultUnavailable, match="would stop us"):
        fault.start()
