"""Machine metadata recorded in every run, so a result can be judged later (pyperf habit)."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Any

import psutil


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _governor() -> str | None:
    path = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cgroup_cpu_quota() -> float | None:
    """CPU cores allowed by the cgroup quota (v2 cpu.max or v1 cfs), None if unlimited."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period_us = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return None if quota_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def collect_host() -> dict[str, Any]:
    """Host facts for `manifest.environment.host`."""
    freq = None
    try:
        f = psutil.cpu_freq()
        freq = round(f.max or f.current) if f else None
    except (OSError, NotImplementedError, AttributeError):
        pass
    return {
        "hostname": socket.gethostname(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "cpu_model": _cpu_model(),
        "cores_logical": psutil.cpu_count(logical=True),
        "cores_physical": psutil.cpu_count(logical=False),
        "cpu_affinity": sorted(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else None,
        "cpu_max_mhz": freq,
        "governor": _governor(),
        "cgroup_cpu_quota_cores": _cgroup_cpu_quota(),
        "memory_bytes": psutil.virtual_memory().total,
    }


def run_environment() -> dict[str, Any]:
    """`manifest.environment` of a run, however it was started; odd hosts never fail a run."""
    try:
        return {"host": collect_host()}
    except Exception:  # noqa: BLE001 - metadata is best effort
        return {"host": {}}
