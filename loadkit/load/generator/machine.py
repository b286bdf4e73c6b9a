"""A worker's own machine, sampled once per interval and sent with its records.

With `--master` the load runs on several hosts, and one of them short of CPU makes
part of the latency the generator's own. The master's samplers see only the master's
machine, so each worker samples its own (the same `HostSampler` the master's host
series uses: its cores, and the cgroup of the worker's own process: its pod's limit)
and ships the row with the interval's records (`channel.ChannelSink`). The master
writes one series per worker machine, `host-worker-<host>` (place `client`), which
`load_machine_saturated` reads beside this machine's (docs/telemetry.md).
"""

from __future__ import annotations

import re
import socket
from typing import Any

from loadkit.rundir.schema import WORKER_SERIES_PREFIX
from loadkit.telemetry.host import HostSampler


def worker_series(host: str) -> str:
    """The series name of a worker machine's host rows (a safe file stem)."""
    return WORKER_SERIES_PREFIX + (re.sub(r"[^A-Za-z0-9_.-]+", "_", host).strip("_.-") or "unknown")


class WorkerMachine:
    """This worker's host row, one per interval (CPU per core since the last one)."""

    def __init__(self, sampler: HostSampler | None = None, host: str | None = None) -> None:
        self.host = host or socket.gethostname()
        self.sampler = sampler or HostSampler()
        self.sampler.open()

    def sample(self, t_ns: int) -> dict[str, Any]:
        (row,) = self.sampler.sample(t_ns)
        return {**row, "host": self.host}
