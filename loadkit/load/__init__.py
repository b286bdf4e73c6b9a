"""Load generation: scenarios and shapes, the Locust users and the run orchestrator.

Two sides, in different processes (docs/architecture.md): the load generator
inside Locust (`loadkit.load.generator`) and the orchestrator around it
(`orchestrator` and its helpers); they share only the hand-off
(`handoff`) and the declarations (`scenario`, `shapes`, `sources`,
`protocols`, `preflight`).

Importing this package does not import Locust or gevent (the orchestrator
runs in a plain process); the Locust-facing names (`InferenceUser` and each
protocol's user class: `TritonHttpUser`, `TritonGrpcUser`, `JsonHttpUser`)
load on first use, and importing them attaches the loadkit recorder to
Locust's events.
"""

from __future__ import annotations

from typing import Any

from loadkit.load import protocols, shapes
from loadkit.load.scenario import Param, Params, Scenario

# The generator's user classes: InferenceUser and one per protocol (its registry entry).
_LOCUST_NAMES = {"InferenceUser", *(p.user_class for p in protocols.REGISTRY)}

__all__ = [  # the user classes load on first use (__getattr__)
    "Param",
    "Params",
    "Scenario",
    "shapes",
    *sorted(_LOCUST_NAMES),
]


def __getattr__(name: str) -> Any:
    if name in _LOCUST_NAMES:
        from loadkit.load.generator import users

        return getattr(users, name)
    raise AttributeError(f"module 'loadkit.load' has no attribute {name!r}")
