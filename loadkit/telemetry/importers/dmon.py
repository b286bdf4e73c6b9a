"""`nvidia-smi dmon` logs, any `-s` selection, with or without `-o D/T/DT`
(parsed by header; `-` is null)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

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
    to_ns,
    utc_offset,
)

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
    tz = utc_offset(tz_offset_hours)
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
        gpu = num(cells.get("gpu"))
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
            t_ns = to_ns(stamp, tz)
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
            t_ns = to_ns(stamp, tz)
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
                value = num(raw)
                row[key] = None if value is None else int_or_float(value * scale)
            else:
                if f"dmon_{name}" not in result.unknown_fields:
                    result.unknown_fields.append(f"dmon_{name}")
                row[f"dmon_{name}"] = int_or_float(num(raw))
        result.rows.append(row)
    if columns is None:
        raise UsageError(
            "no dmon header ('# gpu ...' or '#Date Time gpu ...') found",
            hint="import the file exactly as nvidia-smi dmon wrote it",
        )
    return result


def detect(head: str) -> bool:
    first = first_line(head)
    return first.startswith("#") and re.search(r"\bgpu\b", first.lower()) is not None


def parse(text: str, options: ImportOptions) -> ImportResult:
    return parse_dmon(
        text,
        start_ns=options.start_ns,
        interval_s=options.interval_s,
        tz_offset_hours=options.tz_offset_hours,
    )


IMPORTER = Importer(
    name="dmon",
    usage="nvidia-smi dmon [-s ...] [-o DT] > dmon.log   (no -o DT: give --start)",
    detect=detect,
    parse=parse,
)
