"""A window of production's Prometheus, written as a run directory of kind `production`.

One code path for `loadkit import --prometheus` and `loadkit oncall` (an alert's
window): the exporter families pull the rows (loadkit/telemetry/prometheus/),
`Recording` writes them with the manifest's `production` section, and
`loadkit analyze` reads the result like any other run.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from loadkit.recording import Recording, imported_environment
from loadkit.rundir.layout import TELEMETRY_DIR
from loadkit.rundir.schema import PLACE_SERVER
from loadkit.rundir.writer import default_run_id
from loadkit.telemetry.prometheus.client import PrometheusClient
from loadkit.telemetry.prometheus.families import FAMILIES
from loadkit.telemetry.prometheus.window import (
    PulledWindow,
    Selectors,
    parse_selector,
    pull_window,
)

_USERINFO = re.compile(r"(://)[^/@]+@")


def parse_selectors(raw: Sequence[str]) -> Selectors:
    """`--selector` values: '{...}' for every server query, 'FAMILY={...}' for one family's."""
    common: list[str] = []
    by_family: dict[str, str] = {}
    known = {*FAMILIES, "app-histogram"}
    for item in raw:
        name, sep, rest = item.partition("=")
        if sep and name.strip() in known and rest.strip().startswith("{"):
            family = name.strip()
            by_family[family] = ",".join(
                m for m in (by_family.get(family, ""), parse_selector(rest)) if m
            )
        else:
            common.append(parse_selector(item))
    return Selectors(",".join(m for m in common if m), by_family)


@dataclass(frozen=True)
class ImportedWindow:
    """The run directory written, what Prometheus's answers left to say, and one line on it."""

    path: Path
    notes: tuple[str, ...]
    summary: str


def import_window(
    client: PrometheusClient,
    start_ns: int,
    end_ns: int,
    selectors: Selectors,
    out_dir: str | Path,
    run_id: str | None = None,
    *,
    model: str | None = None,
    step_s: float | None = None,
    latency_histogram: str | None = None,
    command_line: Sequence[str] = (),
) -> ImportedWindow:
    """Pull [start_ns, end_ns] from Prometheus and write it as `out_dir/run_id` (default
    `<end time>-production`). Raises what the client and the pull raise (a Prometheus that
    cannot be reached, a window without Triton's series)."""
    pulled = pull_window(
        client,
        start_ns=start_ns,
        end_ns=end_ns,
        step_s=step_s,
        selectors=selectors,
        model=model,
        latency_histogram=latency_histogram,
    )
    path = _write(client, pulled, start_ns, end_ns, Path(out_dir), run_id, command_line)
    rows = sum(len(r) for r in pulled.rows.values())
    parts = ", ".join(f"{k} {len(v)}" for k, v in pulled.rows.items())
    summary = f"{client.base_url}: {rows} rows ({parts}) -> {path}"
    return ImportedWindow(path, tuple(pulled.notes), summary)


def _write(
    client: PrometheusClient,
    pulled: PulledWindow,
    start_ns: int,
    end_ns: int,
    out_dir: Path,
    run_id: str | None,
    command_line: Sequence[str],
) -> Path:
    info = client.build_info()
    recording = Recording.create(
        out_dir=out_dir,
        run_id=run_id or default_run_id("production", end_ns),
        kind="production",
        scenario=None,
        target={
            "url": _USERINFO.sub(r"\1", client.base_url),
            "protocol": "prometheus",
            "model": pulled.model,
            "embedded": False,
            "requests": None,
        },
        environment=imported_environment(),
        command_line=list(command_line),
    )
    writer = recording.writer
    for series, rows in pulled.rows.items():
        out = writer.series(series)
        for row in rows:
            out.write(row)
        recording.add_source(
            {
                "name": series,
                "file": f"{TELEMETRY_DIR}/{series}.jsonl",
                "interval_s": pulled.step_s,
                "simulated": False,
                "warning": None,
                "imported_from": {"format": "prometheus", "path": client.base_url},
                "unknown_fields": [],
                # The server's own exporters, scraped by production's Prometheus.
                "place": PLACE_SERVER,
                "host": None,
                "parts": {},
            }
        )
    for note in pulled.notes:
        recording.add_note(note)
    recording.update(
        start_ns=start_ns,
        production={
            "prometheus": writer.manifest["target"]["url"],
            "prometheus_version": info.get("version"),
            "window_start_ns": start_ns,
            "window_end_ns": end_ns,
            "step_s": pulled.step_s,
            "step_reason": pulled.step_reason,
            "chunks": pulled.chunks,
            "scrape_interval_s": pulled.scrape_interval_s,
            "rate_window": pulled.rate_window,
            "latency_source": pulled.latency_source,
            "model": pulled.model,
            "series": pulled.sources,
            "requests_made": client.requests_made,
        },
    )
    recording.finish("complete")
    recording.update(end_ns=end_ns)  # the window's end, not the time of the import
    return writer.path
