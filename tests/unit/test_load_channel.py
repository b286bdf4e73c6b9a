"""Records shipped from a worker to the master: bounded buffer, resend, dedupe, clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadkit.load.generator.channel import (
    RECORDS,
    ChannelSink,
    ClockEstimate,
    ClockProbe,
    RecordBuffer,
    RecordCollector,
)
from loadkit.load.generator.recorder import LatencyRecorder
from loadkit.rundir import read_interval_log

T0 = 1_700_000_000 * 1_000_000_000
S = 1_000_000_000


class FakeTimer:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _record_two_intervals(rec: LatencyRecorder) -> None:
    for i in range(10):
        t = T0 + i * (S // 10)
        rec.offered("infer", t)
        rec.started("infer", t, intended_ns=t)
        rec.completed("infer", intended_ns=t, sent_ns=t, done_ns=t + (i + 1) * 1_000_000, ok=True)
    rec.completed(
        "infer", intended_ns=T0, sent_ns=T0, done_ns=T0 + S + 5, ok=False, error_kind="http_500"
    )
    rec.tick(T0 + 2 * S + 1)


def test_worker_records_written_by_the_master_equal_a_local_recording(tmp_path: Path) -> None:
    # GIVEN the same requests recorded locally and by a worker whose records go over a channel
    local = LatencyRecorder(tmp_path / "local", "worker-0", clock_ns=lambda: T0)
    sent: list[tuple[str, dict[str, Any]]] = []
    sink = ChannelSink("worker-0", lambda t, d: sent.append((t, d)))
    remote = LatencyRecorder("", "worker-0", clock_ns=lambda: T0, sink=sink)
    _record_two_intervals(local)
    _record_two_intervals(remote)
    local.close(T0 + 2 * S + 1)
    remote.close(T0 + 2 * S + 1)
    # WHEN the master receives each record (one duplicate among them)
    collector = RecordCollector(tmp_path / "master")
    for msg_type, data in [*sent, sent[0]]:
        assert msg_type == RECORDS
        collector.receive(data)
    collector.close()
    # THEN the master's files hold exactly what the local process wrote
    for sub in ("load/worker-0.jsonl", "requests/worker-0.jsonl"):
        assert (tmp_path / "master" / sub).read_text() == (tmp_path / "local" / sub).read_text()

    def hists(root: Path) -> list[tuple[str, int, int, int]]:
        return [
            (h.tag, h.start_ns, h.end_ns, h.histogram.get_total_count())
            for h in read_interval_log(root / "latency" / "worker-0.hlog")
        ]

    assert hists(tmp_path / "master") == hists(tmp_path / "local")
    assert collector.complete("worker-0")


def test_buffer_is_bounded_and_resends_what_is_not_acknowledged() -> None:
    timer = FakeTimer()
    buffer = RecordBuffer(limit=3)
    for i in range(5):
        buffer.add({"i": i}, timer())
    assert len(buffer) == 3 and buffer.evicted == 2 and buffer.evicted_through == 1
    buffer.ack(3)
    assert buffer.due(timer.t + 1.0, after_s=5.0) == []
    assert [r["seq"] for r in buffer.due(timer.t + 5.0, after_s=5.0)] == [2, 4]
    # just resent: not due again until another `after_s` passed
    assert buffer.due(timer.t + 6.0, after_s=5.0) == []


def test_master_waits_for_a_gap_to_be_filled_before_a_worker_is_complete(tmp_path: Path) -> None:
    timer = FakeTimer()
    sent: list[dict[str, Any]] = []
    sink = ChannelSink("worker-3", lambda t, d: sent.append(d), timer=timer)
    sink.event("phase", "load-start", t_ns=T0)
    sink.flush()
    sink.event("phase", "load-end", t_ns=T0 + S)
    sink.flush()
    sink.close()
    collector = RecordCollector(tmp_path)
    # the connection dropped record 1; records 0 and 2 (final) arrived
    for record in (sent[0], sent[2]):
        sink.on_ack({"seq": collector.receive(record)})
    assert not collector.complete("worker-3")
    assert not sink.drained
    timer.t += 10.0
    sink.resend()  # after the reconnect: only what was not acknowledged
    assert [r["seq"] for r in sent[3:]] == [1]
    sink.on_ack({"seq": collector.receive(sent[3])})
    assert collector.complete("worker-3") and sink.drained
    events = (tmp_path / "events.jsonl").read_text().splitlines()
    assert len(events) == 2 and "load-start" in events[0] and "load-end" in events[1]


def test_lost_worker_offered_rate_is_its_last_full_intervals(tmp_path: Path) -> None:
    collector = RecordCollector(tmp_path)
    rows = [
        {"t_ns": T0 + i * S, "interval_ns": S, "offered": n, "process": "worker-1", "name": "x"}
        for i, n in enumerate([10, 50, 60, 70, 80])
    ]
    rows.append({"t_ns": T0 + 5 * S, "interval_ns": S // 3, "offered": 5, "process": "worker-1"})
    collector.receive({"process": "worker-1", "seq": 0, "load": rows[:2]})
    assert collector.offered_per_s("worker-1") == 50.0  # the first interval, load began inside
    collector.receive({"process": "worker-1", "seq": 1, "load": rows[2:]})
    assert collector.offered_per_s("worker-1") == 70.0  # the last three full ones
    assert collector.workers["worker-1"].last_end_ns == T0 + 5 * S + S // 3


def test_clock_offset_from_the_exchange_with_the_smallest_round_trip() -> None:
    # the master's clock is 40 ms ahead; one way takes 1 ms, the other 3 ms
    ms = 1_000_000
    e = ClockEstimate.from_exchange(t1=0, t2=41 * ms, t3=42 * ms, t4=5 * ms)
    assert e.delay_ns == 4 * ms and e.offset_ns == 39 * ms  # error at most delay/2
    probe = ClockProbe()
    probe.add(e)
    probe.add(ClockEstimate.from_exchange(t1=0, t2=40 * ms, t3=40 * ms, t4=0))
    assert probe.best is not None and probe.best.offset_ns == 40 * ms
    assert probe.report() == {
        "offset_ms": 40.0,
        "delay_ms": 0.0,
        "samples": 2,
        "latest_offset_ms": 40.0,
    }


def test_recorder_in_the_masters_clock_is_fixed_before_the_first_record(tmp_path: Path) -> None:
    rec = LatencyRecorder(tmp_path, "w", clock_ns=lambda: T0)
    assert rec.align_clock(250_000_000)
    rec.offered("infer", T0 + S - 100_000_000)  # our 0.9 s is the master's 1.15 s
    assert not rec.align_clock(0)  # fixed once something is recorded
    rec.close(T0 + 3 * S)
    rows = (tmp_path / "load" / "w.jsonl").read_text().splitlines()
    assert f'"t_ns":{T0 + S},' in rows[0]


def test_a_worker_that_cannot_reach_the_master_says_so_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from loadkit.cli import main
    from loadkit.load.orchestrator import _free_port

    port = _free_port()  # nothing listens there
    code = main(
        ["worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
        + ["--connect-timeout", "0"]
    )
    err = capsys.readouterr().err.splitlines()
    assert code == 3
    assert err[0].startswith(f"ERROR: cannot reach the loadkit master at 127.0.0.1:{port}")
    assert "Connection refused" in err[0] and err[1].startswith("HINT: ")


def test_each_worker_machine_is_one_host_series_written_by_the_master(tmp_path: Path) -> None:
    # GIVEN three worker processes on two machines, each sampling its machine per interval
    sent: list[dict[str, Any]] = []
    sinks = []
    for process, host in (("worker-0", "lg-1"), ("worker-1", "lg-1"), ("worker-2", "lg-2")):
        ticks = iter(range(100))

        def machine(host: str = host, ticks: Any = ticks) -> dict[str, Any]:
            t = T0 + next(ticks) * S
            return {"t_ns": t, "cpu_per_core_pct": [99.0, 12.0], "cores": 2, "host": host}

        sink = ChannelSink(process, lambda _t, d: sent.append(d), machine=machine)
        sinks.append(sink)
    for _ in range(3):
        for sink in sinks:
            sink.interval_done()
    for sink in sinks:
        sink.close()
    # WHEN the master receives every record (a duplicate among them)
    collector = RecordCollector(tmp_path)
    for data in [*sent, sent[0]]:
        collector.receive(data)
    collector.close()
    # THEN one series per machine, each row once, without the host column (it is the source's)
    assert collector.machine_series() == {"host-worker-lg-1": "lg-1", "host-worker-lg-2": "lg-2"}
    for series in ("host-worker-lg-1", "host-worker-lg-2"):
        rows = (tmp_path / "telemetry" / f"{series}.jsonl").read_text().splitlines()
        assert len(rows) == 3 and all('"host"' not in r for r in rows), rows

    # AND a machine that cannot be read does not stop the records
    def unreadable() -> dict[str, Any]:
        raise OSError("no /proc")

    quiet: list[dict[str, Any]] = []
    sink = ChannelSink("worker-9", lambda _t, d: quiet.append(d), machine=unreadable)
    sink.interval_done()
    sink.interval_done()
    assert len(quiet) == 2 and quiet[0]["machine"] == []
