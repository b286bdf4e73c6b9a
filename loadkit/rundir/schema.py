"""The run directory's row formats in code (docs/run-format.md is the prose).

Values every producer (samplers, simulators, importers, the synthetic-run
builder) and the reader must agree on are defined here once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, TypedDict, cast

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


class ReasonColumns(TypedDict, total=False):
    """gpu.jsonl's `reason_<name>` bools, one per bit of `CLOCK_EVENT_REASONS`."""

    reason_gpu_idle: bool | None
    reason_applications_clocks: bool | None
    reason_sw_power_cap: bool | None
    reason_hw_slowdown: bool | None
    reason_sync_boost: bool | None
    reason_sw_thermal: bool | None
    reason_hw_thermal: bool | None
    reason_hw_power_brake: bool | None
    reason_display_clocks: bool | None


def decode_reasons(mask: int | None) -> ReasonColumns:
    """`{"reason_<name>": bool}` for each known bit; all None when the mask is unknown."""
    return cast(
        ReasonColumns,
        {
            column: (None if mask is None else bool(mask & bit))
            for column, bit in REASON_COLUMNS.items()
        },
    )


# --- JSON Lines rows ------------------------------------------------------------------
#
# One TypedDict per series (docs/run-format.md): the producers (load recorder, samplers,
# importers, the synthetic-run builder) annotate the rows they build with it, so mypy
# holds every literal key to the schema; a unit test holds the docs' field lists and
# the rows real producers write (computed `<counter>_delta` keys too) to `row_fields`.
# TypedDicts are plain dicts at run time: nothing is added to the load generator's
# per-interval writes.


def delta_key(counter: str) -> str:
    """The per-interval delta column of a cumulative counter."""
    return f"{counter}_delta"


class _LoadRowKeys(TypedDict):
    """The keys every `LoadRow` has."""

    t_ns: int
    interval_ns: int
    process: str
    name: str
    offered: int
    started: int
    ok: int
    errors: int
    dropped: int
    in_flight: int
    out_of_range: int
    error_kinds: dict[str, int]


class LoadRow(_LoadRowKeys, total=False):
    """`load/<process>.jsonl`: one row per process, interval and request name."""

    dispatch_lag_max_ms: float  # open model
    completion_gaps: list[list[int]]  # absent in runs recorded before it
    generator_cpu_pct: float | None  # the Locust process's CPU, % of one core; absent before


class _RequestRowKeys(TypedDict):
    """The keys every `RequestRow` has."""

    t_ns: int  # intended send
    sent_ns: int
    done_ns: int
    name: str
    ok: bool
    error_kind: str | None
    connection_new: bool


class RequestRow(_RequestRowKeys, total=False):
    """`requests/<process>.jsonl`: one sampled request."""

    sampled: str  # "reservoir" or "slowest"
    request_bytes: int  # the request's tensor (or raw body) bytes; absent before


class _GpuRowKeys(TypedDict):
    """The keys every `GpuRow` has."""

    t_ns: int


class GpuLimits(TypedDict, total=False):
    """A device's fixed limits, repeated on each of its gpu.jsonl rows (read once by the sampler)."""

    sm_clock_max_mhz: float | None
    mem_clock_max_mhz: float | None
    temp_slowdown_c: float | None
    temp_shutdown_c: float | None
    temp_max_operating_c: float | None


class GpuRow(_GpuRowKeys, GpuLimits, ReasonColumns, total=False):
    """`telemetry/gpu.jsonl`: one row per device per sample (NVML, simulated or imported)."""

    gpu: int
    util_gpu_pct: float | None
    util_mem_pct: float | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    sm_clock_mhz: float | None
    mem_clock_mhz: float | None
    temp_c: float | None
    power_w: float | None
    power_limit_w: float | None
    energy_mj: int | None
    clocks_event_reasons: int | None
    violation_power_ns: int | None
    violation_thermal_ns: int | None
    pcie_tx_kbps: float | None
    pcie_rx_kbps: float | None
    proc_mem_bytes: int | None
    simulated: bool
    gpu_lost: bool
    # Imported rows (`loadkit import`): where they came from, DCGM's host and
    # device, and the fields nvidia-smi / DCGM give that NVML sampling does not.
    imported_from: str
    host: str | None
    uuid: str | None
    name: str | None
    pci_bus_id: str | None
    pstate: str | None
    driver_version: str | None
    mem_free_bytes: int | None
    mem_temp_c: float | None
    graphics_clock_mhz: float | None
    fan_pct: float | None
    util_enc_pct: float | None
    util_dec_pct: float | None
    util_jpg_pct: float | None
    util_ofa_pct: float | None
    violation_power_pct: float | None
    violation_thermal: float | None
    bar1_used_bytes: int | None
    ccpm_used_bytes: int | None
    ecc_sbe_errors: int | None
    ecc_dbe_errors: int | None
    pcie_replay_errors: int | None
    gr_engine_active: float | None
    sm_active: float | None
    dram_active: float | None


# host.jsonl's cumulative counters: each has a `<name>_delta` column beside it.
HOST_COUNTERS = (
    "psi_cpu_some_total_us",
    "server_ctx_vol",
    "server_ctx_invol",
    "server_run_delay_ns",
    "cgroup_nr_periods",
    "cgroup_nr_throttled",
    "cgroup_throttled_ns",
    "tcp_active_opens",
    "tcp_passive_opens",
)


class _HostRowKeys(TypedDict):
    """The keys every `HostRow` has."""

    t_ns: int


class HostRow(_HostRowKeys, total=False):
    """`telemetry/host.jsonl`: one row per sample of the generator's host and the server."""

    cpu_pct: float | None
    cpu_per_core_pct: list[float]
    cores: int
    load1: float | None
    psi_cpu_some_avg10: float | None
    psi_cpu_some_total_us: int | None
    psi_cpu_some_total_us_delta: int | None
    server_cpu_pct: float | None
    server_processes: int | None
    server_threads: int | None
    server_ctx_vol: int | None
    server_ctx_vol_delta: int | None
    server_ctx_invol: int | None
    server_ctx_invol_delta: int | None
    server_run_delay_ns: int | None
    server_run_delay_ns_delta: int | None
    server_rss_bytes: int | None
    cgroup_version: int | None
    cgroup_path: str | None
    cgroup_nr_periods: int | None
    cgroup_nr_periods_delta: int | None
    cgroup_nr_throttled: int | None
    cgroup_nr_throttled_delta: int | None
    cgroup_throttled_ns: int | None
    cgroup_throttled_ns_delta: int | None
    tcp_active_opens: int | None
    tcp_active_opens_delta: int | None
    tcp_passive_opens: int | None
    tcp_passive_opens_delta: int | None
    tcp_new_connections: int | None
    server_tcp_ports: list[int] | None
    server_new_connections: int | None
    mem_used_bytes: int
    mem_available_bytes: int


# triton_stats.jsonl's cumulative counters (flattened from one model_stats entry),
# each with a `<name>_delta` column beside it.
TRITON_COUNTERS = (
    "inference_count",
    "execution_count",
    "success_count",
    "success_ns",
    "fail_count",
    "fail_ns",
    "queue_count",
    "queue_ns",
    "compute_input_ns",
    "compute_infer_ns",
    "compute_output_ns",
    "batch_compute_infer_ns",
)


class _TritonStatsRowKeys(TypedDict):
    """The keys every `TritonStatsRow` has."""

    t_ns: int
    interval_ns: int
    model: str
    version: str


class TritonStatsRow(_TritonStatsRowKeys, total=False):
    """`telemetry/triton_stats.jsonl`: one row per model version per interval."""

    reset: bool
    inference_count: int
    inference_count_delta: int
    execution_count: int
    execution_count_delta: int
    success_count: int
    success_count_delta: int
    success_ns: int
    success_ns_delta: int
    fail_count: int
    fail_count_delta: int
    fail_ns: int
    fail_ns_delta: int
    queue_count: int
    queue_count_delta: int
    queue_ns: int
    queue_ns_delta: int
    compute_input_ns: int
    compute_input_ns_delta: int
    compute_infer_ns: int
    compute_infer_ns_delta: int
    compute_output_ns: int
    compute_output_ns_delta: int
    batch_compute_infer_ns: int
    batch_compute_infer_ns_delta: int
    batch_sizes: dict[str, int]
    batch_size_mean: float | None
    queue_us_per_request: float | None
    compute_infer_us_per_request: float | None
    compute_infer_us_per_batch: float | None
    compute_infer_us_by_batch_size: dict[str, float | None]
    request_us_per_request: float | None


class _MetricRowKeys(TypedDict):
    """The keys every `MetricRow` has."""

    t_ns: int
    name: str
    labels: dict[str, str]
    value: float


class MetricRow(_MetricRowKeys, total=False):
    """`telemetry/metrics.jsonl`: one row per selected Prometheus sample per scrape."""

    delta: float | None  # counter-like samples
    reset: bool


def row_fields(row_type: type) -> tuple[str, ...]:
    """A row type's keys in the order they are declared (base classes first)."""
    names: dict[str, None] = {}
    for klass in reversed(row_type.__mro__):
        names.update(dict.fromkeys(getattr(klass, "__annotations__", {})))
    return tuple(names)


def required_fields(row_type: type) -> frozenset[str]:
    return frozenset(getattr(row_type, "__required_keys__", ()))


def row_problems(row: Mapping[str, Any], row_type: type) -> list[str]:
    """What keeps `row` from being a `row_type`: required keys missing, keys it does not declare."""
    declared = row_fields(row_type)
    missing = sorted(required_fields(row_type) - set(row))
    unknown = [k for k in row if k not in declared]
    return [f"missing {k}" for k in missing] + [f"not in {row_type.__name__}: {k}" for k in unknown]


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


# A device's limits carry the GPU rows' names (`GpuRow`); manifests before December 2026
# named them otherwise. Read under the rows' names either way.
_LEGACY_DEVICE_KEYS = {
    "max_sm_clock_mhz": "sm_clock_max_mhz",
    "max_mem_clock_mhz": "mem_clock_max_mhz",
    "slowdown_temp_c": "temp_slowdown_c",
    "shutdown_temp_c": "temp_shutdown_c",
}


def _device(raw: Mapping[str, Any]) -> dict[str, Any]:
    device = {_LEGACY_DEVICE_KEYS.get(k, k): v for k, v in raw.items()}
    for new in _LEGACY_DEVICE_KEYS.values():  # the new name wins where both are present
        if new in raw:
            device[new] = raw[new]
    return device


@dataclass(frozen=True)
class Gpu:
    """`environment.gpu`: where GPU telemetry came from (`nvml`, `simulated`, `imported`, `none`)."""

    kind: str | None
    devices: tuple[dict[str, Any], ...]  # limits under the GPU rows' names (`temp_slowdown_c`)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Gpu:
        devices = tuple(_device(d) for d in _list(raw.get("devices")) if isinstance(d, Mapping))
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


# --- where a series was sampled (docs/telemetry.md, "Where each series was sampled") ---
#
# Every series has a place: `server` (the machine or container the target runs on) or
# `client` (a machine sending load: loadkit's own, or a worker's). `unknown` is what a
# manifest that did not record it reads as, where the legacy rules below cannot tell.
PLACE_SERVER = "server"
PLACE_CLIENT = "client"
PLACE_UNKNOWN = "unknown"
PLACES = (PLACE_SERVER, PLACE_CLIENT, PLACE_UNKNOWN)
# Fields of a series sampled apart from the rest of it, by part name: the prefixes of its
# columns. `host.jsonl`'s `process` part is one process tree and its cgroup (the server's
# with --server-pid, else loadkit's own); its other fields describe the whole machine.
SERIES_PARTS: dict[str, dict[str, tuple[str, ...]]] = {
    "host": {"process": ("server_", "cgroup_")},
}
# Sources read from the server itself (its statistics API, its /metrics endpoint):
# `server` wherever loadkit ran, in manifests that did not record a place too.
SERVER_SOURCES = frozenset({"triton_stats", "metrics"})


# The file stem suffix of this machine's copy of a series the server's own copy holds
# (`loadkit run --scrape`, `loadkit import --prometheus --run`): `host-local`.
LOCAL_SUFFIX = "-local"
# A worker machine's host series under --master: `host-worker-<host>` (place client).
WORKER_SERIES_PREFIX = "host-worker-"


def series_kind(series: str) -> str:
    """What a series file holds: its stem up to a `-` (`host-local`, `gpu-dmon` hold a
    `host`, a `gpu`): this machine's copy beside the server's, or an imported file."""
    return series.split("-", 1)[0]


def field_place(series: str, place: str, parts: Mapping[str, str], field_name: str | None) -> str:
    """The place of a series' field: its part's (`SERIES_PARTS`) when it has one, else `place`."""
    if field_name is not None:
        for part, prefixes in SERIES_PARTS.get(series_kind(series), {}).items():
            if part in parts and field_name.startswith(prefixes):
                return parts[part]
    return place


def _place(value: Any) -> str | None:
    return value if value in PLACES else None


@dataclass(frozen=True)
class TargetLocation:
    """`environment.target_location`: whether the target runs on the machine loadkit ran on.

    `local`: True (same machine), False (another one), None (nothing to decide from, or
    a manifest that did not record it). `how`: what decided it (`LOCATION_HOWS`).
    `host`: the target machine's name (this machine's when local; the target's host
    as given otherwise; null when unknown). `address`: the address that was compared,
    when one was. Decided by `loadkit.placement.locate_target`.
    """

    local: bool | None
    how: str
    host: str | None = None
    address: str | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TargetLocation:
        local = raw.get("local")
        return cls(
            local if isinstance(local, bool) else None,
            _str(raw.get("how")) or LOCATION_NOT_RECORDED,
            _str(raw.get("host")),
            _str(raw.get("address")),
        )

    def to_manifest(self) -> dict[str, Any]:
        return {"local": self.local, "how": self.how, "host": self.host, "address": self.address}

    @property
    def machine_place(self) -> str:
        """The place of a series that describes loadkit's machine (its CPUs, its GPUs)."""
        if self.local is None:
            return PLACE_UNKNOWN
        return PLACE_SERVER if self.local else PLACE_CLIENT


# What decided `TargetLocation.local` (the manifest's `how`).
LOCATION_LOOPBACK = "loopback address"
LOCATION_THIS_HOST = "address of this host"
LOCATION_OTHER_HOST = "address of another host"
LOCATION_UNRESOLVED = "name not resolved"
LOCATION_SERVER_PID = "--server-pid"
LOCATION_SERVER_HOST = "--server-host"
LOCATION_NO_TARGET = "no target address"
LOCATION_NOT_RECORDED = "not recorded"
LOCATION_HOWS = (
    LOCATION_LOOPBACK,
    LOCATION_THIS_HOST,
    LOCATION_OTHER_HOST,
    LOCATION_UNRESOLVED,
    LOCATION_SERVER_PID,
    LOCATION_SERVER_HOST,
    LOCATION_NO_TARGET,
    LOCATION_NOT_RECORDED,
)
NOT_RECORDED = TargetLocation(None, LOCATION_NOT_RECORDED)


@dataclass(frozen=True)
class Environment:
    host: Host
    gpu: Gpu
    server: Server
    target_location: TargetLocation = NOT_RECORDED

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Environment:
        location = raw.get("target_location")
        return cls(
            Host.from_dict(_dict(raw.get("host"))),
            Gpu.from_dict(_dict(raw.get("gpu"))),
            Server.from_dict(_dict(raw.get("server"))),
            TargetLocation.from_dict(location) if isinstance(location, Mapping) else NOT_RECORDED,
        )


@dataclass(frozen=True)
class Source:
    """One entry of `sources`: a telemetry source that ran (or was asked for and could not).

    `place` and `host`: where it was sampled; `parts`: the place of a part of its fields
    whose place differs (`SERIES_PARTS`). A manifest that did not record them gets them
    from the legacy rules (`Manifest.from_dict`), with `place_inferred` set.
    `scraped_from`: a series scraped from exporters (`run --scrape`/`--agent`), each
    exporter's family -> the URL it was read from, credentials stripped ({} otherwise).
    """

    name: str | None
    file: str | None
    interval_s: float | None
    simulated: bool
    warning: str | None
    place: str = PLACE_UNKNOWN
    host: str | None = None
    parts: dict[str, str] = field(default_factory=dict)
    place_inferred: bool = False
    scraped_from: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Source:
        place = _place(raw.get("place"))
        parts = {str(k): p for k, v in _dict(raw.get("parts")).items() if (p := _place(v))}
        return cls(
            _str(raw.get("name")),
            _str(raw.get("file")),
            _number(raw.get("interval_s")),
            bool(raw.get("simulated")),
            _str(raw.get("warning")),
            place or PLACE_UNKNOWN,
            _str(raw.get("host")),
            parts,
            place_inferred=place is None,
            scraped_from={
                str(k): v for k, v in _dict(raw.get("scraped_from")).items() if isinstance(v, str)
            },
        )

    @property
    def series(self) -> str | None:
        """The series' name: the stem of `telemetry/<stem>.jsonl`, else the source's name."""
        if self.file is not None:
            return self.file.rsplit("/", 1)[-1].split(".", 1)[0]
        return self.name

    def place_of(self, field_name: str | None = None) -> str:
        """The place of one of the series' fields (None: the series as a whole)."""
        return field_place(self.name or "", self.place, self.parts, field_name)


def _legacy_place(source: Source, kind: str, target: Target | None) -> Source:
    """The place of a source in a manifest that did not record one (before issue 41).

    Only what is certain without the command line: the server's own endpoints
    (`SERVER_SOURCES`), the simulated GPU and anything sampled beside the embedded
    target (it runs on loadkit's machine), and a production window's series (the
    server's exporters) are `server`; everything else is `unknown`.
    """
    server = (
        source.name in SERVER_SOURCES
        or source.simulated
        or kind == "production"
        or (target is not None and target.embedded)
    )
    place = PLACE_SERVER if server else PLACE_UNKNOWN
    parts = {part: place for part in SERIES_PARTS.get(source.name or "", {})}
    return replace(source, place=place, parts=parts, place_inferred=True)


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
    # Keys added after the first runs: absent in older manifests.
    abort_on: tuple[str, ...] = ()
    abort: dict[str, Any] | None = None
    distributed: dict[str, Any] | None = None  # Locust workers: clocks, losses
    metrics_endpoint: str | None = None  # the live Prometheus endpoint (--serve-metrics PORT)
    demo: dict[str, Any] | None = None  # loadkit demo's cooling-fault schedule
    # `loadkit import --prometheus`: the server, window, step and each series' source.
    production: dict[str, Any] | None = None
    capacity: dict[str, Any] | None = None  # loadkit capacity's search settings
    sweep: dict[str, Any] | None = None  # loadkit sweep: this point's server configuration

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Manifest:
        scenario, target = raw.get("scenario"), raw.get("target")
        slo, abort = raw.get("slo"), raw.get("abort")
        kind = str(raw.get("kind", "load"))
        target_info = Target.from_dict(target) if isinstance(target, Mapping) else None
        sources = (Source.from_dict(s) for s in _list(raw.get("sources")) if isinstance(s, Mapping))
        return cls(
            schema_version=_int(raw.get("schema_version")),
            run_id=_str(raw.get("run_id")),
            kind=kind,
            status=_str(raw.get("status")),
            start_ns=_int(raw.get("start_ns")),
            end_ns=_int(raw.get("end_ns")),
            command_line=tuple(str(a) for a in _list(raw.get("command_line"))),
            loadkit_version=_str(raw.get("loadkit_version")),
            scenario=Scenario.from_dict(scenario) if isinstance(scenario, Mapping) else None,
            target=target_info,
            slo=dict(slo) if isinstance(slo, Mapping) else None,
            environment=Environment.from_dict(_dict(raw.get("environment"))),
            sources=tuple(
                _legacy_place(s, kind, target_info) if s.place_inferred else s for s in sources
            ),
            notes=tuple(str(n) for n in _list(raw.get("notes"))),
            abort_on=tuple(str(c) for c in _list(raw.get("abort_on"))),
            abort=dict(abort) if isinstance(abort, Mapping) else None,
            distributed=dict(d) if isinstance(d := raw.get("distributed"), Mapping) else None,
            metrics_endpoint=_str(raw.get("metrics_endpoint")),
            demo=dict(demo) if isinstance(demo := raw.get("demo"), Mapping) else None,
            production=dict(p) if isinstance(p := raw.get("production"), Mapping) else None,
            capacity=dict(c) if isinstance(c := raw.get("capacity"), Mapping) else None,
            sweep=dict(sw) if isinstance(sw := raw.get("sweep"), Mapping) else None,
        )

    @property
    def simulated(self) -> bool:
        """GPU telemetry (or any source) was simulated."""
        return self.environment.gpu.kind == "simulated" or any(s.simulated for s in self.sources)

    def source(self, series: str) -> Source | None:
        """The `sources` entry of a series (`gpu`, `host`, `gpu-dmon`, ...): by file, else by name."""
        entries = [s for s in self.sources if s.file is not None or s.warning is None]
        found = next((s for s in entries if s.series == series), None)
        return found or next((s for s in self.sources if s.name == series), None)

    def place(self, series: str, field_name: str | None = None) -> str:
        """Where a series (or one of its fields) was sampled: `server`, `client` or `unknown`."""
        source = self.source(series)
        return PLACE_UNKNOWN if source is None else source.place_of(field_name)


MANIFEST_KEYS = tuple(f.name for f in fields(Manifest))
# Every manifest loadkit writes has these (the fields without a default).
MANIFEST_REQUIRED_KEYS = tuple(
    f.name for f in fields(Manifest) if f.default is MISSING and f.default_factory is MISSING
)


def check_manifest(raw: Mapping[str, Any]) -> None:
    """Raise ValueError unless `raw` has every required key of `Manifest` and no other key.

    The writer calls it: a manifest is held to the schema when written, not
    when a reader months later misses a key.
    """
    missing = [k for k in MANIFEST_REQUIRED_KEYS if k not in raw]
    unknown = [k for k in raw if k not in MANIFEST_KEYS]
    if missing or unknown:
        raise ValueError(
            f"manifest does not match loadkit.rundir.schema.Manifest: missing {missing}, "
            f"unknown {unknown} (a new key is a field of Manifest and a row of docs/run-format.md)"
        )


__all__ = [
    "HOST_COUNTERS",
    "MANIFEST_KEYS",
    "MANIFEST_REQUIRED_KEYS",
    "TRITON_COUNTERS",
    "GpuLimits",
    "GpuRow",
    "HostRow",
    "LoadRow",
    "MetricRow",
    "ReasonColumns",
    "RequestRow",
    "TritonStatsRow",
    "check_manifest",
    "field_place",
    "delta_key",
    "required_fields",
    "row_fields",
    "row_problems",
    "Environment",
    "Gpu",
    "Host",
    "Manifest",
    "Scenario",
    "Server",
    "Source",
    "Target",
    "TargetLocation",
    "LOCATION_HOWS",
    "LOCATION_LOOPBACK",
    "LOCATION_NO_TARGET",
    "LOCATION_NOT_RECORDED",
    "LOCATION_OTHER_HOST",
    "LOCATION_SERVER_HOST",
    "LOCATION_SERVER_PID",
    "LOCATION_THIS_HOST",
    "LOCATION_UNRESOLVED",
    "PLACES",
    "PLACE_CLIENT",
    "PLACE_SERVER",
    "PLACE_UNKNOWN",
    "SERIES_PARTS",
    "SERVER_SOURCES",
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
