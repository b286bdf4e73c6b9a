"""A Prometheus `/api/v1/query_range` answer (resultType matrix) of DCGM metrics."""

from __future__ import annotations

import json

from loadkit.errors import UsageError
from loadkit.telemetry.importers.base import Importer, ImportOptions, ImportResult, Row, num
from loadkit.telemetry.importers.dcgm import dcgm_row, host_label


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
        gpu = num(labels.get("gpu"))
        if gpu is None or not metric:
            continue
        host = host_label(labels)
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
            dcgm_row(row, metric, str(point[1]), result)
    result.rows = sorted(rows.values(), key=lambda r: (r["t_ns"], r["host"] or "", r["gpu"]))
    return result


def detect(head: str) -> bool:
    return head.startswith("{")


def parse(text: str, options: ImportOptions) -> ImportResult:
    return parse_prom_range(text, start_ns=options.window_start_ns, end_ns=options.window_end_ns)


IMPORTER = Importer(
    name="prom-range",
    usage="curl 'http://PROM/api/v1/query_range?query=DCGM_FI_DEV_SM_CLOCK&start=..&end=..&step=1s'",
    detect=detect,
    parse=parse,
)
