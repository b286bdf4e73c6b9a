"""Tuning: profile the model once, predict every configuration of a space, verify the best few.

`loadkit tune` (docs/capacity.md) measures the batch profile
(`decide.profile`), simulates Triton's dynamic batcher at each configuration
(`decide.predict`), ranks the space by predicted capacity, and verifies the
top few with real capacity searches loaded through the repository API, as a
sweep does (`decide.sweep`: load, check, restore). The recommendation is the
verified configuration with the highest measured capacity within the SLO.
The server's configuration is restored at the end, after a failure and on
Ctrl-C. Everything lands in the tune directory: `profile.json`, each
verification's run directory and `tune.json`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadkit import lifeline
from loadkit.decide import sweep
from loadkit.decide.predict import Config, Prediction, predict
from loadkit.decide.profile import BatchProfile
from loadkit.errors import LoadkitError, UsageError

TUNE_FILE = "tune.json"
PROFILE_FILE = "profile.json"
TUNE_VERSION = 1

# measure(verification index, settings, predicted capacity) -> the capacity run's directory
Measure = Callable[[int, Mapping[str, Any], "float | None"], Path]
Write = Callable[[Mapping[str, Any]], None]
Profile = Callable[[], BatchProfile]

# A verifying search starts its ramp here, as a share of the predicted capacity: the
# ramp's first probes below it would only confirm what the profile already showed, and
# 0.8 leaves room for a prediction 25 % too high before the first probe fails.
VERIFY_START_SHARE = 0.8


def verify_start(predicted_rps: float | None, start_rps: float, max_rps: float) -> float:
    """The first probe's rate of a verifying search: near the prediction, never below --start."""
    if predicted_rps is None or predicted_rps <= 0:
        return start_rps
    return min(max(start_rps, VERIFY_START_SHARE * predicted_rps), max_rps)


def parse_space(items: Sequence[str]) -> list[tuple[str, list[int]]]:
    """`--space NAME=V1,V2,...` (the names `loadkit sweep --vary` takes)."""
    try:
        return sweep.parse_vary(items)
    except UsageError as err:
        raise UsageError(err.message.replace("--vary", "--space"), hint=err.hint) from None


@dataclass(frozen=True)
class Slo:
    percentile: str  # "p99"
    ms: float

    @property
    def pct(self) -> float:
        return float(self.percentile.removeprefix("p").replace("_", "."))

    def text(self) -> str:
        return f"{self.percentile} <= {self.ms:g} ms"


def scenario_arrivals(shape_info: Mapping[str, Any], spacing: str, seed: int) -> np.ndarray:
    """The scenario's intended arrival times, from its shape's description (manifest form)."""
    from loadkit.load import shapes
    from loadkit.load.generator.arrivals import arrival_times

    params = {k: v for k, v in shape_info.items() if k != "kind"}
    kind = str(shape_info.get("kind") or "")
    built = getattr(shapes, kind, None)
    try:
        if not isinstance(built, type) or not issubclass(built, shapes.Shape):
            raise TypeError(kind)
        shape = built(**params)
    except (TypeError, ValueError, LoadkitError):
        raise UsageError(
            f"cannot rebuild the scenario's shape {kind!r} to simulate its arrivals",
            hint="use a scenario whose shape is one of loadkit.load.shapes",
        ) from None
    times = []
    for t in arrival_times(shape, spacing=spacing, seed=seed):
        times.append(t)
        if len(times) > 200_000:
            break
    return np.asarray(times, dtype=float)


def rank(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Predicted rows best first: the most capacity, then the lowest predicted P99."""

    def key(row: Mapping[str, Any]) -> tuple[float, float]:
        p = row["predicted"]
        p99 = p.get("p99_ms")
        return (-(p.get("capacity_rps") or 0.0), p99 if p99 is not None else math.inf)

    return sorted(rows, key=key)


def predict_space(
    points: Sequence[Mapping[str, Any]],
    defaults: Mapping[str, Any],
    profile: BatchProfile,
    arrivals: np.ndarray,
    slo: Slo,
    spacing: str,
    seed: int,
) -> list[dict[str, Any]]:
    """Every configuration's prediction, in the space's order."""
    rows = []
    for i, settings in enumerate(points):
        config = Config.of(settings, defaults)
        prediction: Prediction = predict(config, profile, arrivals, slo.pct, slo.ms, spacing, seed)
        rows.append(
            {
                "index": i,
                "label": sweep.label_of(settings),
                "settings": dict(settings),
                "predicted": prediction.to_json(),
            }
        )
    mark_pareto(rows)
    return rows


def mark_pareto(rows: list[dict[str, Any]]) -> None:
    """`pareto`: no other configuration has as much capacity and as low a P99, one of them better."""
    for row in rows:
        cap = row["predicted"].get("capacity_rps") or 0.0
        p99 = row["predicted"].get("p99_ms")
        p99 = math.inf if p99 is None else p99
        row["pareto"] = not any(
            (o["predicted"].get("capacity_rps") or 0.0) >= cap
            and (
                o["predicted"].get("p99_ms")
                if o["predicted"].get("p99_ms") is not None
                else math.inf
            )
            <= p99
            and (
                (o["predicted"].get("capacity_rps") or 0.0) > cap
                or (o["predicted"].get("p99_ms") or math.inf) < p99
            )
            for o in rows
            if o is not row
        )


def error_pct(predicted: float | None, measured: float | None) -> float | None:
    """(predicted - measured) / measured, in %."""
    if predicted is None or measured is None or measured <= 0:
        return None
    return round((predicted - measured) / measured * 100.0, 1)


def verification(row: Mapping[str, Any], point: Mapping[str, Any], slo: Slo) -> dict[str, Any]:
    """A verified configuration: predicted against measured."""
    numbers = point.get("numbers") or {}
    measured = numbers.get("capacity_rps")
    predicted = row["predicted"].get("capacity_rps")
    bracket = numbers.get("capacity_bracket")
    low, high = bracket if bracket else (None, None)
    return {
        "label": row["label"],
        "settings": row["settings"],
        "status": point["status"],
        "run": point.get("run"),
        "error": point.get("error"),
        "predicted_capacity_rps": predicted,
        "measured_capacity_rps": measured,
        "capacity_error_pct": error_pct(predicted, measured),
        # the search's bracket (passes at low, fails at high), and what cut it short if
        # anything: then the measured capacity is a lower bound
        "measured_bracket": [low, high] if bracket else None,
        "cut_short": numbers.get("capacity_cut_short"),
        "predicted_within_bracket": (
            bool(low <= predicted <= high)
            if predicted is not None and low is not None and high is not None
            else None
        ),
        "predicted_p99_ms": row["predicted"].get("p99_ms"),
        "measured_batch_mean": numbers.get("batch_size_mean"),
        "slo": slo.text(),
    }


def recommend(
    verifications: Sequence[Mapping[str, Any]],
    predictions: Sequence[Mapping[str, Any]],
    model: str,
    slo: Slo,
    peak_rps: float | None,
    headroom: float | None,
) -> dict[str, Any] | None:
    """The verified configuration with the most measured capacity within the SLO, in one sentence."""
    from loadkit.analysis.capacity import replicas_for

    measured = [
        v
        for v in verifications
        if v["status"] == "measured" and (v.get("measured_capacity_rps") or 0) > 0
    ]
    if not measured:
        return None
    best = max(measured, key=lambda v: v["measured_capacity_rps"])
    cap = float(best["measured_capacity_rps"])
    replicas = replicas_for(peak_rps, cap, headroom or 0.0) if peak_rps is not None else None
    predicted = best.get("predicted_capacity_rps")
    gap = best.get("capacity_error_pct")
    measured_text = (
        f"at least {cap:.0f} req/s measured (its search was cut short by "
        f"{best['cut_short']}: give it longer)"
        if best.get("cut_short")
        else f"{cap:.0f} req/s measured"
    )
    sentence = (
        f"Run {model} with {best['label']}: {measured_text} within {slo.text()}"
        + (f" (predicted {predicted:.0f}, {gap:+.0f} %)" if predicted and gap is not None else "")
        + (
            f", P99 {best['predicted_p99_ms']:.1f} ms predicted at the scenario's arrivals"
            if best.get("predicted_p99_ms") is not None
            else ""
        )
        + (
            f"; {replicas} replica(s) for a peak of {peak_rps:g} req/s with "
            f"{(headroom or 0.0):.0%} headroom"
            if replicas is not None and peak_rps is not None
            else ""
        )
        + f"; the best of {len(measured)} verified out of {len(predictions)} predicted."
    )
    return {
        "label": best["label"],
        "settings": best["settings"],
        "capacity_rps": cap,
        "predicted_capacity_rps": predicted,
        "replicas": replicas,
        "peak_rps": peak_rps,
        "headroom": headroom,
        "sentence": sentence,
    }


def run_tune(
    repo: Any,
    original: Mapping[str, Any],
    data: dict[str, Any],
    write: Write,
    *,
    profile: Profile,
    points: Sequence[Mapping[str, Any]],
    arrivals: np.ndarray,
    slo: Slo,
    spacing: str,
    seed: int,
    verify: int,
    measure: Measure,
    profile_path: Path,
) -> bool:
    """Profile, predict the space, verify the top `verify`; restore the original whatever happens.

    Returns whether Ctrl-C interrupted it. `data` (tune.json) is written after
    each stage, so a killed tune keeps what it measured.
    """
    changed = False
    interrupted = False
    try:
        with lifeline.stop_signals():
            _log("profiling the model's compute per batch size ...")
            changed = True
            measured_profile = profile()
            profile_path.write_text(_json(measured_profile.to_json()), encoding="utf-8")
            data["profile"] = measured_profile.to_json()
            write(data)
            _log(f"predicting {len(points)} configuration(s) ...")
            from loadkit.kserve.repository import preferred_sizes

            defaults = {
                **sweep.settings_of(original),
                "preferred_batch_sizes": preferred_sizes(original),
            }
            rows = predict_space(points, defaults, measured_profile, arrivals, slo, spacing, seed)
            data["predictions"] = rows
            write(data)
            for k, row in enumerate(rank(rows)[: max(0, verify)]):
                settings = row["settings"]
                _log(
                    f"verifying {k + 1}/{verify}: {row['label']} "
                    f"(predicted {row['predicted']['capacity_rps']:.0f} req/s)"
                )
                try:
                    sweep.load_settings(repo, original, settings)
                except LoadkitError as err:
                    _log(f"  failed to load: {err.message}")
                    point = sweep.point(k, settings, None, "failed", error=err.message)
                    data["verifications"].append(verification(row, point, slo))
                    write(data)
                    continue
                run_dir = measure(k, settings, row["predicted"].get("capacity_rps"))
                if sweep.run_status(run_dir) == "aborted-interrupt":
                    point = sweep.point(k, settings, run_dir, "interrupted")
                    data["verifications"].append(verification(row, point, slo))
                    raise KeyboardInterrupt
                point = sweep.point(k, settings, run_dir, "measured", 0.0)
                data["verifications"].append(verification(row, point, slo))
                write(data)
    except KeyboardInterrupt:
        interrupted = True
        _log("Interrupted: restoring the original configuration ...")
    finally:
        if changed:
            lifeline.ignore_stop_signals()  # a second Ctrl-C must not leave it half-restored
            data["restored"] = sweep.restore(repo, original)
        data["status"] = "interrupted" if interrupted else "complete"
        if sys.exc_info()[0] is not None and not interrupted:
            data["status"] = "failed"
        write(data)
    return interrupted


def _json(value: Any) -> str:
    import json

    return json.dumps(value, indent=2, default=str) + "\n"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


__all__ = [
    "PROFILE_FILE",
    "TUNE_FILE",
    "TUNE_VERSION",
    "Slo",
    "error_pct",
    "mark_pareto",
    "parse_space",
    "predict_space",
    "rank",
    "recommend",
    "run_tune",
    "scenario_arrivals",
    "verification",
]
