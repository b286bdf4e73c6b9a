"""`loadkit tune`: the best batching configuration for an SLO, predicted from a batch profile and verified."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadkit.commands import options
from loadkit.errors import EXIT_INTERRUPTED, LoadkitError, TargetError, UsageError

if TYPE_CHECKING:
    from loadkit.decide.tune import Slo, Write

HELP = "predict the best batching configuration from a batch profile, verify the top few"

DESCRIPTION = """\
Find the batching configuration with the most capacity within an SLO without
measuring every point of the space:

1. profile: the model is loaded once per instance count of the space (the
   largest max_batch_size, no queue delay) and short closed loops of 1, 2, 4,
   ... clients run; Triton's statistics give the compute time per execution
   at each batch size (profile.json);
2. predict: a discrete-event simulation (SimPy) of Triton's dynamic batcher
   (queue delay, preferred size, instances) gives each configuration's
   capacity (the highest steady rate whose simulated probe meets the SLO)
   and its P50/P99 at the scenario's own arrivals, bursts included;
3. verify: the --verify best predicted configurations are loaded through the
   repository API (as `loadkit sweep` does) and measured with real capacity
   searches (the options of `loadkit capacity`);
4. recommend the verified configuration with the highest measured capacity
   within the SLO, and with --peak the replicas it needs.

The tune directory holds profile.json, each verification's capacity run,
tune.json (space, profile, predictions, verifications, recommendation) and
report.html (a Pareto plot of capacity against P99, predicted and measured).
The server's configuration is restored at the end, on failure and on Ctrl-C;
if restoring fails the command says what state the server is in (exit 3).
Needs Triton in explicit model-control mode (`loadkit target --model-control
explicit` for the embedded one).

--space NAME=V1,V2,... takes the names `loadkit sweep --vary` takes:
max_queue_delay_us, preferred_batch_size, max_batch_size, instances.
--set parameters go to the scenario (its arrivals); the common ones
(candidates, spacing, protocol, ...) also to the verifying searches.

examples:
  loadkit tune soak --target http://127.0.0.1:8000 --slo p99=50ms \\
      --space max_batch_size=4,8,16 --space max_queue_delay_us=0,2000,8000 \\
      --space instances=1,2 --peak 2000
  loadkit tune burst_2x --target http://127.0.0.1:8000 --slo p99=50ms \\
      --space max_batch_size=1,8 --verify 2 --start 20 --max-rate 600
"""


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "scenario", help="a built-in scenario (e.g. soak, burst_2x) or a locustfile"
    )
    parser.add_argument(
        "--target", required=True, help="Triton's HTTP URL, e.g. http://127.0.0.1:8000"
    )
    parser.add_argument(
        "--space",
        action="append",
        default=[],
        metavar="NAME=V1,V2,...",
        help="a configuration setting and its values (repeatable): max_queue_delay_us, "
        "preferred_batch_size, max_batch_size, instances",
    )
    parser.add_argument(
        "--verify",
        type=int,
        default=3,
        metavar="N",
        help="verify the N best predicted configurations with capacity searches (default 3)",
    )
    parser.add_argument(
        "--profile-step",
        type=float,
        default=3.0,
        metavar="S",
        help="seconds per closed-loop step of the profile (default 3)",
    )
    options.add_overrides(parser, "a scenario parameter (repeatable)")
    options.add_request_options(parser)
    options.add_seed_and_output(parser, directory="tune directory", default_name="time + tune")
    parser.add_argument("--gpu", choices=("auto", "nvml", "sim", "none"), default="auto")
    options.add_server_telemetry(parser)
    from loadkit.commands.capacity import add_search_options

    search = parser.add_argument_group("the verifying capacity searches (see `loadkit capacity`)")
    add_search_options(search, slo_required=True)  # type: ignore[arg-type]


def run(args: argparse.Namespace) -> int:
    from loadkit.commands.sweep import _only_model
    from loadkit.decide import sweep, tune
    from loadkit.kserve.repository import ModelRepository
    from loadkit.load.catalog import resolve_scenario
    from loadkit.load.describe import describe_scenario
    from loadkit.load.orchestrator import check_reachable
    from loadkit.load.scenario import COMMON_PARAMS

    space, search = _checked_options(args)
    slo = tune.Slo(search.slo_percentile, search.slo_ms)
    params = options.scenario_params(args)
    common = {k: v for k, v in params.items() if k in COMMON_PARAMS}
    scenario = resolve_scenario(args.scenario)
    check_reachable(args.target)
    model = args.model or _only_model(args.target)
    info = describe_scenario(scenario, {**params, "model": model})
    spacing = str((info.get("params") or {}).get("spacing") or "constant")
    arrivals = tune.scenario_arrivals(info.get("shape") or {}, spacing, args.seed)

    repo = ModelRepository(args.target, model)
    original = repo.config()
    points = sweep.points_of(space)
    found = sweep.settings_of(original)
    max_batch, instance_counts = _profile_range(space, found)
    tune_dir = _tune_dir(args, scenario.stem)
    (tune_dir / "original-config.json").write_text(json.dumps(original, indent=2) + "\n")
    data: dict[str, Any] = {
        "version": tune.TUNE_VERSION,
        "kind": "tune",
        "scenario": str(scenario),
        "target": args.target,
        "model": model,
        "slo": {f"{slo.percentile}_ms": slo.ms},
        "space": {n: v for n, v in space},
        "params": params,
        "spacing": spacing,
        "original": found,
        "profile": None,
        "predictions": [],
        "verifications": [],
        "recommended": None,
        "restored": None,
        "status": "running",
        "started_at": time.time(),
    }
    write = _writer(tune_dir)
    write(data)

    def profile() -> Any:
        plan_params = {**common, "model": model}
        return _profile(args, repo, original, plan_params, instance_counts, max_batch)

    interrupted = False
    try:
        interrupted = tune.run_tune(
            repo,
            original,
            data,
            write,
            profile=profile,
            points=points,
            arrivals=arrivals,
            slo=slo,
            spacing=spacing,
            seed=args.seed,
            verify=args.verify,
            measure=_Verification(args, model, common, tune_dir),
            profile_path=tune_dir / tune.PROFILE_FILE,
        )
    finally:
        _conclude(data, write, tune_dir, model, slo, search)
    restored = data["restored"]
    if restored is not None and not restored["ok"]:
        raise TargetError(
            restored["message"],
            hint=f"load the original configuration by hand: {tune_dir / 'original-config.json'}",
        )
    if interrupted:
        return EXIT_INTERRUPTED
    return 0


def _checked_options(args: argparse.Namespace) -> tuple[list[tuple[str, list[int]]], Any]:
    """The space and the search settings, checked before the server is touched: (space, search)."""
    from loadkit.commands.capacity import settings_from
    from loadkit.decide import tune

    if not args.target.startswith(("http://", "https://")):
        raise UsageError(
            f"--target {args.target!r}: the repository API is spoken over HTTP",
            hint="use http://host:port",
        )
    space = tune.parse_space(args.space)
    if not space:
        raise UsageError("give at least one --space NAME=V1,V2,...")
    if args.verify < 0 or args.profile_step <= 0:
        raise UsageError("--verify must be >= 0 and --profile-step > 0")
    search = settings_from(args)  # a bad search option fails before the server is touched
    options.server_telemetry(args)  # ... and a bad --scrape/--agent
    return space, search


def _profile_range(
    space: list[tuple[str, list[int]]], found: Mapping[str, Any]
) -> tuple[int, list[int]]:
    """What the profile must cover: the space's largest max_batch_size and its instance counts.

    A setting the space does not vary is the server's own (`found`).
    """
    space_map = dict(space)
    max_batch = max(space_map.get("max_batch_size") or [found.get("max_batch_size") or 1])
    instance_counts = space_map.get("instances") or [found.get("instances") or 1]
    return max_batch, instance_counts


def _profile(
    args: argparse.Namespace,
    repo: Any,
    original: Mapping[str, Any],
    plan_params: Mapping[str, Any],
    instance_counts: list[int],
    max_batch: int,
) -> Any:
    """The batch profile the predictions start from: closed loops at each instance count."""
    from loadkit.decide.profile import measure_profile
    from loadkit.load.closed_loop import request_plan

    plan = request_plan(args.target, plan_params)
    return measure_profile(
        repo, original, plan, instance_counts, max_batch, args.profile_step, log=_log
    )


@dataclass(frozen=True)
class _Verification:
    """Measures one predicted configuration with a real capacity search, as a sweep point."""

    args: argparse.Namespace
    model: str
    common: Mapping[str, Any]  # the scenario parameters the searches share
    tune_dir: Path

    def __call__(self, k: int, settings: Mapping[str, Any], predicted_rps: float | None) -> Path:
        from loadkit.commands.capacity import _analyze, search_capacity
        from loadkit.decide import sweep, tune

        args = self.args
        start = tune.verify_start(predicted_rps, args.start, args.max_rate)
        point_args = argparse.Namespace(
            **{
                **vars(args),
                "model": self.model,
                "overrides": [f"{n}={v}" for n, v in self.common.items()],
                "start": start,
            }
        )
        run_dir, _ = search_capacity(
            point_args,
            out_dir=self.tune_dir,
            run_id="verify-" + sweep.point_id(k, settings),
            # the sweep's key: a verification is a sweep point (docs/run-format.md)
            extra_manifest={"sweep": {"point": k, "settings": dict(settings), "model": self.model}},
        )
        _analyze(run_dir, report=False)
        return run_dir


def _conclude(
    data: dict[str, Any], write: Write, tune_dir: Path, model: str, slo: Slo, search: Any
) -> None:
    """Recommend from what was verified and write it out, however the tuning ended."""
    from loadkit.decide import tune

    data["recommended"] = tune.recommend(
        data["verifications"], data["predictions"], model, slo, search.peak_rps, search.headroom
    )
    data["wall_s"] = round(time.time() - data["started_at"], 1)
    write(data)
    _print(data)
    _write_report(tune_dir)
    print(f"tune directory: {tune_dir}")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _tune_dir(args: argparse.Namespace, name: str) -> Path:
    run_id = args.run_id or time.strftime("%Y%m%d-%H%M%S-tune-") + name
    path = Path(args.out) / run_id
    if path.exists() and any(path.iterdir()):
        raise UsageError(f"{path} exists and is not empty", hint="pick another --run-id")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _writer(path: Path) -> Any:
    from loadkit.decide.tune import TUNE_FILE

    def write(data: Mapping[str, Any]) -> None:
        tmp = path / (TUNE_FILE + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
        tmp.replace(path / TUNE_FILE)

    return write


def _print(data: Mapping[str, Any]) -> None:
    for v in data.get("verifications") or []:
        measured = v.get("measured_capacity_rps")
        predicted = v.get("predicted_capacity_rps")
        if v["status"] != "measured" or measured is None:
            print(f"{v['label']}: {v['status']} {v.get('error') or ''}".rstrip())
            continue
        gap = v.get("capacity_error_pct")
        bracket = v.get("measured_bracket") or [None, None]
        short = (
            f" [search cut short by {v['cut_short']}: passes at {bracket[0]:g}, "
            f"fails at {bracket[1]:g}]"
            if v.get("cut_short") and None not in bracket
            else ""
        )
        print(
            f"{v['label']}: measured {measured:.1f} req/s, predicted "
            f"{predicted:.1f} req/s" + (f" ({gap:+.1f} %)" if gap is not None else "") + short
        )
    rec = data.get("recommended")
    if rec:
        print(rec["sentence"])
    elif data.get("predictions"):
        best = data["predictions"][0]
        print(f"no configuration was verified; predictions are in tune.json ({best['label']} ...)")


def _write_report(tune_dir: Path) -> None:
    from loadkit.report import tune as tune_report

    try:
        (tune_dir / "report.html").write_text(tune_report.render_html(tune_dir), encoding="utf-8")
    except LoadkitError as err:
        print(f"WARNING: no tune report ({err.message})", file=sys.stderr)
