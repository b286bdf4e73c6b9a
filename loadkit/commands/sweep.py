"""`loadkit sweep`: the same test at each server configuration, compared, with a recommendation."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loadkit.commands import options
from loadkit.errors import EXIT_INTERRUPTED, LoadkitError, TargetError, UsageError
from loadkit.rundir.schema import Manifest

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
    parser.add_argument("--model", help="model name (default: the server's only model)")
    parser.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="NAME=V1,V2,...",
        help="a configuration setting and its values (repeatable): max_queue_delay_us, "
        "preferred_batch_size, max_batch_size, instances",
    )
    options.add_overrides(parser, "a scenario parameter, the same at every point (repeatable)")
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
    from loadkit.commands.capacity import add_search_options

    search = parser.add_argument_group(
        "SCENARIO capacity: each point is a capacity search (see `loadkit capacity --help`)"
    )
    add_search_options(search, slo_required=False)  # type: ignore[arg-type]


def parse_vary(items: Sequence[str]) -> list[tuple[str, list[int]]]:
    from loadkit.kserve.repository import SETTINGS

    out: list[tuple[str, list[int]]] = []
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip()
        if not sep or name not in SETTINGS:
            raise UsageError(
                f"--vary {item!r}: not NAME=V1,V2,... with NAME one of {', '.join(SETTINGS)}",
                hint="e.g. --vary max_queue_delay_us=2000,5000,8000",
            )
        try:
            numbers = [int(v) for v in values.split(",") if v.strip()]
        except ValueError:
            raise UsageError(f"--vary {item!r}: the values must be whole numbers") from None
        if not numbers or any(v < 0 for v in numbers):
            raise UsageError(f"--vary {item!r}: give at least one value, none negative")
        if any(n == name for n, _ in out):
            raise UsageError(f"--vary {name} given twice")
        out.append((name, numbers))
    return out


def points_of(vary: Sequence[tuple[str, list[int]]]) -> list[dict[str, int]]:
    names = [n for n, _ in vary]
    return [
        dict(zip(names, combo, strict=True)) for combo in itertools.product(*(v for _, v in vary))
    ]


def label_of(settings: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in settings.items()) or "as found"


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


def _analyzed(run_dir: Path) -> Any:
    from loadkit.commands.report import load_or_analyze
    from loadkit.rundir import load_run

    return load_or_analyze(load_run(run_dir))


def _point(
    i: int,
    settings: Mapping[str, Any],
    run_dir: Path | None,
    status: str,
    warmup_s: float = 5.0,
    **extra: Any,
) -> dict[str, Any]:
    from loadkit.analysis.pipeline import model_config
    from loadkit.analysis.sweep import batch_rules, point_numbers

    point: dict[str, Any] = {
        "index": i,
        "label": label_of(settings),
        "settings": dict(settings),
        "run": str(run_dir) if run_dir is not None else None,
        "status": status,
        **extra,
    }
    if run_dir is not None and status == "measured":
        from loadkit.analysis.sweep import steady_numbers
        from loadkit.rundir import load_run

        analysis = _analyzed(run_dir)
        run = load_run(run_dir)
        config = model_config(run)
        delay_ms = config.max_queue_delay_ms
        numbers = point_numbers(analysis, steady_numbers(run, warmup_s))
        point["numbers"] = numbers
        point["rules"] = batch_rules(
            numbers["batch_sizes"],
            config.max_batch_size,
            None if delay_ms is None else round(delay_ms * 1000),
        )
    return point


def run(args: argparse.Namespace) -> int:
    if args.from_runs:
        return _from_runs(args)
    if not args.scenario or not args.target:
        raise UsageError(
            "loadkit sweep needs SCENARIO and --target (or --from-runs RUN...)",
            hint="e.g. loadkit sweep soak --target http://127.0.0.1:8000 "
            "--vary max_queue_delay_us=2000,8000",
        )
    vary = parse_vary(args.vary)
    if not vary:
        raise UsageError("give at least one --vary NAME=V1,V2,...")
    if not args.target.startswith(("http://", "https://")):
        raise UsageError(
            f"--target {args.target!r}: the repository API is spoken over HTTP",
            hint="use http://host:port (the scenario may still use protocol=grpc with --set)",
        )
    from loadkit.commands.run import parse_overrides
    from loadkit.kserve.repository import ModelRepository, apply_settings
    from loadkit.load.catalog import resolve_scenario
    from loadkit.load.orchestrator import check_reachable

    capacity = args.scenario == CAPACITY
    if capacity:
        if not args.slo:
            raise UsageError("loadkit sweep capacity needs --slo", hint="e.g. --slo p99=50ms")
        from loadkit.commands.capacity import settings_from

        settings_from(args)  # a bad search option fails before the server is touched
        scenario = Path(CAPACITY)
    else:
        scenario = resolve_scenario(args.scenario)
    params = parse_overrides(args.overrides)
    check_reachable(args.target)
    model = args.model or _only_model(args.target)
    repo = ModelRepository(args.target, model)
    original = repo.config()
    points = points_of(vary)
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
        "original": _settings_of(original),
        "points": [],
        "recommended": None,
        "restored": None,
        "status": "running",
    }
    _write_sweep(sweep_dir, data)
    changed = False
    interrupted = False
    from loadkit import lifeline

    try:
        with lifeline.stop_signals():
            for i, settings in enumerate(points):
                label = label_of(settings)
                print(f"point {i + 1}/{len(points)}: {label}", file=sys.stderr)
                try:
                    changed = True
                    repo.load(apply_settings(original, settings))
                    took = _settings_of(repo.config())
                    wrong = {k: took.get(k) for k, v in settings.items() if took.get(k) != v}
                    if wrong:
                        raise TargetError(f"the server reports {label_of(wrong)} after the load")
                except LoadkitError as err:
                    if i == 0 and type(err).__name__ == "NotExplicitMode":
                        changed = False  # nothing was loaded
                        raise
                    print(f"  point failed: {err.message}", file=sys.stderr)
                    data["points"].append(_point(i, settings, None, "failed", error=err.message))
                    _write_sweep(sweep_dir, data)
                    continue
                if capacity:
                    run_dir = _search(args, sweep_dir, i, settings, model)
                else:
                    run_dir = _measure(args, scenario, params, sweep_dir, i, settings, model)
                status = _run_status(run_dir)
                if status == "aborted-interrupt":
                    data["points"].append(_point(i, settings, run_dir, "interrupted"))
                    raise KeyboardInterrupt
                data["points"].append(_point(i, settings, run_dir, "measured", args.warmup))
                _write_sweep(sweep_dir, data)
    except KeyboardInterrupt:
        interrupted = True
        print("Interrupted: restoring the original configuration ...", file=sys.stderr)
    finally:
        if changed:
            lifeline.ignore_stop_signals()  # a second Ctrl-C must not leave it half-restored
            data["restored"] = _restore(repo, original)
        data["status"] = "interrupted" if interrupted else "complete"
        from loadkit.analysis.sweep import recommend

        data["recommended"] = recommend(data["points"])
        _write_sweep(sweep_dir, data)
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


def _settings_of(config: Mapping[str, Any]) -> dict[str, Any]:
    from loadkit.kserve.repository import read_settings

    return read_settings(config)


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
    from loadkit.load.orchestrator import TelemetryOptions, run_scenario

    run_id = _point_id(i, settings)
    return run_scenario(
        scenario,
        args.target,
        duration_s=args.duration,
        seed=args.seed,
        out_dir=sweep_dir,
        params={**params, "model": model},
        run_id=run_id,
        telemetry=TelemetryOptions(gpu=args.gpu, triton_url=args.target.rstrip("/")),
        extra_manifest={"sweep": {"point": i, "settings": dict(settings), "model": model}},
        command_line=["loadkit", *sys.argv[1:]],
    )


def _point_id(i: int, settings: Mapping[str, Any]) -> str:
    return f"{i + 1:02d}-" + "-".join(f"{k}{v}" for k, v in settings.items())


def _search(
    args: argparse.Namespace, sweep_dir: Path, i: int, settings: Mapping[str, Any], model: str
) -> Path:
    """A capacity search at this point (`loadkit sweep capacity`)."""
    from loadkit.commands.capacity import _analyze, search_capacity

    point_args = argparse.Namespace(**{**vars(args), "model": model})
    run_dir, _ = search_capacity(
        point_args,
        out_dir=sweep_dir,
        run_id=_point_id(i, settings),
        extra_manifest={"sweep": {"point": i, "settings": dict(settings), "model": model}},
    )
    _analyze(run_dir, report=False)
    return run_dir


def _run_status(run_dir: Path) -> str:
    manifest = Manifest.from_dict(json.loads((run_dir / "manifest.json").read_text()))
    if manifest.status == "aborted" and (manifest.abort or {}).get("by") == "interrupt":
        return "aborted-interrupt"
    return str(manifest.status)


def _restore(repo: Any, original: Mapping[str, Any]) -> dict[str, Any]:
    """Load the original configuration back and check it; say exactly what state is left."""
    want = _settings_of(original)
    try:
        repo.load(original)
        got = _settings_of(repo.config())
        if got == want:
            message = f"restored {repo.model}'s original configuration ({label_of(want)})"
            print(message, file=sys.stderr)
            return {"ok": True, "message": message, "settings": got}
        message = (
            f"restoring {repo.model} loaded a different configuration: the server now has "
            f"{label_of(got)}, the original was {label_of(want)}"
        )
    except LoadkitError as err:
        try:
            state = repo.state()
            now = label_of(_settings_of(repo.config())) if state == "READY" else None
        except LoadkitError:
            state, now = "unknown (the server does not answer)", None
        message = (
            f"could not restore {repo.model}'s original configuration ({err.message}); "
            f"the model is {state}"
            + (f" with {now}" if now else "")
            + f"; the original was {label_of(want)}"
        )
        got = None
    print(f"ERROR: {message}", file=sys.stderr)
    return {"ok": False, "message": message, "settings": got}


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
    from loadkit.analysis.pipeline import model_config
    from loadkit.analysis.sweep import recommend
    from loadkit.rundir import load_run

    if args.vary or args.scenario:
        raise UsageError("--from-runs compares existing runs: no SCENARIO or --vary with it")
    runs = [load_run(r) for r in args.from_runs]
    configs = []
    for run in runs:
        model = model_config(run).name
        config = run.info.environment.server.models.get(model or "") or {}
        configs.append(_settings_of(config) if config else {})
    keys = [
        k
        for k in ("max_queue_delay_us", "preferred_batch_size", "max_batch_size", "instances")
        if len({str(c.get(k)) for c in configs}) > 1
    ]
    sweep_dir = _sweep_dir(args, "from-runs")
    points = []
    for i, (run, config) in enumerate(zip(runs, configs, strict=True)):
        settings = {k: config.get(k) for k in keys} if keys else {"run": run.info.run_id}
        point = _point(i, settings, run.path.resolve(), "measured", args.warmup)
        if not config:
            point["note"] = "no model configuration recorded in this run's manifest"
        points.append(point)
    data = {
        "version": 1,
        "kind": "sweep",
        "from_runs": [str(r.path.resolve()) for r in runs],
        "vary": {k: [c.get(k) for c in configs] for k in keys},
        "points": points,
        "recommended": recommend(points),
        "restored": None,
        "status": "complete",
    }
    _write_sweep(sweep_dir, data)
    _print_points(data)
    _write_report(sweep_dir)
    print(f"sweep directory: {sweep_dir}")
    return 0
