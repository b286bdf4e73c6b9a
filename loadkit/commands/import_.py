"""`loadkit import`: bring telemetry from other tools into a run directory."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loadkit import __version__
from loadkit.commands import import_prometheus
from loadkit.errors import UsageError
from loadkit.rundir import JsonlWriter, safe_name, write_manifest
from loadkit.rundir.layout import MANIFEST_FILE, SCHEMA_VERSION, TELEMETRY_DIR
from loadkit.rundir.writer import read_manifest_raw
from loadkit.telemetry import importers
from loadkit.telemetry.importers import FORMATS, ImportResult

HELP = "import nvidia-smi / DCGM / Prometheus / Locust files into a run directory"

DESCRIPTION = """\
Parse telemetry you already have and write it as a loadkit run directory
(new, or joined to an existing run with --run), so `loadkit analyze` and
`loadkit report` can use it beside (or instead of) a load test.

formats (detected from the content; or give --format):
  dmon        nvidia-smi dmon [-s ...] [-o DT] > dmon.log   (no -o DT: give --start)
  query-gpu   nvidia-smi --query-gpu=timestamp,index,clocks.sm,... --format=csv -lms 100
  dcgm        curl -s http://HOST:9400/metrics > dcgm.txt     (one instant: --at, or the file time)
  prom-range  curl 'http://PROM/api/v1/query_range?query=DCGM_FI_DEV_SM_CLOCK&start=..&end=..&step=1s'
  locust      <prefix>_stats_history.csv (kept for reference; loadkit reports nothing from it)

Times in nvidia-smi output are the local time of the machine that wrote them:
give --utc-offset HOURS when that was not this machine's time zone.

production's Prometheus (a run of kind `production`, docs/oncall.md):
  loadkit import --prometheus http://prometheus:9090 --window 6h [--step 5s]
                 [--selector '{job="triton"}'] [--model M] [--latency-histogram NAME]

examples:
  loadkit import dmon.log
  loadkit import gpu.csv --run reports/20250101-120000-burst
  loadkit import dmon-no-times.log --start 2025-01-01T12:00:00Z --interval 1
"""


def parse_time(text: str) -> int:
    """ISO 8601 (naive = local time) or Unix seconds -> ns."""
    try:
        return int(float(text) * 1e9)
    except ValueError:
        pass
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (ISO 8601, e.g. 2025-01-01T12:00:00Z, or Unix seconds)"
        ) from None
    if stamp.tzinfo is None:
        stamp = stamp.astimezone()
    return int(stamp.timestamp() * 1e6) * 1000


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", type=Path, metavar="FILE")
    parser.add_argument("--format", choices=FORMATS, help="default: detect from the content")
    parser.add_argument("--run", type=Path, metavar="DIR", help="join this existing run directory")
    parser.add_argument("--out", type=Path, default=Path("reports"), help="parent of a new run")
    parser.add_argument("--run-id", help="name of the new run directory")
    parser.add_argument("--start", type=parse_time, help="dmon without -o DT: when it began")
    parser.add_argument("--interval", type=float, default=1.0, help="dmon without -o DT: -d (s)")
    parser.add_argument("--at", type=parse_time, help="dcgm scrape: when it was taken")
    parser.add_argument("--utc-offset", type=float, metavar="HOURS", help="nvidia-smi time zone")
    parser.add_argument("--window-start", type=parse_time, help="prom-range: keep from")
    parser.add_argument("--window-end", type=parse_time, help="prom-range: keep until")
    parser.add_argument(
        "--fields", help="query-gpu CSV written with noheader: the --query-gpu list"
    )
    import_prometheus.add_arguments(parser)


def parse_file(path: Path, args: argparse.Namespace) -> ImportResult:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    fmt = args.format or importers.detect_format(text)
    if fmt == "dmon":
        return importers.parse_dmon(
            text, start_ns=args.start, interval_s=args.interval, tz_offset_hours=args.utc_offset
        )
    if fmt == "query-gpu":
        fields = [f.strip() for f in args.fields.split(",")] if args.fields else None
        return importers.parse_query_gpu(text, fields=fields, tz_offset_hours=args.utc_offset)
    if fmt == "dcgm":
        t_ns = args.at if args.at is not None else int(path.stat().st_mtime * 1e9)
        return importers.parse_dcgm_text(text, t_ns=t_ns)
    if fmt == "prom-range":
        return importers.parse_prom_range(text, start_ns=args.window_start, end_ns=args.window_end)
    return importers.parse_locust_history(text)


def _series_path(run_dir: Path, result: ImportResult) -> Path:
    """`telemetry/<source>.jsonl`, or `<source>-<format>.jsonl` if that is taken."""
    folder = run_dir / TELEMETRY_DIR
    plain = folder / f"{result.source}.jsonl"
    if not plain.exists():
        return plain
    return folder / f"{result.source}-{safe_name(result.format)}.jsonl"


def _new_manifest(run_id: str, results: list[ImportResult]) -> dict[str, Any]:
    times = [r["t_ns"] for res in results for r in res.rows]
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "kind": "import",
        "status": "complete",
        "start_ns": min(times) if times else None,
        "end_ns": max(times) if times else None,
        "command_line": list(sys.argv),
        "loadkit_version": __version__,
        "scenario": None,
        "target": None,
        "slo": None,
        "environment": {"host": {}, "gpu": {"kind": "imported", "devices": []}},
        "sources": [],
        "notes": [],
    }


def run(args: argparse.Namespace) -> int:
    if args.prometheus:
        return import_prometheus.run_prometheus(args, parse_time)
    if not args.files:
        raise UsageError("give a FILE to import, or --prometheus URL --window 6h")
    results = [(path, parse_file(path, args)) for path in args.files]
    if args.run is not None:
        run_dir = args.run
        if not (run_dir / MANIFEST_FILE).exists():
            raise UsageError(f"{run_dir} is not a run directory (no {MANIFEST_FILE})")
        manifest = read_manifest_raw(run_dir)
    else:
        first = results[0][1].format
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        run_id = args.run_id or f"{stamp}-import-{safe_name(first)}"
        run_dir = args.out / run_id
        if run_dir.exists() and any(run_dir.iterdir()):
            raise UsageError(f"{run_dir} already exists", hint="give --run to join it, or --run-id")
        run_dir.mkdir(parents=True, exist_ok=True)
        manifest = _new_manifest(run_id, [r for _, r in results])
    for path, result in results:
        target = _series_path(run_dir, result)
        with JsonlWriter(target) as writer:
            for row in result.rows:
                writer.write(row)
        warning = None
        if result.skipped_lines:
            warning = f"{result.skipped_lines} partial or malformed line(s) skipped"
        manifest.setdefault("sources", []).append(
            {
                "name": target.stem,
                "file": f"{TELEMETRY_DIR}/{target.name}",
                "interval_s": None,
                "simulated": False,
                "warning": warning,
                "imported_from": {"format": result.format, "path": str(path)},
                "unknown_fields": result.unknown_fields,
            }
        )
        manifest.setdefault("notes", []).extend(result.notes)
        print(
            f"{path}: {len(result.rows)} rows ({result.format}) -> {target}"
            + (f"; {warning}" if warning else ""),
            file=sys.stderr,
        )
    write_manifest(run_dir, manifest)
    print(f"next: loadkit analyze {run_dir}", file=sys.stderr)
    return 0
