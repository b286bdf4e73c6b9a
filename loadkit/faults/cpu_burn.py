"""CPU saturation: real busy-loop processes, on for M s every N s.

Each window spawns `processes` burners (`python -c` with a tight loop; by
default one per logical core), waits until every one of them reports it is
running, logs the start, and at the end kills them by PID and reaps them.
The ground-truth start is therefore when all burners are actually burning.

Burners ask the kernel to SIGKILL them if their parent thread dies
(PR_SET_PDEATHSIG), so even a killed injector leaves no busy loop behind.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from loadkit.faults.schedule import Clock, FaultSchedule, FaultUnavailable, ScheduledFault

READY_TIMEOUT_S = 10.0

# argv[1]: our PID. Die with the parent; tell it we run; burn.
BURNER_CODE = """\
import ctypes, os, sys
try:
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
except Exception:
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(0)
sys.stdout.write("1")
sys.stdout.flush()
while True:
    pass
"""


class CpuBurn(ScheduledFault):
    """Saturate the host's CPU with `processes` busy loops during each window."""

    name = "cpu-burn"

    def __init__(
        self,
        schedule: FaultSchedule,
        *,
        processes: int | None = None,
        nice: int = 0,
        run_dir: str | Path | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(schedule, run_dir=run_dir, clock=clock)
        self.processes = processes if processes is not None else (os.cpu_count() or 1)
        if self.processes < 1:
            raise FaultUnavailable(f"cpu burn needs >= 1 process, got {self.processes}")
        self.nice = nice
        self._burners: list[subprocess.Popen[bytes]] = []

    @property
    def pids(self) -> list[int]:
        """PIDs of the burners running now (empty outside a window)."""
        return [p.pid for p in self._burners if p.poll() is None]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "processes": self.processes, "nice": self.nice}

    def _spawn(self) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-S", "-c", BURNER_CODE, str(os.getpid())]
        if self.nice:
            argv = ["nice", "-n", str(self.nice), *argv]
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )

    def _begin(self) -> dict[str, Any]:
        for _ in range(self.processes):
            self._burners.append(self._spawn())
        deadline = time.monotonic() + READY_TIMEOUT_S
        for proc in self._burners:
            assert proc.stdout is not None
            ready, _, _ = select.select(
                [proc.stdout], [], [], max(0.0, deadline - time.monotonic())
            )
            if not ready or proc.stdout.read(1) != b"1":
                raise RuntimeError(
                    f"cpu burner PID {proc.pid} did not start within {READY_TIMEOUT_S:.0f} s"
                )
        return {"processes": self.processes, "pids": self.pids}

    def _end(self) -> None:
        burners, self._burners = self._burners, []
        for proc in burners:
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in burners:
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
