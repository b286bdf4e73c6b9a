"""`loadkit demo`: the whole story in one command."""

from __future__ import annotations

import argparse
import sys

from loadkit import lifeline
from loadkit.demo import DemoSettings, run_demo
from loadkit.errors import EXIT_INTERRUPTED, EXIT_OK

_D = DemoSettings()
# --short's cycle: 60 s leave room for 5 cycles of 10 s, too few to confirm a period
# (one onset a window late lifted the Rayleigh p over the level); 7 s cycles give 8 spike
# episodes and 9 cycles, p=1e-05 to 4e-05 in three runs (session 23), as the full demo does.
SHORT_FAULT_PERIOD_S = 7.0
SHORT_FAULT_DURATION_S = 2.5

HELP = "start a real Triton, run a 2x burst test with telemetry, analyze it, write a report"
DESCRIPTION = f"""\
The whole of loadkit in one command, on this machine, no GPU needed:

  1. starts the real Triton Inference Server (from the nvidia-pytriton wheel) on
     127.0.0.1 with loadkit's `ranker` model behind the dynamic batcher;
  2. starts a simulated GPU whose cooling fails every {_D.cooling_fault_period_s:g} s for
     {_D.cooling_fault_duration_s:g} s, so it throttles (and really slows the model) periodically;
  3. runs scenarios/burst_2x.py open-model: {_D.base_rate:g} req/s, 2x within {_D.rise_s:g} s,
     hold, back down, recover (about {_D.duration_s:.0f} s) while the GPU, host and Triton
     samplers record;
  4. analyzes the run and writes reports/<run_id>/report.html.

The findings in the report are the analyzer's, not written in: it should find the
periodic P99 spikes, attribute them to (simulated) thermal throttling with their
period, and show the burst's effect on batch sizes, queue time and recovery.

Ctrl-C stops everything it started; what was recorded is kept and reported.

example:  loadkit demo
          loadkit demo --short
          loadkit demo --base-rate 60 --cooling-fault-period 12
"""


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        default=_D.out_dir,
        metavar="DIR",
        help="where the run directory goes (default: reports)",
    )
    parser.add_argument(
        "--run-id", default=None, help="run directory name (default: <UTC time>-burst_2x)"
    )
    parser.add_argument(
        "--base-rate",
        type=float,
        default=_D.base_rate,
        metavar="RPS",
        help=f"steady arrival rate (default: {_D.base_rate:g}/s)",
    )
    parser.add_argument(
        "--cooling-fault-period",
        type=float,
        default=None,
        metavar="S",
        help=f"seconds between simulated cooling faults (default: {_D.cooling_fault_period_s:g}; "
        f"{SHORT_FAULT_PERIOD_S:g} with --short)",
    )
    parser.add_argument(
        "--cooling-fault-duration",
        type=float,
        default=None,
        metavar="S",
        help=f"seconds each cooling fault lasts (default: {_D.cooling_fault_duration_s:g}; "
        f"{SHORT_FAULT_DURATION_S:g} with --short)",
    )
    parser.add_argument(
        "--short",
        action="store_true",
        help=f"a 60 s version, its cooling failing every {SHORT_FAULT_PERIOD_S:g} s: "
        "the same story (8 spike episodes, their period confirmed) in two thirds of the time",
    )
    parser.add_argument("--no-progress", action="store_true", help="no live progress line")


def settings_from_args(args: argparse.Namespace) -> DemoSettings:
    from loadkit.errors import UsageError

    period = args.cooling_fault_period
    duration = args.cooling_fault_duration
    if period is None:
        period = SHORT_FAULT_PERIOD_S if args.short else _D.cooling_fault_period_s
    if duration is None:
        duration = SHORT_FAULT_DURATION_S if args.short else _D.cooling_fault_duration_s
    if args.base_rate <= 0:
        raise UsageError(f"--base-rate must be positive, got {args.base_rate:g}")
    if duration <= 0 or period <= duration:
        raise UsageError(
            "--cooling-fault-period must be longer than --cooling-fault-duration (both > 0)",
            hint=f"e.g. --cooling-fault-period {_D.cooling_fault_period_s:g} --cooling-fault-duration {_D.cooling_fault_duration_s:g}",
        )
    extra = {}
    if args.short:
        extra = {"steady_s": 15.0, "rise_s": 10.0, "hold_s": 10.0, "fall_s": 5.0, "recover_s": 20.0}
    return DemoSettings(
        out_dir=args.out,
        run_id=args.run_id,
        base_rate=args.base_rate,
        cooling_fault_period_s=period,
        cooling_fault_duration_s=duration,
        show_progress=not args.no_progress,
        **extra,  # type: ignore[arg-type]
    )


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    with lifeline.stop_signals():  # Ctrl-C or SIGTERM: stop all, report what was recorded
        result = run_demo(settings)
    from loadkit.analysis.model import Analysis
    from loadkit.commands.analyze import print_summary
    from loadkit.rundir.layout import ANALYSIS_FILE

    print()
    print_summary(Analysis.load(result.run_dir / ANALYSIS_FILE), sys.stdout)
    if result.report_path is not None:
        print(f"report: {result.report_path}")  # no blank line: the first screen is 18 lines
        print(result.report_path.resolve().as_uri())
    if result.status == "aborted":
        print("the run was interrupted; the report covers what was recorded", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK
