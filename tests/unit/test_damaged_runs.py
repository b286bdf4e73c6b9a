"""Damaged run directories are analyzed with a note naming what was skipped, never a traceback.

The reader-level cases (torn lines, a cut compressed segment) are in test_rundir.py and
test_rundir_segments.py; here the whole `loadkit analyze` on a damaged synthetic run.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from loadkit.cli import main
from loadkit.errors import EXIT_RUN_FORMAT
from loadkit.testing.synthetic import RunSpec, write_run


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    return write_run(RunSpec(duration_s=30, rate_rps=150), tmp_path)


def _analyze(
    run_dir: Path, capsys: pytest.CaptureFixture[str], *options: str
) -> tuple[int, list[str], str]:
    rc = main(["analyze", str(run_dir), *options])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    notes = [line for line in captured.out.splitlines() if line.startswith("note: ")]
    return rc, notes, captured.err


def test_a_truncated_compressed_segment_keeps_its_whole_lines(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    live = run_dir / "requests" / "local.jsonl"
    lines = live.read_text().splitlines(keepends=True)
    data = gzip.compress("".join(lines).encode())
    (run_dir / "requests" / "local.seg0001.jsonl.gz").write_bytes(data[: len(data) // 2])
    live.unlink()
    rc, notes, _ = _analyze(run_dir, capsys)
    assert rc == 0
    note = next(n for n in notes if "requests/local.seg0001.jsonl.gz" in n)
    kept = int(note.split("unreadable after line ")[1].split(" ")[0])
    assert 0 < kept < len(lines)  # what decompressed before the cut is kept
    assert "; the rest of it is skipped" in note
    assert (run_dir / "analysis.json").exists()


def test_a_half_written_last_line_is_skipped_and_named(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with open(run_dir / "load" / "local.jsonl", "a") as f:
        f.write('{"t_ns": 17644')
    with open(run_dir / "latency" / "local.hlog", "a") as f:
        f.write("Tag=corrected:infer,2.0")
    rc, notes, _ = _analyze(run_dir, capsys)
    assert rc == 0
    # both files named in the summary's notes (packed into its first lines)
    assert any("load/local.jsonl:" in n and "torn last line" in n for n in notes)
    assert any("latency/local.hlog:" in n for n in notes)
    analysis = json.loads((run_dir / "analysis.json").read_text())
    assert analysis["overall"]["completed"] > 30 * 100


def test_a_missing_telemetry_file_is_named(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (run_dir / "telemetry" / "gpu.jsonl").unlink()
    rc, notes, _ = _analyze(run_dir, capsys)
    assert rc == 0
    # the summary's first note says it (a damaged run's warnings come first) ...
    assert notes[1].startswith("note: telemetry/gpu.jsonl is listed in the manifest's sources")
    # ... and --verbose lists every note and every cause not assessed, with its reason
    rc, notes, _ = _analyze(run_dir, capsys, "--verbose")
    assert rc == 0
    assert (
        "note: telemetry/gpu.jsonl is listed in the manifest's sources but missing: the causes "
        "that need gpu telemetry are not assessable"
    ) in notes
    assert "note: gpu_clock_thermal: not assessable: no gpu data" in notes


def test_a_missing_load_folder_still_analyzes(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for path in (run_dir / "load").iterdir():
        path.unlink()
    rc, notes, _ = _analyze(run_dir, capsys)
    assert rc == 0
    assert any("no load counters" in n for n in notes)


def test_a_damaged_manifest_is_one_line_and_exit_4(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = run_dir / "manifest.json"
    manifest.write_text(manifest.read_text()[:100])
    assert main(["analyze", str(run_dir)]) == EXIT_RUN_FORMAT
    err = capsys.readouterr().err
    assert err.startswith(f"ERROR: {manifest} is not valid JSON")
    assert "Traceback" not in err
