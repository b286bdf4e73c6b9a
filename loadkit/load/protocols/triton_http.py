"""Triton HTTP: KServe v2 binary tensors over HTTP (`protocol=http`)."""

from __future__ import annotations

import json
from typing import Any, NamedTuple
from urllib.parse import quote

from loadkit.kserve.metadata import HttpServerClient
from loadkit.load.protocols.base import Protocol, TransportOptions
from loadkit.load.sources import InferRequest
from loadkit.load.transports import Transport, open_http_client, raw_bytes, split_url


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
        raws = [raw_bytes(d, a) for d, a in zip(request.datatypes, request.arrays, strict=True)]
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


def _transport(url: str, model: str, options: TransportOptions) -> Transport:
    return TritonHttpTransport(url, model, timeout_s=options.timeout_s, churn=options.churn)


PROTOCOL = Protocol(
    name="http",
    help="Triton HTTP",
    user_class="TritonHttpUser",
    transport=_transport,
    metadata_client=HttpServerClient,
    # Binary tensors are an extension: a server without it (MLServer) refuses the body.
    required_extension="binary_tensor_data",
    without_extension="use --set protocol=json (JSON tensors) or protocol=grpc",
)
