"""`--abort-on` conditions: parsing, and evaluation on merged intervals written by real recorders."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadkit.errors import UsageError
from loadkit.load.generator.recorder import LatencyRecorder
from loadkit.load.guard import RunGuard, check_syntax, expand_conditions, parse_condition
from loadkit.load.live import LiveRunReader

S = 1_000_000_000
MS = 1_000_000
T0 = 1_764_449_000 * S


class FakeClock:
    def __init__(self, t_ns: int):
        self.t_ns = t_ns

    def __call__(self) -> int:
        return self.t_ns


def test_conditions_parse_to_seconds_percent_and_whole_durations() -> None:
    c = parse_condition("p99>80ms for 10s")
    assert (c.metric, c.threshold, c.for_s, c.text) == ("p99", 0.08, 10, "p99>80ms for 10s")
    e = parse_condition(" errors > 5% for 5s ")
    assert (e.metric, e.threshold, e.for_s, e.text) == ("errors", 5.0, 5, "errors>5% for 5s")
    assert parse_condition("P99.9>=1.5s for 1m").for_s == 60
    assert parse_condition("p999>2s").metric == "p999"
    assert parse_condition("p99.9>2s").metric == "p999"
    assert parse_condition("p99.9>2s").text == "p99.9>2s for 1s"
    assert parse_condition("p95>500us").threshold == pytest.approx(0.0005)


@pytest.mark.parametrize(
    "text",
    ["p99>80 for 10s", "p98>80ms for 1s", "errors>5ms", "p99<80ms", "p99>80ms for 0.5s", "slo x"],
)
def test_a_bad_condition_is_one_usage_error(text: str) -> None:
    with pytest.raises(UsageError) as err:
        check_syntax([text])
    assert "\n" not in err.value.message and err.value.hint


def test_slo_expands_to_the_scenarios_thresholds() -> None:
    slo = {"p99_ms": 50.0, "errors_pct": 1.0}
    texts = [c.text for c in expand_conditions(["slo"], slo)]
    assert texts == ["p99>50ms for 10s", "errors>1% for 10s"]
    assert [c.for_s for c in expand_conditions(["slo for 3s"], slo)] == [3, 3]
    with pytest.raises(UsageError, match="declares no SLO"):
        expand_conditions(["slo"], None)


def _record_second(rec: LatencyRecorder, second: int, latency_ms: float, n: int = 20) -> None:
    for i in range(n):
        intended = T0 + second * S + i * (S // n)
        rec.offered("infer", intended)
        rec.started("infer", intended, intended_ns=intended)
        done = intended + int(latency_ms * MS)
        rec.completed("infer", intended_ns=intended, sent_ns=intended, done_ns=done, ok=True)


def test_guard_fires_only_after_the_condition_held_for_every_second(tmp_path: Path) -> None:
    # GIVEN two processes; the second one's requests get slow from second 2 on
    clock = FakeClock(T0)
    a = LatencyRecorder(tmp_path, "a", clock_ns=clock)
    b = LatencyRecorder(tmp_path, "b", clock_ns=clock)
    reader = LiveRunReader(tmp_path)
    guard = RunGuard([parse_condition("p99>100ms for 3s")])
    fired = []
    for second in range(7):
        _record_second(a, second, 5)
        _record_second(b, second, 300 if second >= 2 else 5, n=5)
        a.tick(T0 + (second + 1) * S + 1)
        reader.poll()
        if second > 0:  # (a process counts once it has written its first interval)
            # one process behind: the interval is not complete, nothing is judged
            assert reader.last_complete_interval() == T0 + (second - 1) * S
        b.tick(T0 + (second + 1) * S + 1)
        reader.poll()
        breach = guard.check(reader)
        if breach is not None:
            fired.append((second, breach))
    # THEN it fires at the end of the third slow second (and on while it holds), merged P99
    assert [s for s, _ in fired] == [4, 5, 6]
    breach = fired[0][1]
    assert breach.since_ns == T0 + 2 * S and breach.t_ns == T0 + 5 * S
    assert all(v == pytest.approx(0.3, rel=0.01) for v in breach.values)


def test_a_stalled_target_breaks_a_latency_condition_through_pending_ages(tmp_path: Path) -> None:
    # GIVEN requests that never complete (the server stopped answering)
    rec = LatencyRecorder(tmp_path, "local", clock_ns=FakeClock(T0))
    reader = LiveRunReader(tmp_path)
    guard = RunGuard([parse_condition("p99>200ms for 3s"), parse_condition("errors>5% for 3s")])
    _record_second(rec, 0, 5)
    rec.tick(T0 + S + 1)
    for i in range(10):  # sent at 1.0 .. 1.45 s, stuck
        rec.offered("infer", T0 + S + i * 50 * MS)
        rec.started("infer", T0 + S + i * 50 * MS, intended_ns=T0 + S + i * 50 * MS)
    breaches = []
    for second in (1, 2, 3):
        rec.tick(T0 + (second + 1) * S + 1)
        reader.poll()
        breaches.append(guard.check(reader))
    # THEN no completions, no errors, yet the latency condition holds after 3 s
    assert breaches[:2] == [None, None]
    assert breaches[2] is not None and breaches[2].condition.metric == "p99"
    assert breaches[2].values[0] == pytest.approx(1.0, rel=0.01)  # oldest at the end of second 1
