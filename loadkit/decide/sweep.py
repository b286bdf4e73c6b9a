"""A configuration sweep: each batching configuration loaded, measured, compared; the original restored.

`sweep_points` loads every point's settings on the server through the
repository API, checks that they took effect, has the point measured (a run
or a capacity search, the caller's `measure`), and records the point's numbers
and batch-size rules; `restore` loads the original back and says exactly what
state is left. `from_runs` compares runs made by hand, one per configuration.
The recommendation is `loadkit.analysis.sweep.recommend`.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from loadkit import lifeline
from loadkit.errors import LoadkitError, TargetError, UsageError
from loadkit.rundir import Run
from loadkit.rundir.schema import Manifest

# measure(point index, settings) -> the point's run directory
Measure = Callable[[int, Mapping[str, Any]], Path]
# write(sweep data): sweep.json after every point, so a killed sweep keeps what it measured
Write = Callable[[Mapping[str, Any]], None]


def parse_vary(items: Sequence[str]) -> list[tuple[str, list[int]]]:
    """`--vary NAME=V1,V2,...` into (setting, values), checked against the repository's settings."""
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
    """Every combination of the varied settings, in order."""
    names = [n for n, _ in vary]
    return [
        dict(zip(names, combo, strict=True)) for combo in itertools.product(*(v for _, v in vary))
    ]


def label_of(settings: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in settings.items()) or "as found"


def point_id(i: int, settings: Mapping[str, Any]) -> str:
    """The point's run id in the sweep directory ("02-max_queue_delay_us8000")."""
    return f"{i + 1:02d}-" + "-".join(f"{k}{v}" for k, v in settings.items())


def settings_of(config: Mapping[str, Any]) -> dict[str, Any]:
    from loadkit.kserve.repository import read_settings

    return read_settings(config)


def point(
    i: int,
    settings: Mapping[str, Any],
    run_dir: Path | None,
    status: str,
    warmup_s: float = 5.0,
    **extra: Any,
) -> dict[str, Any]:
    """One point of sweep.json: its settings and status; a measured one's numbers and rules."""
    out: dict[str, Any] = {
        "index": i,
        "label": label_of(settings),
        "settings": dict(settings),
        "run": str(run_dir) if run_dir is not None else None,
        "status": status,
        **extra,
    }
    if run_dir is not None and status == "measured":
        from loadkit.analysis.pipeline import model_config
        from loadkit.analysis.stored import load_or_analyze
        from loadkit.analysis.sweep import batch_rules, point_numbers, steady_numbers
        from loadkit.rundir import load_run

        run = load_run(run_dir)
        analysis = load_or_analyze(run)
        config = model_config(run)
        delay_ms = config.max_queue_delay_ms
        numbers = point_numbers(analysis, steady_numbers(run, warmup_s))
        out["numbers"] = numbers
        out["rules"] = batch_rules(
            numbers["batch_sizes"],
            config.max_batch_size,
            None if delay_ms is None else round(delay_ms * 1000),
        )
    return out


def run_status(run_dir: Path) -> str:
    """The run's manifest status; "aborted-interrupt" where Ctrl-C stopped it."""
    manifest = Manifest.from_dict(json.loads((run_dir / "manifest.json").read_text()))
    if manifest.status == "aborted" and (manifest.abort or {}).get("by") == "interrupt":
        return "aborted-interrupt"
    return str(manifest.status)


def load_settings(repo: Any, original: Mapping[str, Any], settings: Mapping[str, Any]) -> None:
    """Load `settings` over the original configuration; TargetError unless they took effect."""
    from loadkit.kserve.repository import apply_settings

    repo.load(apply_settings(original, settings))
    took = settings_of(repo.config())
    wrong = {k: took.get(k) for k, v in settings.items() if took.get(k) != v}
    if wrong:
        raise TargetError(f"the server reports {label_of(wrong)} after the load")


def sweep_points(
    repo: Any,
    original: Mapping[str, Any],
    points: Sequence[Mapping[str, Any]],
    measure: Measure,
    data: dict[str, Any],
    write: Write,
    warmup_s: float,
) -> bool:
    """Measure every point into `data["points"]`, then restore the original and recommend.

    Returns whether Ctrl-C interrupted the sweep. A point that does not load is
    recorded as failed and the sweep goes on; one that cannot be loaded at all
    (the server not in explicit mode) ends it at the first point.
    """
    from loadkit.analysis.sweep import recommend

    changed = False
    interrupted = False
    try:
        with lifeline.stop_signals():
            for i, settings in enumerate(points):
                label = label_of(settings)
                print(f"point {i + 1}/{len(points)}: {label}", file=sys.stderr)
                try:
                    changed = True
                    load_settings(repo, original, settings)
                except LoadkitError as err:
                    if i == 0 and type(err).__name__ == "NotExplicitMode":
                        changed = False  # nothing was loaded
                        raise
                    print(f"  point failed: {err.message}", file=sys.stderr)
                    data["points"].append(point(i, settings, None, "failed", error=err.message))
                    write(data)
                    continue
                run_dir = measure(i, settings)
                if run_status(run_dir) == "aborted-interrupt":
                    data["points"].append(point(i, settings, run_dir, "interrupted"))
                    raise KeyboardInterrupt
                data["points"].append(point(i, settings, run_dir, "measured", warmup_s))
                write(data)
    except KeyboardInterrupt:
        interrupted = True
        print("Interrupted: restoring the original configuration ...", file=sys.stderr)
    finally:
        if changed:
            lifeline.ignore_stop_signals()  # a second Ctrl-C must not leave it half-restored
            data["restored"] = restore(repo, original)
        data["status"] = "interrupted" if interrupted else "complete"
        data["recommended"] = recommend(data["points"])
        write(data)
    return interrupted


def restore(repo: Any, original: Mapping[str, Any]) -> dict[str, Any]:
    """Load the original configuration back and check it; say exactly what state is left."""
    want = settings_of(original)
    try:
        repo.load(original)
        got = settings_of(repo.config())
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
            now = label_of(settings_of(repo.config())) if state == "READY" else None
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


def from_runs(runs: Sequence[Run], warmup_s: float) -> dict[str, Any]:
    """sweep.json for runs made by hand, one per configuration: the settings that differ."""
    from loadkit.analysis.pipeline import model_config
    from loadkit.analysis.sweep import recommend

    configs = []
    for run in runs:
        model = model_config(run).name
        config = run.info.environment.server.models.get(model or "") or {}
        configs.append(settings_of(config) if config else {})
    keys = [
        k
        for k in ("max_queue_delay_us", "preferred_batch_size", "max_batch_size", "instances")
        if len({str(c.get(k)) for c in configs}) > 1
    ]
    points = []
    for i, (run, config) in enumerate(zip(runs, configs, strict=True)):
        settings = {k: config.get(k) for k in keys} if keys else {"run": run.info.run_id}
        measured = point(i, settings, run.path.resolve(), "measured", warmup_s)
        if not config:
            measured["note"] = "no model configuration recorded in this run's manifest"
        points.append(measured)
    return {
        "version": 1,
        "kind": "sweep",
        "from_runs": [str(r.path.resolve()) for r in runs],
        "vary": {k: [c.get(k) for c in configs] for k in keys},
        "points": points,
        "recommended": recommend(points),
        "restored": None,
        "status": "complete",
    }
