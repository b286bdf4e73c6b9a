"""`loadkit capacity`: the highest arrival rate that meets an SLO, with its bracket and replicas."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from loadkit.commands import options
from loadkit.errors import EXIT_INTERRUPTED, LoadkitError, UsageError

HELP = "find the highest arrival rate within an SLO (and the replicas a peak needs)"

DESCRIPTION = """\
Search for the highest arrival rate the target serves within an SLO: a
geometric ramp (x2 from --start), then bisection between the highest rate
that passed and the lowest that failed, until the bracket is narrower than
--resolution. Each probe is an open-model step: settle windows, then measure
windows. A probe passes when achieved >= 97 % of offered, no arrival was
dropped, the corrected percentile and the errors are within the SLO and the
requests in flight are not growing. A probe whose windows disagree (the last
3 within 10 %) is lengthened before it is judged; --trials N probes both ends
of the bracket N times.

When loadkit itself cannot send a rate (its Locust process saturated, or
arrivals late or dropped while the server's service time stayed at its
low-load value), the answer names that rate as the generator's limit, never
as the server's capacity.

Everything is one run directory of kind `capacity` (each probe a phase),
analyzed and reported like any run: analysis.json holds `capacity` (rate_rps,
low_rps, high_rps, limited_by, replicas, the probes), and the report has a
capacity section. With --peak and --headroom, the replicas (GPUs) needed:
ceil(peak / (capacity x (1 - headroom))), assuming linear scale-out.

examples:
  loadkit capacity --target http://127.0.0.1:8000 --slo p99=50ms
  loadkit capacity --target http://127.0.0.1:8000 --slo p99=50ms,errors=0.1% \\
      --peak 2000 --headroom 50% --max-duration 300
  loadkit capacity --target http://127.0.0.1:8000 --model doc_ranker --slo p95=20ms \\
      --start 50 --max-rate 800 --trials 3
  loadkit capacity --target http://10.0.0.7:8000 --slo p99=50ms --agent http://10.0.0.7:9477

exit codes: 0 the search answered, 2 bad input (SLO, percentages, model not
served), 3 the target could not be reached, 130 interrupted (data kept).
"""


def _share(text: str, flag: str) -> float:
    """`50%` or `0.5` -> 0.5."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UsageError(f"{flag} {text!r} is not a percentage", hint=f"e.g. {flag} 50%") from None
    if not 0.0 <= value < 1.0:
        raise UsageError(f"{flag} {text!r} must be at least 0% and below 100%")
    return value


def add_search_options(parser: argparse.ArgumentParser, *, slo_required: bool) -> None:
    """The search's options (`loadkit capacity`, and `loadkit sweep capacity` per point)."""
    parser.add_argument(
        "--slo",
        required=slo_required,
        help="the objective, e.g. p99=50ms or p99=50ms,errors=0.1%% (errors default 0.1%%)",
    )
    parser.add_argument("--peak", type=float, metavar="RPS", help="the peak to plan replicas for")
    parser.add_argument(
        "--headroom", default="50%", help="with --peak: capacity kept in reserve (default 50%%)"
    )
    parser.add_argument(
        "--resolution",
        default="5%",
        help="stop when the bracket is narrower than this share of its low end (default 5%%)",
    )
    parser.add_argument(
        "--trials", type=int, default=1, metavar="N", help="probes at each end of the bracket"
    )
    parser.add_argument(
        "--max-duration",
        type=float,
        default=600.0,
        metavar="S",
        help="the whole search ends within this many seconds (default 600)",
    )
    parser.add_argument(
        "--start", type=float, default=10.0, metavar="RPS", help="first probe's rate (default 10)"
    )
    parser.add_argument(
        "--max-rate",
        type=float,
        default=1000.0,
        metavar="RPS",
        help="never probe above this rate; sizes the user pool (default 1000)",
    )
    parser.add_argument(
        "--settle", type=int, default=2, metavar="S", help="seconds before measuring (default 2)"
    )
    parser.add_argument(
        "--window",
        type=int,
        default=5,
        metavar="S",
        help="seconds per measure window (perf_analyzer's default); 3 windows per probe, more "
        "when they disagree (default 5)",
    )


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target", required=True, help="server URL: http://host:port (HTTP) or host:port (gRPC)"
    )
    add_search_options(parser, slo_required=True)
    options.add_request_options(parser)
    options.add_overrides(
        parser, "a request parameter (protocol, users, spacing, candidates, batch_size, ...)"
    )
    options.add_seed_and_output(parser, default_name="time + capacity")
    parser.add_argument(
        "--gpu",
        choices=("auto", "nvml", "sim", "none"),
        default="auto",
        help="GPU telemetry source (default auto: NVML if present)",
    )
    parser.add_argument("--server-pid", type=int, help="PID of the server, for its CPU")
    options.add_server_telemetry(parser)
    options.add_server_host(parser)
    parser.add_argument("--no-report", action="store_true", help="do not write report.html")


def settings_from(args: argparse.Namespace) -> Any:
    """The search settings from the command line; UsageError on any bad value."""
    from loadkit import percentile_names
    from loadkit.analysis.slo import parse_slo
    from loadkit.load.search import SearchSettings

    slo = parse_slo(args.slo)
    latency = [k.removesuffix("_ms") for k in slo if k.endswith("_ms")]
    if len(latency) != 1:
        raise UsageError(
            f"--slo {args.slo!r} needs exactly one latency percentile",
            hint="e.g. --slo p99=50ms,errors=0.1%",
        )
    pct = latency[0]
    assert percentile_names.key(pct) == pct
    for name, value in (("--start", args.start), ("--max-rate", args.max_rate)):
        if not value > 0:
            raise UsageError(f"{name} must be > 0 req/s, got {value:g}")
    if args.start > args.max_rate:
        raise UsageError(f"--start {args.start:g} is above --max-rate {args.max_rate:g}")
    if args.trials < 1:
        raise UsageError(f"--trials must be >= 1, got {args.trials}")
    if args.max_duration <= 0:
        raise UsageError(f"--max-duration must be > 0 s, got {args.max_duration:g}")
    if args.settle < 0 or args.window < 1:
        raise UsageError("--settle must be >= 0 and --window >= 1 (seconds)")
    resolution = _share(args.resolution, "--resolution")
    if resolution <= 0:
        raise UsageError("--resolution must be above 0%")
    if args.peak is not None and args.peak <= 0:
        raise UsageError(f"--peak must be > 0 req/s, got {args.peak:g}")
    return SearchSettings(
        slo_percentile=pct,
        slo_ms=slo[f"{pct}_ms"],
        errors_pct=slo.get("errors_pct", 0.1),
        start_rps=args.start,
        max_rps=args.max_rate,
        max_duration_s=args.max_duration,
        resolution=resolution,
        trials=args.trials,
        settle_s=args.settle,
        window_s=args.window,
        peak_rps=args.peak,
        headroom=_share(args.headroom, "--headroom") if args.peak is not None else None,
    )


def search_capacity(
    args: argparse.Namespace,
    *,
    out_dir: str | Path,
    run_id: str | None,
    extra_manifest: dict[str, Any] | None = None,
) -> tuple[Path, bool]:
    """One capacity run (the search inside one LoadRun); (its directory, interrupted)."""
    from loadkit.commands.options import scenario_params
    from loadkit.load.catalog import scenario_dir
    from loadkit.load.orchestrator import LoadRun, RunOptions, TelemetryOptions
    from loadkit.load.search import CapacitySearch, SearchStopped

    settings = settings_from(args)
    server_telemetry = options.server_telemetry(args)
    params: dict[str, Any] = scenario_params(args)
    for reserved in ("max_rate", "max_duration_s", "idle_rate"):
        if reserved in params:
            raise UsageError(f"--set {reserved} is set by loadkit capacity itself")
    params.update(max_rate=str(settings.max_rps), max_duration_s=str(args.max_duration + 60))
    http = args.target.startswith(("http://", "https://"))
    run_options = RunOptions(
        seed=args.seed,
        out_dir=out_dir,
        run_id=run_id,
        params=params,
        telemetry=TelemetryOptions(
            gpu=args.gpu,
            triton_url=args.target.rstrip("/") if http else None,
            server_pid=getattr(args, "server_pid", None),
            server_host=getattr(args, "server_host", None),
            extra=server_telemetry,
        ),
        extra_manifest={
            "kind": "capacity",
            "capacity": settings.to_manifest(),
            "slo": {
                f"{settings.slo_percentile}_ms": settings.slo_ms,
                "errors_pct": settings.errors_pct,
            },
            **(extra_manifest or {}),
        },
        command_line=["loadkit", *sys.argv[1:]],
    )
    failure: str | None = None
    with LoadRun(scenario_dir() / "_steered.py", args.target, run_options) as load:
        procs = load.procs
        assert procs is not None
        search = CapacitySearch(
            load.run_dir,
            settings,
            alive=lambda: procs.main.poll() is None,
            generator_pids=[p.pid for _, p in procs.procs],
        )
        try:
            search.run()
        except SearchStopped as exc:
            failure = str(exc)
        assert load.writer is not None
        capacity = dict(load.writer.manifest.get("capacity") or {})
        capacity["stopped_by"] = (
            f"--max-duration {args.max_duration:g} s" if search.stopped_by else None
        )
        load.writer.update(capacity=capacity)
        load.wait()
    run_dir = load.run_dir
    interrupted = load.status == "aborted" and failure is None and load.failure is None
    if failure is not None:
        raise LoadkitError(f"the capacity search stopped: {failure}", hint=f"see {run_dir}/logs/")
    return run_dir, interrupted


def run(args: argparse.Namespace) -> int:
    run_dir, interrupted = search_capacity(args, out_dir=args.out, run_id=args.run_id)
    if interrupted:
        print(f"Interrupted; the probes so far are kept in {run_dir}", file=sys.stderr)
        _analyze(run_dir, report=not args.no_report)
        return EXIT_INTERRUPTED
    analysis = _analyze(run_dir, report=not args.no_report)
    result = analysis.capacity
    if result is not None:
        print(result.answer)
        if result.prediction is not None:
            gap = f" (measured {result.gap_pct:+.0f}%)" if result.gap_pct is not None else ""
            print(f"predicted from Triton's statistics: {result.prediction.rps:.0f} req/s{gap}")
        print(f"limited by {result.limited_by}: {result.limited_by_evidence}")
    print(f"run directory: {run_dir}")
    return 0


def _analyze(run_dir: Any, *, report: bool) -> Any:
    from loadkit.analysis import analyze_run
    from loadkit.rundir import load_run
    from loadkit.rundir.layout import ANALYSIS_FILE, REPORT_FILE

    run = load_run(run_dir)
    analysis = analyze_run(run)  # type: ignore[operator]
    analysis.save(run.path / ANALYSIS_FILE)
    if report:
        from loadkit.report import html

        (run.path / REPORT_FILE).write_text(html.render(run, analysis), encoding="utf-8")
    return analysis
