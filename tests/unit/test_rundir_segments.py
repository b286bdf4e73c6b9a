"""Run directory v2: long series rolled into compressed segments, read back whole and once."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from loadkit.load.generator.recorder import LatencyRecorder, reservoir_size
from loadkit.rundir import JsonlWriter, RunWriter, load_run
from loadkit.rundir import writer as writer_module
from loadkit.rundir.layout import REQUESTS_DIR, TELEMETRY_DIR
from loadkit.rundir.segments import series_files

T0 = 1_764_449_000_000_000_000


class FakeTimer:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run(tmp_path: Path) -> RunWriter:
    return RunWriter.create(out_dir=tmp_path, run_id="seg", command_line=["x"])


def test_rolled_segments_are_compressed_and_read_back_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeTimer()
    monkeypatch.setattr(writer_module, "timer", clock)
    monkeypatch.setattr(writer_module, "COMPRESS_STEP_BYTES", 512)
    run = _run(tmp_path)
    writer = JsonlWriter(run.path / TELEMETRY_DIR / "gpu.jsonl", segment_s=10.0)
    # GIVEN 35 s of rows at 10 Hz, a segment every 10 s, flushed twice a second
    for i in range(350):
        clock.now = i / 10
        writer.write({"t_ns": T0 + i * 100_000_000, "i": i})
        if i % 5 == 0:
            writer.flush()
    folder = run.path / TELEMETRY_DIR
    names = sorted(p.name for p in folder.iterdir())
    # THEN closed segments are compressed a piece per flush (the last may still be in progress)
    assert "gpu.seg0001.jsonl.gz" in names and "gpu.seg0002.jsonl.gz" in names
    assert "gpu.jsonl" in names
    with gzip.open(folder / "gpu.seg0001.jsonl.gz", "rt") as f:
        first = [json.loads(line)["i"] for line in f]
    assert first == list(range(101))  # rolled on the write at 10.0 s
    # AND a reader mid-run sees every flushed row once, in order (the last flush: row 345)
    rows = load_run(run.path).series("gpu")
    assert list(rows["i"]) == list(range(346))
    # WHEN the writer closes, pending compressions finish
    writer.close()
    names = sorted(p.name for p in folder.iterdir())
    assert names == [
        "gpu.jsonl",
        "gpu.seg0001.jsonl.gz",
        "gpu.seg0002.jsonl.gz",
        "gpu.seg0003.jsonl.gz",
    ]
    loaded = load_run(run.path)
    assert loaded.series_names() == ["gpu"] and loaded.has_series("gpu")
    assert list(loaded.series("gpu")["i"]) == list(range(350))


def test_a_segment_left_both_plain_and_compressed_is_read_once(tmp_path: Path) -> None:
    run = _run(tmp_path)
    folder = run.path / REQUESTS_DIR
    folder.mkdir()
    rows = [{"t_ns": T0 + i, "sent_ns": T0 + i} for i in range(4)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (folder / "local.seg0001.jsonl").write_text(text[: len(text) // 2 + 1])
    with gzip.open(folder / "local.seg0001.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows[:2]))
    (folder / "local.seg0002.jsonl.gz.tmp").write_bytes(b"half a compression")
    (folder / "local.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[2:]))
    assert [p.name for p in series_files(folder)["local"]] == [
        "local.seg0001.jsonl.gz",
        "local.jsonl",
    ]
    frame = load_run(run.path).request_samples
    assert list(frame["t_ns"]) == [T0, T0 + 1, T0 + 2, T0 + 3]
    assert set(frame["process"]) == {"local"}


def test_a_corrupted_compressed_segment_keeps_what_decompresses(tmp_path: Path) -> None:
    run = _run(tmp_path)
    folder = run.path / TELEMETRY_DIR
    folder.mkdir()
    payload = gzip.compress(
        "".join(json.dumps({"t_ns": T0 + i, "i": i}) + "\n" for i in range(50_000)).encode()
    )
    (folder / "host.seg0001.jsonl.gz").write_bytes(payload[: len(payload) // 2])
    loaded = load_run(run.path)
    rows = loaded.series("host")
    assert 0 < len(rows) < 50_000 and list(rows["i"]) == list(range(len(rows)))
    assert any("host.seg0001.jsonl.gz: compressed segment unreadable" in w for w in loaded.warnings)


def test_version_1_directories_still_read(tmp_path: Path) -> None:
    run = _run(tmp_path)
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest["schema_version"] == 2
    manifest["schema_version"] = 1
    (run.path / "manifest.json").write_text(json.dumps(manifest))
    (run.path / TELEMETRY_DIR).mkdir()
    (run.path / TELEMETRY_DIR / "gpu.jsonl").write_text('{"t_ns": 1, "i": 0}\n')
    assert list(load_run(run.path).series("gpu")["i"]) == [0]


def test_reservoir_shrinks_as_the_run_grows_and_keeps_the_slowest(tmp_path: Path) -> None:
    assert reservoir_size(0) == reservoir_size(600) == 200
    assert reservoir_size(2400) == 100
    assert reservoir_size(86_400) == 17
    assert reservoir_size(10**9) == 10
    now = [T0]
    rec = LatencyRecorder(tmp_path, "p", clock_ns=lambda: now[0], slowest_kept=2)
    for second in (0, 2400):
        base = T0 + second * 1_000_000_000
        for i in range(500):
            done = base + 1000 + i * 1_000_000
            slow = 900_000_000 if i in (7, 8) else 0  # two slow requests per interval
            rec.completed(
                "infer",
                intended_ns=done - 2_000_000 - slow,
                sent_ns=done - 1_000_000,
                done_ns=done,
                ok=True,
            )
    rec.close(now_ns=T0 + 2401 * 1_000_000_000)
    frame = load_run_requests(tmp_path / REQUESTS_DIR / "p.jsonl")
    first = [r for r in frame if r["t_ns"] < T0 + 2000 * 1_000_000_000]
    late = [r for r in frame if r["t_ns"] >= T0 + 2000 * 1_000_000_000]
    assert sum(r["sampled"] == "reservoir" for r in first) == 200
    assert sum(r["sampled"] == "reservoir" for r in late) == 100
    for rows in (first, late):  # the slowest two are always there
        latencies = sorted((r["done_ns"] - r["t_ns"] for r in rows), reverse=True)
        assert latencies[:2] == [902_000_000, 902_000_000]


def load_run_requests(path: Path) -> list[dict[str, int | str]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


WRITER_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from loadkit.rundir import RunWriter, JsonlWriter
    run = RunWriter.create(out_dir=sys.argv[1], run_id="killed", command_line=["x"])
    w = JsonlWriter(run.path / "telemetry" / "gpu.jsonl", segment_s=0.25)
    print("ready", flush=True)
    i = 0
    while True:
        w.write({"t_ns": 1_764_449_000_000_000_000 + i, "i": i, "pad": "x" * 200})
        w.flush()
        i += 1
        time.sleep(0.002)
    """
)


def test_sigkilled_writer_mid_roll_keeps_every_flushed_row_once(tmp_path: Path) -> None:
    # GIVEN a real process rolling a segment every 0.25 s, flushing every row
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER_SCRIPT, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    folder = tmp_path / "killed" / "telemetry"
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if len(list(folder.glob("gpu.seg*.jsonl.gz"))) >= 3:
                break
            time.sleep(0.05)
    finally:
        # WHEN it is killed, wherever it is in a roll or a compression
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    # THEN every row is read exactly once, in order, from segments and the live file
    assert len(list(folder.glob("gpu.seg*.jsonl.gz"))) >= 3
    rows = load_run(tmp_path / "killed").series("gpu")
    assert len(rows) >= 100
    assert list(rows["i"]) == list(range(len(rows)))
