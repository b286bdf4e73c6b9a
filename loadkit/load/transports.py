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

    pool = client._connection_pool
    pool._is_socket_alive = is_socket_alive  # type: ignore[method-assign]
    resolved = _literal_address(pool)
    if resolved is not None:
        pool._resolve = lambda: resolved  # type: ignore[method-assign]
    return client


def _literal_address(pool: Any) -> list[Any] | None:
    """getaddrinfo's answer for a pool whose host is an IP address (None for a name).

    Each new connection resolves its host through gevent's thread pool: a
    thread hand-off per connect, for an answer an IP address cannot change.
    A name is still resolved per connection (DNS round robin spreads them).
    """
    import ipaddress
    import socket

    host = str(pool._connection_host).strip("[]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None
    family = socket.AF_INET if pool.disable_ipv6 else 0
    return socket.getaddrinfo(
        host,
        pool._connection_port,
        family,
        socket.SOCK_STREAM,
        socket.SOL_TCP,
        flags=socket.AI_NUMERICHOST,
    )


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

    @property
    def connected(self) -> bool:
        """Whether a request went out on this transport's (kept) connection."""
        return self._connected

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


class KserveV2JsonBodies:
    """`kserve_v2_json_bytes`, byte for byte, from fragments built once per request layout.

    Between the requests of a source only the tensors' values change. Building
    the body's dict and encoding its names, shapes and datatypes per request was
    most of the JSON body's cost (docs/benchmarks.md, session 6: 10 % of the
    open model's process, orjson itself 3 %). So the invariant text around each
    tensor's `data` is cut once per (names, datatypes, outputs, shapes), from the
    same layout (`_kserve_v2_body`), and each request encodes its arrays only.
    What orjson refuses goes to `kserve_v2_json_bytes` whole, as before.
    """

    def __init__(self) -> None:
        self._fragments: dict[tuple[Any, ...], tuple[bytes, ...]] = {}

    def encode(self, request: InferRequest) -> bytes:
        shapes = tuple(a.shape for a in request.arrays)
        key = (request.names, request.datatypes, request.outputs, shapes)
        fragments = self._fragments.get(key)
        if fragments is None:
            fragments = self._fragments[key] = _json_fragments(request)
        if not request.arrays:
            return fragments[0]
        parts = [fragments[0]]
        try:
            for datatype, array, tail in zip(
                request.datatypes, request.arrays, fragments[1:], strict=True
            ):
                data = _bytes_data(array) if datatype == "BYTES" else np.ravel(array)
                parts += (orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY), tail)
        except TypeError:  # orjson.JSONEncodeError: the whole body through dumps_json's fallback
            return kserve_v2_json_bytes(request)
        return b"".join(parts)


def _json_fragments(request: InferRequest) -> tuple[bytes, ...]:
    """The encoded body cut around each input's `data`: len(inputs) + 1 pieces."""
    marks = [f"loadkit-data-{i}-{id(request)}" for i in range(len(request.arrays))]
    order = iter(marks)
    body = orjson.dumps(
        _kserve_v2_body(request, lambda _: next(order), bytes_data=lambda _: next(order))
    )
    pieces = [body]
    for mark in marks:
        head, tail = pieces[-1].split(orjson.dumps(mark), 1)
        pieces[-1:] = [head, tail]
    return tuple(pieces)


def _kserve_v2_body(
    request: InferRequest,
    numeric: Callable[[np.ndarray], Any],
    bytes_data: Callable[[np.ndarray], Any] = _bytes_data,
) -> dict[str, Any]:
    """The body's one layout; `numeric` gives a numeric input's data (a list, or an array)."""
    body: dict[str, Any] = {
        "inputs": [
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": datatype,
                "data": bytes_data(array) if datatype == "BYTES" else numeric(array),
            }
            for name, datatype, array in request.inputs
        ]
    }
    if request.outputs:
        body["outputs"] = [{"name": n} for n in request.outputs]
    return body
