"""The per-process recorder, error classification and scenario parameters (no processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadkit.errors import UsageError
from loadkit.load.failures import HttpStatusError, classify_failure
from loadkit.load.generator.recorder import LatencyRecorder
from loadkit.load.scenario import Param, Scenario, auto_users
from loadkit.load.shapes import Constant, Truncated
from loadkit.rundir import load_run, read_interval_log
from loadkit.rundir.schema import LoadRow, RequestRow, row_problems

S = 1_000_000_000
T0 = 1_764_449_000 * S  # a whole second


class FakeClock:
    def __init__(self, t_ns: int):
        self.t_ns = t_ns

    def __call__(self) -> int:
        return self.t_ns


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _request(rec: LatencyRecorder, intended: int, sent: int, done: int, ok: bool = True, kind=None):
    rec.started("infer", sent)
    rec.completed("infer", intended_ns=intended, sent_ns=sent, done_ns=done, ok=ok, error_kind=kind)


def test_intervals_by_completion_time_corrected_and_service(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    rec = LatencyRecorder(tmp_path, "local", clock_ns=clock)
    # GIVEN one arrival sent 300 ms late, completing 10 ms after it was sent
    rec.offered("infer", T0 + 100_000_000)
    _request(rec, T0 + 100_000_000, T0 + 400_000_000, T0 + 410_000_000)
    # and one failure in the next second
    rec.offered("infer", T0 + S + 1)
    _request(rec, T0 + S + 1, T0 + S + 1, T0 + S + 5_000_000, ok=False, kind="queue_full")
    rec.tick(T0 + S + 10)  # only the first second has ended
    hists = list(read_interval_log(tmp_path / "latency" / "local.hlog"))
    assert [(h.kind, h.name, h.start_ns) for h in hists] == [
        ("corrected", "infer", T0),
        ("service", "infer", T0),
    ]
    corrected, service = (h.histogram for h in hists)
    assert corrected.get_max_value() == pytest.approx(310_000, rel=1e-3)
    assert service.get_max_value() == pytest.approx(10_000, rel=1e-3)
    rows = _rows(tmp_path / "load" / "local.jsonl")
    assert len(rows) == 1 and rows[0]["ok"] == 1 and rows[0]["offered"] == 1
    # WHEN closing mid-second THEN the partial interval is written too
    rec.close(T0 + S + 500_000_000)
    rows = _rows(tmp_path / "load" / "local.jsonl")
    assert rows[1]["interval_ns"] == 500_000_000
    assert rows[1]["errors"] == 1 and rows[1]["error_kinds"] == {"queue_full": 1}
    samples = _rows(tmp_path / "requests" / "local.jsonl")
    assert {s["ok"] for s in samples} == {True, False}
    assert samples[0]["t_ns"] == T0 + 100_000_000 and samples[0]["sent_ns"] == T0 + 400_000_000
    assert [row_problems(r, LoadRow) for r in rows] == [[], []]
    assert {tuple(row_problems(s, RequestRow)) for s in samples} == {()}


def test_dropped_out_of_range_and_in_flight(tmp_path: Path) -> None:
    clock = FakeClock(T0 + 1)
    rec = LatencyRecorder(tmp_path, "w", clock_ns=clock)
    rec.offered("infer", T0 + 1)
    rec.dropped("infer")
    rec.started("infer", T0 + 2)  # still in flight at the end of the second
    _request(rec, T0 + 3, T0 + 3, T0 + 3 + 100 * S)  # 100 s: above the histogram range
    rec.close(T0 + 104 * S + 1)
    rows = _rows(tmp_path / "load" / "w.jsonl")
    first = rows[0]
    assert first["dropped"] == 1 and first["in_flight"] == 1
    assert sum(r["out_of_range"] for r in rows) == 1
    assert sum(r["ok"] for r in rows) == 1
    # one row per second from the first to the last: gaps are explicit zeros
    assert [r["t_ns"] for r in rows] == [T0 + i * S for i in range(len(rows))]


def test_sample_is_bounded_and_keeps_the_slowest(tmp_path: Path) -> None:
    rec = LatencyRecorder(tmp_path, "p", clock_ns=FakeClock(T0), sample_size=10, slowest_kept=2)
    for i in range(1000):
        _request(rec, T0 + i, T0 + i, T0 + i + (5_000_000 if i != 500 else 900_000_000))
    rec.close(T0 + S)
    samples = _rows(tmp_path / "requests" / "p.jsonl")
    assert 10 <= len(samples) <= 12
    assert any(s["done_ns"] - s["t_ns"] == 900_000_000 for s in samples)


def test_each_sampled_request_carries_its_size(tmp_path: Path) -> None:
    rec = LatencyRecorder(tmp_path, "p", clock_ns=FakeClock(T0), sample_size=10, slowest_kept=2)
    for i in range(100):
        rec.started("infer", T0 + i)
        slow = i == 50  # the one large request is the slowest
        rec.completed(
            "infer",
            intended_ns=T0 + i,
            sent_ns=T0 + i,
            done_ns=T0 + i + (90_000_000 if slow else 5_000_000),
            ok=True,
            request_bytes=1 << 20 if slow else 2048,
        )
    rec.close(T0 + S)
    samples = _rows(tmp_path / "requests" / "p.jsonl")
    assert {s["request_bytes"] for s in samples} <= {2048, 1 << 20}
    slowest = max(samples, key=lambda s: s["done_ns"] - s["t_ns"])
    assert slowest["request_bytes"] == 1 << 20


def test_interrupted_run_loads(tmp_path: Path) -> None:
    from loadkit.rundir import RunWriter

    writer = RunWriter.create(out_dir=tmp_path, run_id="r", kind="load")
    rec = LatencyRecorder(writer.path, "local", clock_ns=FakeClock(T0))
    _request(rec, T0, T0, T0 + 1000)
    rec.close(T0 + 10)
    writer.finalize("aborted")
    run = load_run(writer.path)
    assert run.status == "aborted" and len(run.latency_intervals) == 2


class FakeTritonError(Exception):
    def __init__(self, msg: str, status: str | None):
        super().__init__(msg)
        self._msg, self._status = msg, status

    def status(self) -> str | None:
        return self._status

    def message(self) -> str:
        return self._msg


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (TimeoutError(), "timeout"),
        (ConnectionRefusedError(), "refused"),
        (ConnectionResetError(), "reset"),
        (FakeTritonError("Exceeds maximum queue size", "503"), "queue_full"),
        (FakeTritonError("model not found", "400"), "http_400"),
        (FakeTritonError("unavailable", "StatusCode.UNAVAILABLE"), "grpc_UNAVAILABLE"),
        (FakeTritonError("deadline", "StatusCode.DEADLINE_EXCEEDED"), "timeout"),
        (
            FakeTritonError(
                "[StatusCode.RESOURCE_EXHAUSTED] Exceeds maximum queue size",
                "StatusCode.RESOURCE_EXHAUSTED",
            ),
            "queue_full",
        ),
        (HttpStatusError(503, '{"error":"Exceeds maximum queue size"}'), "queue_full"),
        (HttpStatusError(500, "boom"), "http_500"),
        (ValueError("?"), "other"),
    ],
)
def test_failure_classification(exc: BaseException, kind: str) -> None:
    assert classify_failure(exc) == kind


def test_gevent_kinds_by_name() -> None:
    GreenletExit = type("GreenletExit", (BaseException,), {})
    assert classify_failure(GreenletExit()) == "cancelled"


def _scenario(**kw) -> Scenario:
    return Scenario(
        name="t",
        params={"rate": Param(10.0, "r"), "duration_s": Param(5.0, "d")},
        shape=lambda p: Constant(p.rate, p.duration_s),
        **kw,
    )


def test_scenario_overrides_are_parsed_by_type_and_checked() -> None:
    resolved = _scenario().resolve({"rate": "25", "churn": "yes", "users": "7"})
    assert resolved.params.rate == 25.0 and resolved.params.churn is True
    assert resolved.users == 7 and resolved.shape.rate_at(1) == 25.0
    with pytest.raises(UsageError, match="no parameter"):
        _scenario().resolve({"rat": "1"})
    with pytest.raises(UsageError, match="not a valid float"):
        _scenario().resolve({"rate": "fast"})
    with pytest.raises(UsageError, match="protocol"):
        _scenario().resolve({"protocol": "ftp"})


def test_duration_sets_the_parameter_or_truncates() -> None:
    assert _scenario().resolve(duration_s=2).shape.duration_s == 2
    burst = Scenario(name="b", shape=lambda p: Constant(5.0, 100.0))
    shape = burst.resolve(duration_s=3).shape
    assert isinstance(shape, Truncated) and shape.duration_s == 3


def test_auto_users_scale_with_peak_rate() -> None:
    assert auto_users(0) == 10 and auto_users(200) == 110 and auto_users(1e6) == 2000


def test_unreachable_target_fails_before_recording(tmp_path) -> None:
    import socket

    import pytest

    from loadkit.errors import TargetError
    from loadkit.load.orchestrator import check_reachable

    # a port that was free a moment ago: nothing listens there
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TargetError, match=f"127.0.0.1:{port}"):
        check_reachable(f"http://127.0.0.1:{port}", timeout_s=1.0)
    with pytest.raises(TargetError):
        check_reachable(f"127.0.0.1:{port}", timeout_s=1.0)  # gRPC form


def test_completion_gaps_are_written_exactly_wherever_they_fall(tmp_path: Path) -> None:
    # GIVEN two requests in flight from 0.9 s; nothing completes until 1.6 s (a stall
    # straddling the second boundary), then both complete; later a short 30 ms pause
    clock = FakeClock(T0)
    rec = LatencyRecorder(tmp_path, "local", clock_ns=clock)
    ms = 1_000_000
    _request(rec, T0 + 100 * ms, T0 + 100 * ms, T0 + 110 * ms)
    rec.started("infer", T0 + 900 * ms)
    rec.started("infer", T0 + 950 * ms)
    for sent in (900, 950):
        rec.completed(
            "infer",
            intended_ns=T0 + sent * ms,
            sent_ns=T0 + sent * ms,
            done_ns=T0 + 1600 * ms,
            ok=True,
        )
    rec.started("infer", T0 + 1700 * ms)
    rec.completed(
        "infer", intended_ns=T0 + 1700 * ms, sent_ns=T0 + 1700 * ms, done_ns=T0 + 1730 * ms, ok=True
    )
    rec.close(T0 + 2 * S)
    rows = _rows(tmp_path / "load" / "local.jsonl")
    # THEN the 0.7 s gap is in the row of the second it ended in, from the send that
    # put the process in flight; the gap idle time (no request in flight) and the
    # 30 ms pause are not gaps
    assert rows[0]["completion_gaps"] == []
    assert rows[1]["completion_gaps"] == [[T0 + 900 * ms, T0 + 1600 * ms]]
    # ... and the run reader gives them to the analysis
    import pandas as pd

    from loadkit.analysis.gaps import gaps_from_load

    gaps = gaps_from_load(pd.DataFrame(rows))
    assert gaps is not None and gaps.spans_ns.tolist() == [[T0 + 900 * ms, T0 + 1600 * ms]]


def test_requests_in_flight_at_an_interval_end_are_written_as_pending_ages(tmp_path: Path) -> None:
    # GIVEN two requests intended at 0.2 s and 0.7 s that have not completed by the end of second 0
    rec = LatencyRecorder(tmp_path, "local", clock_ns=FakeClock(T0))
    rec.started("infer", T0 + 300_000_000, intended_ns=T0 + 200_000_000)
    rec.started("infer", T0 + 700_000_000, intended_ns=T0 + 700_000_000)
    # and one that completes within the second (not pending)
    _request(rec, T0 + 100_000_000, T0 + 100_000_000, T0 + 150_000_000)
    rec.tick(T0 + S + 1)
    # and the first completes in second 1 (the second is still in flight at its end)
    rec.completed(
        "infer", intended_ns=T0 + 200_000_000, sent_ns=T0 + 300_000_000, done_ns=T0 + S + 5, ok=True
    )
    rec.tick(T0 + 2 * S + 1)
    pending = [
        h for h in read_interval_log(tmp_path / "latency" / "local.hlog") if h.kind == "pending"
    ]
    # THEN each interval's pending histogram holds the ages at its end (lower bounds of latency)
    assert [h.start_ns for h in pending] == [T0, T0 + S]
    first, second = (h.histogram for h in pending)
    assert first.get_total_count() == 2
    assert first.get_max_value() == pytest.approx(800_000, rel=1e-3)
    assert first.get_min_value() == pytest.approx(300_000, rel=1e-3)
    assert second.get_total_count() == 1
    assert second.get_max_value() == pytest.approx(1_300_000, rel=1e-3)
    # and the completed-request histograms are unchanged
    corrected = [
        h for h in read_interval_log(tmp_path / "latency" / "local.hlog") if h.kind == "corrected"
    ]
    assert [h.histogram.get_total_count() for h in corrected] == [1, 1]


def test_a_tick_pauses_while_writing_and_loses_nothing_recorded_in_its_pauses(
    tmp_path: Path,
) -> None:
    # GIVEN a second of 300 requests, and a generator that keeps recording while a tick
    # writes that second (the tick yields to it between pieces of the writing)
    clock = FakeClock(T0)
    rec = LatencyRecorder(tmp_path, "p", clock_ns=clock)
    for i in range(300):
        t = T0 + i * 3_000_000
        rec.offered("infer", t)
        _request(rec, t, t, t + 1_000_000)
    late = iter(range(1000))
    pauses = []

    def pause() -> None:  # another greenlet runs: a late arrival of the second being written
        k = next(late)
        pauses.append(k)
        t = T0 + 999_000_000 - k
        rec.offered("infer", t)
        _request(rec, t, T0 + S + 10 + k, T0 + S + 20 + k)

    # WHEN the tick writes the first second, pausing
    clock.t_ns = T0 + S + 5
    rec.tick(pause=pause)
    rec.close(T0 + 2 * S)
    # THEN it paused several times, and every request is in the load rows, the histograms
    # and the totals exactly once; what came during the pauses is in the next interval
    assert len(pauses) >= 5
    rows = _rows(tmp_path / "load" / "p.jsonl")
    assert [r["t_ns"] for r in rows] == [T0, T0 + S]
    assert rows[0]["ok"] == rows[0]["offered"] == 300
    assert rows[1]["ok"] == rows[1]["offered"] == len(pauses)
    hists = list(read_interval_log(tmp_path / "latency" / "p.hlog"))
    service = [h.histogram.get_total_count() for h in hists if h.kind == "service"]
    assert service == [300, len(pauses)]
    assert rec.totals["ok"] == rec.totals["offered"] == 300 + len(pauses)


def test_a_stop_during_a_paused_tick_waits_for_its_write_and_loses_nothing(
    tmp_path: Path,
) -> None:
    import gevent
    import gevent.event

    # GIVEN a whole second of 300 requests and 40 more in the next, and a ticker greenlet
    # that is paused in the middle of writing the first second (its cooperative yield)
    clock = FakeClock(T0)
    rec = LatencyRecorder(tmp_path, "p", clock_ns=clock)
    for i in range(340):
        t = T0 + i * 3_000_000
        rec.offered("infer", t)
        _request(rec, t, t, t + 1_000_000)
    inside_write = gevent.event.Event()

    def pause() -> None:
        inside_write.set()
        gevent.sleep(0)

    clock.t_ns = T0 + S + 5
    ticker = gevent.spawn(rec.tick, pause=pause)
    inside_write.wait(timeout=5)
    assert inside_write.is_set() and not ticker.dead
    # WHEN the run stops (another greenlet closes the recorder) while the write is paused
    rec.close(T0 + S + 500_000_000, wait=lambda: gevent.sleep(0))
    # THEN the ticker finished its write without an error, and both seconds, the last one
    # partial, are written with every request exactly once
    ticker.get(timeout=5)
    rows = _rows(tmp_path / "load" / "p.jsonl")
    assert [(r["t_ns"], r["interval_ns"], r["ok"]) for r in rows] == [
        (T0, S, 333),
        (T0 + S, 500_000_000, 7),
    ]
    hists = list(read_interval_log(tmp_path / "latency" / "p.hlog"))
    assert [h.histogram.get_total_count() for h in hists if h.kind == "service"] == [333, 7]


def test_closing_from_inside_a_paused_tick_without_a_way_to_wait_is_refused(
    tmp_path: Path,
) -> None:
    # A close that cannot yield to the paused tick would close the files under it.
    clock = FakeClock(T0)
    rec = LatencyRecorder(tmp_path, "p", clock_ns=clock)
    _request(rec, T0, T0, T0 + 1_000_000)
    refused: list[str] = []

    def pause() -> None:
        with pytest.raises(RuntimeError, match="paused tick") as err:
            rec.close()
        refused.append(str(err.value))

    clock.t_ns = T0 + S + 5
    rec.tick(pause=pause)
    assert refused and not rec.closed
    rec.close(T0 + 2 * S)
    assert rec.closed
