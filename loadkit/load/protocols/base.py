"""What a protocol is to loadkit: one entry owns everything that differs between protocols.

A `Protocol` names the value of the scenario's `protocol` parameter and
gives, for it:

- the transport one Locust user sends requests with (`transport`);
- the client that reads the server's and the model's metadata for the
  pre-flight and the manifest (`metadata_client`, a `ServerClient`);
- the fixed-protocol Locust user class scenarios may subclass
  (`user_class`: built in `loadkit.load.generator.users`, exported by
  `loadkit.load`);
- its pre-flight rules: whether it replays JSON Lines request bodies
  (`sends_bodies`), which server extension it needs and what to do without
  it (`required_extension`, `without_extension`);
- what a Locust process must do once before its first connection
  (`prepare_process`, e.g. gRPC's gevent hook).

No field names a Locust class: entries are read by the orchestrator's
pre-flight as well as inside Locust.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from loadkit.kserve.metadata import DEFAULT_TIMEOUT_S, ServerClient
from loadkit.load.transports import JsonBody, Transport

DEFAULT_JSON_PATH = "/v2/models/{model}/infer"


class TransportOptions(NamedTuple):
    """What a scenario's parameters (and its user class) say about the transport."""

    timeout_s: float
    churn: bool
    json_path: str = DEFAULT_JSON_PATH
    json_body: JsonBody | None = None


TransportFactory = Callable[[str, str, TransportOptions], Transport]  # (url, model, options)


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Protocol:
    """One protocol's entry in the registry (`loadkit.load.protocols.REGISTRY`)."""

    name: str  # the `protocol` parameter's value
    help: str  # what it is, in a few words, for the parameter's help
    user_class: str  # the Locust user class that fixes this protocol
    transport: TransportFactory
    metadata_client: type[ServerClient]
    sends_bodies: bool = False  # replays a JSON Lines file of request bodies (--input-data)
    required_extension: str = ""  # a server extension the transport needs
    without_extension: str = ""  # the way out, when the server does not list it
    prepare_process: Callable[[], None] = _nothing

    def open_client(self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> ServerClient:
        """A metadata client for the server at `url`."""
        return self.metadata_client(url, timeout_s)

    def make_transport(
        self,
        url: str,
        model: str,
        *,
        timeout_s: float,
        churn: bool,
        json_path: str = DEFAULT_JSON_PATH,
        json_body: JsonBody | None = None,
    ) -> Transport:
        """The transport for one user (one client, one connection unless `churn`)."""
        return self.transport(url, model, TransportOptions(timeout_s, churn, json_path, json_body))
