"""Locust's `*_stats_history.csv`, kept as an imported series only: its percentiles
are rounded and windowed, so loadkit reports nothing from them."""

from __future__ import annotations

import csv
import io
import re

from loadkit.errors import UsageError
from loadkit.telemetry.importers.base import (
    Importer,
    ImportOptions,
    ImportResult,
    Row,
    first_line,
    int_or_float,
    num,
)


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
            row[key] = None if raw in (None, "", "N/A") else int_or_float(num(raw))
        result.rows.append(row)
    return result


def detect(head: str) -> bool:
    first = first_line(head)
    return first.startswith("Timestamp,") and "Requests/s" in first


def parse(text: str, options: ImportOptions) -> ImportResult:
    return parse_locust_history(text)


IMPORTER = Importer(
    name="locust",
    usage="<prefix>_stats_history.csv (kept for reference; loadkit reports nothing from it)",
    detect=detect,
    parse=parse,
)
