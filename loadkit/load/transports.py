"""How one Locust user talks to the target: Triton HTTP, Triton gRPC, JSON over HTTP.

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
from typing import Any, NamedTuple
from urllib.parse import quote

import numpy as np
import orjson

from loadkit.errors import UsageError
from loadkit.load.failures import HttpStatusError
from loadkit.load.sources import InferRequest

JsonBody = Callable[[InferRequest], Any]

_grpc_gevent_ready = False


def init_grpc_gevent() -> None:
    """Make gRPC cooperate with gevent; must run before the first channel.

    Without it every gRPC call blocks the gevent hub: 20 users send one
    request at a time and the latencies still look normal.
    """
    global _grpc_gevent_ready
    if not _grpc_gevent_ready:
        import grpc.experimental.gevent as grpc_gevent

        grpc_gevent.init_gevent()
        _grpc_gevent_ready = True


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


class HttpWire(NamedTuple):
    body: bytes
    headers: dict[str, str]


class TritonHttpTransport(Transport):
    """KServe v2 binary tensors over HTTP; one connection per user.

    The body is what `tritonclient.http` sends (its own `generate_request_body`
    writes the JSON header, cached per shape and size, since every request of a
    source has the same one), encoded ahead; it goes out through
    geventhttpclient directly, as tritonclient's client does, without
    tritonclient's per-request plugin, header and URL handling. A request
    succeeds when the server answers 200 and its whole response is read (the
    outputs are not decoded: the request is timed, not checked); any other
    status raises tritonclient's `InferenceServerException` with the server's
    own error message, as `tritonclient.http` would.
    """

    def __init__(self, url: str, model: str, *, timeout_s: float, churn: bool):
        super().__init__(url, model, timeout_s=timeout_s, churn=churn)
        scheme, hostport = split_url(url)
        self._base = f"{scheme}://{hostport.split('/', 1)[0]}"
        self._path = f"/v2/models/{quote(model)}/infer"
        self._headers: dict[tuple[Any, ...], tuple[bytes, dict[str, str]]] = {}

    def _open(self) -> None:
        self._client = open_http_client(self._base, self.timeout_s)

    def encode(self, request: InferRequest) -> HttpWire:
        raws = [_raw_bytes(d, a) for d, a in zip(request.datatypes, request.arrays, strict=True)]
        shapes = tuple(a.shape for a in request.arrays)
        key: tuple[Any, ...] = (request.names, request.datatypes, request.outputs, shapes)
        key += (tuple(len(r) for r in raws),)
        cached = self._headers.get(key)
        if cached is None:
            cached = self._headers[key] = _binary_header(request)
        header, headers = cached
        return HttpWire(b"".join((header, *raws)), headers)

    def _send(self, wire: HttpWire) -> None:
        response = self._client.post(self._path, body=wire.body, headers=wire.headers)
        body = response.read()
        if response.status_code != 200:
            raise _http_error(response.status_code, body)


def _raw_bytes(datatype: str, array: np.ndarray) -> bytes:
    """A tensor's bytes as the binary tensor extension carries them (row-major, BYTES
    elements with a 4-byte length prefix: tritonclient's own serializer)."""
    if datatype == "BYTES":
        from tritonclient.utils import serialize_byte_tensor

        serialized = serialize_byte_tensor(array)  # one object element: the bytes
        return bytes(serialized.item()) if serialized.size else b""
    return array.tobytes()


def _binary_header(request: InferRequest) -> tuple[bytes, dict[str, str]]:
    """The JSON header tritonclient writes for `request`, and the HTTP headers that go with it."""
    import tritonclient.http as httpclient

    inputs = []
    for name, datatype, array in request.inputs:
        tensor = httpclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array, binary_data=True)
        inputs.append(tensor)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in request.outputs]
    body, json_size = httpclient.InferenceServerClient.generate_request_body(
        inputs, outputs=outputs or None
    )
    size = len(body) if json_size is None else json_size
    return body[:size], {"Inference-Header-Content-Length": str(size)}


def _http_error(status: int, body: bytes) -> Exception:
    """tritonclient's exception for a non-200 answer, with the server's own message."""
    from tritonclient.utils import InferenceServerException

    text = body.decode("utf-8", "replace")
    try:
        message = str(json.loads(text)["error"]) if text else "empty response from the server"
    except (ValueError, KeyError, TypeError):
        message = text
    return InferenceServerException(msg=message, status=str(status), debug_details=text)


class TritonGrpcTransport(Transport):
    """KServe v2 gRPC (tritonclient's generated stub); each user its own channel.

    The `ModelInferRequest` of each request is built ahead (what
    `tritonclient.grpc` builds per call: tensors' raw contents, the requested
    outputs), from a template per shape; `send` only calls the stub. Errors
    become tritonclient's `InferenceServerException` as its client raises them.
    """

    def __init__(self, url: str, model: str, *, timeout_s: float, churn: bool):
        super().__init__(url, model, timeout_s=timeout_s, churn=churn)
        _, self._hostport = split_url(url, default_scheme="grpc")
        self._templates: dict[tuple[Any, ...], Any] = {}
        self._stub: Any = None

    def _open(self) -> None:
        init_grpc_gevent()
        import grpc
        from tritonclient.grpc import service_pb2_grpc

        self._client = grpc.insecure_channel(
            self._hostport,
            options=[
                # Without this, channels share one global connection pool and
                # neither "one connection per user" nor churn would be real.
                ("grpc.use_local_subchannel_pool", 1),
                ("grpc.max_send_message_length", 2**31 - 1),
                ("grpc.max_receive_message_length", 2**31 - 1),
            ],
        )
        self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._client)

    def encode(self, request: InferRequest) -> Any:
        from tritonclient.grpc import service_pb2

        shapes = tuple(a.shape for a in request.arrays)
        key = (request.names, request.datatypes, request.outputs, shapes)
        template = self._templates.get(key)
        if template is None:
            template = self._templates[key] = service_pb2.ModelInferRequest(
                model_name=self.model,
                inputs=[
                    service_pb2.ModelInferRequest.InferInputTensor(
                        name=n, datatype=d, shape=list(a.shape)
                    )
                    for n, d, a in request.inputs
                ],
                outputs=[
                    service_pb2.ModelInferRequest.InferRequestedOutputTensor(name=n)
                    for n in request.outputs
                ],
            )
        proto = service_pb2.ModelInferRequest()
        proto.CopyFrom(template)
        proto.raw_input_contents.extend(
            _raw_bytes(d, a) for d, a in zip(request.datatypes, request.arrays, strict=True)
        )
        return proto

    def _send(self, wire: Any) -> None:
        import grpc

        try:
            self._stub.ModelInfer(wire, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            from tritonclient.utils import InferenceServerException

            raise InferenceServerException(
                msg=exc.details(), status=str(exc.code()), debug_details=exc.debug_error_string()
            ) from None


class JsonHttpTransport(Transport):
    """A JSON POST to `path` (e.g. a recommendation API in front of the model).

    The default body (KServe v2 JSON tensors) is encoded ahead with the block;
    a scenario's own `json_body` is called per request, just before the send
    timestamp.
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        timeout_s: float,
        churn: bool,
        path: str = "/v2/models/{model}/infer",
        body: JsonBody | None = None,
    ):
        super().__init__(url, model, timeout_s=timeout_s, churn=churn)
        scheme, hostport = split_url(url)
        self._base = f"{scheme}://{hostport.split('/', 1)[0]}"
        self._path = path.format(model=model)
        self._body = body or kserve_v2_json
        self._ahead = body is None

    def _open(self) -> None:
        self._client = open_http_client(self._base, self.timeout_s)

    def encode(self, request: InferRequest) -> bytes:
        if request.body is not None:
            return request.body
        if self._ahead:
            return kserve_v2_json_bytes(request)
        return dumps_json(self._body(request))

    def encode_block(self, requests: list[InferRequest]) -> list[InferRequest]:
        return super().encode_block(requests) if self._ahead else requests

    def _send(self, wire: bytes) -> None:
        response = self._client.post(self._path, body=wire, headers=_JSON_HEADERS)
        body = response.read()
        if not 200 <= response.status_code < 300:
            raise HttpStatusError(response.status_code, body.decode("utf-8", "replace"))


_JSON_HEADERS = {"Content-Type": "application/json"}


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


def make_transport(
    protocol: str,
    url: str,
    model: str,
    *,
    timeout_s: float,
    churn: bool,
    json_path: str = "/v2/models/{model}/infer",
    json_body: JsonBody | None = None,
) -> Transport:
    if protocol == "http":
        return TritonHttpTransport(url, model, timeout_s=timeout_s, churn=churn)
    if protocol == "grpc":
        return TritonGrpcTransport(url, model, timeout_s=timeout_s, churn=churn)
    if protocol == "json":
        return JsonHttpTransport(
            url, model, timeout_s=timeout_s, churn=churn, path=json_path, body=json_body
        )
    raise UsageError(f"unknown protocol {protocol!r}", hint="use http, grpc or json")
