"""`loadkit import`: bring telemetry from other tools into a run directory."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

from loadkit.commands import import_prometheus
from loadkit.errors import UsageError
from loadkit.recording import Recording, imported_environment
from loadkit.rundir import JsonlWriter, safe_name
from loadkit.rundir.layout import MANIFEST_FILE, TELEMETRY_DIR
from loadkit.rundir.writer import default_run_id
from loadkit.telemetry import importers
from loadkit.telemetry.importers import ImportOptions, ImportResult

HELP = "import nvidia-smi / DCGM / Prometheus / Locust files into a run directory"

DESCRIPTION_TEMPLATE = """\
Parse telemetry you already have and write it as a loadkit run directory
(new, or joined to an existing run with --run), so `loadkit analyze` and
`loadkit report` can use it beside (or instead of) a load test.

formats (detected from the content; or give --format):
{formats}

Times in nvidia-smi output are the local time of the machine that wrote them:
give --utc-offset HOURS when that was not this machine's time zone.

production's Prometheus (a run of kind `production`, docs/oncall.md):
  loadkit import --prometheus http://prometheus:9090 --window 6h [--step 5s]
                 [--selector '{job="triton"}'] [--model M] [--latency-histogram NAME]

the server's exporters for a load test's own window, joined into its run
(dcgm-exporter, node-exporter, cAdvisor: the server's gpu and host series):
  loadkit import --prometheus http://prometheus:9090 --run reports/20250101-120000-burst
                 [--selector node='{instance="gpu-3:9100"}'] [--step 1s]

examples:
  loadkit import dmon.log
  loadkit import gpu.csv --run reports/20250101-120000-burst
  loadkit import dmon-no-times.log --start 2025-01-01T12:00:00Z --interval 1
"""
DESCRIPTION = DESCRIPTION_TEMPLATE.replace(
    "{formats}", "\n".join(f"  {i.name:<11} {i.usage}" for i in importers.REGISTRY)
)


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
    parser.add_argument(
        "--format", choices=importers.FORMATS, help="default: detect from the content"
    )
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
        mtime_s = path.stat().st_mtime
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    options = ImportOptions(
        start_ns=args.start,
        interval_s=args.interval,
        at_ns=args.at,
        file_mtime_ns=int(mtime_s * 1e9),
        tz_offset_hours=args.utc_offset,
        window_start_ns=args.window_start,
        window_end_ns=args.window_end,
        fields=[f.strip() for f in args.fields.split(",")] if args.fields else None,
    )
    return importers.parse(text, options, args.format)


def _series_path(run_dir: Path, result: ImportResult) -> Path:
    """`telemetry/<source>.jsonl`, or `<source>-<format>.jsonl` if that is taken."""
    folder = run_dir / TELEMETRY_DIR
    plain = folder / f"{result.source}.jsonl"
    if not plain.exists():
        return plain
    return folder / f"{result.source}-{safe_name(result.format)}.jsonl"


def open_run(args: argparse.Namespace, first_format: str) -> tuple[Recording, bool]:
    """The run directory the files go to: the one `--run` names, or a new one of kind
    `import` (named after the first file's format). True when it is new."""
    if args.run is not None:
        if not (args.run / MANIFEST_FILE).exists():
            raise UsageError(f"{args.run} is not a run directory (no {MANIFEST_FILE})")
        return Recording.join(args.run), False
    run_id = args.run_id or default_run_id(f"import-{first_format}")
    run_dir = args.out / run_id
    if run_dir.exists() and any(run_dir.iterdir()):
        raise UsageError(f"{run_dir} already exists", hint="give --run to join it, or --run-id")
    return Recording.create(
        out_dir=args.out, run_id=run_id, kind="import", environment=imported_environment()
    ), True


def close_run(recording: Recording, results: list[ImportResult]) -> None:
    """A new import run spans its rows (not the time of the import) and is complete."""
    times = [r["t_ns"] for res in results for r in res.rows]
    recording.update(start_ns=min(times) if times else None)
    recording.finish("complete")
    recording.update(end_ns=max(times) if times else None)


def run(args: argparse.Namespace) -> int:
    if args.prometheus:
        return import_prometheus.run_prometheus(args, parse_time)
    if not args.files:
        raise UsageError("give a FILE to import, or --prometheus URL --window 6h")
    results = [(path, parse_file(path, args)) for path in args.files]
    recording, new = open_run(args, results[0][1].format)
    run_dir = recording.path
    for path, result in results:
        target = _series_path(run_dir, result)
        with JsonlWriter(target) as series:
            for row in result.rows:
                series.write(row)
        warning = None
        if result.skipped_lines:
            warning = f"{result.skipped_lines} partial or malformed line(s) skipped"
        recording.add_source(
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
        for note in result.notes:
            recording.add_note(note)
        print(
            f"{path}: {len(result.rows)} rows ({result.format}) -> {target}"
            + (f"; {warning}" if warning else ""),
            file=sys.stderr,
        )
    if new:
        close_run(recording, [r for _, r in results])
    print(f"next: loadkit analyze {run_dir}", file=sys.stderr)
    return 0
