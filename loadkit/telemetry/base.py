"""What every telemetry sampler is, and how a missing source is reported.

A sampler is a small object with `open()`, `sample(t_ns) -> rows` and
`close()`. It never raises for a field a device does not support (that field
is null, reported once through `warn_once`); it raises `SourceUnavailable` from
`open()` when the whole source is missing, so the caller can print one line and
go on without it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from loadkit.errors import LoadkitError
from loadkit.placement import server_machine, this_hostname
from loadkit.rundir.schema import PLACE_SERVER, PLACE_UNKNOWN, TargetLocation

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

    def said(self, key: str) -> None:
        """Count `key` as said: its news went out another way (a source's opening warning)."""
        self._seen.add(key)

    def drain(self) -> list[str]:
        pending, self._pending = self._pending, []
        return pending


@dataclass(frozen=True)
class SamplerSpec:
    """What one sampler process runs: a source, its sampler kind, options, interval; picklable."""

    source: str  # file stem: telemetry/<source>.jsonl
    kind: str  # a key of its source's `samplers` ("gpu-nvml", "gpu-sim", "host", ...)
    interval_s: float
    options: dict[str, Any] = field(default_factory=dict)
    simulated: bool = False  # the manifest's `sources[].simulated`


@dataclass(frozen=True)
class SamplerOptions:
    """What a run asked its samplers to watch (`SamplerSet.start`'s arguments)."""

    run_dir: Path
    gpu: str = "auto"  # auto | nvml | sim | none
    triton_url: str | None = None
    triton_models: list[str] | None = None
    server_pid: int | None = None
    metrics_url: str | None = None
    metrics_patterns: list[str] | None = None
    sim_gpu_state: Path | None = None
    # Whether the target runs on this machine (loadkit.placement.locate_target); None:
    # not decided (a caller that did not say), which makes this machine's series `unknown`.
    target: TargetLocation | None = None
    # Options of any other source, by the name its `plan` reads (TelemetryOptions.extra).
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SourcePlace:
    """Where a source's series is sampled: the manifest's `sources[].place`, `host`, `parts`.

    `place`: `server` or `client` (`unknown` when the run did not decide where its
    target is); `host`: that machine's name; `parts`: the place of a part of the
    series' fields that differs (`loadkit.rundir.schema.SERIES_PARTS`);
    `scraped_from`: a scraped series' exporters, family -> URL (credentials stripped),
    the manifest's `sources[].scraped_from`.
    """

    place: str
    host: str | None
    parts: Mapping[str, str] = field(default_factory=dict)
    scraped_from: Mapping[str, str] = field(default_factory=dict)

    def to_manifest(self) -> dict[str, Any]:
        out = {"place": self.place, "host": self.host, "parts": dict(self.parts)}
        if self.scraped_from:
            out["scraped_from"] = dict(self.scraped_from)
        return out


def this_machine(options: SamplerOptions, **parts: str) -> SourcePlace:
    """The place of a series sampled on this machine: the server's only when the target is here."""
    place = options.target.machine_place if options.target is not None else PLACE_UNKNOWN
    return SourcePlace(place, this_hostname(), parts)


def the_server(options: SamplerOptions, url: str) -> SourcePlace:
    """The place of a series the server itself answers (its statistics API, its /metrics)."""
    return SourcePlace(PLACE_SERVER, server_machine(url, options.target))


@dataclass(frozen=True)
class SourcePlan:
    """What one source records in a run: its sampler (None: not in this run) and what it says.

    `environment` is this source's part of the manifest's `environment` (the
    GPU's devices); `warning` a source that was asked for but cannot be read,
    listed in the manifest's sources with no file; `place` where its series is
    (or would have been) sampled. `holds_series`: the server's own copy of a series
    another source samples on this machine (`--scrape`): it keeps the series' name,
    and the other is written as `<series>-local` (`supervisor.plan_sources`).
    """

    spec: SamplerSpec | None
    environment: Mapping[str, Any] | None = None
    warning: str | None = None
    place: SourcePlace | None = None
    holds_series: bool = False


@dataclass(frozen=True)
class TelemetrySource:
    """One live telemetry source: the registry entry (loadkit/telemetry/sources.py) of its module.

    `name` is the file stem (`telemetry/<name>.jsonl`), the key of sampling
    rates and the key the analysis aligns the series by. `plan` decides from
    the run's options whether (and how) the source is sampled; `samplers` builds
    the sampler of each kind inside the sampler process. A source that fills
    other sources' series (`scrape`: the server's exporters) plans one sampler
    per series, named after it (`spec.source`), and may plan none.
    """

    name: str
    label: str  # in help text: "<label> sampling rate (10)"
    default_interval_s: float
    row_type: type  # its rows (loadkit/rundir/schema.py)
    samplers: Mapping[str, Callable[[SamplerSpec], Sampler]]
    # (options, interval_s) -> its plan, or one plan per series it fills
    plan: Callable[[SamplerOptions, float], SourcePlan | tuple[SourcePlan, ...]]
    rate_flag: bool = False  # `loadkit watch --<name>-rate HZ`

    @property
    def default_rate_hz(self) -> float:
        return 1.0 / self.default_interval_s
