"""Markdown (tickets, chat) and JSON (dashboards, pipelines) reports."""

from __future__ import annotations

import json
from pathlib import Path

from analysis_builder import HOSTILE, make_analysis, make_run

from loadkit.report import jsonreport, markdown
from loadkit.report.markdown import md_escape, md_url

# The documented, stable keys (docs/reports.md): only ever added to.
JSON_TOP_KEYS = {
    "report_schema", "generator", "run", "verdict", "headline", "numbers", "findings",
    "episodes", "periodicity", "recoveries", "alerts", "knee", "capacity", "html_report",
}  # fmt: skip
JSON_NUMBER_KEYS = {
    "duration_s", "offered_rps", "achieved_rps", "requests_offered", "requests_completed",
    "requests_ok", "errors", "error_pct", "dropped", "dropped_pct", "error_kinds", "error_messages",
    "p50_ms",
    "p90_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms", "service_p50_ms", "service_p99_ms",
    "service_p999_ms",
}  # fmt: skip


def test_markdown_has_verdict_numbers_findings_and_link(synthetic):
    run, analysis = synthetic
    text = markdown.render(run, analysis, html_url="file:///runs/x/report.html")
    assert text.startswith("## ❌ FAIL: Load test: burst on ranker\n")
    assert "**The run did not meet its SLO.** P99 78.5 ms exceeds 50 ms." in text
    assert "| P99 | ≤ 50.0 ms | 78.5 ms | fail |" in text
    assert "| 102 req/s | 102 req/s | 5.40 ms | 10.9 ms | 78.5 ms | 110 ms | 5 | 5 |" in text
    assert "1. **GPU thermal throttling** (strong)" in text
    assert "   - **Action:** Check GPU cooling and airflow" in text
    assert "[Full HTML report](file:///runs/x/report.html)" in text


def test_markdown_escapes_hostile_text(tmp_path: Path):
    run = make_run(tmp_path / "r", hostile=HOSTILE)
    text = markdown.render(
        run, make_analysis(n=60, hostile=HOSTILE), html_url="file:///a b)<x>.html"
    )
    # Only our own blockquote marker may be a raw ">"; nothing from outside is markup.
    body = "\n".join(ln[2:] if ln.startswith("> ") else ln for ln in text.splitlines())
    assert "<" not in body and ">" not in body
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in text
    assert "Errors by kind: &lt;/script&gt;&lt;img src=x onerror=alert(1)&gt; × 5" in text
    assert "(file:///a%20b%29%3Cx%3E.html)" in text


def test_md_escape_keeps_a_table_cell_and_a_line_intact():
    assert md_escape("a|b\nc") == "a\\|b c"
    assert md_escape("[x](javascript:y)") == "\\[x\\](javascript:y)"
    assert md_escape("*bold* _it_ `code`") == "\\*bold\\* \\_it\\_ \\`code\\`"
    assert md_url("file:///x/(y).html") == "file:///x/%28y%29.html"


def test_json_report_has_the_documented_keys_and_the_analysis_numbers(synthetic):
    run, analysis = synthetic
    doc = json.loads(jsonreport.render(run, analysis, html_path="/runs/x/report.html"))
    assert set(doc) == JSON_TOP_KEYS
    assert set(doc["numbers"]) == JSON_NUMBER_KEYS
    assert doc["report_schema"] == 1
    assert doc["verdict"]["passed"] is False
    assert doc["numbers"]["p99_ms"] == analysis.overall.corrected.p99_ms
    assert doc["numbers"]["achieved_rps"] == analysis.overall.throughput_rps
    assert doc["numbers"]["dropped"] == analysis.overall.dropped
    assert doc["run"]["scenario_params"] == {"rate": 100, "burst": 2.0, "label": "burst"}
    assert [f["cause"] for f in doc["findings"]] == ["gpu_clock_thermal"]
    assert doc["findings"][0]["evidence"][0] == {
        "name": "SM clock in episodes", "value": 1200.0, "unit": "MHz", "note": "",
    }  # fmt: skip
    assert len(doc["episodes"]) == len(analysis.episodes)
    assert doc["recoveries"][0]["recovery_s"] == 6.0
    assert doc["html_report"] == "/runs/x/report.html"


def test_json_and_markdown_are_deterministic(synthetic):
    run, analysis = synthetic
    assert jsonreport.render(run, analysis) == jsonreport.render(run, analysis)
    assert markdown.render(run, analysis) == markdown.render(run, analysis)
