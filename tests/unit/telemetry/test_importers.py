"""Importers on real-format samples (tests/data/import/), incl. partial lines and
unknown columns, and `loadkit import` creating or joining a run directory."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loadkit.cli import main
from loadkit.errors import UsageError
from loadkit.rundir import load_run
from loadkit.telemetry.importers import (
    dcgm_value,
    detect_format,
    parse_dcgm_text,
    parse_dmon,
    parse_locust_history,
    parse_prom_range,
    parse_query_gpu,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "import"


def text(name: str) -> str:
    return (DATA / name).read_text()


def utc_ns(*args: int) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp()) * 1_000_000_000


def test_dmon_all_selections_with_date_time() -> None:
    result = parse_dmon(text("dmon_pucvmet_DT.log"), tz_offset_hours=0)
    assert result.skipped_lines == 1  # the torn last line
    assert len(result.rows) == 5  # two GPUs x 2 samples + one; repeated header handled
    first = result.rows[0]
    assert first["t_ns"] == utc_ns(2025, 3, 1, 14, 2, 10) and first["gpu"] == 0
    assert first["power_w"] == 412 and first["temp_c"] == 71 and first["util_gpu_pct"] == 97
    assert first["sm_clock_mhz"] == 1980 and first["mem_clock_mhz"] == 2619
    assert first["mem_used_bytes"] == 12041 * 1024 * 1024
    assert first["pcie_rx_kbps"] == 310_000
    throttled = result.rows[2]
    assert throttled["sm_clock_mhz"] == 1110 and throttled["violation_thermal"] == 1
    assert result.rows[3]["pcie_rx_kbps"] is None  # "-" is null


def test_dmon_without_timestamps_needs_start_and_uses_interval() -> None:
    with pytest.raises(UsageError, match="no timestamps"):
        parse_dmon(text("dmon_default_no_time.log"))
    start = utc_ns(2025, 3, 1, 14, 0, 0)
    result = parse_dmon(text("dmon_default_no_time.log"), start_ns=start, interval_s=2.0)
    assert [r["t_ns"] for r in result.rows] == [start, start + 2 * 10**9, start + 4 * 10**9]
    assert result.rows[0]["mem_temp_c"] is None and result.rows[2]["util_gpu_pct"] == 88


def test_dmon_time_only_old_driver_and_unknown_columns() -> None:
    start = utc_ns(2025, 3, 1, 0, 0, 0)
    result = parse_dmon(text("dmon_old_driver_T.log"), start_ns=start, tz_offset_hours=0)
    (row,) = result.rows
    assert row["t_ns"] == utc_ns(2025, 3, 1, 9, 15, 1)
    assert row["temp_c"] == 38  # old "temp" column
    assert row["dmon_newcol"] == 7 and "dmon_newcol" in result.unknown_fields


def test_query_gpu_csv_with_units_na_and_partial_line() -> None:
    result = parse_query_gpu(text("query_gpu_lms.csv"), tz_offset_hours=-5)
    assert result.skipped_lines == 1
    a, b, c = result.rows
    assert a["t_ns"] == utc_ns(2025, 3, 1, 19, 2, 10) + 105_000_000
    assert a["util_gpu_pct"] == 97 and a["mem_used_bytes"] == 12041 * 1024 * 1024
    assert a["power_w"] == pytest.approx(412.35) and a["power_limit_w"] == 700
    assert a["reason_hw_thermal"] is False and a["name"] == "NVIDIA H100 80GB HBM3"
    assert b["clocks_event_reasons"] == 0x48 and b["reason_hw_thermal"] and b["reason_hw_slowdown"]
    assert b["sm_clock_mhz"] == 1110 and b["smi_ecc_errors_corrected_volatile_total"] is None
    assert c["sm_clock_mhz"] is None  # [Not Supported]
    assert "smi_ecc_errors_corrected_volatile_total" in result.unknown_fields


def test_dcgm_exporter_text_sentinels_and_torn_line() -> None:
    t = utc_ns(2025, 3, 1, 14, 2, 11)
    result = parse_dcgm_text(text("dcgm_exporter.txt"), t_ns=t)
    assert result.skipped_lines == 1
    gpu0, gpu1 = result.rows
    assert gpu0["host"] == "gpu-node-7" and gpu0["t_ns"] == t
    assert gpu0["sm_clock_mhz"] == 1110 and gpu0["temp_c"] == 88
    assert gpu0["power_w"] == pytest.approx(455.123) and gpu0["energy_mj"] == 93812345123
    assert gpu0["clocks_event_reasons"] == 72 and gpu0["reason_hw_thermal"] is True
    assert gpu1["energy_mj"] is None  # 0x7FFFFFFFFFFFFFF2 (not supported) sentinel
    assert gpu1["dcgm_prof_pipe_tensor_active"] is None  # FP64 blank
    assert gpu0["dcgm_prof_pipe_tensor_active"] == pytest.approx(0.412301)


def test_dcgm_sentinel_family() -> None:
    for raw in ("9223372036854775792", "9223372036854775794", "9223372036854775795", "2147483632"):
        assert dcgm_value(raw) is None
    assert dcgm_value("140737488355328.0") is None and dcgm_value("NaN") is None
    assert dcgm_value("1980") == 1980.0


def test_prometheus_query_range_both_hostname_labels_and_window() -> None:
    result = parse_prom_range(text("prom_query_range.json"))
    node7 = [r for r in result.rows if r["host"] == "gpu-node-7"]
    node8 = [r for r in result.rows if r["host"] == "gpu-node-8"]
    assert [r["sm_clock_mhz"] for r in node7] == [1980, 1110, 1125, 1980]
    assert [r["reason_hw_thermal"] for r in node7] == [False, True, True, False]
    assert len(node8) == 2 and all(r["violation_power_ns"] is None for r in node8)
    assert node7[0]["dcgm_dev_nvlink_bandwidth_total"] == 123456
    windowed = parse_prom_range(
        text("prom_query_range.json"), start_ns=1740837731 * 10**9, end_ns=1740837732 * 10**9
    )
    assert {r["t_ns"] for r in windowed.rows} == {1740837731 * 10**9, 1740837732 * 10**9}


def test_locust_history() -> None:
    result = parse_locust_history(text("locust_stats_history.csv"))
    assert result.skipped_lines == 1 and len(result.rows) == 3
    row = result.rows[1]
    assert row["name"] == "infer" and row["type"] == "POST" and row["requests_s"] == 181.3
    assert row["p99_ms"] == 23 and row["p99_9_ms"] == 41 and row["user_count"] == 20
    assert result.rows[0]["p50_ms"] is None
    assert result.source == "locust_history" and result.notes


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("dmon_pucvmet_DT.log", "dmon"),
        ("dmon_default_no_time.log", "dmon"),
        ("dmon_old_driver_T.log", "dmon"),
        ("query_gpu_lms.csv", "query-gpu"),
        ("dcgm_exporter.txt", "dcgm"),
        ("prom_query_range.json", "prom-range"),
        ("locust_stats_history.csv", "locust"),
    ],
)
def test_detect_format(name: str, fmt: str) -> None:
    assert detect_format(text(name)) == fmt


def test_cli_creates_then_joins_a_run(tmp_path: Path) -> None:
    code = main(
        ["import", str(DATA / "dmon_pucvmet_DT.log"), "--out", str(tmp_path), "--run-id", "inc",
         "--utc-offset", "0"]
    )  # fmt: skip
    assert code == 0
    run_dir = tmp_path / "inc"
    code = main(["import", str(DATA / "query_gpu_lms.csv"), "--run", str(run_dir)])
    assert code == 0
    run = load_run(run_dir)
    assert run.manifest["kind"] == "import" and run.manifest["status"] == "complete"
    assert run.manifest["start_ns"] == utc_ns(2025, 3, 1, 14, 2, 10)
    files = sorted(s["file"] for s in run.manifest["sources"])
    assert files == ["telemetry/gpu-query-gpu.jsonl", "telemetry/gpu.jsonl"]
    assert run.manifest["sources"][0]["warning"] == "1 partial or malformed line(s) skipped"
    rows = [json.loads(x) for x in (run_dir / "telemetry" / "gpu.jsonl").read_text().splitlines()]
    assert len(rows) == 5 and rows[0]["imported_from"] == "dmon"


def test_cli_rejects_unknown_content(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\nworld\n")
    assert main(["import", str(junk), "--out", str(tmp_path)]) == 2
    assert "--format" in capsys.readouterr().err


def test_time_zone_default_is_local() -> None:
    result = parse_dmon(text("dmon_pucvmet_DT.log"))
    local = datetime(2025, 3, 1, 14, 2, 10).astimezone()
    assert result.rows[0]["t_ns"] == int(local.timestamp()) * 10**9
