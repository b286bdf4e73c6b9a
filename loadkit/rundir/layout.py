"""Names of the pieces of a run directory (docs/run-format.md), in one place."""

from __future__ import annotations

# History:
#   1 (loadkit 0.1.0): first version.
SCHEMA_VERSION = 1
KNOWN_SCHEMA_VERSIONS = (1,)

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
