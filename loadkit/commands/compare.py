"""`loadkit compare`: the same scenario under two (or more) configurations, side by side."""

from __future__ import annotations

import argparse

from loadkit.analysis.stored import load_or_analyze
from loadkit.commands.report import write_output
from loadkit.errors import UsageError
from loadkit.report import formats
from loadkit.rundir import load_run, safe_name

HELP = "compare runs (A/B): numbers, differences, distributions, findings"

DESCRIPTION = """\
Compare two or more runs of the same scenario under different configurations
(e.g. max_queue_delay 2 ms vs 8 ms, or before and after a fix). The first run
is the baseline (A). Shows the configuration that differs, the headline
numbers side by side with their differences and whether each exceeds
run-to-run noise (where the analysis can estimate it), overlaid latency
distributions and timelines, and which findings appeared or disappeared.
Runs without analysis.json are analyzed first.

examples:
  loadkit compare reports/delay-2ms reports/delay-8ms
  loadkit compare BEFORE AFTER --format md -o -
"""


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run directories; the first is A")
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="where to write ('-' for stdout); default compare-<A>-vs-<B>.html beside run A",
    )
    parser.add_argument("--format", choices=formats.COMPARE_FORMATS, default=formats.DEFAULT)


def run(args: argparse.Namespace) -> int:
    if len(args.runs) < 2:
        raise UsageError(
            "compare needs at least two runs", hint="loadkit compare RUN_A RUN_B [RUN_C ...]"
        )
    runs = []
    for path in args.runs:
        run_dir = load_run(path)
        runs.append((run_dir, load_or_analyze(run_dir)))
    first = runs[0][0].path
    name = "compare-" + "-vs-".join(safe_name(r.run_id) for r, _ in runs)
    reporter = formats.get(args.format).compare_reporter()
    assert reporter is not None  # the choices are the formats that compare
    default = first.parent / f"{name}.{reporter.output_file_extension}"
    output = args.output or str(default)
    html_default = first.parent / f"{name}.html"
    url = html_default.resolve().as_uri() if html_default.exists() else None
    text = reporter.render(runs, html_url=url)
    write_output(text, output, f"comparison ({args.format.upper()})")
    return 0
