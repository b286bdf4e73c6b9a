"""Load generation: shapes, open-model arrivals, Locust users and the run orchestrator.

Importing this package does not import Locust or gevent (the orchestrator
runs in a plain process); the Locust-facing names (`InferenceUser`,
`TritonHttpUser`, `TritonGrpcUser`, `JsonHttpUser`) load on first use, and
importing them attaches the loadkit recorder to Locust's events.
"""

from __future__ import annotations

from typing import Any

from loadkit.load import shapes
from loadkit.load.scenario import Param, Params, Scenario

_LOCUST_NAMES = {"InferenceUser", "TritonHttpUser", "TritonGrpcUser", "JsonHttpUser"}

__all__ = [
    "InferenceUser",
    "JsonHttpUser",
    "Param",
    "Params",
    "Scenario",
    "TritonGrpcUser",
    "TritonHttpUser",
    "shapes",
]


def __getattr__(name: str) -> Any:
    if name in _LOCUST_NAMES:
        from loadkit.load import users

        return getattr(users, name)
    raise AttributeError(f"module 'loadkit.load' has no attribute {name!r}")
