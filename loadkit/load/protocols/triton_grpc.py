"""Triton gRPC: KServe v2 over gRPC, through tritonclient's stub (`protocol=grpc`)."""

from __future__ import annotations

from typing import Any

from loadkit.kserve.metadata import GrpcServerClient
from loadkit.load.protocols.base import Protocol, TransportOptions
from loadkit.load.sources import InferRequest
from loadkit.load.transports import Transport, raw_bytes, split_url

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
            raw_bytes(d, a) for d, a in zip(request.datatypes, request.arrays, strict=True)
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


def _transport(url: str, model: str, options: TransportOptions) -> Transport:
    return TritonGrpcTransport(url, model, timeout_s=options.timeout_s, churn=options.churn)


PROTOCOL = Protocol(
    name="grpc",
    help="Triton gRPC",
    user_class="TritonGrpcUser",
    transport=_transport,
    metadata_client=GrpcServerClient,
    prepare_process=init_grpc_gevent,
)
