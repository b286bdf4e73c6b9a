"""Request presets for models loadkit knows: what suits a model when its inputs match.

A preset gives a model's spec and the request options that suit it (a
variable dimension's size, an id range). The package that ships a model
registers its preset under the `loadkit.request_presets` entry point group
(`name = "module:function"`, the function taking the scenario's parameters
and returning a `Preset`): loadkit's embedded target declares its ranker's
that way in pyproject.toml, so nothing in `loadkit.load` names a model or
the package that ships it. `register()` adds one at run time
(tests, a scenario file).

`requests=NAME` picks a preset by name; a model whose inputs match a
preset's exactly gets its options without asking (`sources.matching_preset`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from loadkit.errors import UsageError
from loadkit.kserve.metadata import ModelSpec

ENTRY_POINT_GROUP = "loadkit.request_presets"


@dataclass(frozen=True)
class Preset:
    """Defaults for a known model: its spec and the options that suit it."""

    spec: ModelSpec
    shapes: Mapping[str, tuple[int, ...]]
    int_ranges: Mapping[str, tuple[int, int]]


PresetFactory = Callable[[Mapping[str, Any]], Preset]

_REGISTERED: dict[str, PresetFactory] = {}
_DECLARED: dict[str, Any] = {}  # name -> entry point, loaded on first use
_scanned = False


def register(name: str, factory: PresetFactory) -> None:
    """Add (or replace) the preset `name`."""
    _REGISTERED[name] = factory


def _declared() -> dict[str, Any]:
    global _scanned
    if not _scanned:
        for point in entry_points(group=ENTRY_POINT_GROUP):
            _DECLARED.setdefault(point.name, point)
        _scanned = True
    return _DECLARED


def names() -> tuple[str, ...]:
    """Every preset's name: registered ones, then those installed packages declare."""
    return tuple(dict.fromkeys([*_REGISTERED, *_declared()]))


def load(name: str, params: Mapping[str, Any]) -> Preset:
    """The preset `name`, given the scenario's parameters."""
    factory = _REGISTERED.get(name)
    if factory is None:
        point = _declared().get(name)
        if point is None:
            raise UsageError(
                f"no request preset {name!r}", hint="presets: " + (", ".join(names()) or "none")
            )
        factory = _REGISTERED[name] = point.load()
    return factory(params)
