"""k6's JSON output (`k6 run --out json=results.json`): one request per line, kept as an
imported series like Locust's history.

The format is documented at https://grafana.com/docs/k6/latest/results-output/real-time/json/
and written by k6's `output/json` package (grafana/k6, `wrapper.go`): NDJSON, each line
either `{"type": "Metric", "data": {name, type, contains, thresholds, submetrics},
"metric": NAME}` declaring a metric, or `{"type": "Point", "data": {"time": RFC 3339 with
nanoseconds, "value": ..., "tags": {...}, "metadata": {...}}, "metric": NAME}`, one sample.

Only `http_req_duration` points are kept, one row per request: `value` is the request's
duration in milliseconds (sending + waiting + receiving, no connection set-up) and `time`
is when it ended (k6 stamps every sample of an HTTP request with its end), so the row's
`t_ns` / `sent_ns` are the end minus the duration. Tags give the request's name (k6 names a
request by its URL unless the script tags it), method, status and `expected_response`
(k6's own verdict; without it, a status from 200 to 399 is ok). Other metrics (vus,
http_reqs, checks, ...) are counted in the notes, not imported.

The rows go to `telemetry/k6_requests.jsonl`, an imported series beside the analysis
(k6 measured without coordinated-omission correction and wrote no loadkit histograms,
so loadkit reports no latency finding from them).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime
from typing import Any

from loadkit.errors import UsageError
from loadkit.telemetry.importers.base import (
    Importer,
    ImportOptions,
    ImportResult,
    Row,
    first_line,
    num,
)

DURATION_METRIC = "http_req_duration"
_RFC3339 = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?\d*(Z|[+-]\d\d:\d\d)$", re.IGNORECASE
)


def time_ns(text: str) -> int | None:
    """k6's RFC 3339 time (nanoseconds, `Z` or an offset) -> integer ns, else None."""
    match = _RFC3339.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        return None
    whole, fraction, zone = match.groups()
    zone = "+00:00" if zone.upper() == "Z" else zone
    seconds = int(datetime.fromisoformat(whole + zone).timestamp())
    return seconds * 1_000_000_000 + int((fraction or "0").ljust(9, "0"))


def _request_row(data: dict[str, Any]) -> Row | None:
    done_ns = time_ns(data.get("time", ""))
    value = data.get("value")
    if done_ns is None or not isinstance(value, int | float) or isinstance(value, bool):
        return None
    tags = data.get("tags") or {}
    status = num(str(tags.get("status", "")))
    expected = tags.get("expected_response")
    if expected in ("true", "false"):
        ok = expected == "true"
    else:
        ok = status is not None and 200 <= status < 400
    sent_ns = done_ns - int(round(value * 1e6))
    error_kind = None
    if not ok:
        error_kind = f"http_{int(status)}" if status else f"k6_{tags.get('error_code') or 'error'}"
    return {
        "t_ns": sent_ns,
        "sent_ns": sent_ns,
        "done_ns": done_ns,
        "name": tags.get("name") or tags.get("url") or DURATION_METRIC,
        "ok": ok,
        "error_kind": error_kind,
        "latency_ms": value,
        "status": None if status is None else int(status),
        "method": tags.get("method"),
        "url": tags.get("url"),
        "scenario": tags.get("scenario"),
        "group": tags.get("group") or None,
        "imported_from": "k6",
    }


def parse_k6_json(text: str) -> ImportResult:
    """`k6 run --out json=FILE`: one row per `http_req_duration` point."""
    result = ImportResult("k6_requests", "k6")
    others: Counter[str] = Counter()
    declared = False
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            result.skipped_lines += 1  # a torn last line
            continue
        if not isinstance(doc, dict) or doc.get("type") not in ("Metric", "Point"):
            result.skipped_lines += 1
            continue
        declared = True
        if doc["type"] == "Metric":
            continue
        if doc.get("metric") != DURATION_METRIC:
            others[str(doc.get("metric"))] += 1
            continue
        row = _request_row(doc.get("data") or {})
        if row is None:
            result.skipped_lines += 1
            continue
        result.rows.append(row)
    if not declared:
        raise UsageError(
            "no k6 Metric or Point lines found",
            hint="import the file k6 wrote with `k6 run --out json=FILE` (gunzip a .gz first)",
        )
    result.rows.sort(key=lambda r: r["t_ns"])
    result.notes.append(
        "k6 request durations are imported for reference (telemetry/k6_requests.jsonl): "
        "measured without coordinated-omission correction, no latency finding is made from them"
    )
    if others:
        counted = ", ".join(f"{name} {count}" for name, count in sorted(others.items()))
        result.notes.append(f"k6 points not imported: {counted}")
    return result


def detect(head: str) -> bool:
    try:
        doc = json.loads(first_line(head))
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("type") in ("Metric", "Point") and "metric" in doc


def parse(text: str, options: ImportOptions) -> ImportResult:
    return parse_k6_json(text)


IMPORTER = Importer(
    name="k6",
    usage="k6 run --out json=k6.json script.js   (per-request durations, kept for reference)",
    detect=detect,
    parse=parse,
)
