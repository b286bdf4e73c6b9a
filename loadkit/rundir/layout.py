"""Names of the pieces of a run directory (docs/run-format.md), in one place."""

from __future__ import annotations

# History:
#   1 (loadkit 0.1.0): first version.
#   2: long series (requests/, telemetry/) rolled into hourly segments, closed ones
#      gzip-compressed (`<name>.seg<NNNN>.jsonl.gz`); the request sample's reservoir
#      shrinks as the run grows. Version 1 directories read unchanged.
#   2, extended (issue 41): `environment.target_location` and the sources' `place`,
#      `host` and `parts` (optional keys: older readers ignore them; manifests
#      without them read by the legacy rules of `schema._legacy_place`).
SCHEMA_VERSION = 2
KNOWN_SCHEMA_VERSIONS = (1, 2)

MANIFEST_FILE = "manifest.json"
EVENTS_FILE = "events.jsonl"
LATENCY_DIR = "latency"
LOAD_DIR = "load"
REQUESTS_DIR = "requests"
TELEMETRY_DIR = "telemetry"
ANALYSIS_FILE = "analysis.json"
REPORT_FILE = "report.html"

# HdrHistogram range: 1 µs .. 60 s, 3 significant figures (values in µs).
HDR_LOWEST_US = 1
HDR_HIGHEST_US = 60_000_000
HDR_SIGNIFICANT_FIGURES = 3

LATENCY_KINDS = ("corrected", "service")
