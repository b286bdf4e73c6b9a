"""The run directory's disk (loadkit/load/diskspace.py) and the writers that stop on a write error."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from loadkit.load import diskspace
from loadkit.load.generator.recorder import EXIT_WRITE_FAILED, FileSink


def test_needed_bytes_follow_the_soak_benchmark() -> None:
    assert diskspace.needed_bytes(3600) == 136 * diskspace.MIB
    assert diskspace.needed_bytes(1800, processes=2) == 136 * diskspace.MIB
    assert diskspace.needed_bytes(0) == 0


def test_warns_only_when_the_disk_is_smaller_than_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(diskspace, "free_bytes", lambda _: 10 * diskspace.MIB)
    assert diskspace.space_warning(tmp_path, 60, 1) is None  # 2.3 MiB needed
    warning = diskspace.space_warning(tmp_path, 3600, 1)
    assert warning is not None
    assert warning.startswith(f"10.0 MiB free on the disk holding {tmp_path}; a 3600 s run")
    assert "about 136.0 MiB" in warning


def test_the_guard_holds_a_reserve_and_sees_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard = diskspace.DiskGuard(tmp_path)
    guard.start()
    reserve = tmp_path / diskspace.RESERVE_FILE
    assert reserve.stat().st_size == guard.reserve_bytes >= diskspace.RESERVE_MIN_BYTES
    assert not guard.full()
    monkeypatch.setattr(diskspace, "free_bytes", lambda _: 4096)
    assert guard.full()
    guard.release()
    assert not reserve.exists() and guard.reserve_bytes == 0


def test_what_was_written_and_where_it_stopped(tmp_path: Path) -> None:
    (tmp_path / "load").mkdir()
    (tmp_path / "requests").mkdir()
    (tmp_path / "load" / "local.jsonl").write_text("x" * 100)
    newest = tmp_path / "requests" / "local.jsonl"
    newest.write_text("y" * 50)
    os.utime(tmp_path / "load" / "local.jsonl", (1, 1))
    (tmp_path / diskspace.RESERVE_FILE).write_bytes(b"\0" * 1000)
    assert diskspace.last_written(tmp_path) == Path("requests/local.jsonl")
    assert diskspace.recorded_bytes(tmp_path) == 150


def test_a_file_sink_raises_unless_told_to_stop_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sink = FileSink(tmp_path, "local")

    def full(*_a: object, **_k: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "load/local.jsonl"))

    monkeypatch.setattr(sink._load, "write", full)
    row = {"t_ns": 1}
    with pytest.raises(OSError):
        sink.load(row)  # type: ignore[arg-type]
    exits: list[int] = []

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(FileSink, "exit_on_write_error", True)
    monkeypatch.setattr(os, "_exit", fake_exit)
    with pytest.raises(SystemExit):
        sink.load(row)  # type: ignore[arg-type]
    assert exits == [EXIT_WRITE_FAILED]
    assert capsys.readouterr().err == (
        f"ERROR: cannot write {tmp_path / 'load/local.jsonl'} (No space left on device); stopping\n"
    )
