"""Container CPU quota throttling: a real CFS quota on the target's cgroup.

`start()` creates a child CPU cgroup `loadkit-<our pid>-<target pid>` next
to the target (under the target's own cpu cgroup on v1; under the v2 root,
the only place a v2 cpu controller can be enabled beside processes), moves
the target and its descendant processes in (whole thread groups, via
`cgroup.procs`), and leaves it unlimited. Each window sets the quota (e.g.
0.3 core: `cpu.cfs_quota_us` 30000 of a 100000 µs period on v1, `cpu.max`
"30000 100000" on v2) and removes it (`-1` / `max`) at the end. `stop()` moves
every process back to the cgroup it came from and removes the child cgroup.

Where the kernel does not let us (not root, read-only cgroupfs, no cpu
controller, v2 subtree rules), `start()` raises `FaultUnavailable` with the
reason, which callers turn into a skip with a note.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from loadkit.faults.schedule import Clock, FaultSchedule, FaultUnavailable, ScheduledFault

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_ROOT = Path("/proc")
V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")
DEFAULT_PERIOD_US = 100_000
RMDIR_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class CpuCgroupLayout:
    """Where the target's cpu cgroup lives: version, mount point, and its path in it."""

    version: int  # 1 or 2
    mount: Path  # e.g. /sys/fs/cgroup/cpu (v1) or /sys/fs/cgroup (v2)
    relative: str  # the target's cgroup below the mount, "/" for the root

    @property
    def path(self) -> Path:
        return self.mount / self.relative.lstrip("/")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def locate_cpu_cgroup(
    pid: int, cgroup_root: Path = CGROUP_ROOT, proc_root: Path = PROC_ROOT
) -> CpuCgroupLayout:
    """The cpu cgroup of `pid`: a v1 `cpu` controller if mounted, else v2 with `cpu`.

    Raises FaultUnavailable when neither is usable.
    """
    text = _read(proc_root / str(pid) / "cgroup")
    if text is None:
        raise FaultUnavailable(f"cgroup quota: cannot read /proc/{pid}/cgroup (no such process?)")
    v2_relative: str | None = None
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, relative = parts
        if controllers == "":
            v2_relative = relative
        elif "cpu" in controllers.split(","):
            for name in V1_CPU_MOUNTS:
                mount = cgroup_root / name
                if (mount / "cpu.cfs_quota_us").exists():
                    return CpuCgroupLayout(1, mount, relative)
    if v2_relative is not None:
        for mount in (cgroup_root, cgroup_root / "unified"):
            if "cpu" in (_read(mount / "cgroup.controllers") or "").split():
                return CpuCgroupLayout(2, mount, v2_relative)
    raise FaultUnavailable(
        "cgroup quota is not possible here: no cgroup v1 `cpu` controller "
        f"(cpu.cfs_quota_us under {cgroup_root}) and no cgroup v2 with the `cpu` controller",
        hint="run on a host (or privileged container) with a writable cpu cgroup",
    )


def quota_value(version: int, cores: float | None, period_us: int) -> str:
    """What to write for a quota of `cores` CPUs (None: unlimited)."""
    if cores is None:
        return "-1" if version == 1 else f"max {period_us}"
    quota = max(1000, int(round(cores * period_us)))  # the kernel's minimum is 1 ms
    return str(quota) if version == 1 else f"{quota} {period_us}"


def _process_tree(pid: int) -> list[int]:
    try:
        root = psutil.Process(pid)
        return [pid, *(c.pid for c in root.children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def _not_permitted(what: str, exc: OSError) -> FaultUnavailable:
    return FaultUnavailable(
        f"cgroup quota is not permitted here: {what}: {exc.strerror or exc}",
        hint="needs root and a writable cpu cgroup (cgroup v1 cpu controller or v2 with +cpu)",
    )


class CgroupQuota(ScheduledFault):
    """Throttle `pid` (and its descendants) to `quota_cores` CPUs during each window."""

    name = "cgroup-quota"

    def __init__(
        self,
        pid: int,
        schedule: FaultSchedule,
        *,
        quota_cores: float = 0.3,
        period_us: int = DEFAULT_PERIOD_US,
        include_children: bool = True,
        run_dir: str | Path | None = None,
        clock: Clock | None = None,
        cgroup_root: Path = CGROUP_ROOT,
        proc_root: Path = PROC_ROOT,
    ) -> None:
        super().__init__(schedule, run_dir=run_dir, clock=clock)
        if quota_cores <= 0:
            raise FaultUnavailable(f"cgroup quota must be > 0 cores, got {quota_cores}")
        self.pid = pid
        self.quota_cores = quota_cores
        self.period_us = period_us
        self.include_children = include_children
        self.cgroup_root = cgroup_root
        self.proc_root = proc_root
        self.layout: CpuCgroupLayout | None = None
        self.child: Path | None = None
        self._origins: dict[int, Path] = {}  # pid -> the cgroup it came from

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "pid": self.pid,
            "quota_cores": self.quota_cores,
            "period_us": self.period_us,
            "include_children": self.include_children,
        }

    # --------------------------------------------------------------- control files
    def _quota_file(self) -> str:
        assert self.layout is not None
        return "cpu.cfs_quota_us" if self.layout.version == 1 else "cpu.max"

    def _set_quota(self, cores: float | None) -> None:
        assert self.layout is not None and self.child is not None
        value = quota_value(self.layout.version, cores, self.period_us)
        (self.child / self._quota_file()).write_text(value, encoding="utf-8")

    def cpu_stat(self) -> dict[str, int]:
        """The child cgroup's cpu.stat counters (nr_periods, nr_throttled, ...)."""
        if self.child is None:
            return {}
        out: dict[str, int] = {}
        for line in (_read(self.child / "cpu.stat") or "").splitlines():
            key, _, value = line.partition(" ")
            if value.strip().lstrip("-").isdigit():
                out[key] = int(value)
        return out

    @staticmethod
    def _move(pid: int, cgroup: Path) -> bool:
        """Move `pid`'s thread group into `cgroup`; False if it no longer exists."""
        try:
            (cgroup / "cgroup.procs").write_text(str(pid), encoding="utf-8")
            return True
        except ProcessLookupError:
            return False
        except OSError as exc:
            if exc.errno == errno.ESRCH:
                return False
            raise

    # ------------------------------------------------------------------ lifecycle
    def _prepare(self) -> None:
        self.layout = locate_cpu_cgroup(self.pid, self.cgroup_root, self.proc_root)
        parent = self.layout.path if self.layout.version == 1 else self.layout.mount
        child = parent / f"loadkit-{os.getpid()}-{self.pid}"
        try:
            if self.layout.version == 2:
                subtree = parent / "cgroup.subtree_control"
                if "cpu" not in (_read(subtree) or "").split():
                    subtree.write_text("+cpu", encoding="utf-8")
            child.mkdir(exist_ok=True)
        except OSError as exc:
            raise _not_permitted(f"cannot create {child}", exc) from None
        self.child = child
        try:
            self._set_quota(None)
            self._set_period()
            pids = _process_tree(self.pid) if self.include_children else [self.pid]
            if not pids:
                raise FaultUnavailable(f"cgroup quota: PID {self.pid} does not exist")
            for pid in pids:
                origin = self._origin_of(pid)
                if self._move(pid, child):
                    self._origins[pid] = origin
        except OSError as exc:
            self._cleanup()
            raise _not_permitted(f"cannot move PID {self.pid} into {child}", exc) from None
        except BaseException:
            self._cleanup()
            raise

    def _set_period(self) -> None:
        """v1: use our period so the quota means `quota_cores` (v2 writes both at once)."""
        assert self.layout is not None and self.child is not None
        if self.layout.version == 1:
            (self.child / "cpu.cfs_period_us").write_text(str(self.period_us), encoding="utf-8")

    def _origin_of(self, pid: int) -> Path:
        layout = locate_cpu_cgroup(pid, self.cgroup_root, self.proc_root)
        return layout.path

    def _begin(self) -> dict[str, Any]:
        self._set_quota(self.quota_cores)
        return {
            "quota_cores": self.quota_cores,
            "period_us": self.period_us,
            "cgroup": str(self.child),
            "pids": sorted(self._origins),
        }

    def _end(self) -> None:
        if self.child is not None:
            self._set_quota(None)

    def _cleanup(self) -> None:
        child, self.child = self.child, None
        if child is None:
            return
        try:
            (child / self._quota_file()).write_text(
                quota_value(self.layout.version if self.layout else 1, None, self.period_us),
                encoding="utf-8",
            )
        except OSError:
            pass
        # Back where each came from; processes forked meanwhile go to the first origin.
        fallback = next(iter(self._origins.values()), child.parent)
        for pid, origin in self._origins.items():
            self._move_back(pid, origin)
        for pid in self._members(child):
            self._move_back(pid, fallback)
        self._origins.clear()
        deadline = time.monotonic() + RMDIR_TIMEOUT_S
        while True:
            try:
                child.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return  # left behind empty-ish; named after our PID, harmless
                for pid in self._members(child):
                    self._move_back(pid, fallback)
                time.sleep(0.05)

    def _move_back(self, pid: int, origin: Path) -> None:
        try:
            self._move(pid, origin)
        except OSError:
            pass

    @staticmethod
    def _members(cgroup: Path) -> list[int]:
        text = _read(cgroup / "cgroup.procs") or ""
        return [int(x) for x in text.split() if x.isdigit()]
