"""The report-format registry: `loadkit report` reads it and nothing else, so a format
added to it (one reporter module, one entry) is a `--format` choice with its own file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from analysis_builder import make_analysis, make_run

from loadkit.cli import main
from loadkit.report import formats


def test_each_entry_names_its_file_by_its_reporters_extension() -> None:
    assert formats.FORMATS == ("html", "md", "json")
    names = {f.name: f.file_name() for f in formats.REGISTRY}
    assert names == {"html": "report.html", "md": "report.md", "json": "report.json"}
    for fmt in formats.REGISTRY:
        assert callable(fmt.load().render_report) and fmt.directory_renderer("sweep") is not None


def test_compare_writes_the_formats_whose_entry_has_a_comparison() -> None:
    import argparse

    from loadkit.commands import compare

    assert formats.COMPARE_FORMATS == ("html", "md")
    for name in formats.COMPARE_FORMATS:
        reporter = formats.get(name).compare_reporter()
        assert reporter is not None and reporter.output_file_extension == name
    assert formats.get("json").compare_reporter() is None
    parser = argparse.ArgumentParser()
    compare.prepare_parser(parser)
    assert parser.parse_args(["A", "B", "--format", "md"]).format == "md"
    with pytest.raises(SystemExit):
        parser.parse_args(["A", "B", "--format", "json"])


def test_the_registry_loads_no_reporter_until_used() -> None:
    code = (
        "import sys, loadkit.commands.report; "
        "print(any(m.split('.')[0] in ('matplotlib', 'jinja2') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


REPORTER = """
class TextReporter:
    output_file_extension = "txt"

    def render_report(self, run, analysis, html_report):
        return f"{run.manifest['run_id']}: {len(analysis.episodes)} episodes\\n"
"""


def test_a_new_format_is_one_module_and_one_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "textreport.py").write_text(REPORTER)
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = formats.ReportFormat("txt", "textreport:TextReporter")
    monkeypatch.setattr(formats, "BY_NAME", {**formats.BY_NAME, "txt": entry})
    monkeypatch.setattr(formats, "FORMATS", (*formats.FORMATS, "txt"))
    run_dir = tmp_path / "20251129-205000-burst"
    make_run(run_dir)
    make_analysis(n=120).save(run_dir / "analysis.json")
    assert main(["report", str(run_dir), "--format", "txt"]) == 0
    assert (run_dir / "report.txt").read_text().startswith("20251129-205000-burst: ")
    assert "TXT report" in capsys.readouterr().out


def test_a_sweep_in_json_is_its_sweep_json_on_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sweep.json").write_text('{"points": []}\n')
    assert main(["report", str(tmp_path), "--format", "json"]) == 0
    assert capsys.readouterr().out == '{"points": []}\n'
