"""Run directory format v1: round trip, partial runs, corrupted lines, unknown versions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from loadkit.errors import RunFormatError
from loadkit.rundir import (
    IntervalLogWriter,
    JsonlWriter,
    RunWriter,
    load_run,
    new_histogram,
    read_interval_log,
)
from loadkit.rundir import writer as writer_module
from loadkit.rundir.layout import LATENCY_DIR

T0 = 1_764_449_000_000_000_000  # a fixed wall-clock start in ns


def _make_run(tmp_path: Path) -> RunWriter:
    return RunWriter.create(
        out_dir=tmp_path,
        run_id="r1",
        scenario={"name": "burst_2x", "path": "scenarios/burst_2x.py", "params": {"rate": 50}},
        target={"url": "http://127.0.0.1:1", "protocol": "http", "model": "ranker"},
        environment={"host": {"cores_logical": 2}},
        command_line=["loadkit", "run", "x"],
    )


def test_round_trip_manifest_events_series_and_histograms(tmp_path: Path) -> None:
    # GIVEN a run with events, a telemetry series and two interval histograms
    run = _make_run(tmp_path)
    start = run.manifest["start_ns"]
    run.event("phase", "burst-start", t_ns=start + 10, rate=100)
    gpu = run.series("gpu")
    gpu.write({"t_ns": T0 + 2, "gpu": 0, "sm_clock_mhz": 1980, "temp_c": None})
    gpu.write({"t_ns": T0 + 1, "gpu": 0, "sm_clock_mhz": 1410, "temp_c": 71.5})
    log = IntervalLogWriter(run.path / LATENCY_DIR / "local.hlog", base_time_ns=T0)
    hist = new_histogram()
    for v in (1000, 2000, 3000, 50_000):
        hist.record_value(v)
    log.write("corrected:infer", T0, T0 + 1_000_000_000, hist)
    log.write("service:infer", T0, T0 + 1_000_000_000, hist)
    log.close()
    run.finalize("complete")

    # WHEN it is loaded
    loaded = load_run(run.path)

    # THEN everything comes back, sorted by time, with nulls kept
    assert loaded.status == "complete"
    assert loaded.manifest["scenario"]["params"] == {"rate": 50}
    assert loaded.manifest["end_ns"] >= loaded.manifest["start_ns"]
    assert list(loaded.events["name"]) == ["run-start", "burst-start", "run-end"]
    assert loaded.events["rate"].iloc[1] == 100
    frame = loaded.series("gpu")
    assert list(frame["sm_clock_mhz"]) == [1410, 1980]
    assert frame["temp_c"].isna().iloc[1]
    hists = loaded.latency_intervals
    assert [(h.kind, h.name) for h in hists] == [("corrected", "infer"), ("service", "infer")]
    assert hists[0].start_ns == T0 and hists[0].end_ns == T0 + 1_000_000_000
    assert hists[0].histogram.get_total_count() == 4
    assert hists[0].histogram.get_value_at_percentile(100) == pytest.approx(50_000, rel=1e-3)
    assert loaded.warnings == []
    assert loaded.load_intervals.empty
    assert loaded.warnings == ["no load counters (load/ is missing or empty)"]


def test_unknown_schema_version_is_refused_by_number(tmp_path: Path) -> None:
    run = _make_run(tmp_path)
    manifest = json.loads((run.path / "manifest.json").read_text())
    manifest["schema_version"] = 99
    (run.path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RunFormatError, match="schema_version 99"):
        load_run(run.path)


def test_not_a_run_directory_is_explained(tmp_path: Path) -> None:
    with pytest.raises(RunFormatError, match="does not exist"):
        load_run(tmp_path / "nope")
    with pytest.raises(RunFormatError, match="no manifest.json"):
        load_run(tmp_path)


def test_corrupted_and_torn_lines_are_skipped_with_a_warning(tmp_path: Path) -> None:
    run = _make_run(tmp_path)
    host = run.series("host")
    host.write({"t_ns": T0, "cpu_pct": 10.0})
    host.close()
    path = run.path / "telemetry" / "host.jsonl"
    with open(path, "a") as f:
        f.write("{not json\n")
        f.write(json.dumps({"t_ns": T0 + 1, "cpu_pct": 20.0}) + "\n")
        f.write('{"t_ns": 17644')  # torn last line, no newline
    hlog = run.path / LATENCY_DIR / "w.hlog"
    w = IntervalLogWriter(hlog, base_time_ns=T0)
    h = new_histogram()
    h.record_value(5)
    w.write("corrected:x", T0, T0 + 10**9, h)
    w.close()
    with open(hlog, "a") as f:
        f.write("Tag=corrected:x,1.000,1.000,0.005,HISTFAAAAgarbage\n")
        f.write("Tag=corrected:x,2.0")

    loaded = load_run(run.path)
    assert list(loaded.series("host")["cpu_pct"]) == [10.0, 20.0]
    assert len(loaded.latency_intervals) == 1
    joined = "\n".join(loaded.warnings)
    assert "host.jsonl:2: skipped corrupted line" in joined
    assert "host.jsonl:4: skipped torn last line" in joined
    assert "w.hlog" in joined


def test_unfinished_run_loads_and_says_so(tmp_path: Path) -> None:
    run = _make_run(tmp_path)
    run.series("gpu").write({"t_ns": T0 + 5, "gpu": 0})
    run.flush()
    loaded = load_run(run.path)
    assert loaded.status == "running"
    assert any("did not finish" in w for w in loaded.warnings)
    assert loaded.end_ns is not None


def test_writer_flushes_on_time_without_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fake monotonic clock: no sleeping.
    now = [100.0]
    monkeypatch.setattr(writer_module, "timer", lambda: now[0])
    path = tmp_path / "s.jsonl"
    w = JsonlWriter(path, flush_interval_s=1.0)
    w.write({"t_ns": 1})
    assert path.read_text() == ""  # buffered
    now[0] += 1.0
    w.write({"t_ns": 2})
    assert path.read_text().count("\n") == 2
    w.close()


def test_interval_log_is_readable_by_the_hdrhistogram_library(tmp_path: Path) -> None:
    # The standard reader (hdrh.log.HistogramLogReader) must accept our lines.
    from hdrh.log import HistogramLogReader

    path = tmp_path / "a.hlog"
    w = IntervalLogWriter(path, base_time_ns=T0)
    h = new_histogram()
    h.record_value(1234)
    w.write("corrected:infer", T0 + 2 * 10**9, T0 + 3 * 10**9, h)
    w.close()
    reader = HistogramLogReader(str(path), new_histogram())
    got = reader.get_next_interval_histogram()
    assert got is not None and got.get_total_count() == 1
    assert got.get_tag() == "corrected:infer"
    assert got.get_start_time_stamp() == pytest.approx((T0 / 1e9 + 2) * 1000, abs=1)
    ours = list(read_interval_log(path))
    assert ours[0].start_ns == T0 + 2 * 10**9


WRITER_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from loadkit.rundir import RunWriter, IntervalLogWriter, new_histogram
    run = RunWriter.create(out_dir=sys.argv[1], run_id="killed", scenario={"name": "k"})
    series = run.series("gpu")
    log = IntervalLogWriter(run.path / "latency" / "local.hlog", base_time_ns=run.manifest["start_ns"])
    i = 0
    while True:
        t = time.time_ns()
        series.write({"t_ns": t, "gpu": 0, "i": i})
        if i % 10 == 0:
            h = new_histogram(); h.record_value(1000 + i)
            log.write("corrected:infer", t, t + 10**8, h); log.flush()
        i += 1
        if i == 30:
            print("ready", flush=True)
        time.sleep(0.01)
    """
)


def test_sigkilled_writer_leaves_a_loadable_run(tmp_path: Path) -> None:
    # GIVEN a real writer process streaming rows
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER_SCRIPT, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        # let at least one time-based flush (0.5 s) happen after "ready"
        deadline = time.monotonic() + 10
        series = tmp_path / "killed" / "telemetry" / "gpu.jsonl"
        while time.monotonic() < deadline:
            if series.exists() and series.read_text().count("\n") >= 30:
                break
            time.sleep(0.05)
    finally:
        # WHEN it is killed without any chance to clean up
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    # THEN the run loads, says it did not finish, and keeps the flushed rows
    loaded = load_run(tmp_path / "killed")
    assert loaded.status == "running"
    rows = loaded.series("gpu")
    assert len(rows) >= 30
    assert list(rows["i"][:30]) == list(range(30))
    assert len(loaded.latency_intervals) >= 3
