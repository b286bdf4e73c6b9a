"""The drift-free sampling loop: `next += interval`, never `sleep(interval)`.

Sleeping a fixed interval after each sample drifts by the sample's own cost;
scheduling from a fixed origin does not. When a sample overruns (the machine
was busy), the missed ticks are skipped, counted, and the schedule stays on
its original grid. `timer` is aliased at module level so tests can drive the
loop with a fake clock.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loadkit.rundir.writer import JsonlWriter, append_event, now_ns
from loadkit.telemetry.base import Sampler

timer = time.monotonic


@dataclass
class LoopStats:
    samples: int = 0
    rows: int = 0
    skipped_ticks: int = 0
    sample_errors: int = 0


def run_loop(
    sampler: Sampler,
    writer: JsonlWriter,
    interval_s: float,
    *,
    should_stop: Callable[[float], bool],
    run_dir: Path | None = None,
    max_samples: int | None = None,
    clock_ns: Callable[[], int] = now_ns,
) -> LoopStats:
    """Sample every `interval_s` until `should_stop(timeout)` returns True.

    `should_stop(timeout)` waits up to `timeout` seconds and says whether to
    stop (e.g. `threading.Event().wait`); it is the loop's only sleep.
    Warnings the sampler collected (a field not supported, a source briefly
    unreachable) go to stderr and, with `run_dir`, to the events log as
    `note` rows; a sample that raised is an `error` row (first three only).
    """
    if interval_s <= 0:
        raise ValueError(f"interval must be positive, got {interval_s}")
    stats = LoopStats()
    next_tick = timer()
    while True:
        try:
            rows = sampler.sample(clock_ns())
        except Exception as exc:  # noqa: BLE001 - one bad sample must not end telemetry
            stats.sample_errors += 1
            rows = []
            if stats.sample_errors <= 3:
                message = f"sample failed: {type(exc).__name__}: {exc}"
                _report(sampler.source, message, run_dir, kind="error")
        for row in rows:
            writer.write(row)
        stats.rows += len(rows)
        stats.samples += 1
        for message in sampler.drain_warnings():
            _report(sampler.source, message, run_dir)
        if max_samples is not None and stats.samples >= max_samples:
            break
        next_tick += interval_s
        now = timer()
        if now > next_tick:
            missed = int((now - next_tick) // interval_s) + 1
            stats.skipped_ticks += missed
            next_tick += missed * interval_s
        if should_stop(max(0.0, next_tick - timer())):
            break
    writer.flush()
    return stats


def _report(source: str, message: str, run_dir: Path | None, kind: str = "note") -> None:
    print(f"WARNING: telemetry {source}: {message}", file=sys.stderr, flush=True)
    if run_dir is not None:
        try:
            append_event(run_dir, kind, "telemetry", source=source, message=message)
        except OSError:
            pass
