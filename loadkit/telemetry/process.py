"""The body of one sampler process: build the sampler, open it, loop, close.

Started by `loadkit.telemetry.supervisor` as `python -m
loadkit.telemetry.process` (a fresh interpreter, so it never inherits gevent's
monkey-patching or event loop, and never re-imports the parent's `__main__`).
It reports to the parent once, as one JSON line on stdout: `ok` when the
source is open, `unavailable` with a message when it is missing (one warning
line; the run goes on without it). It stops on SIGTERM or when the parent
process disappears.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from loadkit.rundir.layout import TELEMETRY_DIR
from loadkit.rundir.segments import SEGMENT_S
from loadkit.rundir.writer import JsonlWriter, append_event
from loadkit.telemetry.base import SamplerSpec, SourceUnavailable
from loadkit.telemetry.sources import build_sampler

__all__ = ["EXIT_WRITE_FAILED", "SamplerSpec", "StopFlag", "build_sampler", "main", "sampler_main"]


# After our parent's death, the longest we take to flush and exit: then the kernel ends us.
ORPHAN_EXIT_S = 1.0


class StopFlag:
    """Set by SIGTERM (or the parent's death); the loop's only way to stop.

    The signal handler only sets a flag (safe at any point); the loop notices
    it after its current sleep, which is at most one interval. When the
    SIGTERM is our parent's death signal (we were reparented before it came),
    nobody is left to SIGKILL a straggler, so the handler also arms a timer
    whose SIGALRM, at its default action, ends the process ORPHAN_EXIT_S later
    whatever it is doing (a sample in flight, a segment compressing, the
    interpreter's exit). A loaded CI host once saw a sampler outlive its dead
    parent by over 2 s. What is flushed by then is kept; a closed segment being
    compressed stays as its plain file.
    """

    def __init__(self) -> None:
        self.stopping = False
        self._parent = os.getppid()

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stopping = True
        if os.getppid() != self._parent:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.setitimer(signal.ITIMER_REAL, ORPHAN_EXIT_S)

    def wait(self, timeout: float) -> bool:
        """Sleep up to `timeout`; True when it is time to stop."""
        if not self.stopping and timeout > 0:
            time.sleep(timeout)
        return self.stopping or os.getppid() != self._parent


def report_status(status: str, message: str | None = None) -> None:
    """The one line the parent reads on our stdout."""
    sys.stdout.write(json.dumps({"status": status, "message": message}) + "\n")
    sys.stdout.flush()


def sampler_main(spec: SamplerSpec, run_dir: str) -> int:
    """Body of a sampler process: open, report, loop until stopped, close."""
    from loadkit.telemetry.loop import run_loop

    stop = StopFlag()
    stop.install()
    logging.basicConfig(level=logging.ERROR)  # warnings are printed once by the loop
    sampler = build_sampler(spec)
    try:
        sampler.open()
    except SourceUnavailable as exc:
        message = exc.message + (f" ({exc.hint})" if exc.hint else "")
        print(f"WARNING: telemetry {spec.source}: {message}", file=sys.stderr, flush=True)
        append_event(run_dir, "error", "telemetry", source=spec.source, message=message)
        report_status("unavailable", message)
        return 0
    report_status("ok")
    writer = JsonlWriter(
        Path(run_dir) / TELEMETRY_DIR / f"{spec.source}.jsonl", segment_s=SEGMENT_S
    )
    try:
        try:
            run_loop(sampler, writer, spec.interval_s, should_stop=stop.wait, run_dir=Path(run_dir))
        finally:
            sampler.close()
            writer.close()
    except OSError:
        # The run directory cannot be written (a full disk): the orchestrator stops the
        # run and says so in one line; a traceback per sampler would say it six times.
        return EXIT_WRITE_FAILED
    return 0


# A sampler that cannot write its file exits with this status (EX_IOERR), quietly.
EXIT_WRITE_FAILED = 74


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadkit.telemetry.process")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--spec", required=True, help="SamplerSpec as JSON")
    args = parser.parse_args(argv)
    spec = SamplerSpec(**json.loads(args.spec))
    return sampler_main(spec, args.run_dir)


if __name__ == "__main__":
    sys.exit(main())
