"""What every transport shares: how one Locust user talks to the target.

The transports themselves live with their protocols (`loadkit.load.protocols`:
Triton HTTP, Triton gRPC, JSON over HTTP); this module holds their base class
and the wire helpers more than one of them uses.

One transport (one client, one connection) per Locust user: tritonclient's
HTTP client is not safe to share and its pool defaults to one connection, so
a shared client would serialise users and show the queueing as latency.
With `churn=True` every request opens (and closes) its own connection.

`infer(request)` sends one `InferRequest` (named tensors and the requested
outputs, from `loadkit.load.sources`), returns whether it opened a new
connection and raises on failure (classified by `loadkit.load.failures`).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from loadkit.errors import UsageError
from loadkit.load.sources import InferRequest

JsonBody = Callable[[InferRequest], Any]


def open_http_client(base_url: str, timeout_s: float) -> Any:
    """A geventhttpclient `HTTPClient` with one connection that never yields before a send.

    Before reusing a kept-alive connection the library checks that it is
    still open with `select.select([sock], [], [], 0)`. Under Locust that is
    gevent's `select`, which also yields to the event loop: every request
    would let every other ready greenlet run between its send timestamp and
    its send, and be timed that much slower. The same check through the
    original `select` does not yield.
    """
    from gevent import monkey
    from geventhttpclient import HTTPClient

    client = HTTPClient.from_url(
        base_url, concurrency=1, connection_timeout=timeout_s, network_timeout=timeout_s
    )
    select = monkey.get_original("select", "select")

    def is_socket_alive(sock: Any) -> bool:  # ConnectionPool._is_socket_alive, without the yield
        if sock is None:
            return False
        try:
            if sock.fileno() < 0:
                return False
            readable, _, _ = select([sock], [], [], 0.0)
            return not readable
        except (OSError, ValueError):
            return False

    client._connection_pool._is_socket_alive = is_socket_alive  # type: ignore[method-assign]
    return client


def split_url(url: str, default_scheme: str = "http") -> tuple[str, str]:
    """("http"/"https"/"grpc", "host:port/path") from a URL with or without a scheme."""
    if "://" in url:
        scheme, rest = url.split("://", 1)
    else:
        scheme, rest = default_scheme, url
    rest = rest.rstrip("/")
    if not rest:
        raise UsageError(f"target URL {url!r} has no host", hint="e.g. http://127.0.0.1:8000")
    return scheme.lower(), rest


class Transport(ABC):
    def __init__(self, url: str, model: str, *, timeout_s: float, churn: bool):
        self.url = url
        self.model = model
        self.timeout_s = timeout_s
        self.churn = churn
        self._connected = False
        self._client: Any = None  # the protocol's client object, with a close()

    @abstractmethod
    def _open(self) -> None: ...

    def _close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        self._connected = False

    @abstractmethod
    def encode(self, request: InferRequest) -> Any:
        """`request` as this transport puts it on the wire (body, proto): no I/O."""

    @abstractmethod
    def _send(self, wire: Any) -> None: ...

    def encode_block(self, requests: list[InferRequest]) -> list[InferRequest]:
        """The requests with their wire form attached, encoded ahead of their send time.

        Sources call this when they draw a block, so no request is serialized
        between its send timestamp and the socket.
        """
        encode = self.encode
        return [r._replace(wire=encode(r)) for r in requests]

    def prepare(self, request: InferRequest) -> Any:
        """The wire form of `request`: encoded ahead, or now (call before the send timestamp)."""
        return request.wire if request.wire is not None else self.encode(request)

    def connect(self) -> None:
        if not self.churn:
            self._open()

    def send(self, wire: Any) -> bool:
        """Send one prepared request; True if it opened a new connection."""
        if self.churn:
            self._open()
            try:
                self._send(wire)
            finally:
                self._close()
            return True
        new = not self._connected
        self._connected = True
        self._send(wire)
        return new

    def infer(self, request: InferRequest) -> bool:
        """Encode and send one request; True if it opened a new connection."""
        return self.send(self.prepare(request))

    def close(self) -> None:
        if not self.churn:
            self._close()


def raw_bytes(datatype: str, array: np.ndarray) -> bytes:
    """A tensor's bytes as the binary tensor extension carries them (row-major, BYTES
    elements with a 4-byte length prefix: tritonclient's own serializer)."""
    if datatype == "BYTES":
        from tritonclient.utils import serialize_byte_tensor

        serialized = serialize_byte_tensor(array)  # one object element: the bytes
        return bytes(serialized.item()) if serialized.size else b""
    return array.tobytes()


def _bytes_data(array: np.ndarray) -> list[str]:
    return [b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b) for b in array.ravel()]


def dumps_json(body: Any) -> bytes:
    """`body` as JSON bytes: orjson (numpy arrays as they are), or the standard library's encoder.

    orjson is 4-10x faster than `json.dumps` on the number lists of a ranking
    request (`bench/json_body.py`: 31 -> 7.5 us for the ranker's 100 candidates,
    226 -> 23 us for 1,000), and the body was the JSON transport's largest cost per
    request in the profile (docs/benchmarks.md). FP32 values are written in their shortest form,
    which reads back as the same FP32. What orjson refuses (ints beyond 64 bits,
    non-string keys) goes to `json`.
    """
    try:
        return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(body, default=_plain).encode()


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def kserve_v2_json_bytes(request: InferRequest) -> bytes:
    """The KServe v2 JSON body for a request, encoded: numeric arrays go to orjson unconverted."""
    return dumps_json(_kserve_v2_body(request, np.ravel))


def kserve_v2_json(request: InferRequest) -> dict[str, Any]:
    """The KServe v2 / Open Inference Protocol JSON body for a request."""
    return _kserve_v2_body(request, lambda array: array.ravel().tolist())


def _kserve_v2_body(request: InferRequest, numeric: Callable[[np.ndarray], Any]) -> dict[str, Any]:
    """The body's one layout; `numeric` gives a numeric input's data (a list, or an array)."""
    body: dict[str, Any] = {
        "inputs": [
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": datatype,
                "data": _bytes_data(array) if datatype == "BYTES" else numeric(array),
            }
            for name, datatype, array in request.inputs
        ]
    }
    if request.outputs:
        body["outputs"] = [{"name": n} for n in request.outputs]
    return body
