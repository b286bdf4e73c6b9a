"""Parsers for telemetry that on-call engineers already have, into loadkit rows.

Each parser is a pure function `text -> ImportResult` producing rows in the
run-format schema of the matching source (GPU rows as in `gpu.jsonl`), with
unknown columns kept under a prefixed name and unparseable values as null.
Partial (torn) lines are skipped and counted, never fatal.

Formats:
- `dmon`: `nvidia-smi dmon` logs, any `-s` selection, with or without `-o D/T/DT`
  (parsed by header; `-` is null);
- `query-gpu`: `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] -lms N`;
- `dcgm`: a dcgm-exporter text scrape (one instant);
- `prom-range`: a Prometheus `query_range` JSON answer (matrix) of DCGM metrics;
- `locust`: Locust's `*_stats_history.csv` (kept as an imported series only:
  its percentiles are rounded and windowed, so loadkit reports nothing from them).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from loadkit.errors import UsageError
from loadkit.rundir.schema import decode_reasons

Row = dict[str, Any]
MIB = 1024 * 1024


@dataclass
class ImportResult:
    source: str  # telemetry file stem the rows belong in ("gpu", "locust_history")
    format: str
    rows: list[Row] = field(default_factory=list)
    skipped_lines: int = 0
    unknown_fields: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _reasons(mask: int | None) -> Row:
    return dict(decode_reasons(mask))  # the same NVML bits the live sampler decodes


def _num(text: str | None) -> float | None:
    """A number from '45', '45 %', '250.12 W', '-', '[N/A]', '[Not Supported]'; else None."""
    if text is None:
        return None
    text = text.strip()
    if not text or text in ("-", "N/A") or text.startswith("["):
        return None
    match = re.match(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", text)
    if not match:
        return None
    value = float(match.group(0))
    return value if math.isfinite(value) else None


def _int_or_float(value: float | None) -> int | float | None:
    if value is None:
        return None
    return int(value) if value.is_integer() else value


def _tz(offset_hours: float | None) -> timezone | None:
    return None if offset_hours is None else timezone(timedelta(hours=offset_hours))


def _to_ns(dt: datetime, tz: timezone | None) -> int:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=tz) if tz is not None else dt.astimezone()  # local time
    return int(dt.timestamp() * 1_000_000) * 1000


# --- nvidia-smi dmon ----------------------------------------------------------
# column -> (loadkit field, scale); units as dmon prints them.
DMON_COLUMNS: dict[str, tuple[str, float]] = {
    "pwr": ("power_w", 1.0),
    "gtemp": ("temp_c", 1.0),
    "temp": ("temp_c", 1.0),  # older drivers
    "mtemp": ("mem_temp_c", 1.0),
    "sm": ("util_gpu_pct", 1.0),
    "mem": ("util_mem_pct", 1.0),
    "enc": ("util_enc_pct", 1.0),
    "dec": ("util_dec_pct", 1.0),
    "jpg": ("util_jpg_pct", 1.0),
    "ofa": ("util_ofa_pct", 1.0),
    "mclk": ("mem_clock_mhz", 1.0),
    "pclk": ("sm_clock_mhz", 1.0),
    "pviol": ("violation_power_pct", 1.0),
    "tviol": ("violation_thermal", 1.0),
    "fb": ("mem_used_bytes", MIB),
    "bar1": ("bar1_used_bytes", MIB),
    "ccpm": ("ccpm_used_bytes", MIB),
    "sbecc": ("ecc_sbe_errors", 1.0),
    "dbecc": ("ecc_dbe_errors", 1.0),
    "pci": ("pcie_replay_errors", 1.0),
    "rxpci": ("pcie_rx_kbps", 1000.0),  # MB/s -> KB/s
    "txpci": ("pcie_tx_kbps", 1000.0),
}


def parse_dmon(
    text: str,
    *,
    start_ns: int | None = None,
    interval_s: float = 1.0,
    tz_offset_hours: float | None = None,
) -> ImportResult:
    """`nvidia-smi dmon` output. Without `-o D/T` timestamps, `start_ns` is required:
    samples are then `interval_s` apart (dmon `-d`, default 1 s)."""
    result = ImportResult("gpu", "dmon")
    tz = _tz(tz_offset_hours)
    columns: list[str] | None = None
    sample_index = -1
    seen_in_sample: set[int] = set()
    last_clock: Any = None
    day_offset = 0
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            names = stripped.lstrip("#").split()
            if names and names[0].lower() in ("date", "time", "gpu"):
                columns = [n.lower() for n in names]
            continue  # the units line ("# Idx W C ...") is also a comment
        if columns is None:
            result.skipped_lines += 1
            continue
        values = stripped.split()
        if len(values) != len(columns):
            result.skipped_lines += 1  # torn or wrapped line
            continue
        cells = dict(zip(columns, values, strict=True))
        gpu = _num(cells.get("gpu"))
        if gpu is None:
            result.skipped_lines += 1
            continue
        t_ns = None
        if "date" in cells and "time" in cells:
            try:
                stamp = datetime.strptime(f"{cells['date']} {cells['time']}", "%Y%m%d %H:%M:%S")
            except ValueError:
                result.skipped_lines += 1
                continue
            t_ns = _to_ns(stamp, tz)
        elif "time" in cells:  # -o T: times of day only; the date comes from --start
            if start_ns is None:
                raise UsageError(
                    "this dmon log has times but no dates (-o T)",
                    hint="give --start TIME: its date is used (midnight rollovers are handled)",
                )
            try:
                clock = datetime.strptime(cells["time"], "%H:%M:%S").time()
            except ValueError:
                result.skipped_lines += 1
                continue
            day = datetime.fromtimestamp(start_ns / 1e9, tz or None).date()
            if last_clock is not None and clock < last_clock:
                day_offset += 1
            last_clock = clock
            stamp = datetime.combine(day + timedelta(days=day_offset), clock)
            t_ns = _to_ns(stamp, tz)
        if t_ns is None:
            if int(gpu) in seen_in_sample or sample_index < 0:
                sample_index += 1
                seen_in_sample = set()
            seen_in_sample.add(int(gpu))
            if start_ns is None:
                raise UsageError(
                    "this dmon log has no timestamps (it was not run with -o DT)",
                    hint="give --start TIME (when the log began) and --interval S (dmon -d)",
                )
            t_ns = start_ns + int(sample_index * interval_s * 1e9)
        row: Row = {"t_ns": t_ns, "gpu": int(gpu), "imported_from": "dmon"}
        for name, raw in cells.items():
            if name in ("date", "time", "gpu"):
                continue
            if name in DMON_COLUMNS:
                key, scale = DMON_COLUMNS[name]
                value = _num(raw)
                row[key] = None if value is None else _int_or_float(value * scale)
            else:
                if f"dmon_{name}" not in result.unknown_fields:
                    result.unknown_fields.append(f"dmon_{name}")
                row[f"dmon_{name}"] = _int_or_float(_num(raw))
        result.rows.append(row)
    if columns is None:
        raise UsageError(
            "no dmon header ('# gpu ...' or '#Date Time gpu ...') found",
            hint="import the file exactly as nvidia-smi dmon wrote it",
        )
    return result


# --- nvidia-smi --query-gpu CSV -------------------------------------------------
QUERY_FIELDS: dict[str, tuple[str, float]] = {
    "index": ("gpu", 1.0),
    "utilization.gpu": ("util_gpu_pct", 1.0),
    "utilization.memory": ("util_mem_pct", 1.0),
    "memory.used": ("mem_used_bytes", MIB),
    "memory.total": ("mem_total_bytes", MIB),
    "memory.free": ("mem_free_bytes", MIB),
    "clocks.sm": ("sm_clock_mhz", 1.0),
    "clocks.current.sm": ("sm_clock_mhz", 1.0),
    "clocks.gr": ("graphics_clock_mhz", 1.0),
    "clocks.current.graphics": ("graphics_clock_mhz", 1.0),
    "clocks.mem": ("mem_clock_mhz", 1.0),
    "clocks.current.memory": ("mem_clock_mhz", 1.0),
    "clocks.max.sm": ("sm_clock_max_mhz", 1.0),
    "clocks.max.streaming_multiprocessor": ("sm_clock_max_mhz", 1.0),
    "clocks.max.mem": ("mem_clock_max_mhz", 1.0),
    "clocks.max.memory": ("mem_clock_max_mhz", 1.0),
    "temperature.gpu": ("temp_c", 1.0),
    "temperature.memory": ("mem_temp_c", 1.0),
    "power.draw": ("power_w", 1.0),
    "power.draw.instant": ("power_w", 1.0),
    "power.limit": ("power_limit_w", 1.0),
    "enforced.power.limit": ("power_limit_w", 1.0),
    "fan.speed": ("fan_pct", 1.0),
}
_REASON_COLUMN = re.compile(r"^clocks_(?:throttle|event)_reasons\.(\w+)$")
_REASON_ALIASES = {
    "gpu_idle": "gpu_idle",
    "applications_clocks_setting": "applications_clocks",
    "sw_power_cap": "sw_power_cap",
    "hw_slowdown": "hw_slowdown",
    "hw_thermal_slowdown": "hw_thermal",
    "hw_power_brake_slowdown": "hw_power_brake",
    "sw_thermal_slowdown": "sw_thermal",
    "sync_boost": "sync_boost",
}


def _query_header(name: str) -> str:
    return re.sub(r"\s*\[.*\]\s*$", "", name.strip()).lower()


def parse_query_gpu(
    text: str, *, fields: list[str] | None = None, tz_offset_hours: float | None = None
) -> ImportResult:
    """CSV from `nvidia-smi --query-gpu=... --format=csv -lms N` (the header names the
    fields; with `noheader` pass `fields`). Timestamps are local time unless an offset is given."""
    result = ImportResult("gpu", "query-gpu")
    tz = _tz(tz_offset_hours)
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    header = [_query_header(f) for f in fields] if fields else None
    for record in reader:
        if not record or not any(c.strip() for c in record):
            continue
        if header is None or (record and _query_header(record[0]) == header[0] and not fields):
            header = [_query_header(c) for c in record]
            continue
        if len(record) != len(header):
            result.skipped_lines += 1
            continue
        cells = dict(zip(header, (c.strip() for c in record), strict=True))
        stamp = cells.get("timestamp")
        if stamp is None:
            raise UsageError(
                "the query did not include 'timestamp'",
                hint="run nvidia-smi --query-gpu=timestamp,index,... so samples have times",
            )
        try:
            t_ns = _to_ns(datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f"), tz)
        except ValueError:
            result.skipped_lines += 1
            continue
        row: Row = {"t_ns": t_ns, "imported_from": "query-gpu"}
        for name, raw in cells.items():
            if name == "timestamp":
                continue
            if name in QUERY_FIELDS:
                key, scale = QUERY_FIELDS[name]
                value = _num(raw)
                row[key] = None if value is None else _int_or_float(value * scale)
            elif name in ("clocks_throttle_reasons.active", "clocks_event_reasons.active"):
                mask = int(raw, 16) if re.fullmatch(r"0x[0-9a-fA-F]+", raw) else None
                row["clocks_event_reasons"] = mask
                row.update(_reasons(mask))
            elif (m := _REASON_COLUMN.match(name)) and m.group(1) in _REASON_ALIASES:
                flag = {"active": True, "not active": False}.get(raw.lower())
                row.setdefault(f"reason_{_REASON_ALIASES[m.group(1)]}", flag)
            elif name in ("name", "uuid", "pci.bus_id", "pstate", "driver_version"):
                row[name.replace(".", "_")] = raw or None
            else:
                key = "smi_" + re.sub(r"\W+", "_", name)
                if key not in result.unknown_fields:
                    result.unknown_fields.append(key)
                value = _num(raw)
                text_value = None if not raw or raw.startswith("[") else raw
                row[key] = _int_or_float(value) if value is not None else text_value
        row.setdefault("gpu", 0)
        result.rows.append(row)
    if header is None:
        raise UsageError("empty nvidia-smi CSV", hint="was the file written with --format=csv?")
    return result


# --- DCGM (dcgm-exporter text and Prometheus query_range JSON) ----------------------
DCGM_FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_DEV_MAX_SM_CLOCK": ("sm_clock_max_mhz", 1.0),
    "DCGM_FI_DEV_MAX_MEM_CLOCK": ("mem_clock_max_mhz", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1.0),
    "DCGM_FI_DEV_MEMORY_TEMP": ("mem_temp_c", 1.0),
    "DCGM_FI_DEV_SLOWDOWN_TEMP": ("temp_slowdown_c", 1.0),
    "DCGM_FI_DEV_SHUTDOWN_TEMP": ("temp_shutdown_c", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_mj", 1.0),
    "DCGM_FI_DEV_GPU_UTIL": ("util_gpu_pct", 1.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("util_mem_pct", 1.0),
    "DCGM_FI_DEV_FB_USED": ("mem_used_bytes", MIB),
    "DCGM_FI_DEV_FB_FREE": ("mem_free_bytes", MIB),
    "DCGM_FI_DEV_FB_TOTAL": ("mem_total_bytes", MIB),
    "DCGM_FI_DEV_POWER_VIOLATION": ("violation_power_ns", 1000.0),  # µs
    "DCGM_FI_DEV_THERMAL_VIOLATION": ("violation_thermal_ns", 1000.0),
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": ("pcie_tx_kbps", 1.0),
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": ("pcie_rx_kbps", 1.0),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gr_engine_active", 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", 1.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active", 1.0),
}
DCGM_REASON_FIELDS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")

# DCGM's "blank" sentinels: a value at or above these means no data
# (BLANK, NOT_FOUND, NOT_SUPPORTED, NOT_PERMISSIONED, ...).
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
DCGM_INT32_BLANK = 0x7FFFFFF0
DCGM_FP64_BLANK = 140737488355328.0  # 2**47


def dcgm_value(raw: str | float) -> float | None:
    """The value, or None for DCGM's blank/not-found/not-supported sentinels or NaN."""
    if isinstance(raw, str):
        raw = raw.strip()
        try:
            as_int = int(raw)
        except ValueError:
            as_int = None
        if as_int is not None:
            if as_int >= DCGM_INT64_BLANK or DCGM_INT32_BLANK <= as_int <= 0x7FFFFFFF:
                return None
            return float(as_int)
        try:
            value = float(raw)
        except ValueError:
            return None
    else:
        value = float(raw)
    if not math.isfinite(value) or value >= DCGM_FP64_BLANK:
        return None
    if DCGM_INT32_BLANK <= value <= 0x7FFFFFFF:
        return None
    return value


def _dcgm_row(row: Row, metric: str, raw: str | float, result: ImportResult) -> None:
    value = dcgm_value(raw)
    if metric in DCGM_FIELDS:
        key, scale = DCGM_FIELDS[metric]
        row[key] = None if value is None else _int_or_float(value * scale)
    elif metric in DCGM_REASON_FIELDS:
        mask = None if value is None else int(value)
        row["clocks_event_reasons"] = mask
        row.update(_reasons(mask))
    elif metric.startswith("DCGM_"):
        key = "dcgm_" + metric.removeprefix("DCGM_FI_").lower()
        if key not in result.unknown_fields:
            result.unknown_fields.append(key)
        row[key] = _int_or_float(value)


def _host_label(labels: dict[str, str]) -> str | None:
    return labels.get("Hostname") or labels.get("hostname") or labels.get("instance")


def parse_dcgm_text(text: str, *, t_ns: int) -> ImportResult:
    """One dcgm-exporter scrape (`curl host:9400/metrics`), all taken at `t_ns`."""
    result = ImportResult("gpu", "dcgm")
    rows: dict[tuple[str | None, int], Row] = {}
    good_lines = []
    for line in text.splitlines():
        # A torn last line (no value) would make the whole parse fail: drop it.
        if line.strip() and not line.startswith("#") and len(line.rsplit(maxsplit=1)) < 2:
            result.skipped_lines += 1
            continue
        good_lines.append(line)
    try:
        families = list(text_string_to_metric_families("\n".join(good_lines) + "\n"))
    except ValueError as exc:
        raise UsageError(
            f"not Prometheus text: {exc}", hint="is this a dcgm-exporter scrape?"
        ) from None
    for family in families:
        for sample in family.samples:
            labels = dict(sample.labels)
            gpu = _num(labels.get("gpu"))
            if gpu is None:
                continue
            key = (_host_label(labels), int(gpu))
            row = rows.setdefault(
                key,
                {"t_ns": t_ns, "gpu": int(gpu), "host": key[0], "uuid": labels.get("UUID"),
                 "name": labels.get("modelName"), "imported_from": "dcgm"},
            )  # fmt: skip
            _dcgm_row(row, sample.name.removesuffix("_total"), sample.value, result)
    result.rows = sorted(rows.values(), key=lambda r: (r["host"] or "", r["gpu"]))
    if not result.rows:
        raise UsageError(
            "no DCGM_FI_* samples with a gpu label found", hint="is this dcgm-exporter output?"
        )
    return result


def parse_prom_range(
    text: str, *, start_ns: int | None = None, end_ns: int | None = None
) -> ImportResult:
    """A Prometheus `/api/v1/query_range` answer (resultType matrix) of DCGM metrics."""
    result = ImportResult("gpu", "prom-range")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise UsageError(
            f"not JSON: {exc}", hint="save the raw /api/v1/query_range answer"
        ) from None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        raise UsageError(
            "expected a Prometheus query_range answer with resultType 'matrix'",
            hint="use /api/v1/query_range (not /query) and save the JSON as returned",
        )
    rows: dict[tuple[str | None, int, int], Row] = {}
    for series in data.get("result") or []:
        labels = dict(series.get("metric") or {})
        metric = labels.get("__name__", "")
        gpu = _num(labels.get("gpu"))
        if gpu is None or not metric:
            continue
        host = _host_label(labels)
        for point in series.get("values") or []:
            try:
                t_ns = int(round(float(point[0]) * 1000)) * 1_000_000
            except (TypeError, ValueError, IndexError):
                result.skipped_lines += 1
                continue
            if (start_ns is not None and t_ns < start_ns) or (end_ns is not None and t_ns > end_ns):
                continue
            row = rows.setdefault(
                (host, int(gpu), t_ns),
                {"t_ns": t_ns, "gpu": int(gpu), "host": host, "uuid": labels.get("UUID"),
                 "name": labels.get("modelName"), "imported_from": "prom-range"},
            )  # fmt: skip
            _dcgm_row(row, metric, str(point[1]), result)
    result.rows = sorted(rows.values(), key=lambda r: (r["t_ns"], r["host"] or "", r["gpu"]))
    return result


# --- Locust stats history -----------------------------------------------------------
def parse_locust_history(text: str) -> ImportResult:
    """Locust `*_stats_history.csv`: rows per timestamp and request name, as imported."""
    result = ImportResult("locust_history", "locust")
    result.notes.append(
        "Locust history percentiles are rounded and cover a 10 s window (or the whole run); "
        "they are kept for reference only, not used for latency findings"
    )
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or "Timestamp" not in reader.fieldnames:
        raise UsageError("no 'Timestamp' column: not a Locust stats history CSV")
    for record in reader:
        try:
            t_ns = int(record["Timestamp"]) * 1_000_000_000
        except (TypeError, ValueError):
            result.skipped_lines += 1
            continue
        if None in record or None in record.values():  # too many / too few cells: torn
            result.skipped_lines += 1
            continue
        row: Row = {"t_ns": t_ns, "imported_from": "locust"}
        for name, raw in record.items():
            if name == "Timestamp" or name is None:
                continue
            key = re.sub(r"\W+", "_", name.strip().lower().replace("%", "pct")).strip("_")
            if name.endswith("%"):
                key = "p" + name[:-1].replace(".", "_") + "_ms"
            if name in ("Type", "Name"):
                row[key] = raw
                continue
            row[key] = None if raw in (None, "", "N/A") else _int_or_float(_num(raw))
        result.rows.append(row)
    return result


# --- detection --------------------------------------------------------------------
FORMATS = ("dmon", "query-gpu", "dcgm", "prom-range", "locust")


def detect_format(text: str) -> str:
    head = text.lstrip()[:4096]
    if head.startswith("{"):
        return "prom-range"
    if "DCGM_FI_" in head:
        return "dcgm"
    first = head.splitlines()[0] if head else ""
    if first.startswith("#") and re.search(r"\bgpu\b", first.lower()):
        return "dmon"
    if first.startswith("Timestamp,") and "Requests/s" in first:
        return "locust"
    if "timestamp" in first.lower() or re.match(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d", first):
        return "query-gpu"
    raise UsageError(
        "cannot tell the file's format",
        hint=f"give --format (one of {', '.join(FORMATS)})",
    )


Parser = Callable[..., ImportResult]
