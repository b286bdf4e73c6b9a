"""The drift-free sampling loop, driven by a fake monotonic clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadkit.rundir import JsonlWriter
from loadkit.telemetry import loop


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CostlySampler:
    """Each sample takes `cost_s` of (fake) time; records when it was called."""

    source = "fake"

    def __init__(self, clock: FakeClock, costs: list[float]) -> None:
        self.clock = clock
        self.costs = costs
        self.calls: list[float] = []

    def open(self) -> None: ...

    def close(self) -> None: ...

    def drain_warnings(self) -> list[str]:
        return []

    def sample(self, t_ns: int) -> list[dict[str, Any]]:
        self.calls.append(self.clock.now)
        cost = self.costs[len(self.calls) - 1] if len(self.calls) <= len(self.costs) else 0.013
        self.clock.now += cost
        return [{"t_ns": t_ns, "n": len(self.calls)}]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(loop, "timer", fake)
    return fake


def sleeper(clock: FakeClock) -> Any:
    def should_stop(timeout: float) -> bool:
        clock.now += timeout
        return False

    return should_stop


def test_schedule_does_not_drift_with_sample_cost(clock: FakeClock, tmp_path: Path) -> None:
    # GIVEN every sample costs 13 ms of a 100 ms interval
    sampler = CostlySampler(clock, [])
    with JsonlWriter(tmp_path / "fake.jsonl") as writer:
        stats = loop.run_loop(
            sampler, writer, 0.1, should_stop=sleeper(clock), max_samples=100, clock_ns=lambda: 1
        )
    # THEN sample k starts at exactly start + k * interval (no accumulated 13 ms)
    start = sampler.calls[0]
    assert sampler.calls[-1] - start == pytest.approx(99 * 0.1, abs=1e-6)
    assert stats.samples == 100 and stats.rows == 100 and stats.skipped_ticks == 0
    assert len((tmp_path / "fake.jsonl").read_text().splitlines()) == 100


def test_overrun_skips_missed_ticks_and_stays_on_grid(clock: FakeClock, tmp_path: Path) -> None:
    # GIVEN the third sample stalls for 0.35 s (3.5 intervals)
    sampler = CostlySampler(clock, [0.01, 0.01, 0.35])
    with JsonlWriter(tmp_path / "fake.jsonl") as writer:
        stats = loop.run_loop(
            sampler, writer, 0.1, should_stop=sleeper(clock), max_samples=6, clock_ns=lambda: 1
        )
    start = sampler.calls[0]
    offsets = [round(c - start, 6) for c in sampler.calls]
    # THEN ticks 0.3, 0.4, 0.5 are skipped and the loop resumes at 0.6 on the same grid
    assert offsets == [0.0, 0.1, 0.2, 0.6, 0.7, 0.8]
    assert stats.skipped_ticks == 3


def test_stop_request_ends_the_loop(clock: FakeClock, tmp_path: Path) -> None:
    sampler = CostlySampler(clock, [])
    asked = []

    def stop_after_three(timeout: float) -> bool:
        asked.append(timeout)
        clock.now += timeout
        return len(asked) >= 3

    with JsonlWriter(tmp_path / "fake.jsonl") as writer:
        stats = loop.run_loop(sampler, writer, 0.5, should_stop=stop_after_three)
    assert stats.samples == 3
    assert all(t == pytest.approx(0.5 - 0.013) for t in asked)


def test_a_failing_sample_is_reported_and_the_loop_goes_on(
    clock: FakeClock, tmp_path: Path
) -> None:
    class Flaky(CostlySampler):
        def sample(self, t_ns: int) -> list[dict[str, Any]]:
            rows = super().sample(t_ns)
            if len(self.calls) == 2:
                raise RuntimeError("boom")
            return rows

    (tmp_path / "run").mkdir()
    sampler = Flaky(clock, [])
    with JsonlWriter(tmp_path / "fake.jsonl") as writer:
        stats = loop.run_loop(
            sampler,
            writer,
            0.1,
            should_stop=sleeper(clock),
            max_samples=4,
            run_dir=tmp_path / "run",
        )
    assert stats.samples == 4 and stats.rows == 3 and stats.sample_errors == 1
    events = (tmp_path / "run" / "events.jsonl").read_text()
    assert "boom" in events and '"kind":"error"' in events


def test_interval_must_be_positive(tmp_path: Path) -> None:
    with JsonlWriter(tmp_path / "x.jsonl") as writer, pytest.raises(ValueError):
        loop.run_loop(CostlySampler(FakeClock(), []), writer, 0, should_stop=lambda t: True)
