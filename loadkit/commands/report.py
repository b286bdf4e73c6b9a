"""`loadkit report`: write a run's report (HTML for people, Markdown for tickets, JSON for machines)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from loadkit.analysis.stored import load_or_analyze
from loadkit.errors import UsageError
from loadkit.report import formats
from loadkit.rundir import load_run
from loadkit.rundir.layout import REPORT_FILE

HELP = "write a run's report: self-contained HTML, Markdown or JSON"

DESCRIPTION = """\
Write the report of a run directory. HTML (default) is one self-contained
file for people who were not at the test: the SLO verdict, headline numbers,
what happened, timelines, latency distribution, one card per cause found with
its evidence and recommended action, and the run's metadata. It needs no
network and prints well. Markdown is the short version for a ticket or chat
message; JSON is a small stable summary for dashboards and pipelines
(keys documented in docs/reports.md).

If the run has no analysis.json yet (or with --reanalyze), the run is
analyzed first and analysis.json is written.

examples:
  loadkit report reports/20251129-205000-burst
  loadkit report RUN -o /tmp/burst.html
  loadkit report RUN --format md -o -          # Markdown to stdout
  loadkit report RUN --format json -o summary.json

A sweep directory (loadkit sweep) or a tune directory (loadkit tune) given as
RUN gets its comparison of configurations instead (a tune's in HTML only).
"""


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN", help="run directory (e.g. reports/<run_id>)")
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="where to write the report ('-' for stdout); default RUN/report.html "
        "(RUN/report.md, RUN/report.json for the other formats)",
    )
    parser.add_argument(
        "--format",
        choices=sorted(formats.FORMATS),
        default=formats.DEFAULT,
        help=f"output format (default {formats.DEFAULT})",
    )
    parser.add_argument(
        "--reanalyze",
        action="store_true",
        help="analyze the run again even if analysis.json exists (e.g. after upgrading loadkit)",
    )


def write_output(text: str, output: str, what: str) -> None:
    """Write to a file (creating its folder) or stdout, and say where it went."""
    if output == "-":
        sys.stdout.write(text)
        return
    from loadkit.rundir.atomic import write_atomic

    target = Path(output)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, text)  # whole or not at all: the previous report stays
    except OSError as exc:
        raise UsageError(
            f"cannot write {target} ({exc.strerror or exc}); the previous one, if any, is kept",
            hint="free some space, or pass a writable path with -o FILE",
        ) from None
    resolved = target.resolve()
    print(f"{what}: {target}")
    print(resolved.as_uri())


# Directories of runs with a report of their own: (the file that marks one, its kind).
DIRECTORY_KINDS = (("sweep.json", "sweep"), ("tune.json", "tune"))


def _directory_report(args: argparse.Namespace, fmt: formats.ReportFormat, kind: str) -> int:
    """A sweep (`sweep.json`) or tune (`tune.json`) directory: its configurations compared."""
    render = fmt.directory_renderer(kind)
    if render is None:
        hint = "give another --format" + (" (html)" if kind == "tune" else "")
        raise UsageError(f"a {kind} has no {fmt.name} report", hint=hint)
    text = render(args.run_dir)
    output = args.output
    if output is None:
        to_stdout = kind == "sweep" and fmt.sweep_to_stdout
        output = "-" if to_stdout else str(Path(args.run_dir) / fmt.file_name())
    write_output(text, output, f"{fmt.name.upper()} {kind} report")
    return 0


def run(args: argparse.Namespace) -> int:
    fmt = formats.get(args.format)
    for marker, kind in DIRECTORY_KINDS:
        if (Path(args.run_dir) / marker).is_file():
            return _directory_report(args, fmt, kind)
    run_dir = load_run(args.run_dir)
    analysis = load_or_analyze(run_dir, args.reanalyze)
    reporter = fmt.load()
    output = args.output or str(run_dir.path / fmt.file_name())
    if output != "-" and Path(output).is_dir():
        raise UsageError(f"{output} is a directory", hint="pass a file name with -o FILE")
    html_report = run_dir.path / REPORT_FILE
    text = reporter.render_report(run_dir, analysis, html_report if html_report.exists() else None)
    write_output(text, output, f"{fmt.name.upper()} report")
    return 0
