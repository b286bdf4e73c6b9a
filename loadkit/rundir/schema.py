"""The run directory's row formats in code (docs/run-format.md is the prose).

Values every producer (samplers, simulators, importers, the synthetic-run
builder) and the reader must agree on are defined here once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

# NVML's clock-event (throttle) reason bits, nvmlClocksEventReason*: gpu.jsonl holds
# the mask (`clocks_event_reasons`) and one `reason_<name>` bool per bit.
CLOCK_EVENT_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clocks": 0x100,
}
REASON_GPU_IDLE = CLOCK_EVENT_REASONS["gpu_idle"]
REASON_SW_POWER_CAP = CLOCK_EVENT_REASONS["sw_power_cap"]
REASON_HW_SLOWDOWN = CLOCK_EVENT_REASONS["hw_slowdown"]
REASON_SW_THERMAL = CLOCK_EVENT_REASONS["sw_thermal"]
REASON_HW_THERMAL = CLOCK_EVENT_REASONS["hw_thermal"]
REASON_HW_POWER_BRAKE = CLOCK_EVENT_REASONS["hw_power_brake"]
THERMAL_REASONS = REASON_SW_THERMAL | REASON_HW_THERMAL
POWER_REASONS = REASON_SW_POWER_CAP | REASON_HW_POWER_BRAKE
# gpu.jsonl's `reason_<name>` column of each bit.
REASON_COLUMNS: dict[str, int] = {
    f"reason_{name}": bit for name, bit in CLOCK_EVENT_REASONS.items()
}


def decode_reasons(mask: int | None) -> dict[str, bool | None]:
    """`{"reason_<name>": bool}` for each known bit; all None when the mask is unknown."""
    return {
        column: (None if mask is None else bool(mask & bit))
        for column, bit in REASON_COLUMNS.items()
    }


# --- manifest.json -------------------------------------------------------------------
#
# Typed views of the manifest as the reader hands it on (`Run.info`): every
# consumer reads `run.info.environment.server.models`, not a chain of
# `(m.get("environment") or {}).get(...)`. Values of the wrong type read as
# absent (a manifest from another tool or an older loadkit), never as an error.


def _dict(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else None


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


@dataclass(frozen=True)
class Scenario:
    """`scenario`: the scenario file's name, path and parameters (loadkit run adds more)."""

    name: str | None
    path: str | None
    params: dict[str, Any]

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Scenario:
        return cls(_str(raw.get("name")), _str(raw.get("path")), _dict(raw.get("params")))


@dataclass(frozen=True)
class Target:
    """`target`: the server under load and the model the requests go to."""

    url: str | None
    protocol: str | None
    model: str | None
    embedded: bool
    requests: dict[str, Any] | None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Target:
        requests = raw.get("requests")
        return cls(
            _str(raw.get("url")),
            _str(raw.get("protocol")),
            _str(raw.get("model")),
            bool(raw.get("embedded")),
            dict(requests) if isinstance(requests, Mapping) else None,
        )


@dataclass(frozen=True)
class Host:
    """`environment.host` (the generator's machine); `raw` holds every recorded key."""

    hostname: str | None
    cores_logical: int | None
    memory_bytes: float | None
    raw: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Host:
        return cls(
            _str(raw.get("hostname")),
            _int(raw.get("cores_logical")),
            _number(raw.get("memory_bytes")),
            dict(raw),
        )


@dataclass(frozen=True)
class Gpu:
    """`environment.gpu`: where GPU telemetry came from (`nvml`, `simulated`, `imported`, `none`)."""

    kind: str | None
    devices: tuple[dict[str, Any], ...]

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Gpu:
        devices = tuple(dict(d) for d in _list(raw.get("devices")) if isinstance(d, Mapping))
        return cls(_str(raw.get("kind")), devices)


@dataclass(frozen=True)
class Server:
    """`environment.server`: the KServe v2 server, its models' configurations, what it did not say."""

    name: str | None
    version: str | None
    models: dict[str, dict[str, Any]]
    not_recorded: tuple[str, ...]

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Server:
        models = {
            str(k): dict(v) for k, v in _dict(raw.get("models")).items() if isinstance(v, Mapping)
        }
        return cls(
            _str(raw.get("name")),
            _str(raw.get("version")),
            models,
            tuple(str(n) for n in _list(raw.get("not_recorded"))),
        )


@dataclass(frozen=True)
class Environment:
    host: Host
    gpu: Gpu
    server: Server

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Environment:
        return cls(
            Host.from_dict(_dict(raw.get("host"))),
            Gpu.from_dict(_dict(raw.get("gpu"))),
            Server.from_dict(_dict(raw.get("server"))),
        )


@dataclass(frozen=True)
class Source:
    """One entry of `sources`: a telemetry source that ran."""

    name: str | None
    file: str | None
    interval_s: float | None
    simulated: bool
    warning: str | None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Source:
        return cls(
            _str(raw.get("name")),
            _str(raw.get("file")),
            _number(raw.get("interval_s")),
            bool(raw.get("simulated")),
            _str(raw.get("warning")),
        )


@dataclass(frozen=True)
class Manifest:
    """`manifest.json` (docs/run-format.md): one field per top-level key."""

    schema_version: int | None
    run_id: str | None
    kind: str
    status: str | None
    start_ns: int | None
    end_ns: int | None
    command_line: tuple[str, ...]
    loadkit_version: str | None
    scenario: Scenario | None
    target: Target | None
    slo: dict[str, Any] | None
    environment: Environment
    sources: tuple[Source, ...]
    notes: tuple[str, ...]
    abort_on: tuple[str, ...]
    abort: dict[str, Any] | None
    distributed: dict[str, Any] | None = None  # Locust workers: clocks, losses

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Manifest:
        scenario, target = raw.get("scenario"), raw.get("target")
        slo, abort = raw.get("slo"), raw.get("abort")
        return cls(
            schema_version=_int(raw.get("schema_version")),
            run_id=_str(raw.get("run_id")),
            kind=str(raw.get("kind", "load")),
            status=_str(raw.get("status")),
            start_ns=_int(raw.get("start_ns")),
            end_ns=_int(raw.get("end_ns")),
            command_line=tuple(str(a) for a in _list(raw.get("command_line"))),
            loadkit_version=_str(raw.get("loadkit_version")),
            scenario=Scenario.from_dict(scenario) if isinstance(scenario, Mapping) else None,
            target=Target.from_dict(target) if isinstance(target, Mapping) else None,
            slo=dict(slo) if isinstance(slo, Mapping) else None,
            environment=Environment.from_dict(_dict(raw.get("environment"))),
            sources=tuple(
                Source.from_dict(s) for s in _list(raw.get("sources")) if isinstance(s, Mapping)
            ),
            notes=tuple(str(n) for n in _list(raw.get("notes"))),
            abort_on=tuple(str(c) for c in _list(raw.get("abort_on"))),
            abort=dict(abort) if isinstance(abort, Mapping) else None,
            distributed=dict(d) if isinstance(d := raw.get("distributed"), Mapping) else None,
        )

    @property
    def simulated(self) -> bool:
        """GPU telemetry (or any source) was simulated."""
        return self.environment.gpu.kind == "simulated" or any(s.simulated for s in self.sources)


MANIFEST_KEYS = tuple(f.name for f in fields(Manifest))


__all__ = [
    "MANIFEST_KEYS",
    "Environment",
    "Gpu",
    "Host",
    "Manifest",
    "Scenario",
    "Server",
    "Source",
    "Target",
    "CLOCK_EVENT_REASONS",
    "POWER_REASONS",
    "REASON_COLUMNS",
    "REASON_GPU_IDLE",
    "REASON_HW_POWER_BRAKE",
    "REASON_HW_SLOWDOWN",
    "REASON_HW_THERMAL",
    "REASON_SW_POWER_CAP",
    "REASON_SW_THERMAL",
    "THERMAL_REASONS",
    "decode_reasons",
]
