"""The run directory's disk: a warning before a run it may not hold, and a clean stop when it fills.

A 24-hour soak that fills its disk at hour 20 keeps its 20 hours: the
orchestrator watches the free space with every poll and stops the load when it
is gone, and a small reserve file, made at the start and deleted then, leaves
room to mark the run `aborted` with the reason (the manifest, one event).

The size a run needs comes from the soak benchmark (docs/benchmarks.md, "the
24-hour soak"): the steepest part of a run, its first 10 minutes at 300 req/s
with every request sampled, grew the run directory 136 MiB per hour per Locust
process; later hours are smaller (the reservoir shrinks, closed hours are
compressed), so the estimate errs on the safe side.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

MIB = 1024 * 1024
RUN_DIR_BYTES_PER_HOUR = 136 * MIB  # per Locust process writing records (docs/benchmarks.md)
LOW_WATER_BYTES = 16 * 1024  # free space below this: the disk is full
RESERVE_FILE = ".loadkit-reserve"
RESERVE_MIN_BYTES = 64 * 1024
RESERVE_MAX_BYTES = 1 * MIB


def needed_bytes(duration_s: float, processes: int = 1) -> int:
    """What a run of `duration_s` may write (an upper estimate, see the module docstring)."""
    return int(RUN_DIR_BYTES_PER_HOUR * max(1, processes) * max(0.0, duration_s) / 3600.0)


def free_bytes(path: str | os.PathLike[str]) -> int:
    return int(shutil.disk_usage(path).free)


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def space_warning(out_dir: str | os.PathLike[str], duration_s: float, processes: int) -> str | None:
    """A one-line warning when the disk holding `out_dir` has less free space than the run needs."""
    need = needed_bytes(duration_s, processes)
    free = free_bytes(out_dir)
    if free >= need:
        return None
    return (
        f"{human(free)} free on the disk holding {out_dir}; a {duration_s:.0f} s run may write "
        f"about {human(need)} ({human(RUN_DIR_BYTES_PER_HOUR)} per hour per Locust process, "
        "docs/benchmarks.md). If the disk fills, the load stops and what was written is kept."
    )


@dataclass
class DiskGuard:
    """Watches the free space of a run directory's disk and holds a reserve for the last words."""

    run_dir: Path
    reserve_bytes: int = 0

    @property
    def reserve_path(self) -> Path:
        return self.run_dir / RESERVE_FILE

    def start(self) -> None:
        """Set aside a reserve (1/50 of the disk, 64 KiB..1 MiB); nothing when there is no room."""
        total = shutil.disk_usage(self.run_dir).total
        size = int(min(RESERVE_MAX_BYTES, max(RESERVE_MIN_BYTES, total // 50)))
        try:
            with open(self.reserve_path, "wb") as f:
                f.write(b"\0" * size)
                f.flush()
                os.fsync(f.fileno())
            self.reserve_bytes = size
        except OSError:
            self.release()

    def full(self) -> bool:
        try:
            return free_bytes(self.run_dir) < LOW_WATER_BYTES
        except OSError:  # the directory is gone: nothing more can be written either
            return True

    def release(self) -> None:
        """Give the reserve back (before the run's last writes)."""
        try:
            self.reserve_path.unlink(missing_ok=True)
        except OSError:
            pass
        self.reserve_bytes = 0


def last_written(run_dir: Path) -> Path | None:
    """The data file written last (where the disk ran out), relative to the run directory."""
    newest: tuple[float, Path] | None = None
    for sub in ("latency", "load", "requests", "telemetry"):
        folder = run_dir / sub
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            try:
                mtime = path.stat().st_mtime
            except OSError:
                continue
            if path.is_file() and (newest is None or mtime > newest[0]):
                newest = (mtime, path)
    return newest[1].relative_to(run_dir) if newest else None


def recorded_bytes(run_dir: Path) -> int:
    """Bytes kept in the run directory (the reserve left out)."""
    total = 0
    for root, _, files in os.walk(run_dir):
        for name in files:
            if name == RESERVE_FILE:
                continue
            try:
                total += (Path(root) / name).stat().st_size
            except OSError:
                pass
    return total
