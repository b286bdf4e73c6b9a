"""What every telemetry sampler is, and how a missing source is reported.

A sampler is a small object with `open()`, `sample(t_ns) -> rows` and
`close()`. It never raises for a field a device does not support (that field
is null, reported once through `warn_once`); it raises `SourceUnavailable` from
`open()` when the whole source is missing, so the caller can print one line and
go on without it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from loadkit.errors import LoadkitError

log = logging.getLogger("loadkit.telemetry")

Row = dict[str, Any]
# A sampler's rows are its series' row type (loadkit/rundir/schema.py: GpuRow, HostRow, ...).
SeriesRow = Mapping[str, Any]


class SourceUnavailable(LoadkitError):
    """A telemetry source cannot be read at all (no driver, server unreachable, ...)."""


class Sampler(Protocol):
    """The interface the loop runner drives."""

    source: str  # file stem: telemetry/<source>.jsonl

    def open(self) -> None: ...

    def sample(self, t_ns: int) -> Sequence[SeriesRow]: ...

    def close(self) -> None: ...

    def drain_warnings(self) -> list[str]: ...


class WarnOnce:
    """Collects one-time warnings ("field X not supported") for the runner to log.

    Samplers call `warn(key, message)`; the message is kept only the first time
    `key` is seen. The loop runner drains them into stderr and the events log.
    """

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._pending: list[str] = []

    def warn(self, key: str, message: str) -> None:
        if key in self._seen:
            return
        self._seen.add(key)
        self._pending.append(message)
        log.warning(message)

    def drain(self) -> list[str]:
        pending, self._pending = self._pending, []
        return pending
