"""Scenario declarations: a shape, its parameters and the traffic model (no Locust here).

A scenario file (`scenarios/*.py`) is a locustfile that builds one
`Scenario` at module level (`SCENARIO = Scenario(...)`), subclasses one of
the users in `loadkit.load.generator.users` and exports `SCENARIO.locust_shape()`.
Parameters have defaults and help texts; `loadkit run --set name=value`
overrides them (values are parsed by the default's type). The orchestrator
passes the overrides to every Locust process in `LOADKIT_PARAMS` (JSON).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from loadkit.errors import UsageError
from loadkit.load import protocols
from loadkit.load.handoff import ENV_DURATION, ENV_PARAMS
from loadkit.load.shapes import Shape, Truncated

MODELS = ("open", "closed")


@dataclass(frozen=True)
class Param:
    """A scenario parameter: default value (its type is the parameter's type) and help."""

    default: Any
    help: str


# Parameters every scenario has; a scenario may override their defaults.
COMMON_PARAMS: dict[str, Param] = {
    "protocol": Param("http", protocols.choices()),
    "model": Param("", "model name (default: the server's only model)"),
    "requests": Param(
        "metadata", "request source: metadata (from the model's metadata and config) or ranker"
    ),
    "shape": Param("", "NAME:d1,d2 for inputs with variable dims, space-separated (--shape)"),
    "int_range": Param("", "NAME:LO,HI for integer inputs, space-separated (default 0,99)"),
    "string_length": Param(16, "length of synthetic BYTES strings"),
    "input_data": Param("", "perf_analyzer input-data JSON, or JSON Lines bodies (json)"),
    "batch_size": Param(1, "rows per request, for models with max_batch_size > 0"),
    "candidates": Param(100, "ranker model: candidate items per request"),
    "churn": Param(False, "open a new connection for every request (reproduces churn)"),
    "users": Param(0, "Locust users serving arrivals (open) or looping (closed); 0 = auto"),
    "spacing": Param("constant", "arrival spacing: constant or poisson (seeded)"),
    "max_start_delay_s": Param(1.0, "an arrival not started within this is dropped (counted)"),
    "timeout_s": Param(10.0, "request timeout"),
    "json_path": Param("/v2/models/{model}/infer", "URL path for protocol=json"),
}


class Params(dict[str, Any]):
    """Resolved parameter values; attribute access for brevity in scenario files."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(f"scenario has no parameter {name!r}") from exc


def parse_value(name: str, text: Any, default: Any) -> Any:
    """Parse an override by the type of the default; UsageError on a bad value."""
    if not isinstance(text, str):
        return text
    try:
        if isinstance(default, bool):
            lowered = text.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
    except ValueError:
        kind = type(default).__name__
        raise UsageError(
            f"--set {name}={text}: not a valid {kind}",
            hint=f"{name} defaults to {default!r}",
        ) from None
    return text


@dataclass
class ResolvedScenario:
    """A scenario with its parameter values fixed: what one run executes."""

    scenario: Scenario
    params: Params
    shape: Shape
    users: int

    @property
    def duration_s(self) -> float:
        return self.shape.duration_s

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.scenario.name,
            "description": self.scenario.description,
            "model": self.scenario.model,
            "request_name": self.scenario.request_name,
            "params": dict(self.params),
            "param_help": {k: p.help for k, p in self.scenario.all_params().items()},
            "param_defaults": {k: p.default for k, p in self.scenario.all_params().items()},
            "shape": self.shape.describe(),
            "duration_s": self.duration_s,
            "peak_rate": self.shape.peak_rate() if self.scenario.model == "open" else None,
            "users": self.users,
            "phases": [[p.t_s, p.name, p.attrs] for p in self.shape.phases()],
            "slo": self.scenario.slo,
        }


def manifest_scenario(
    info: Mapping[str, Any], *, path: str, seed: int, workers: int
) -> dict[str, Any]:
    """`manifest.scenario` from `ResolvedScenario.describe()`: one definition for `loadkit run`
    and plain `locust -f`, so both record the same keys."""
    return {
        "name": info["name"],
        "path": path,
        "params": dict(info["params"]),
        "model": info["model"],
        "shape": info["shape"],
        "duration_s": info["duration_s"],
        "peak_rate": info["peak_rate"],
        "users": info["users"],
        "seed": seed,
        "workers": workers,
        "worker_split": "every N-th arrival (worker i takes arrivals k with k % N == i)",
    }


@dataclass
class Scenario:
    """What a scenario file declares. See docs/scenarios.md."""

    name: str
    shape: Callable[[Params], Shape]
    params: Mapping[str, Param] = field(default_factory=dict)
    description: str = ""
    model: str = "open"
    request_name: str = "infer"
    slo: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise UsageError(f"scenario {self.name}: model must be one of {MODELS}")
        _REGISTRY.append(self)

    def all_params(self) -> dict[str, Param]:
        merged = dict(COMMON_PARAMS)
        merged.update(self.params)
        return merged

    def resolve(
        self, overrides: Mapping[str, Any] | None = None, duration_s: float | None = None
    ) -> ResolvedScenario:
        """Apply overrides (strings are parsed by the default's type) and `--duration`.

        `--duration` sets the `duration_s` parameter when the scenario has
        one; otherwise it cuts the shape off (or holds its last rate) there.
        """
        declared = self.all_params()
        unknown = sorted(set(overrides or {}) - set(declared))
        if unknown:
            raise UsageError(
                f"scenario {self.name} has no parameter(s) {', '.join(unknown)}",
                hint="parameters: " + ", ".join(sorted(declared)),
            )
        values = Params({k: p.default for k, p in declared.items()})
        for key, raw in (overrides or {}).items():
            values[key] = parse_value(key, raw, declared[key].default)
        if duration_s is not None and "duration_s" in declared:
            values["duration_s"] = float(duration_s)
        if values["protocol"] not in protocols.NAMES:
            raise UsageError(
                f"protocol {values['protocol']!r} is not one of {', '.join(protocols.NAMES)}"
            )
        shape = self.shape(values)
        if duration_s is not None and "duration_s" not in declared:
            shape = Truncated(shape, float(duration_s))
        users = int(values["users"])
        if users <= 0:
            users = auto_users(shape.peak_rate()) if self.model == "open" else 10
        return ResolvedScenario(self, values, shape, users)

    def resolve_from_environment(self) -> ResolvedScenario:
        """Resolve with the overrides the orchestrator put in the environment."""
        raw = os.environ.get(ENV_PARAMS) or "{}"
        try:
            overrides = json.loads(raw)
        except ValueError as exc:
            raise UsageError(f"{ENV_PARAMS} is not JSON: {raw[:80]}") from exc
        duration = os.environ.get(ENV_DURATION)
        return self.resolve(overrides, float(duration) if duration else None)

    def locust_shape(self) -> type:
        """The `LoadTestShape` class Locust needs in the scenario module.

        Built by the load generator (`loadkit.load.generator.runtime`), which
        installs its builder when a scenario imports a loadkit user class:
        declarations never import the generator.
        """
        if not _SHAPE_CLASS:
            raise UsageError(
                f"scenario {self.name}: no loadkit user class imported before locust_shape()",
                hint="import one first: from loadkit.load import InferenceUser",
            )
        return _SHAPE_CLASS[-1](self)


def auto_users(peak_rate: float) -> int:
    """Pool size for the open model: half a second of arrivals at peak, 10..2000."""
    return int(min(2000, max(10, math.ceil(peak_rate * 0.5) + 10)))


_REGISTRY: list[Scenario] = []
_SHAPE_CLASS: list[Callable[[Scenario], type]] = []


def install_shape_class(build: Callable[[Scenario], type]) -> None:
    """How `Scenario.locust_shape()` builds Locust's shape class (the generator's runtime)."""
    _SHAPE_CLASS[:] = [build]


def current_scenario() -> Scenario:
    """The scenario the loaded locustfile declared (the last one constructed)."""
    if not _REGISTRY:
        raise UsageError(
            "the locustfile declares no loadkit Scenario",
            hint="build one at module level: SCENARIO = Scenario(name=..., shape=...)",
        )
    return _REGISTRY[-1]
