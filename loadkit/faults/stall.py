"""Process stalls: SIGSTOP a process for M s every N s, then SIGCONT it.

This reproduces what a GC pause, a swap storm or a container freeze looks
like from outside: the server takes no requests and finishes none, then
catches up at once. By default only the target PID is stopped (for the
embedded Triton, the server that owns the sockets); `include_group=True`
stops its whole process group too (Triton's Python backend stubs).

A stopped process must never be left behind: every exit path (stop(), the
context manager, the schedule thread failing, interpreter exit) sends SIGCONT.
Only a SIGKILL of the injecting process itself can skip that.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from loadkit.faults.schedule import Clock, FaultSchedule, FaultUnavailable, ScheduledFault


class ProcessStall(ScheduledFault):
    """Pause `pid` (and optionally its process group) during each window."""

    name = "stall"

    def __init__(
        self,
        pid: int,
        schedule: FaultSchedule,
        *,
        include_group: bool = False,
        run_dir: str | Path | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(schedule, run_dir=run_dir, clock=clock)
        self.pid = pid
        self.include_group = include_group
        self._pgid: int | None = None

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "pid": self.pid, "include_group": self.include_group}

    def _prepare(self) -> None:
        try:
            os.kill(self.pid, 0)
            self._pgid = os.getpgid(self.pid) if self.include_group else None
        except ProcessLookupError:
            raise FaultUnavailable(f"cannot stall PID {self.pid}: no such process") from None
        except PermissionError:
            raise FaultUnavailable(
                f"cannot stall PID {self.pid}: not permitted to signal it",
                hint="run as the process's owner or root",
            ) from None
        if self._pgid is not None and self._pgid == os.getpgrp():
            raise FaultUnavailable(
                f"PID {self.pid} shares our process group; stopping the group would stop us",
                hint="start the target in its own session (start_new_session=True)",
            )

    def _signal(self, sig: signal.Signals) -> None:
        if self._pgid is not None:
            os.killpg(self._pgid, sig)
        else:
            os.kill(self.pid, sig)

    def _begin(self) -> dict[str, Any]:
        self._signal(signal.SIGSTOP)
        return {"pid": self.pid, "process_group": self._pgid}

    def _end(self) -> None:
        try:
            self._signal(signal.SIGCONT)
        except ProcessLookupError:
            pass  # it exited (killed while stopped): nothing left to resume

    def _cleanup(self) -> None:
        # Belt and braces: whatever happened, the target is not left stopped.
        self._end()
