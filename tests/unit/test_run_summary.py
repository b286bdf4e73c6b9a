"""`loadkit run`'s closing lines: keys in the percentile vocabulary, spoken as people read them."""

from __future__ import annotations

from pathlib import Path

from loadkit.load.summary import summarize_run
from loadkit.testing.synthetic import RunSpec, write_run


def test_summary_keys_are_the_vocabularys_and_its_text_says_p99_9(tmp_path: Path) -> None:
    run_dir = write_run(RunSpec(duration_s=10, rate_rps=50), tmp_path)
    summary = summarize_run(run_dir)
    # the same key live.py, the Prometheus endpoint and analysis.json use (was "p99.9")
    assert list(summary.corrected_ms) == ["p50", "p99", "p999", "max"]
    assert list(summary.service_ms) == ["p50", "p99", "p999", "max"]
    corrected = next(line for line in summary.text().splitlines() if "corrected" in line)
    assert " p99.9 " in corrected and "p999" not in corrected
