"""The registry of protocols: one module per protocol, listed once here.

Adding a protocol = one new module in this package holding its transport
(a `loadkit.load.transports.Transport`) and a `PROTOCOL = Protocol(...)`
(name, help, user class name, transport, metadata client, pre-flight rules;
see `base.py`), plus its entry in `REGISTRY`. The scenario's `protocol`
parameter, the pre-flight, the Locust users and `loadkit.load`'s exported
user classes read this registry and nothing else (docs/architecture.md).
"""

from __future__ import annotations

from loadkit.errors import UsageError
from loadkit.load.protocols import json_http, triton_grpc, triton_http
from loadkit.load.protocols.base import Protocol, TransportOptions

REGISTRY: tuple[Protocol, ...] = (
    triton_http.PROTOCOL,
    triton_grpc.PROTOCOL,
    json_http.PROTOCOL,
)

BY_NAME: dict[str, Protocol] = {p.name: p for p in REGISTRY}
NAMES: tuple[str, ...] = tuple(p.name for p in REGISTRY)


def choices() -> str:
    """`http (Triton HTTP), grpc (Triton gRPC) or json (JSON over HTTP)`, for help texts."""
    items = [f"{p.name} ({p.help})" for p in REGISTRY]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def get(name: str) -> Protocol:
    """The protocol `name`; UsageError listing the known ones otherwise."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise UsageError(
            f"unknown protocol {name!r}", hint="use " + ", ".join(NAMES[:-1]) + " or " + NAMES[-1]
        ) from None


__all__ = [
    "BY_NAME",
    "NAMES",
    "REGISTRY",
    "Protocol",
    "TransportOptions",
    "choices",
    "get",
]
