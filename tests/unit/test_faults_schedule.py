"""FaultSchedule windows and the ScheduledFault loop, on a fake clock."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from loadkit.errors import UsageError
from loadkit.faults.schedule import FaultSchedule, ScheduledFault
from tests.unit.faults_fakes import WALL_ORIGIN_NS, FakeClock


class RecordingFault(ScheduledFault):
    name = "recording"

    def __init__(self, *args: Any, fail_at: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, float]] = []
        self.fail_at = fail_at

    def _begin(self) -> dict[str, Any]:
        begins = sum(1 for c in self.calls if c[0] == "begin")
        if self.fail_at is not None and begins == self.fail_at:
            self.calls.append(("half-begin", self.clock.monotonic()))
            raise RuntimeError("target vanished")
        self.calls.append(("begin", self.clock.monotonic()))
        return {"level": 3}

    def _end(self) -> None:
        self.calls.append(("end", self.clock.monotonic()))


def events(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_periodic_windows_without_jitter() -> None:
    schedule = FaultSchedule(duration_s=2, period_s=10, first_start_s=5, until_s=40)
    assert list(schedule.windows()) == [(5, 7), (15, 17), (25, 27), (35, 37)]


def test_single_window_when_no_period() -> None:
    assert list(FaultSchedule(duration_s=3, first_start_s=1).windows()) == [(1, 4)]


def test_count_limits_windows() -> None:
    schedule = FaultSchedule(duration_s=1, period_s=4, count=3)
    assert [s for s, _ in schedule.windows()] == [0, 4, 8]


def test_jitter_is_seeded_bounded_and_never_overlaps() -> None:
    a = FaultSchedule(duration_s=2, period_s=6, first_start_s=3, jitter_s=1.5, seed=7, count=50)
    b = FaultSchedule(duration_s=2, period_s=6, first_start_s=3, jitter_s=1.5, seed=7, count=50)
    c = FaultSchedule(duration_s=2, period_s=6, first_start_s=3, jitter_s=1.5, seed=8, count=50)
    wa = list(a.windows())
    assert wa == list(b.windows())
    assert wa != list(c.windows())
    for i, (start, end) in enumerate(wa):
        assert abs(start - (3 + 6 * i)) <= 1.5 + 1e-9
        assert end - start == pytest.approx(2)
    assert all(wa[i][1] <= wa[i + 1][0] for i in range(len(wa) - 1))


def test_overlapping_windows_are_rejected() -> None:
    with pytest.raises(UsageError, match="overlap"):
        FaultSchedule(duration_s=5, period_s=8, jitter_s=2)


def test_loop_switches_at_planned_times_and_logs_ground_truth(tmp_path: Path) -> None:
    # GIVEN a fault every 10 s for 2 s, first at 5 s, on a fake clock
    clock = FakeClock()
    fault = RecordingFault(
        FaultSchedule(duration_s=2, period_s=10, first_start_s=5, until_s=30),
        run_dir=tmp_path,
        clock=clock,
    )
    # WHEN the schedule runs out
    fault.start()
    assert fault.join(5.0)
    fault.stop()
    # THEN on/off happened at the planned offsets and each is logged with wall-clock ns
    assert fault.calls == [
        ("begin", 5),
        ("end", 7),
        ("begin", 15),
        ("end", 17),
        ("begin", 25),
        ("end", 27),
    ]
    rows = [r for r in events(tmp_path) if r["kind"] == "fault"]
    assert [(r["name"], r["action"], r["window"]) for r in rows] == [
        ("recording", "start", 0),
        ("recording", "end", 0),
        ("recording", "start", 1),
        ("recording", "end", 1),
        ("recording", "start", 2),
        ("recording", "end", 2),
    ]
    assert rows[0]["t_ns"] == WALL_ORIGIN_NS + 5_000_000_000
    assert rows[1]["t_ns"] == WALL_ORIGIN_NS + 7_000_000_000
    assert rows[0]["level"] == 3 and rows[0]["period_s"] == 10
    assert [(w.start_ns, w.end_ns) for w in fault.history][0] == (
        WALL_ORIGIN_NS + 5_000_000_000,
        WALL_ORIGIN_NS + 7_000_000_000,
    )


class BlockingClock(FakeClock):
    """Advances time on waits until `block_at`, then blocks (really) until stopped."""

    def __init__(self, block_at: float) -> None:
        super().__init__()
        self.block_at = block_at
        self.blocked = threading.Event()

    def wait(self, stop: threading.Event, timeout_s: float) -> bool:
        if self.t + timeout_s > self.block_at:
            self.t = self.block_at
            self.blocked.set()
            return stop.wait(5.0)
        return super().wait(stop, timeout_s)


def test_stop_in_the_middle_of_a_window_ends_it_and_logs_the_end(tmp_path: Path) -> None:
    clock = BlockingClock(block_at=6.0)  # inside the first window (5..7)
    fault = RecordingFault(
        FaultSchedule(duration_s=2, period_s=10, first_start_s=5), run_dir=tmp_path, clock=clock
    )
    with fault:
        assert clock.blocked.wait(5.0)
        assert fault.active
    assert not fault.active
    assert fault.calls == [("begin", 5), ("end", 6)]
    assert [r["action"] for r in events(tmp_path)] == ["start", "end"]


def test_stop_before_the_first_window_switches_nothing(tmp_path: Path) -> None:
    clock = BlockingClock(block_at=1.0)
    fault = RecordingFault(
        FaultSchedule(duration_s=2, first_start_s=5), run_dir=tmp_path, clock=clock
    )
    fault.start()
    assert clock.blocked.wait(5.0)
    fault.stop()
    assert fault.calls == []
    assert events(tmp_path) == []


def test_a_failing_begin_is_undone_and_recorded(tmp_path: Path) -> None:
    clock = FakeClock()
    fault = RecordingFault(
        FaultSchedule(duration_s=1, period_s=5, count=3), run_dir=tmp_path, clock=clock, fail_at=1
    )
    fault.start()
    assert fault.join(5.0)
    fault.stop()
    assert isinstance(fault.error, RuntimeError)
    # the half-done second window was undone with _end
    assert [c[0] for c in fault.calls] == ["begin", "end", "half-begin", "end"]
    rows = events(tmp_path)
    assert rows[-1]["kind"] == "error" and "target vanished" in rows[-1]["message"]


def test_describe_has_the_schedule() -> None:
    fault = RecordingFault(FaultSchedule(duration_s=1, period_s=5, seed=3))
    assert fault.describe()["schedule"]["seed"] == 3
    assert fault.describe()["fault"] == "recording"
