"""`loadkit import --prometheus URL --window 6h`: a window of production's Prometheus as a run.

Pulls the window through the exporter families (loadkit/telemetry/prometheus/)
and writes a run directory of kind `production` (`loadkit.production_window`,
which `loadkit oncall` calls too), so `loadkit analyze` and `loadkit report`
read it like any other run.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

from loadkit.errors import UsageError
from loadkit.production_window import import_window, parse_selectors
from loadkit.recording import Recording
from loadkit.rundir import JsonlWriter
from loadkit.rundir.layout import MANIFEST_FILE, TELEMETRY_DIR
from loadkit.rundir.schema import LOCAL_SUFFIX, PLACE_SERVER, Manifest
from loadkit.telemetry.prometheus.client import NS, PrometheusClient
from loadkit.telemetry.prometheus.families import FAMILIES
from loadkit.telemetry.prometheus.window import (
    DEFAULT_STEP_S,
    MAX_STEPS,
    choose_step,
    detect_scrape_interval,
    pull_server_series,
)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str) -> float:
    """'6h', '90m', '5s', '250ms', '30' (seconds) -> seconds."""
    match = _DURATION.match(text)
    if not match or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 6h, 90m, 5s)")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    prom = parser.add_argument_group("production window from Prometheus (--prometheus)")
    prom.add_argument("--prometheus", metavar="URL", help="Prometheus base URL (http://host:9090)")
    prom.add_argument("--window", type=parse_duration, help="how far back from --end (e.g. 6h)")
    prom.add_argument("--end", help="end of the window (ISO 8601 or Unix seconds; default: now)")
    prom.add_argument(
        "--step",
        type=parse_duration,
        help="resolution (default: the scrape interval, read from Prometheus's `up`; coarser "
        f"only for a window of over {MAX_STEPS:,} scrapes; {DEFAULT_STEP_S:g}s if unknown)",
    )
    prom.add_argument(
        "--selector",
        action="append",
        default=[],
        metavar="[FAMILY=]{...}",
        help='label matchers for every query, or one family\'s (e.g. node={instance="gpu-3:9100"}); '
        f"families: {', '.join(FAMILIES)}, app-histogram",
    )
    prom.add_argument("--model", help="the Triton model to analyze (default: the busiest)")
    prom.add_argument(
        "--latency-histogram", metavar="NAME", help="application histogram <NAME>_bucket (seconds)"
    )
    prom.add_argument("--prom-user", help="basic-auth user")
    prom.add_argument("--prom-password-file", type=Path, help="basic-auth password, from a file")
    prom.add_argument(
        "--prom-token-file", type=Path, help="bearer token, from a file (never written to the run)"
    )


def _secret(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None


def _window(args: argparse.Namespace, parse_time: Any) -> tuple[int, int]:
    if args.window is None:
        raise UsageError("--prometheus needs --window (e.g. --window 6h)")
    if args.end is None:
        end_ns = time.time_ns()
    else:
        try:
            end_ns = parse_time(args.end)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(str(exc)) from None
    return end_ns - int(args.window * NS), end_ns


def _client(args: argparse.Namespace) -> PrometheusClient:
    return PrometheusClient(
        args.prometheus,
        username=args.prom_user,
        password=_secret(args.prom_password_file),
        token=_secret(args.prom_token_file),
    )


def run_prometheus(args: argparse.Namespace, parse_time: Any) -> int:
    if args.files:
        raise UsageError("give files or --prometheus, not both")
    if args.run is not None:
        return join_run(args)
    start_ns, end_ns = _window(args, parse_time)
    imported = import_window(
        _client(args),
        start_ns,
        end_ns,
        parse_selectors(args.selector),
        args.out,
        args.run_id,
        model=args.model,
        step_s=args.step,
        latency_histogram=args.latency_histogram,
        command_line=_command_line(),
    )
    print(imported.summary, file=sys.stderr)
    for note in imported.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"next: loadkit analyze {imported.path}", file=sys.stderr)
    return 0


def _command_line() -> list[str]:
    """argv without secrets' values (only file names are ever given, but be sure)."""
    out: list[str] = []
    for arg in sys.argv:
        out.append(re.sub(r"(?i)(://[^/@:]+:)[^/@]+@", r"\1***@", arg))
    return out


# --- a load test's own window, joined: --run DIR -----------------------------------------
def join_run(args: argparse.Namespace) -> int:
    """The server's GPU and host series for a load test's own window, from Prometheus, into
    its run directory (the server's exporters: place `server`)."""
    run_dir = Path(args.run)
    if not (run_dir / MANIFEST_FILE).exists():
        raise UsageError(f"{run_dir} is not a run directory (no {MANIFEST_FILE})")
    if args.window is not None or args.end is not None:
        raise UsageError(
            "--run reads the run's own window (its manifest's start and end)",
            hint="leave out --window and --end",
        )
    recording = Recording.join(run_dir)
    info = Manifest.from_dict(recording.manifest)
    if info.start_ns is None or info.end_ns is None:
        raise UsageError(
            f"{run_dir} has no start and end in its manifest (status {info.status})",
            hint="a run killed before it finished has no end: import a --window instead",
        )
    client = _client(args)
    selectors = parse_selectors(args.selector)
    scrape = (
        None
        if args.step is not None
        else detect_scrape_interval(client, selectors.for_family("node"), info.end_ns)
    )
    step_s, _ = choose_step(args.step, scrape, (info.end_ns - info.start_ns) / NS)
    pulled = pull_server_series(
        client, start_ns=info.start_ns, end_ns=info.end_ns, step_s=step_s, selectors=selectors
    )
    if not pulled.rows:
        raise UsageError(
            "Prometheus has no GPU or host series of the server for the run's window: "
            + "; ".join(pulled.notes),
            hint="check --selector dcgm=... / node=... and that Prometheus scrapes the exporters",
        )
    written = []
    for series, rows in pulled.rows.items():
        stem = _joined_stem(recording, info, series)
        with JsonlWriter(run_dir / TELEMETRY_DIR / f"{stem}.jsonl") as out:
            for row in rows:
                out.write(row)
        hosts = {r.get("host") for r in rows} - {None}
        recording.add_source(
            {
                "name": stem,
                "file": f"{TELEMETRY_DIR}/{stem}.jsonl",
                "interval_s": step_s,
                "simulated": False,
                "warning": None,
                "imported_from": {
                    "format": "prometheus",
                    "path": re.sub(r"(://)[^/@]+@", r"\1", client.base_url),
                    "series": [s for s in pulled.sources if s["series"] == series],
                },
                "unknown_fields": [],
                "place": PLACE_SERVER,
                "host": hosts.pop() if len(hosts) == 1 else pulled.hosts.get(series),
                "parts": {},
            }
        )
        written.append(f"{stem} {len(rows)}")
    for note in pulled.notes:
        recording.add_note(f"prometheus: {note}")
        print(f"note: {note}", file=sys.stderr)
    print(
        f"{client.base_url}: the run's window at {step_s:g} s ({', '.join(written)}) -> {run_dir}",
        file=sys.stderr,
    )
    print(f"next: loadkit analyze {run_dir}", file=sys.stderr)
    return 0


def _joined_stem(recording: Recording, info: Manifest, series: str) -> str:
    """The server's series holds the name (the analysis reads it); a copy of this machine
    already there moves aside to `<series>-local`, one of the server's stays and Prometheus's
    is `<series>-prometheus`."""
    folder = recording.path / TELEMETRY_DIR
    if not (folder / f"{series}.jsonl").exists() and not any(folder.glob(f"{series}.seg*")):
        return series
    if info.place(series) == PLACE_SERVER:
        recording.add_note(
            f"{series}: the run's own {series} series is the server's already; "
            f"Prometheus's is {TELEMETRY_DIR}/{series}-prometheus.jsonl"
        )
        return f"{series}-prometheus"
    local = f"{series}{LOCAL_SUFFIX}"
    recording.rename_series(series, local)
    recording.add_note(
        f"{series}: the server's from Prometheus; this machine's ({info.place(series)}) "
        f"moved to {TELEMETRY_DIR}/{local}.jsonl"
    )
    return series
