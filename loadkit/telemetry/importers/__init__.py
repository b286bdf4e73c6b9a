"""The registry of importers: one module per file format, listed once here.

Adding an importer = one new module in this package holding an `IMPORTER = Importer(...)`
(its `--format` name, a usage line for `loadkit import --help`, `detect(head)` and
`parse(text, options) -> ImportResult`), plus its entry in `REGISTRY`. `loadkit import`'s
`--format` choices, its help and content detection read this registry and nothing else
(docs/architecture.md, "How to add an importer").
"""

from __future__ import annotations

from loadkit.errors import UsageError
from loadkit.telemetry.importers import dcgm, dmon, k6, locust, prom_range, query_gpu
from loadkit.telemetry.importers.base import Importer, ImportOptions, ImportResult
from loadkit.telemetry.importers.dcgm import DCGM_FIELDS, dcgm_value, parse_dcgm_text
from loadkit.telemetry.importers.dmon import DMON_COLUMNS, parse_dmon
from loadkit.telemetry.importers.locust import parse_locust_history
from loadkit.telemetry.importers.prom_range import parse_prom_range
from loadkit.telemetry.importers.query_gpu import QUERY_FIELDS, parse_query_gpu

# In the order formats are detected: the most specific first (k6's NDJSON lines and a
# query_range answer both start with "{"; a DCGM scrape's comments name the GPU as a
# dmon header does).
REGISTRY: tuple[Importer, ...] = (
    k6.IMPORTER,
    prom_range.IMPORTER,
    dcgm.IMPORTER,
    dmon.IMPORTER,
    locust.IMPORTER,
    query_gpu.IMPORTER,
)

BY_NAME: dict[str, Importer] = {i.name: i for i in REGISTRY}
FORMATS: tuple[str, ...] = tuple(i.name for i in REGISTRY)

HEAD_CHARS = 4096  # what detection looks at


def get(name: str) -> Importer:
    return BY_NAME[name]


def detect_format(text: str) -> str:
    """The first registered format whose `detect` accepts the file's head."""
    head = text.lstrip()[:HEAD_CHARS]
    for importer in REGISTRY:
        if importer.detect(head):
            return importer.name
    raise UsageError(
        "cannot tell the file's format",
        hint=f"give --format (one of {', '.join(FORMATS)})",
    )


def parse(text: str, options: ImportOptions, fmt: str | None = None) -> ImportResult:
    """The file's rows, read as `fmt` (default: detected from the content)."""
    return get(fmt or detect_format(text)).parse(text, options)


__all__ = [
    "BY_NAME",
    "DCGM_FIELDS",
    "DMON_COLUMNS",
    "FORMATS",
    "QUERY_FIELDS",
    "REGISTRY",
    "ImportOptions",
    "ImportResult",
    "Importer",
    "dcgm_value",
    "detect_format",
    "get",
    "parse",
    "parse_dcgm_text",
    "parse_dmon",
    "parse_locust_history",
    "parse_prom_range",
    "parse_query_gpu",
]
