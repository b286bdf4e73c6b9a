"""The k6 importer (`k6 run --out json=FILE`), added through the importer registry alone:
detection, parsing (torn line, failed requests, time zones, nanoseconds), and
`loadkit import` then `loadkit analyze` on the imported run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadkit.analysis.model import Analysis
from loadkit.cli import main
from loadkit.errors import UsageError
from loadkit.rundir import load_run
from loadkit.telemetry import importers
from loadkit.telemetry.importers.k6 import parse_k6_json, time_ns

DATA = Path(__file__).resolve().parents[2] / "data" / "import"
K6 = DATA / "k6_results.json"
T0 = 1740837730 * 10**9  # 2025-03-01T14:02:10Z


def test_detected_by_the_registry_before_prom_range() -> None:
    assert importers.detect_format(K6.read_text()) == "k6"
    assert importers.detect_format((DATA / "prom_query_range.json").read_text()) == "prom-range"
    assert "k6" in importers.FORMATS and importers.get("k6").name == "k6"


def test_time_keeps_nanoseconds_and_offsets() -> None:
    assert time_ns("2025-03-01T14:02:10.012345678Z") == T0 + 12_345_678
    assert time_ns("2025-03-01T16:02:10.25+02:00") == T0 + 250_000_000
    assert time_ns("2025-03-01T14:02:10Z") == T0
    assert time_ns("yesterday") is None


def test_one_row_per_request_duration() -> None:
    result = parse_k6_json(K6.read_text())
    assert result.source == "k6_requests" and result.format == "k6"
    assert result.skipped_lines == 1  # the torn last line
    assert len(result.rows) == 5  # http_reqs, http_req_failed and vus points are not rows
    assert [r["t_ns"] for r in result.rows] == sorted(r["t_ns"] for r in result.rows)
    first = next(r for r in result.rows if r["latency_ms"] == 12.345678)
    assert first["done_ns"] == T0 + 12_345_678
    assert first["sent_ns"] == first["t_ns"] == T0 + 12_345_678 - 12_345_678
    assert first["name"] == "infer" and first["method"] == "POST" and first["status"] == 200
    assert first["ok"] is True and first["error_kind"] is None and first["imported_from"] == "k6"
    failed = {r["error_kind"] for r in result.rows if not r["ok"]}
    assert failed == {"http_503", "k6_1050"}
    unnamed = next(r for r in result.rows if r["method"] == "GET")
    assert unnamed["name"] == "http://127.0.0.1:8000/v2/health/ready"  # k6 names it by URL
    assert any("http_reqs 5" in note for note in result.notes)


def test_not_k6() -> None:
    assert not importers.get("k6").detect('{"status":"success","data":{}}')
    with pytest.raises(UsageError):
        parse_k6_json('{"status":"success"}\n')


def test_import_then_analyze(tmp_path: Path) -> None:
    assert main(["import", str(K6), "--out", str(tmp_path), "--run-id", "k6"]) == 0
    run_dir = tmp_path / "k6"
    run = load_run(run_dir)
    assert run.manifest["kind"] == "import" and run.manifest["status"] == "complete"
    [source] = run.manifest["sources"]
    assert source["file"] == "telemetry/k6_requests.jsonl"
    assert source["imported_from"]["format"] == "k6"
    assert run.manifest["start_ns"] == min(r["t_ns"] for r in parse_k6_json(K6.read_text()).rows)
    rows = (run_dir / "telemetry" / "k6_requests.jsonl").read_text().splitlines()
    assert len(rows) == 5 and json.loads(rows[0])["imported_from"] == "k6"
    assert main(["analyze", str(run_dir)]) == 0
    assert Analysis.load(run_dir / "analysis.json") is not None
