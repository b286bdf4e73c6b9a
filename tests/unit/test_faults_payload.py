"""LargePayload: the state file the load generator reads holds the payload size in each window, 0 after."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadkit.faults import LargePayload, PayloadState
from loadkit.faults.schedule import FaultSchedule, FaultUnavailable
from tests.unit.faults_fakes import FakeClock


def test_writes_the_size_in_each_window_and_zero_after(tmp_path: Path) -> None:
    state = tmp_path / "payload.json"
    fault = LargePayload(
        state,
        FaultSchedule(duration_s=2.0, period_s=9, first_start_s=1, count=2),
        payload_bytes=1 << 20,
        share=0.5,
        run_dir=tmp_path,
        clock=FakeClock(),
    )
    written: list[int] = []
    original = fault._write

    def spy(size: int) -> None:
        written.append(size)
        original(size)

    fault._write = spy  # type: ignore[method-assign]
    fault.start()
    assert fault.join(5.0)
    fault.stop()
    assert written[:5] == [0, 1 << 20, 0, 1 << 20, 0] and written[-1] == 0
    assert json.loads(state.read_text()) == {"bytes": 0, "share": 0.5}
    rows = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(r["name"], r["action"]) for r in rows] == [
        ("data-movement", "start"),
        ("data-movement", "end"),
    ] * 2
    assert rows[0]["payload_bytes"] == 1 << 20 and rows[0]["share"] == 0.5


def test_the_reader_keeps_its_last_good_value_on_a_torn_file(tmp_path: Path) -> None:
    path = tmp_path / "payload.json"
    now = [0.0]
    reader = PayloadState(path, clock=lambda: now[0])
    assert reader.get() == 0  # no file yet
    path.write_text(json.dumps({"bytes": 512, "share": 0.1}))
    now[0] += 0.2
    assert reader.get() == 512 and reader.share == 0.1
    path.write_text('{"bytes": 5')  # caught mid-write
    now[0] += 0.2
    assert reader.get() == 512


def test_an_empty_payload_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FaultUnavailable, match=">= 1 byte"):
        LargePayload(tmp_path / "p.json", FaultSchedule(duration_s=1), payload_bytes=0)
    with pytest.raises(FaultUnavailable, match="share"):
        LargePayload(tmp_path / "p.json", FaultSchedule(duration_s=1), share=0.0)
