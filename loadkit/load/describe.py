"""Describe a scenario file as JSON, in its own process.

Scenario files import Locust, and importing Locust monkey-patches the whole
process for gevent; the orchestrator (and its samplers) must stay a plain
Python process. So `loadkit run` asks a child for the scenario's name,
parameters, shape, duration and phases:

    python -m loadkit.load.describe scenarios/burst_2x.py --params '{"base_rate": 50}'
    python -m loadkit.load.describe --many a.py b.py   # one JSON list, defaults only

prints one JSON object (`ResolvedScenario.describe()`), or
`{"error": ..., "hint": ..., "exit_code": ...}` with that exit status.
With `--preflight TARGET` it also runs the pre-flight (`loadkit.load.preflight`)
against the target and adds its result (request plan, server description).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from loadkit import lifeline
from loadkit.errors import EXIT_TARGET, LoadkitError, TargetError, UsageError

DESCRIBE_TIMEOUT_S = 60.0


def load_scenario_module(path: Path) -> ModuleType:
    """Import a scenario file under a private module name."""
    if not path.is_file():
        raise UsageError(
            f"scenario file {path} does not exist",
            hint="give a locustfile's path or a built-in name (`loadkit scenarios`)",
        )
    spec = importlib.util.spec_from_file_location(f"loadkit_scenario_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(module)
    return module


def _user_json_body(module: ModuleType) -> Any:
    """The `json_body` of the scenario's (first concrete) user class, if it sets one."""
    for value in vars(module).values():
        if isinstance(value, type) and not vars(value).get("abstract", False):
            body = getattr(value, "json_body", None)
            if body is not None and hasattr(value, "send_one"):
                return body
    return None


def describe_in_process(
    path: Path,
    params: dict[str, Any],
    duration_s: float | None,
    preflight_target: str | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    module = load_scenario_module(path)
    from loadkit.load.scenario import Scenario, current_scenario

    scenario = getattr(module, "SCENARIO", None)
    if not isinstance(scenario, Scenario):
        scenario = current_scenario()
    resolved = scenario.resolve(params, duration_s)
    info = resolved.describe()
    if preflight_target is not None:
        from loadkit.load.preflight import run_preflight

        result = run_preflight(
            preflight_target, resolved.params, seed=seed, json_body=_user_json_body(module)
        )
        info["preflight"] = result.to_json()
    return info


def describe_scenario(
    path: str | Path,
    params: dict[str, Any] | None = None,
    duration_s: float | None = None,
    *,
    preflight_target: str | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Run the describer in a child process; raise its LoadkitError (exit 2 or 3) on failure."""
    argv = [
        sys.executable,
        "-m",
        "loadkit.load.describe",
        str(path),
        "--params",
        json.dumps(params or {}),
    ]
    if duration_s is not None:
        argv += ["--duration", str(duration_s)]
    if preflight_target is not None:
        argv += ["--preflight", preflight_target, "--seed", str(seed)]
    try:
        proc = lifeline.run(argv, capture_output=True, text=True, timeout=DESCRIBE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise UsageError(f"loading scenario {path} took over {DESCRIBE_TIMEOUT_S:.0f} s") from exc
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    result: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    if proc.returncode != 0 or "error" in result or not result:
        message = result.get("error") or f"could not load scenario {path}"
        detail = proc.stderr.strip().splitlines()[-1:] if proc.stderr.strip() else []
        hint = result.get("hint") or (detail[0] if detail else None)
        if result.get("exit_code") == EXIT_TARGET:
            raise TargetError(message, hint=hint)
        raise UsageError(message, hint=hint)
    return result


def describe_scenarios(paths: list[Path]) -> list[dict[str, Any]]:
    """Describe several scenario files (defaults only) in one child process.

    Each entry is the scenario's description, or `{"path": ..., "error": ...}`.
    """
    argv = [sys.executable, "-m", "loadkit.load.describe", "--many", *map(str, paths)]
    try:
        proc = lifeline.run(argv, capture_output=True, text=True, timeout=DESCRIBE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise UsageError(f"loading scenarios took over {DESCRIBE_TIMEOUT_S:.0f} s") from exc
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    if proc.returncode != 0 or not lines:
        detail = proc.stderr.strip().splitlines()[-1:] if proc.stderr.strip() else []
        raise UsageError("could not load the scenarios", hint=detail[0] if detail else None)
    result: list[dict[str, Any]] = json.loads(lines[-1])
    return result


def _describe_or_error(
    path: Path,
    params: dict[str, Any],
    duration_s: float | None,
    preflight_target: str | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    try:
        return describe_in_process(path, params, duration_s, preflight_target, seed)
    except LoadkitError as err:
        return {"error": err.message, "hint": err.hint, "exit_code": err.exit_code}
    except Exception as exc:  # a broken scenario file: say what and where
        return {"error": f"scenario {path} failed to load: {type(exc).__name__}: {exc}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadkit.load.describe")
    parser.add_argument("scenario", type=Path, nargs="+")
    parser.add_argument("--params", default="{}")
    parser.add_argument("--duration", type=float, default=None)
    parser.add_argument("--many", action="store_true", help="print one JSON list")
    parser.add_argument("--preflight", metavar="TARGET", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.many:
        many = [{"path": str(p), **_describe_or_error(p, {}, None)} for p in args.scenario]
        print(json.dumps(many, default=str))
        return 0
    info = _describe_or_error(
        args.scenario[0], json.loads(args.params), args.duration, args.preflight, args.seed
    )
    print(json.dumps(info, default=str))
    return 2 if "error" in info else 0


if __name__ == "__main__":
    sys.exit(main())
