"""The reader at scale: chunked JSON Lines give the same frames, interval logs stream."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from loadkit.rundir import IntervalLogWriter, RunWriter, load_run, new_histogram
from loadkit.rundir import reader as reader_module
from loadkit.rundir.layout import LATENCY_DIR, REQUESTS_DIR

T0 = 1_764_449_000_000_000_000
NS = 1_000_000_000

# Rows that stress `pd.DataFrame(rows)`'s inference: missing keys, None, ints that
# become floats, bools with None, strings, nested objects, lists, keys in another order.
MIXED_ROWS: list[dict[str, object]] = [
    {"t_ns": T0 + 3, "a": 1, "ok": True, "name": "infer", "kinds": {"timeout": 1}},
    {"t_ns": T0 + 1, "a": None, "ok": False, "name": "x", "cores": [1.5, 2.0]},
    {"name": "y", "t_ns": T0 + 2, "a": 2.5, "ok": None, "extra": "only here"},
    {"t_ns": T0 + 2, "a": 3, "ok": True, "name": None, "kinds": {}},
    {"t_ns": "not a time", "a": 4},
]


def _run(tmp_path: Path) -> RunWriter:
    return RunWriter.create(out_dir=tmp_path, run_id="r", scenario={"name": "s"})


def _write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines))


def _reference(rows: list[dict[str, object]]) -> pd.DataFrame:
    """What the reader built before chunking: one DataFrame from all row dicts."""
    df = pd.DataFrame(rows)
    df["t_ns"] = pd.to_numeric(df["t_ns"], errors="coerce")
    df = df.dropna(subset=["t_ns"])
    df["t_ns"] = df["t_ns"].astype("int64")
    return df.sort_values("t_ns", kind="stable").reset_index(drop=True)


@pytest.mark.parametrize("chunk_lines,compact_rows", [(1, 1), (2, 2), (3, 65_536), (8192, 1)])
def test_chunked_frames_equal_one_dataframe_of_all_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_lines: int, compact_rows: int
) -> None:
    # GIVEN a telemetry file with mixed rows, a corrupted line and a blank line
    monkeypatch.setattr(reader_module, "CHUNK_LINES", chunk_lines)
    monkeypatch.setattr(reader_module, "COMPACT_ROWS", compact_rows)
    run = _run(tmp_path)
    lines = [json.dumps(r) + "\n" for r in MIXED_ROWS]
    lines.insert(2, "{broken\n")
    lines.insert(4, "\n")
    lines.append("[1, 2]\n")  # valid JSON, not an object
    _write_lines(run.path / "telemetry" / "gpu.jsonl", lines)

    # WHEN it is read in chunks of any size
    loaded = load_run(run.path)
    frame = loaded.series("gpu")

    # THEN the frame is the one a single DataFrame of all rows gives, and bad lines are named
    pd.testing.assert_frame_equal(frame, _reference(MIXED_ROWS))
    joined = "\n".join(loaded.warnings)
    assert "gpu.jsonl:3: skipped corrupted line" in joined
    assert "gpu.jsonl:8: skipped a line that is not a JSON object" in joined


def test_request_samples_of_several_processes_and_a_projection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader_module, "CHUNK_LINES", 2)
    run = _run(tmp_path)
    a = [{"t_ns": T0 + i, "sent_ns": T0 + i + 5, "name": "infer", "ok": True} for i in (4, 0, 2)]
    b = [{"t_ns": T0 + 1, "sent_ns": None, "name": "infer", "ok": False, "process": "given"}]
    _write_lines(run.path / REQUESTS_DIR / "w1.jsonl", [json.dumps(r) + "\n" for r in a])
    _write_lines(
        run.path / REQUESTS_DIR / "w2.jsonl",
        [json.dumps(r) + "\n" for r in b] + ['{"t_ns": 17'],  # torn last line
    )
    loaded = load_run(run.path)

    projected = loaded.request_sample_columns(["sent_ns", "ok"])
    full = loaded.request_samples
    expected = _reference([{**r, "process": "w1"} for r in a] + b)
    pd.testing.assert_frame_equal(full, expected)
    assert list(full["process"]) == ["w1", "given", "w1", "w1"]
    # the projection: the same rows and values, only the columns asked for, in frame order
    pd.testing.assert_frame_equal(projected, full[["sent_ns", "ok"]])
    pd.testing.assert_frame_equal(
        load_run(run.path).request_sample_columns(("ok", "sent_ns")), full[["sent_ns", "ok"]]
    )
    assert math.isnan(projected["sent_ns"][1])
    # read twice, the torn line is reported once
    assert sum("w2.jsonl:2: skipped torn last line" in w for w in loaded.warnings) == 1


def _hlog(path: Path, seconds: list[int], value_us: int) -> None:
    log = IntervalLogWriter(path, base_time_ns=T0)
    for s in seconds:
        h = new_histogram()
        h.record_value(value_us + s, 2)
        log.write("corrected:infer", T0 + s * NS, T0 + (s + 1) * NS, h)
    log.close()


def test_interval_logs_stream_file_by_file_and_warn_once(tmp_path: Path) -> None:
    # GIVEN two processes' logs, one with a corrupted line
    run = _run(tmp_path)
    _hlog(run.path / LATENCY_DIR / "b.hlog", [0, 2], 1000)
    _hlog(run.path / LATENCY_DIR / "a.hlog", [1, 3], 2000)
    with open(run.path / LATENCY_DIR / "a.hlog", "a") as f:
        f.write("Tag=corrected:infer,9.000,1.000,0.005,HISTFAAAAgarbage\n")
    loaded = load_run(run.path)

    # WHEN they are streamed twice and listed
    first = [(h.source, h.start_ns) for h in loaded.iter_latency_intervals()]
    second = list(loaded.iter_latency_intervals())
    listed = loaded.latency_intervals

    # THEN the stream goes file by file; the list is the same histograms sorted by start
    assert first == [("a", T0 + NS), ("a", T0 + 3 * NS), ("b", T0), ("b", T0 + 2 * NS)]
    assert len(second) == 4
    assert [h.start_ns for h in listed] == [T0 + s * NS for s in range(4)]
    assert [h.histogram.get_max_value() // 1000 for h in listed] == [1, 2, 1, 2]
    assert sum("a.hlog" in w for w in loaded.warnings) == 1


def test_no_interval_logs_is_one_warning(tmp_path: Path) -> None:
    loaded = load_run(_run(tmp_path).path)
    assert list(loaded.iter_latency_intervals()) == []
    assert loaded.latency_intervals == []
    assert sum("no latency histograms" in w for w in loaded.warnings) == 1


@pytest.mark.parametrize("compact_rows", [1, 3, 7, 65_536])
def test_numeric_columns_packed_as_they_go_give_the_same_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compact_rows: int
) -> None:
    # GIVEN columns that stay ints, turn float, get nulls, gain a key late, or turn text late
    monkeypatch.setattr(reader_module, "CHUNK_LINES", 2)
    monkeypatch.setattr(reader_module, "COMPACT_ROWS", compact_rows)
    rows: list[dict[str, object]] = []
    for i in range(20):
        row: dict[str, object] = {"t_ns": T0 + 20 - i, "ints": i, "big": 2**62 + i}
        row["mixed"] = i if i < 8 else (i + 0.5 if i < 14 else None)
        row["flag"] = i % 2 == 0
        row["late_text"] = i if i < 17 else "text"
        if i >= 11:
            row["late_key"] = i * 1.5
        rows.append(row)
    run = _run(tmp_path)
    _write_lines(run.path / "telemetry" / "host.jsonl", [json.dumps(r) + "\n" for r in rows])
    # THEN the frame and its dtypes are those of one DataFrame of all rows
    frame = load_run(run.path).series("host")
    pd.testing.assert_frame_equal(frame, _reference(rows))
    assert frame["ints"].dtype == "int64" and frame["mixed"].dtype == "float64"
    assert frame["late_text"].dtype == object and frame["flag"].dtype == bool
