"""What every importer is: an `Importer` entry, the `ImportResult` it returns, and the
small parsing helpers the formats share.

An importer is a pure function `(text, ImportOptions) -> ImportResult` producing rows
in the run-format schema of the matching source (GPU rows as in `gpu.jsonl`), with
unknown columns kept under a prefixed name and unparseable values as null.
Partial (torn) lines are skipped and counted, never fatal.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

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


@dataclass(frozen=True)
class ImportOptions:
    """What `loadkit import`'s flags say about a file; each format reads the ones it needs."""

    start_ns: int | None = None  # dmon without -o DT: when the log began
    interval_s: float = 1.0  # dmon without -o DT: dmon -d
    at_ns: int | None = None  # dcgm scrape: when it was taken (default: the file's time)
    file_mtime_ns: int | None = None
    tz_offset_hours: float | None = None  # nvidia-smi: the writer's time zone
    window_start_ns: int | None = None  # prom-range: keep from
    window_end_ns: int | None = None  # prom-range: keep until
    fields: list[str] | None = None  # query-gpu written with noheader: the --query-gpu list


@dataclass(frozen=True)
class Importer:
    """One file format `loadkit import` reads (one module each, listed in the registry)."""

    name: str  # `--format` value; the rows' `imported_from`
    usage: str  # how the file is made: one line of `loadkit import --help`
    # Whether a file's head (its first 4 KB, leading blanks removed) is this format.
    # Asked in registry order: the most specific formats come first.
    detect: Callable[[str], bool]
    parse: Callable[[str, ImportOptions], ImportResult]


def reasons(mask: int | None) -> Row:
    return dict(decode_reasons(mask))  # the same NVML bits the live sampler decodes


def num(text: str | None) -> float | None:
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


def int_or_float(value: float | None) -> int | float | None:
    if value is None:
        return None
    return int(value) if value.is_integer() else value


def utc_offset(offset_hours: float | None) -> timezone | None:
    return None if offset_hours is None else timezone(timedelta(hours=offset_hours))


def to_ns(dt: datetime, tz: timezone | None) -> int:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=tz) if tz is not None else dt.astimezone()  # local time
    return int(dt.timestamp() * 1_000_000) * 1000


def first_line(head: str) -> str:
    return head.splitlines()[0] if head else ""
