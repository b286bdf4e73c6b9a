"""Triton's model repository API: load a model with another configuration, read it back.

`loadkit sweep` changes a model's batching and instances through
`POST /v2/repository/models/{m}/load` with `{"parameters": {"config": "<JSON>"}}`,
which Triton accepts only in explicit model-control mode
(`--model-control-mode=explicit`). Plain urllib (no gevent), the server's
own words kept in every error.
"""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from loadkit.errors import TargetError, UsageError

LOAD_TIMEOUT_S = 120.0  # a Python-backend model with several instances takes seconds
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# The sweep's names for the configuration fields it may change.
SETTINGS = ("max_queue_delay_us", "preferred_batch_size", "max_batch_size", "instances")
EXPLICIT_HINT = (
    "start Triton with --model-control-mode=explicit --load-model=<model> "
    "(the embedded one: `loadkit target --model-control explicit`), or change the "
    "configuration yourself and compare the runs with `loadkit sweep --from-runs RUN...`"
)


class NotExplicitMode(TargetError):
    """The server refuses repository loads (model control mode none or poll)."""


def _request(url: str, body: Any = None, timeout_s: float = 10.0) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    request.add_header("Content-Type", "application/json")
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            return int(response.status), response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TargetError(
            f"cannot reach {url} ({reason})", hint="is the server running at --target?"
        ) from exc


def _server_words(text: str) -> str:
    try:
        return str(json.loads(text).get("error") or text).strip()
    except (ValueError, AttributeError):
        return text.strip()


def apply_settings(config: Mapping[str, Any], settings: Mapping[str, int]) -> dict[str, Any]:
    """A copy of a Triton model config (JSON) with the sweep's settings applied."""
    out = copy.deepcopy(dict(config))
    for name, value in settings.items():
        if name == "max_queue_delay_us":
            out.setdefault("dynamic_batching", {})["max_queue_delay_microseconds"] = int(value)
        elif name == "preferred_batch_size":
            out.setdefault("dynamic_batching", {})["preferred_batch_size"] = [int(value)]
        elif name == "max_batch_size":
            out["max_batch_size"] = int(value)
            batching = out.get("dynamic_batching")
            if isinstance(batching, dict):  # a preferred size above the max is refused
                preferred = [int(v) for v in batching.get("preferred_batch_size") or []]
                kept = [v for v in preferred if v <= int(value)]
                if "preferred_batch_size" not in settings:
                    batching["preferred_batch_size"] = kept
        elif name == "instances":
            groups = out.get("instance_group") or [{"kind": "KIND_AUTO"}]
            groups = [dict(g) for g in groups]
            groups[0]["count"] = int(value)
            out["instance_group"] = groups
        else:
            raise UsageError(f"cannot vary {name!r}", hint=f"one of: {', '.join(SETTINGS)}")
    return out


def read_settings(config: Mapping[str, Any]) -> dict[str, int | None]:
    """The sweep's settings as a config holds them (None where absent)."""
    batching = config.get("dynamic_batching")
    batching = batching if isinstance(batching, dict) else {}
    preferred = batching.get("preferred_batch_size") or []
    groups = config.get("instance_group") or []

    def num(value: Any) -> int | None:
        try:
            return int(value)
        except (TypeError, ValueError):
            return None

    return {
        "max_queue_delay_us": num(batching.get("max_queue_delay_microseconds", 0))
        if batching
        else None,
        "preferred_batch_size": num(preferred[0]) if preferred else None,
        "max_batch_size": num(config.get("max_batch_size")),
        "instances": sum(num(g.get("count", 1)) or 0 for g in groups if isinstance(g, dict))
        or None,
    }


def preferred_sizes(config: Mapping[str, Any]) -> list[int]:
    """The config's whole preferred_batch_size list (`read_settings` names only its first)."""
    batching = config.get("dynamic_batching")
    values = batching.get("preferred_batch_size") if isinstance(batching, dict) else None
    out = []
    for v in values or []:
        try:
            out.append(int(v))
        except (TypeError, ValueError):
            continue
    return sorted(set(out))


class ModelRepository:
    """One model on one Triton: its configuration, and loading it with another."""

    def __init__(self, url: str, model: str):
        self.url = url.rstrip("/")
        self.model = model
        self._model_path = quote(model, safe="")

    def config(self) -> dict[str, Any]:
        status, text = _request(f"{self.url}/v2/models/{self._model_path}/config")
        if status != 200:
            raise UsageError(
                f"the server has no configuration for model {self.model!r}: {_server_words(text)}",
                hint="is the model loaded? `curl -X POST URL/v2/repository/index` lists them",
            )
        value = json.loads(text)
        if not isinstance(value, dict):
            raise TargetError(f"the server's /config for {self.model!r} is not a JSON object")
        return value

    def stats(self) -> dict[str, Any]:
        """The model's statistics (`/v2/models/{m}/stats`: cumulative since it loaded)."""
        status, text = _request(f"{self.url}/v2/models/{self._model_path}/stats")
        if status != 200:
            raise TargetError(f"no statistics for {self.model!r}: {_server_words(text)}")
        value = json.loads(text)
        return value if isinstance(value, dict) else {}

    def load(self, config: Mapping[str, Any]) -> None:
        """Load the model with `config`; NotExplicitMode or TargetError with the server's words."""
        status, text = _request(
            f"{self.url}/v2/repository/models/{self._model_path}/load",
            {"parameters": {"config": json.dumps(config)}},
            timeout_s=LOAD_TIMEOUT_S,
        )
        if status == 200:
            return
        words = _server_words(text)
        if "not allowed" in words:
            raise NotExplicitMode(
                f"the server is not in explicit model-control mode ({words})", hint=EXPLICIT_HINT
            )
        raise TargetError(f"loading {self.model!r} with the new configuration failed: {words}")

    def state(self) -> str:
        """The model's state in the repository index (READY, UNAVAILABLE, ...) or 'absent'."""
        status, text = _request(f"{self.url}/v2/repository/index", {})
        if status != 200:
            return f"unknown (index: HTTP {status})"
        try:
            rows = json.loads(text)
        except ValueError:
            return "unknown"
        states = [
            str(r.get("state") or "UNKNOWN")
            for r in rows
            if isinstance(r, dict) and r.get("name") == self.model
        ]
        return states[0] if states else "absent"


__all__ = [
    "EXPLICIT_HINT",
    "SETTINGS",
    "ModelRepository",
    "NotExplicitMode",
    "apply_settings",
    "preferred_sizes",
    "read_settings",
]
