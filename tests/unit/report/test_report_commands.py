"""`loadkit report` and `loadkit compare` on run directories (no processes started)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from analysis_builder import make_analysis, make_run

import loadkit.analysis
from loadkit.cli import main
from loadkit.errors import EXIT_RUN_FORMAT


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    path = tmp_path / "20251129-205000-burst"
    make_run(path)
    make_analysis(n=120).save(path / "analysis.json")
    return path


def test_report_writes_html_into_the_run_and_prints_path_and_url(run_dir: Path, capsys):
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    report = run_dir / "report.html"
    assert report.exists() and "FAIL" in report.read_text(encoding="utf-8")
    assert out == [f"HTML report: {report}", report.resolve().as_uri()]


def test_report_markdown_to_stdout_links_the_html(run_dir: Path, capsys):
    main(["report", str(run_dir)])
    capsys.readouterr()
    assert main(["report", str(run_dir), "--format", "md", "-o", "-"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("## ❌ FAIL")
    assert f"[Full HTML report]({(run_dir / 'report.html').resolve().as_uri()})" in text


def test_report_json_to_a_file(run_dir: Path, tmp_path: Path, capsys):
    target = tmp_path / "out" / "summary.json"
    assert main(["report", str(run_dir), "--format", "json", "-o", str(target)]) == 0
    doc = json.loads(target.read_text(encoding="utf-8"))
    assert doc["run"]["run_id"] == "20251129-205000-burst" and doc["verdict"]["passed"] is False


def test_report_analyzes_a_run_without_analysis_json(tmp_path: Path, monkeypatch, capsys):
    path = tmp_path / "fresh"
    make_run(path)
    calls = []

    def fake_analyze(run):
        calls.append(run.path)
        return make_analysis(n=60, run_id="fresh")

    monkeypatch.setitem(vars(loadkit.analysis), "analyze_run", fake_analyze)
    assert main(["report", str(path)]) == 0
    assert calls == [path]
    assert (path / "analysis.json").exists() and (path / "report.html").exists()


def test_report_on_a_missing_directory_says_so(tmp_path: Path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == EXIT_RUN_FORMAT
    err = capsys.readouterr().err
    assert "ERROR:" in err and "does not exist" in err


def test_report_refuses_an_unknown_analysis_version(run_dir: Path, capsys):
    data = json.loads((run_dir / "analysis.json").read_text())
    data["schema_version"] = 99
    (run_dir / "analysis.json").write_text(json.dumps(data))
    assert main(["report", str(run_dir)]) == EXIT_RUN_FORMAT
    assert "schema_version 99" in capsys.readouterr().err


def test_compare_writes_html_beside_run_a(tmp_path: Path, capsys):
    for name, delay in (("a", 2000), ("b", 8000)):
        make_run(tmp_path / name, max_queue_delay_us=delay)
        make_analysis(n=60, run_id=name).save(tmp_path / name / "analysis.json")
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    page = (tmp_path / "compare-a-vs-b.html").read_text(encoding="utf-8")
    assert "max_queue_delay_microseconds" in page
    assert (
        main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "md", "-o", "-"])
        == 0
    )
    assert "### Numbers" in capsys.readouterr().out


def test_compare_needs_two_runs(tmp_path: Path, capsys):
    make_run(tmp_path / "a")
    assert main(["compare", str(tmp_path / "a")]) == 2
    assert "at least two runs" in capsys.readouterr().err


def test_report_end_to_end_on_a_synthetic_run(tmp_path: Path, capsys):
    """A recorded-format run (the analyzer's synthetic writer) through the real pipeline."""
    from loadkit.testing.synthetic import demo_spec, write_run

    path = write_run(demo_spec(), tmp_path, run_id="demo")
    assert main(["report", str(path)]) == 0
    analysis = json.loads((path / "analysis.json").read_text(encoding="utf-8"))
    page = (path / "report.html").read_text(encoding="utf-8")
    word = "PASS" if analysis["verdict"]["passed"] else "FAIL"
    assert f'id="verdict-badge">{"✓" if word == "PASS" else "✗"} {word}' in page
    for finding in analysis["findings"]:
        assert f'data-cause="{finding["cause"]}"' in page
    capsys.readouterr()
    assert main(["report", str(path), "--format", "json", "-o", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["numbers"]["p99_ms"] == analysis["overall"]["corrected"]["p99_ms"]
    assert doc["verdict"]["passed"] == analysis["verdict"]["passed"]
