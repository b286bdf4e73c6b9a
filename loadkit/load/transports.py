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
from typing import Any

import numpy as np

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
    def _send(self, request: InferRequest) -> None: ...

    def connect(self) -> None:
        if not self.churn:
            self._open()

    def infer(self, request: InferRequest) -> bool:
        """Send one request; True if it opened a new connection."""
        if self.churn:
            self._open()
            try:
                self._send(request)
            finally:
                self._close()
            return True
        new = not self._connected
        self._connected = True
        self._send(request)
        return new

    def close(self) -> None:
        if not self.churn:
            self._close()


class TritonHttpTransport(Transport):
    """`tritonclient.http` with binary tensors; one connection per user."""

    def __init__(self, url: str, model: str, *, timeout_s: float, churn: bool):
        super().__init__(url, model, timeout_s=timeout_s, churn=churn)
        scheme, self._hostport = split_url(url)
        self._ssl = scheme == "https"

    def _open(self) -> None:
        import tritonclient.http as httpclient

        self._client = httpclient.InferenceServerClient(
            self._hostport,
            concurrency=1,
            connection_timeout=self.timeout_s,
            network_timeout=self.timeout_s,
            ssl=self._ssl,
        )

    def _send(self, request: InferRequest) -> None:
        import tritonclient.http as httpclient

        inputs = []
        for name, datatype, array in request.inputs:
            tensor = httpclient.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array, binary_data=True)
            inputs.append(tensor)
        outputs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in request.outputs]
        self._client.infer(self.model, inputs, outputs=outputs or None)


class TritonGrpcTransport(Transport):
    """`tritonclient.grpc`; each user gets its own channel (local subchannel pool)."""

    def __init__(self, url: str, model: str, *, timeout_s: float, churn: bool):
        super().__init__(url, model, timeout_s=timeout_s, churn=churn)
        _, self._hostport = split_url(url, default_scheme="grpc")

    def _open(self) -> None:
        init_grpc_gevent()
        import tritonclient.grpc as grpcclient

        self._client = grpcclient.InferenceServerClient(
            self._hostport,
            channel_args=[
                # Without this, channels share one global connection pool and
                # neither "one connection per user" nor churn would be real.
                ("grpc.use_local_subchannel_pool", 1),
                ("grpc.max_send_message_length", 2**31 - 1),
                ("grpc.max_receive_message_length", 2**31 - 1),
            ],
        )

    def _send(self, request: InferRequest) -> None:
        import tritonclient.grpc as grpcclient

        inputs = []
        for name, datatype, array in request.inputs:
            tensor = grpcclient.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        outputs = [grpcclient.InferRequestedOutput(n) for n in request.outputs]
        self._client.infer(
            self.model, inputs, outputs=outputs or None, client_timeout=self.timeout_s
        )


class JsonHttpTransport(Transport):
    """A JSON POST to `path` (e.g. a recommendation API in front of the model)."""

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

    def _open(self) -> None:
        from geventhttpclient import HTTPClient

        self._client = HTTPClient.from_url(
            self._base,
            concurrency=1,
            connection_timeout=self.timeout_s,
            network_timeout=self.timeout_s,
        )

    def _send(self, request: InferRequest) -> None:
        payload = request.body if request.body is not None else json.dumps(self._body(request))
        response = self._client.post(
            self._path, body=payload, headers={"Content-Type": "application/json"}
        )
        body = response.read()
        if not 200 <= response.status_code < 300:
            raise HttpStatusError(response.status_code, body.decode("utf-8", "replace"))


def _json_data(datatype: str, array: np.ndarray) -> list[Any]:
    if datatype == "BYTES":
        return [
            b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b) for b in array.ravel()
        ]
    data: list[Any] = array.ravel().tolist()
    return data


def kserve_v2_json(request: InferRequest) -> dict[str, Any]:
    """The KServe v2 / Open Inference Protocol JSON body for a request."""
    body: dict[str, Any] = {
        "inputs": [
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": datatype,
                "data": _json_data(datatype, array),
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
