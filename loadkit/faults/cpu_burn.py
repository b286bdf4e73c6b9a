"""CPU saturation: real busy-loop processes, on for M s every N s.

Each window spawns `processes` burners (`python -c` with a tight loop; by
default one per logical core), waits until every one of them reports it is
running, logs the start, and at the end kills them by PID and reaps them.
The ground-truth start is therefore when all burners are actually burning.

`nice` < 0 runs the burners at a higher priority than everything else (a
noisy neighbour the scheduler favours): on an otherwise idle host, busy loops
at the default priority barely delay a mostly sleeping server, because the
scheduler runs a waking task first and, with autogroups on (the Linux
default), shares CPU between sessions before processes: Triton and Locust
each run in a session of their own and keep their share. With `nice` != 0
each burner runs in a new session and sets the nice value of its process and
of its autogroup; with `own_session=False` (plain busy loops in the caller's
session, like a script started beside the server) only that of its process. Raising priority needs root (or CAP_SYS_NICE); without it
the fault is unavailable rather than silently weaker. Windows stay bounded:
the burners are killed at each window's end.

`cpus` pins the burners to those cores (a neighbour on some of them: with the
server's own cpuset on the same cores it competes with the server there, while
the machine's other cores stay free).

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadkit import lifeline
from loadkit.faults.schedule import Clock, FaultSchedule, FaultUnavailable, ScheduledFault

READY_TIMEOUT_S = 10.0

# argv[1]: our PID, argv[2]: nice, argv[3]: "idle" for SCHED_IDLE, argv[4]: the cores
# to run on ("-": any). Die with the parent; take the priority (for the burner's own
# autogroup too: it runs in a session of its own); pin; tell the parent we run; burn.
BURNER_CODE = """\
import ctypes, os, sys
try:
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
except Exception:
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(0)
nice = int(sys.argv[2])
if nice:
    # the autogroup's nice only in a session of our own: in our parent's session it
    # would renice every process of that session
    if os.getsid(0) == os.getpid() and os.path.exists("/proc/self/autogroup"):
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(nice))
    os.setpriority(os.PRIO_PROCESS, 0, nice)
if sys.argv[3] == "idle":
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
if sys.argv[4] != "-":
    os.sched_setaffinity(0, [int(c) for c in sys.argv[4].split(",")])
sys.stdout.write("1")
sys.stdout.flush()
while True:
    pass
"""


def _may_raise_priority() -> bool:
    """Whether this process may start children at a negative nice value."""
    if os.geteuid() == 0:
        return True
    try:  # CAP_SYS_NICE is bit 23 of the effective capability set
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> 23 & 1)
    except (OSError, ValueError):
        pass
    return False


class CpuBurn(ScheduledFault):
    """Saturate the host's CPU with `processes` busy loops during each window."""

    name = "cpu-burn"

    def __init__(
        self,
        schedule: FaultSchedule,
        *,
        processes: int | None = None,
        nice: int = 0,
        own_session: bool | None = None,
        sched_idle: bool = False,
        cpus: Sequence[int] | None = None,
        run_dir: str | Path | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(schedule, run_dir=run_dir, clock=clock)
        # Each burner in a session (an autogroup) of its own, like a co-located
        # job in its own container or login: by default only with a nice value.
        self.own_session = nice != 0 if own_session is None else own_session
        self.processes = processes if processes is not None else (os.cpu_count() or 1)
        if self.processes < 1:
            raise FaultUnavailable(f"cpu burn needs >= 1 process, got {self.processes}")
        if nice < 0 and not _may_raise_priority():
            raise FaultUnavailable(
                f"cpu burn at nice {nice} needs root or CAP_SYS_NICE",
                hint="run as root, or use nice >= 0",
            )
        self.nice = nice
        # SCHED_IDLE: the burners run only on CPU nothing else wants, and any waking
        # task preempts them at once (a nice value alone does not: at nice 19,
        # EEVDF still lets a burner finish its slice before a waking server runs).
        self.sched_idle = sched_idle
        self.cpus = sorted(set(cpus)) if cpus else None
        if self.cpus is not None and not set(self.cpus) <= os.sched_getaffinity(0):
            raise FaultUnavailable(
                f"cpu burn on cores {self.cpus}: this process may run only on "
                f"{sorted(os.sched_getaffinity(0))}"
            )
        self._burners: list[subprocess.Popen[bytes]] = []

    @property
    def pids(self) -> list[int]:
        """PIDs of the burners running now (empty outside a window)."""
        return [p.pid for p in self._burners if p.poll() is None]

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "processes": self.processes,
            "nice": self.nice,
            "own_session": self.own_session,
            "sched_idle": self.sched_idle,
            "cpus": self.cpus,
        }

    def _spawn(self) -> subprocess.Popen[bytes]:
        policy = "idle" if self.sched_idle else "normal"
        cpus = ",".join(map(str, self.cpus)) if self.cpus else "-"
        argv = [
            sys.executable, "-S", "-c", BURNER_CODE, str(os.getpid()), str(self.nice), policy, cpus
        ]  # fmt: skip
        # Forked on a process-long thread (lifeline), so the PDEATHSIG below
        # follows this process, not the schedule's thread.
        return lifeline.popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            # With a priority: a session (and so a scheduler autogroup) of its own.
            # Where autogroups are on, the kernel shares CPU between sessions
            # first, so a nice value inside ours would not reach Triton and
            # Locust, which run in sessions of their own.
            start_new_session=self.own_session,
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
