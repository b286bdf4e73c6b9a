"""`loadkit sweep`: the same test at each server configuration, compared, with a recommendation."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadkit.commands import options
from loadkit.errors import EXIT_INTERRUPTED, LoadkitError, TargetError, UsageError

CAPACITY = "capacity"  # SCENARIO capacity: a capacity search at each point

HELP = "run a scenario at each batching configuration (Triton's repository API) and compare"

DESCRIPTION = """\
Run the same scenario at each point of a configuration grid and compare them.
Each point is loaded through Triton's model repository API (explicit model
control: POST /v2/repository/models/M/load with a config override), read back
from /v2/models/M/config to check it took effect, then measured: one run
directory per point (its configuration in the manifest's `sweep`), analyzed
like any run. The sweep directory holds them and sweep.json (`points`: each
configuration, its run and its numbers; `recommended`: the configuration and
why), and `loadkit report SWEEP_DIR` writes the comparison: corrected
P50/P95/P99, throughput, batch-size distribution, queue vs compute, SLO
verdict, findings, and the batch-size rules per configuration ("window
useless": batches of 1-2 with a window; "raise max_batch_size": batches
pinned at it).

NAME is one of max_queue_delay_us, preferred_batch_size, max_batch_size,
instances; several --vary give every combination. SCENARIO `capacity` makes
each point a capacity search (the options of `loadkit capacity`: --slo,
--start, --max-rate, ...): the recommendation is then the most capacity
within the SLO.

The server is left as it was found: the original configuration is loaded
back at the end, after a point that failed, and on Ctrl-C or SIGTERM. If
restoring fails, the command says exactly what state the server is in
(exit 3).

A server not in explicit model-control mode is refused with how to start it
(`loadkit target --model-control explicit` for the embedded one). Without
repository control, change the configuration yourself, make one run per
configuration, and compare them with --from-runs.

examples:
  loadkit sweep soak --target http://127.0.0.1:8000 \\
      --vary max_queue_delay_us=2000,5000,8000 --set rate=50 --duration 30
  loadkit sweep burst_2x --target http://127.0.0.1:8000 \\
      --vary max_queue_delay_us=0,2000 --vary instances=1,2
  loadkit sweep capacity --target http://127.0.0.1:8000 --slo p99=50ms \\
      --vary instances=1,2 --start 50 --max-rate 800
  loadkit sweep --from-runs reports/window-2ms reports/window-8ms --run-id window-sweep
  loadkit report reports/<sweep_id>
"""


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "scenario", nargs="?", help="a built-in scenario (e.g. soak, burst_2x) or a locustfile"
    )
    parser.add_argument("--target", help="Triton's HTTP URL, e.g. http://127.0.0.1:8000")
    parser.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="NAME=V1,V2,...",
        help="a configuration setting and its values (repeatable): max_queue_delay_us, "
        "preferred_batch_size, max_batch_size, instances",
    )
    options.add_overrides(parser, "a scenario parameter, the same at every point (repeatable)")
    options.add_request_options(parser)
    parser.add_argument("--duration", type=float, help="run length per point in seconds")
    parser.add_argument(
        "--warmup",
        type=float,
        default=5.0,
        metavar="S",
        help="each point's first seconds are left out of its numbers (default 5: the model "
        "was just loaded)",
    )
    options.add_seed_and_output(parser, directory="sweep directory", default_name="time + sweep")
    parser.add_argument(
        "--from-runs",
        nargs="+",
        metavar="RUN",
        help="compare existing runs (one per configuration) instead of running",
    )
    parser.add_argument("--gpu", choices=("auto", "nvml", "sim", "none"), default="auto")
    options.add_server_telemetry(parser)
    from loadkit.commands.capacity import add_search_options

    search = parser.add_argument_group(
        "SCENARIO capacity: each point is a capacity search (see `loadkit capacity --help`)"
    )
    add_search_options(search, slo_required=False)  # type: ignore[arg-type]


def run(args: argparse.Namespace) -> int:
    if args.from_runs:
        return _from_runs(args)
    from loadkit.decide import sweep

    scenario, vary = _checked(args)
    params = options.scenario_params(args)
    options.server_telemetry(args)  # a bad --scrape/--agent fails before the server is touched
    from loadkit.kserve.repository import ModelRepository
    from loadkit.load.orchestrator import check_reachable

    check_reachable(args.target)
    model = args.model or _only_model(args.target)
    repo = ModelRepository(args.target, model)
    original = repo.config()
    sweep_dir = _sweep_dir(args, scenario.stem)
    (sweep_dir / "original-config.json").write_text(json.dumps(original, indent=2) + "\n")
    data: dict[str, Any] = {
        "version": 1,
        "kind": "sweep",
        "scenario": str(scenario),
        "target": args.target,
        "model": model,
        "vary": {n: v for n, v in vary},
        "params": params,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "original": sweep.settings_of(original),
        "points": [],
        "recommended": None,
        "restored": None,
        "status": "running",
    }
    _write_sweep(sweep_dir, data)

    def measure(i: int, settings: Mapping[str, Any]) -> Path:
        if scenario == Path(CAPACITY):
            return _search(args, sweep_dir, i, settings, model)
        return _measure(args, scenario, params, sweep_dir, i, settings, model)

    interrupted = sweep.sweep_points(
        repo,
        original,
        sweep.points_of(vary),
        measure,
        data,
        lambda d: _write_sweep(sweep_dir, d),
        args.warmup,
    )
    return _finish(data, sweep_dir, interrupted)


def _checked(args: argparse.Namespace) -> tuple[Path, list[tuple[str, list[int]]]]:
    """The scenario each point runs (`capacity`: a search) and the settings varied, checked
    before the server is touched."""
    from loadkit.decide import sweep

    if not args.scenario or not args.target:
        raise UsageError(
            "loadkit sweep needs SCENARIO and --target (or --from-runs RUN...)",
            hint="e.g. loadkit sweep soak --target http://127.0.0.1:8000 "
            "--vary max_queue_delay_us=2000,8000",
        )
    vary = sweep.parse_vary(args.vary)
    if not vary:
        raise UsageError("give at least one --vary NAME=V1,V2,...")
    if not args.target.startswith(("http://", "https://")):
        raise UsageError(
            f"--target {args.target!r}: the repository API is spoken over HTTP",
            hint="use http://host:port (the scenario may still use protocol=grpc with --set)",
        )
    if args.scenario == CAPACITY:
        if not args.slo:
            raise UsageError("loadkit sweep capacity needs --slo", hint="e.g. --slo p99=50ms")
        from loadkit.commands.capacity import settings_from

        settings_from(args)  # a bad search option fails before the server is touched
        return Path(CAPACITY), vary
    from loadkit.load.catalog import resolve_scenario

    return resolve_scenario(args.scenario), vary


def _finish(data: Mapping[str, Any], sweep_dir: Path, interrupted: bool) -> int:
    """Print the points and the recommendation, write the report; the exit status."""
    restored = data["restored"]
    _print_points(data)
    _write_report(sweep_dir)
    print(f"sweep directory: {sweep_dir}")
    if restored is not None and not restored["ok"]:
        raise TargetError(
            restored["message"],
            hint=f"load the original configuration by hand: {sweep_dir / 'original-config.json'}",
        )
    if interrupted:
        return EXIT_INTERRUPTED
    if not any(p["status"] == "measured" for p in data["points"]):
        raise TargetError(
            "no configuration could be measured: every point failed to load",
            hint=f"see the points' errors in {sweep_dir / 'sweep.json'}",
        )
    return 0


def _sweep_dir(args: argparse.Namespace, name: str) -> Path:
    run_id = args.run_id or time.strftime("%Y%m%d-%H%M%S-sweep-") + name
    path = Path(args.out) / run_id
    if path.exists() and any(path.iterdir()):
        raise UsageError(f"{path} exists and is not empty", hint="pick another --run-id")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _write_sweep(path: Path, data: Mapping[str, Any]) -> None:
    from loadkit.analysis.sweep import SWEEP_FILE

    tmp = path / (SWEEP_FILE + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path / SWEEP_FILE)


def _only_model(url: str) -> str:
    import urllib.request

    request = urllib.request.Request(url.rstrip("/") + "/v2/repository/index", data=b"{}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            rows = json.loads(response.read())
    except (OSError, ValueError) as exc:
        raise UsageError("cannot list the server's models; give --model") from exc
    ready = [r.get("name") for r in rows if isinstance(r, dict) and r.get("state") == "READY"]
    if len(ready) != 1:
        raise UsageError(
            f"the server has {len(ready)} ready models; name one with --model",
            hint="ready: " + (", ".join(str(r) for r in ready) or "none"),
        )
    return str(ready[0])


def _measure(
    args: argparse.Namespace,
    scenario: Path,
    params: Mapping[str, str],
    sweep_dir: Path,
    i: int,
    settings: Mapping[str, Any],
    model: str,
) -> Path:
    from loadkit.decide.sweep import point_id
    from loadkit.load.orchestrator import TelemetryOptions, run_scenario

    run_id = point_id(i, settings)
    return run_scenario(
        scenario,
        args.target,
        duration_s=args.duration,
        seed=args.seed,
        out_dir=sweep_dir,
        params={**params, "model": model},
        run_id=run_id,
        telemetry=TelemetryOptions(
            gpu=args.gpu,
            triton_url=args.target.rstrip("/"),
            extra=options.server_telemetry(args),
        ),
        extra_manifest={"sweep": {"point": i, "settings": dict(settings), "model": model}},
        command_line=["loadkit", *sys.argv[1:]],
    )


def _search(
    args: argparse.Namespace, sweep_dir: Path, i: int, settings: Mapping[str, Any], model: str
) -> Path:
    """A capacity search at this point (`loadkit sweep capacity`)."""
    from loadkit.commands.capacity import _analyze, search_capacity
    from loadkit.decide.sweep import point_id

    point_args = argparse.Namespace(**{**vars(args), "model": model})
    run_dir, _ = search_capacity(
        point_args,
        out_dir=sweep_dir,
        run_id=point_id(i, settings),
        extra_manifest={"sweep": {"point": i, "settings": dict(settings), "model": model}},
    )
    _analyze(run_dir, report=False)
    return run_dir


def _print_points(data: Mapping[str, Any]) -> None:
    for p in data["points"]:
        n = p.get("numbers") or {}

        def ms(key: str, n: Mapping[str, Any] = n) -> str:
            v = n.get(key)
            return f"{v:.1f}" if isinstance(v, int | float) else "n/a"

        if p["status"] != "measured":
            print(f"{p['label']}: {p['status']} {p.get('error') or ''}".rstrip())
            continue
        rules = "; ".join(r["rule"] for r in p.get("rules") or [])
        if n.get("capacity_rps") is not None:
            print(
                f"{p['label']}: capacity {n['capacity_rps']:.1f} req/s within the SLO, "
                f"batch {ms('batch_size_mean')}" + (f" [{rules}]" if rules else "")
            )
            continue
        print(
            f"{p['label']}: P50 {ms('p50_ms')} P95 {ms('p95_ms')} P99 {ms('p99_ms')} ms, "
            f"{ms('throughput_rps')} req/s, batch {ms('batch_size_mean')}, "
            f"SLO {'pass' if n.get('slo_passed') else 'FAIL'}" + (f" [{rules}]" if rules else "")
        )
    rec = data.get("recommended")
    if rec:
        print(f"recommended: {rec['label']} ({rec['why']})")


def _write_report(sweep_dir: Path) -> None:
    from loadkit.report import sweep as sweep_report

    try:
        (sweep_dir / "report.html").write_text(
            sweep_report.render_html(sweep_dir), encoding="utf-8"
        )
    except LoadkitError as err:
        print(f"WARNING: no sweep report ({err.message})", file=sys.stderr)


def _from_runs(args: argparse.Namespace) -> int:
    """The comparison from runs made by hand, one per configuration."""
    from loadkit.decide import sweep
    from loadkit.rundir import load_run

    if args.vary or args.scenario:
        raise UsageError("--from-runs compares existing runs: no SCENARIO or --vary with it")
    runs = [load_run(r) for r in args.from_runs]
    sweep_dir = _sweep_dir(args, "from-runs")
    data = sweep.from_runs(runs, args.warmup)
    _write_sweep(sweep_dir, data)
    _print_points(data)
    _write_report(sweep_dir)
    print(f"sweep directory: {sweep_dir}")
    return 0
