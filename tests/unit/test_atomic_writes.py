"""`loadkit analyze` and `loadkit report` write whole files or nothing (loadkit/rundir/atomic.py)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from loadkit.cli import main
from loadkit.errors import EXIT_INTERRUPTED, EXIT_USAGE
from loadkit.rundir import atomic
from loadkit.testing.synthetic import RunSpec, write_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_run(RunSpec(duration_s=20, rate_rps=100), tmp_path_factory.mktemp("runs"))


def _fail_at_fsync(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    """The data is in the temporary file, then the write fails (disk full, Ctrl-C)."""

    def fsync(fd: int) -> None:
        raise exc

    monkeypatch.setattr(atomic.os, "fsync", fsync)


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_write_atomic_replaces_whole_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    target.write_text("old")
    atomic.write_atomic(target, "new")
    assert target.read_text() == "new" and not _leftovers(tmp_path)


@pytest.mark.parametrize(
    "exc", [OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), KeyboardInterrupt()]
)
def test_a_failed_write_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc: BaseException
) -> None:
    target = tmp_path / "a.json"
    target.write_text("old")
    _fail_at_fsync(monkeypatch, exc)
    with pytest.raises(type(exc)):
        atomic.write_atomic(target, "new" * 1000)
    assert target.read_text() == "old" and not _leftovers(tmp_path)


def test_analyze_on_a_full_disk_is_one_line_and_keeps_the_previous_analysis(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", str(run_dir)]) == 0
    before = (run_dir / "analysis.json").read_bytes()
    capsys.readouterr()
    _fail_at_fsync(monkeypatch, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    assert main(["analyze", str(run_dir)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.splitlines()[0] == (
        f"ERROR: cannot write {run_dir / 'analysis.json'} (No space left on device); "
        "the previous one, if any, is kept"
    )
    assert "Traceback" not in err
    assert (run_dir / "analysis.json").read_bytes() == before
    assert not _leftovers(run_dir)


def test_analyze_interrupted_while_writing_keeps_the_previous_analysis(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", str(run_dir)]) == 0
    before = (run_dir / "analysis.json").read_bytes()
    _fail_at_fsync(monkeypatch, KeyboardInterrupt())
    assert main(["analyze", str(run_dir)]) == EXIT_INTERRUPTED
    assert "Traceback" not in capsys.readouterr().err
    assert (run_dir / "analysis.json").read_bytes() == before
    assert not _leftovers(run_dir)


def test_report_into_an_unwritable_place_is_one_line(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # analyzed first: otherwise the report says "analyzing ..." before its error, and
    # whether an earlier test of this module analyzed the shared run decided the outcome
    assert main(["analyze", str(run_dir)]) == 0
    capsys.readouterr()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["report", str(run_dir), "-o", str(blocker / "report.html")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"ERROR: cannot write {blocker / 'report.html'} (")
    assert "HINT: free some space, or pass a writable path with -o FILE" in err
    assert "Traceback" not in err


def test_report_on_a_full_disk_keeps_the_previous_report(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(run_dir), "--format", "md"]) == 0
    before = (run_dir / "report.md").read_bytes()
    _fail_at_fsync(monkeypatch, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    assert main(["report", str(run_dir), "--format", "md"]) == EXIT_USAGE
    assert "No space left on device" in capsys.readouterr().err
    assert (run_dir / "report.md").read_bytes() == before
    assert not _leftovers(run_dir)
