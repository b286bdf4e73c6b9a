"""`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] -lms N` CSV."""

from __future__ import annotations

import csv
import io
import re
from datetime import datetime

from loadkit.errors import UsageError
from loadkit.telemetry.importers.base import (
    MIB,
    Importer,
    ImportOptions,
    ImportResult,
    Row,
    first_line,
    int_or_float,
    num,
    reasons,
    to_ns,
    utc_offset,
)

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
    tz = utc_offset(tz_offset_hours)
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
            t_ns = to_ns(datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f"), tz)
        except ValueError:
            result.skipped_lines += 1
            continue
        row: Row = {"t_ns": t_ns, "imported_from": "query-gpu"}
        for name, raw in cells.items():
            if name == "timestamp":
                continue
            if name in QUERY_FIELDS:
                key, scale = QUERY_FIELDS[name]
                value = num(raw)
                row[key] = None if value is None else int_or_float(value * scale)
            elif name in ("clocks_throttle_reasons.active", "clocks_event_reasons.active"):
                mask = int(raw, 16) if re.fullmatch(r"0x[0-9a-fA-F]+", raw) else None
                row["clocks_event_reasons"] = mask
                row.update(reasons(mask))
            elif (m := _REASON_COLUMN.match(name)) and m.group(1) in _REASON_ALIASES:
                flag = {"active": True, "not active": False}.get(raw.lower())
                row.setdefault(f"reason_{_REASON_ALIASES[m.group(1)]}", flag)
            elif name in ("name", "uuid", "pci.bus_id", "pstate", "driver_version"):
                row[name.replace(".", "_")] = raw or None
            else:
                key = "smi_" + re.sub(r"\W+", "_", name)
                if key not in result.unknown_fields:
                    result.unknown_fields.append(key)
                value = num(raw)
                text_value = None if not raw or raw.startswith("[") else raw
                row[key] = int_or_float(value) if value is not None else text_value
        row.setdefault("gpu", 0)
        result.rows.append(row)
    if header is None:
        raise UsageError("empty nvidia-smi CSV", hint="was the file written with --format=csv?")
    return result


def detect(head: str) -> bool:
    first = first_line(head)
    return "timestamp" in first.lower() or bool(re.match(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d", first))


def parse(text: str, options: ImportOptions) -> ImportResult:
    return parse_query_gpu(text, fields=options.fields, tz_offset_hours=options.tz_offset_hours)


IMPORTER = Importer(
    name="query-gpu",
    usage="nvidia-smi --query-gpu=timestamp,index,clocks.sm,... --format=csv -lms 100",
    detect=detect,
    parse=parse,
)
