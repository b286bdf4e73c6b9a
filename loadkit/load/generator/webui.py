"""loadkit's numbers in Locust's own web UI (`locust -f scenarios/x.py` without --headless).

Through the extension points of Locust's web UI (see Locust's
`examples/extend_web_ui.py`): a `loadkit` tab declared with
`template_args["extended_tabs"]` and `["extended_tables"]`, filled from an
`extended_stats` entry that we add to the UI's `/stats/requests` poll; and
the snapshot as JSON at `/loadkit/stats`. The numbers are the same
`LiveRunReader` snapshot that `loadkit run` serves and prints: corrected
and service quantiles over the last 10 complete seconds, merged over every
process writing into the run directory.

The snapshot is recomputed only when a new second completes (it walks HDR
counts in Python, a few milliseconds, inside this Locust process's event
loop), so a browser polling every 2 s costs the load little.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadkit.load.live import LiveRunReader, LiveSnapshot
from loadkit.rundir.writer import read_manifest_raw

TAB_KEY = "loadkit"
_COLUMNS = [
    ("latency", "Latency (last 10 s)"),
    ("p50_ms", "P50 ms"),
    ("p95_ms", "P95 ms"),
    ("p99_ms", "P99 ms"),
    ("p999_ms", "P99.9 ms"),
    ("offered_per_s", "Offered /s"),
    ("achieved_per_s", "Achieved /s"),
    ("in_flight", "In flight"),
    ("dispatch_lag_ms", "Dispatch lag ms"),
    ("errors", "Errors"),
    ("dropped", "Dropped"),
    ("phase", "Phase"),
]


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000.0, 3)


def table_rows(s: LiveSnapshot) -> list[dict[str, Any]]:
    """The tab's rows: corrected first (the number to judge by), then service."""
    rows = []
    for kind, label, values in (
        ("corrected", "corrected (from intended send)", s.corrected_s),
        ("service", "service (from actual send)", s.service_s),
    ):
        rows.append(
            {
                "kind": kind,
                "latency": label,
                "p50_ms": _ms(values["p50"]),
                "p95_ms": _ms(values["p95"]),
                "p99_ms": _ms(values["p99"]),
                "p999_ms": _ms(values["p999"]),
                "offered_per_s": round(s.offered_per_s, 1),
                "achieved_per_s": round(s.achieved_per_s, 1),
                "in_flight": s.in_flight,
                "dispatch_lag_ms": _ms(s.dispatch_lag_max_s),
                "errors": s.errors_total,
                "dropped": s.dropped_total,
                "phase": s.phase or "",
            }
        )
    return rows


class WebUiStats:
    """The current run's snapshot, read from its run directory on demand."""

    def __init__(self, run_dir: Callable[[], Path | None], total_s: float):
        self._run_dir = run_dir
        self._total_s = total_s
        self._reader: LiveRunReader | None = None
        self._start_ns: int | None = None
        self._cached: tuple[int | None, LiveSnapshot] | None = None

    def snapshot(self) -> LiveSnapshot | None:
        run_dir = self._run_dir()
        if run_dir is None:
            return None
        if self._reader is None or self._reader.run_dir != Path(run_dir):
            self._reader = LiveRunReader(run_dir)
            self._cached = None
            try:
                self._start_ns = int(read_manifest_raw(run_dir).get("start_ns") or 0) or None
            except (OSError, ValueError):
                self._start_ns = None
        reader = self._reader
        reader.poll()
        last = reader.last_complete_interval()
        if self._cached is None or self._cached[0] != last:
            elapsed = (time.time_ns() - self._start_ns) / 1e9 if self._start_ns else 0.0
            self._cached = (last, reader.snapshot(elapsed, self._total_s))
        return self._cached[1]


def attach(web_ui: Any, stats: WebUiStats) -> None:
    """Add the loadkit tab and `/loadkit/stats` to a Locust `WebUI`."""
    from flask import Response, jsonify, request

    structure = [{"key": key, "title": title} for key, title in _COLUMNS]
    web_ui.template_args["extended_tabs"] = [{"title": "loadkit", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [{"key": TAB_KEY, "structure": structure}]

    @web_ui.app.route("/loadkit/stats")
    def loadkit_stats() -> Response:
        snapshot = stats.snapshot()
        return jsonify(
            {
                "snapshot": snapshot.to_dict() if snapshot else None,
                "rows": table_rows(snapshot) if snapshot else [],
            }
        )

    @web_ui.app.after_request
    def add_loadkit_stats(response: Response) -> Response:
        if request.path != "/stats/requests" or response.status_code != 200:
            return response
        try:
            data = json.loads(response.get_data(as_text=True))
        except ValueError:
            return response
        snapshot = stats.snapshot()
        extended = [e for e in data.get("extended_stats") or [] if e.get("key") != TAB_KEY]
        extended.append({"key": TAB_KEY, "data": table_rows(snapshot) if snapshot else []})
        data["extended_stats"] = extended
        response.set_data(json.dumps(data))
        return response
