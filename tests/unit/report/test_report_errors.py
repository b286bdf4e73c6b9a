"""An outage in the reports: its finding first, with the numbers that describe it (escaped)."""

from __future__ import annotations

from pathlib import Path

from loadkit.cli import main
from loadkit.testing.synthetic import ErrorWindow, RunSpec, write_run


def test_an_outage_leads_the_html_and_markdown_reports(tmp_path: Path, capsys) -> None:
    spec = RunSpec(duration_s=30, rate_rps=150, error_windows=(ErrorWindow(12, 40, "refused"),))
    run_dir = write_run(spec, tmp_path)
    assert main(["report", str(run_dir)]) == 0
    html = (run_dir / "report.html").read_text()
    assert "The target stopped answering at 12 s and did not come back" in html
    assert "share of the run" in html and "episodes explained" not in html
    assert main(["report", str(run_dir), "--format", "md", "-o", "-"]) == 0
    md = capsys.readouterr().out
    first = next(line for line in md.splitlines() if line.startswith("1. **"))
    assert first.startswith("1. **Target unreachable** (strong): The target stopped answering")
