"""`loadkit run`: run a scenario against a target and record everything into a run directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadkit.commands import options
from loadkit.errors import EXIT_INTERRUPTED, EXIT_SLO_FAILED, EXIT_TARGET, UsageError
from loadkit.telemetry.gpu import GPU_CHOICES

if TYPE_CHECKING:
    from loadkit.analysis.model import Finding

HELP = "run a load scenario (Locust, open model) and record latency + telemetry"

DESCRIPTION = """\
Run a scenario against a target, headless, and
record into reports/<run_id>/: HdrHistogram interval logs of latency measured
from the intended send time (coordinated-omission corrected) and from the
actual send, per-second load counters (offered, achieved, errors by kind,
dropped arrivals), a sample of requests, shape phases (burst-start, ...) and
host/GPU/Triton telemetry.

The scenario is a built-in one by name (`loadkit scenarios` lists them) or
the path of your own locustfile. Ctrl-C (or SIGTERM) stops the run: it is
marked 'aborted' and keeps everything recorded (exit status 130). If this
command is killed outright (SIGKILL), its Locust processes and samplers die
with it at once: no load outlives it.
--abort-on CONDITION stops the load within a second of the condition holding
(checked on the merged 1 s intervals of every Locust process): the run is
marked 'aborted' with the condition and the moment, and the exit status is 1.
Latency conditions count requests still in flight at their age so far, so a
target that stops answering breaks them too. Scenario parameters are set
with --set name=value; pass the scenario before --help to list its
parameters.

examples:
  loadkit run burst_2x --target http://127.0.0.1:8000
  loadkit run burst_2x --target http://127.0.0.1:8000 \\
      --set base_rate=50 --set multiplier=3 --duration 60
  loadkit run steps_to_knee --target 127.0.0.1:8001 --set protocol=grpc
  loadkit run soak --target http://127.0.0.1:8000 --workers 2
  loadkit run soak --target http://10.0.0.7:8000 --master --expect-workers 4
  loadkit run burst_2x --target http://10.0.0.7:8000 \\
      --scrape node=http://10.0.0.7:9100/metrics --scrape dcgm=http://10.0.0.7:9400/metrics
  loadkit run burst_2x --target http://10.0.0.7:8000 --agent http://10.0.0.7:9477
  loadkit run soak --target http://127.0.0.1:8000 \\
      --abort-on "p99>80ms for 10s" --abort-on "errors>5% for 5s"
  loadkit run burst_2x --target http://127.0.0.1:8000 --abort-on slo
  loadkit run soak --target http://127.0.0.1:8000 --model doc_ranker \\
      --shape DOC_IDS:16 --int-range DOC_IDS:0,999 --batch-size 4
  loadkit run soak --target http://127.0.0.1:8000 --input-data data.json

Before recording, loadkit reads the model's metadata, builds the requests
from it and sends one: when the server rejects it, the run stops with the
server's own words (exit 2); when nothing answers, exit 3.
When the target stops answering during the run (connections refused or
reset), the summary's first line says from when to when, and whether it came
back; if it was unreachable for more than --max-unreachable of the run
(default 10 %), the exit status is 3. Everything recorded is kept.
"""

# `loadkit run` exits 3 when the target was unreachable for more than this share of the run.
DEFAULT_MAX_UNREACHABLE_PCT = 10.0


def _scenario_from_argv(argv: list[str]) -> Path | None:
    """The scenario named on this command line, for `loadkit run burst_2x --help`."""
    from loadkit.load.catalog import builtin_path

    if "run" not in argv:
        return None
    for arg in argv[argv.index("run") + 1 :]:
        if arg.startswith("-"):
            continue
        if arg.endswith(".py") and Path(arg).is_file():
            return Path(arg)
        return builtin_path(arg)
    return None


def _scenario_help(path: Path) -> str:
    from loadkit.load.describe import describe_scenario

    try:
        info = describe_scenario(path)
    except UsageError as err:
        return f"\nscenario {path}: cannot describe it ({err.message})\n"
    lines = [f"\nparameters of {info['name']} ({path}), set with --set name=value:"]
    helps: dict[str, str] = info.get("param_help", {})
    defaults: dict[str, Any] = info.get("param_defaults", {})
    width = max((len(k) for k in helps), default=10)
    for key in sorted(helps):
        lines.append(f"  {key:<{width}}  {helps[key]} (default {defaults.get(key)!r})")
    lines.append(
        f"duration {info['duration_s']:.0f} s, {info['users']} users, {info['model']} model"
    )
    return "\n".join(lines) + "\n"


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    scenario_file = _scenario_from_argv(sys.argv)
    if scenario_file is not None and ("-h" in sys.argv or "--help" in sys.argv):
        parser.epilog = _scenario_help(scenario_file)
    parser.add_argument(
        "scenario",
        help="a built-in scenario's name (e.g. burst_2x; see `loadkit scenarios`) or a "
        "locustfile's path",
    )
    parser.add_argument(
        "--target",
        required=True,
        help="server URL: http://host:port (HTTP, JSON) or host:port (gRPC)",
    )
    parser.add_argument("--duration", type=float, help="run length in seconds (overrides)")
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="Locust worker processes on this machine (0: one local process)",
    )
    _add_distributed_options(parser)
    options.add_seed_and_output(parser, default_name="time + scenario")
    options.add_overrides(parser, "set a scenario parameter (repeatable)")
    options.add_request_options(parser)
    _add_guard_options(parser)
    _add_live_metrics_options(parser)
    _add_telemetry_options(parser)
    parser.add_argument("--no-progress", action="store_true", help="no live progress line")
    parser.add_argument(
        "--progress-every",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="when stderr is not a terminal (CI logs), print the progress line this often",
    )


def _add_distributed_options(parser: argparse.ArgumentParser) -> None:
    """--master and its workers: one machine writes the run that many machines load."""
    dist = parser.add_argument_group(
        "many machines (workers run `loadkit worker --master-host THIS_HOST`)"
    )
    dist.add_argument(
        "--master",
        action="store_true",
        help="be the master of workers on other machines; this machine writes the run",
    )
    dist.add_argument(
        "--expect-workers",
        type=int,
        default=0,
        metavar="N",
        help="with --master: start once N workers are connected",
    )
    dist.add_argument(
        "--master-bind-host",
        default="0.0.0.0",
        help="with --master: the interface workers connect to (default all)",
    )
    dist.add_argument(
        "--master-bind-port",
        type=int,
        default=5557,
        help="with --master: the TCP port workers connect to (default 5557)",
    )
    dist.add_argument(
        "--connect-wait",
        type=float,
        default=60.0,
        metavar="S",
        help="with --master: seconds to wait for the workers to connect (default 60)",
    )


def _add_guard_options(parser: argparse.ArgumentParser) -> None:
    """When the run counts as failed or stops early: what a CI gate or an unattended run needs."""
    guard = parser.add_argument_group("guard")
    guard.add_argument(
        "--max-unreachable",
        type=float,
        default=DEFAULT_MAX_UNREACHABLE_PCT,
        metavar="PCT",
        help="exit status 3 when the target was unreachable (connections refused or reset) "
        f"for more than PCT %% of the run (default {DEFAULT_MAX_UNREACHABLE_PCT:g})",
    )
    guard.add_argument(
        "--abort-on",
        action="append",
        default=[],
        metavar="CONDITION",
        help="stop the load when CONDITION holds, e.g. 'p99>80ms for 10s', 'errors>5%% for 5s', "
        "or 'slo' (the scenario's SLO, each threshold for 10 s); repeatable; exit status 1",
    )


def _add_live_metrics_options(parser: argparse.ArgumentParser) -> None:
    """A Prometheus endpoint for watching a long run while it runs."""
    live = parser.add_argument_group("live metrics")
    live.add_argument(
        "--serve-metrics",
        type=int,
        metavar="PORT",
        help="serve live Prometheus metrics (corrected P50..P99.9 over the last 10 s, rates, "
        "errors, in flight, phase) at http://HOST:PORT/metrics; 0 picks a free port",
    )
    live.add_argument(
        "--serve-metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="address to serve the metrics on (default 127.0.0.1; 0.0.0.0 for every interface)",
    )


def _add_telemetry_options(parser: argparse.ArgumentParser) -> None:
    """Which telemetry sources are sampled beside the load, and where the server is."""
    tele = parser.add_argument_group("telemetry")
    tele.add_argument(
        "--gpu",
        choices=GPU_CHOICES,
        default="auto",
        help="GPU telemetry source (default auto: NVML if present)",
    )
    tele.add_argument(
        "--triton-stats",
        default="auto",
        metavar="URL|auto|none",
        help="Triton HTTP URL for the statistics API (auto: the target, if HTTP)",
    )
    tele.add_argument(
        "--triton-metrics",
        default="none",
        metavar="URL|none",
        help="Prometheus metrics URL to scrape, e.g. http://127.0.0.1:8002/metrics",
    )
    tele.add_argument(
        "--server-pid",
        type=int,
        help="PID of the server, for its CPU/context switches (the server runs on this machine)",
    )
    options.add_server_telemetry(tele)
    options.add_server_host(tele)
    tele.add_argument("--no-telemetry", action="store_true", help="record load only")


def _stats_url(choice: str, target: str) -> str | None:
    if choice == "none":
        return None
    if choice == "auto":
        return target.rstrip("/") if target.startswith(("http://", "https://")) else None
    return choice


def _check_urls(args: argparse.Namespace) -> None:
    """Every URL on the command line against the one rule (loadkit/endpoint.py), before anything runs."""
    from loadkit.endpoint import HTTP_SCHEMES, parse_endpoint

    parse_endpoint(args.target, "--target")
    if args.triton_stats not in ("auto", "none"):
        parse_endpoint(args.triton_stats, "--triton-stats", HTTP_SCHEMES, "http")
    if args.triton_metrics != "none":
        parse_endpoint(args.triton_metrics, "--triton-metrics", HTTP_SCHEMES, "http")


def _workers(args: argparse.Namespace) -> Any:
    from loadkit.load.orchestrator import Workers

    if not args.master:
        if args.expect_workers:
            raise UsageError("--expect-workers needs --master")
        return Workers(local=args.workers)
    if args.expect_workers <= 0:
        raise UsageError(
            "--master needs --expect-workers N (N >= 1)",
            hint="how many `loadkit worker --master-host THIS_HOST` will connect",
        )
    if not 0 < args.master_bind_port <= 65535:
        raise UsageError(f"--master-bind-port {args.master_bind_port}: not a TCP port")
    workers = Workers(
        local=args.workers,
        expect=args.expect_workers,
        bind_host=args.master_bind_host,
        bind_port=args.master_bind_port,
        connect_wait_s=args.connect_wait,
    )
    workers.check()
    return workers


def run(args: argparse.Namespace) -> int:
    from loadkit.load.catalog import resolve_scenario
    from loadkit.load.guard import check_syntax
    from loadkit.load.orchestrator import TelemetryOptions, run_scenario
    from loadkit.load.summary import summarize_run
    from loadkit.placement import check_server_flags

    check_syntax(args.abort_on)  # a bad condition fails before anything starts
    _check_urls(args)
    server_telemetry = options.server_telemetry(args)
    check_server_flags(args.server_pid, args.server_host)
    if not 0 <= args.max_unreachable <= 100:
        raise UsageError(
            f"--max-unreachable must be a percentage (0..100), got {args.max_unreachable:g}"
        )
    if args.progress_every <= 0:
        raise UsageError(f"--progress-every must be > 0, got {args.progress_every:g}")
    if args.serve_metrics is not None and not 0 <= args.serve_metrics <= 65535:
        raise UsageError(f"--serve-metrics {args.serve_metrics}: not a TCP port (0..65535)")
    workers = _workers(args)
    scenario = resolve_scenario(args.scenario)
    params = options.scenario_params(args)
    telemetry = TelemetryOptions(
        enabled=not args.no_telemetry,
        gpu=args.gpu,
        triton_url=_stats_url(args.triton_stats, args.target),
        metrics_url=None if args.triton_metrics == "none" else args.triton_metrics,
        server_pid=args.server_pid,
        server_host=args.server_host,
        extra=server_telemetry,
    )
    run_dir = run_scenario(
        scenario,
        args.target,
        duration_s=args.duration,
        workers=workers,
        seed=args.seed,
        out_dir=args.out,
        params=params,
        run_id=args.run_id,
        show_progress=not args.no_progress,
        progress_every_s=args.progress_every,
        abort_on=args.abort_on,
        serve_metrics=(
            (args.serve_metrics_host, args.serve_metrics)
            if args.serve_metrics is not None
            else None
        ),
        telemetry=telemetry,
        command_line=["loadkit", *sys.argv[1:]],
    )
    summary = summarize_run(run_dir)
    outage = _outage(run_dir)
    if outage is not None:
        from loadkit.analysis import causes

        print(causes.outage_line([outage]))
    print(summary.text())
    if summary.abort and summary.abort.get("by") == "condition":
        print(f"Aborted by --abort-on: {summary.abort.get('message')}", file=sys.stderr)
        return EXIT_SLO_FAILED
    if summary.status == "aborted":
        print(f"Interrupted; data recorded so far is kept in {run_dir}", file=sys.stderr)
        return EXIT_INTERRUPTED
    return _unreachable_status(outage, args.max_unreachable)


def _outage(run_dir: Path) -> Finding | None:
    """The run's outage finding (the target unreachable), from its load counters (None: none)."""
    from loadkit.analysis import causes
    from loadkit.rundir import load_run

    run = load_run(run_dir)
    start, end = run.start_ns, run.end_ns
    if start is None or end is None or end <= start:
        return None
    counts = causes.error_counts(run.load_intervals, int(start), int(end))
    return causes.outage(counts) if counts is not None else None


def _unreachable_status(outage: Finding | None, max_pct: float) -> int:
    """Exit 3 (one ERROR line) when the target was unreachable for more than `max_pct` % of the run."""
    share = outage.coincidence if outage is not None else 0.0  # an error finding's share of the run
    if 100.0 * share > max_pct:
        print(
            f"ERROR: the target was unreachable for {share:.0%} of the run "
            f"(more than --max-unreachable {max_pct:g} %); exit status {EXIT_TARGET}",
            file=sys.stderr,
        )
        return EXIT_TARGET
    return 0
