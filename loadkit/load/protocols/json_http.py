"""JSON over HTTP: KServe v2 JSON tensors, or a scenario's own body (`protocol=json`).

For a recommendation API in front of the model too: the path is the
`json_path` parameter, the body the user class's `json_body`, and only this
protocol replays a JSON Lines file of request bodies (`--input-data`).
"""

from __future__ import annotations

from loadkit.kserve.metadata import HttpServerClient
from loadkit.load.failures import HttpStatusError
from loadkit.load.protocols.base import Protocol, TransportOptions
from loadkit.load.sources import InferRequest
from loadkit.load.transports import (
    JsonBody,
    KserveV2JsonBodies,
    Transport,
    dumps_json,
    kserve_v2_json,
    open_http_client,
    split_url,
)


class JsonHttpTransport(Transport):
    """A JSON POST to `path` (e.g. a recommendation API in front of the model).

    The default body (KServe v2 JSON tensors) is encoded ahead with the block,
    from fragments prebuilt per request layout (`KserveV2JsonBodies`);
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
        self._bodies = KserveV2JsonBodies()  # the default body, from prebuilt fragments

    def _open(self) -> None:
        self._client = open_http_client(self._base, self.timeout_s)

    def encode(self, request: InferRequest) -> bytes:
        if request.body is not None:
            return request.body
        if self._ahead:
            return self._bodies.encode(request)
        return dumps_json(self._body(request))

    def encode_block(self, requests: list[InferRequest]) -> list[InferRequest]:
        return super().encode_block(requests) if self._ahead else requests

    def _send(self, wire: bytes) -> None:
        response = self._client.post(self._path, body=wire, headers=_JSON_HEADERS)
        body = response.read()
        if not 200 <= response.status_code < 300:
            raise HttpStatusError(response.status_code, body.decode("utf-8", "replace"))


_JSON_HEADERS = {"Content-Type": "application/json"}


def _transport(url: str, model: str, options: TransportOptions) -> Transport:
    return JsonHttpTransport(
        url,
        model,
        timeout_s=options.timeout_s,
        churn=options.churn,
        path=options.json_path,
        body=options.json_body,
    )


PROTOCOL = Protocol(
    name="json",
    help="JSON over HTTP",
    user_class="JsonHttpUser",
    transport=_transport,
    metadata_client=HttpServerClient,  # a KServe v2 server's metadata, read over HTTP
    sends_bodies=True,
)
