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
    """KServe v2 gRPC (tritonclient's generated service); each user its own channel.

    Each request goes out as the serialized `ModelInferRequest` that
    `tritonclient.grpc` would send, byte for byte, built ahead from prebuilt
    fragments: the message without its tensors (model, inputs' names, datatypes
    and shapes, the requested outputs) is serialized once per request layout,
    and each request appends only its tensors' bytes as `raw_input_contents`
    entries (the message's last field, so the bytes are the ones protobuf would
    write). The call sends those bytes as they are and does not decode the
    answer (the request is timed, not checked, as over HTTP); errors become
    tritonclient's `InferenceServerException` as its client raises them.
    """

    def __init__(self, url: str, model: str, *, timeout_s: float, churn: bool):
        super().__init__(url, model, timeout_s=timeout_s, churn=churn)
        _, self._hostport = split_url(url, default_scheme="grpc")
        self._heads: dict[tuple[Any, ...], bytes] = {}  # request layout -> serialized head
        self._model_infer: Any = None

    def _open(self) -> None:
        init_grpc_gevent()
        import grpc

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
        # tritonclient's stub's method, taking and giving bytes (no serializers).
        self._model_infer = self._client.unary_unary(MODEL_INFER)

    def encode(self, request: InferRequest) -> bytes:
        shapes = tuple(a.shape for a in request.arrays)
        key = (request.names, request.datatypes, request.outputs, shapes)
        head = self._heads.get(key)
        if head is None:
            head = self._heads[key] = self._message_head(request)
        parts = [head]
        for datatype, array in zip(request.datatypes, request.arrays, strict=True):
            raw = raw_bytes(datatype, array)
            size = len(raw)
            prefix = _PREFIXES.get(size)
            if prefix is None:
                prefix = _RAW_INPUT_TAG + _varint(size)
                if len(_PREFIXES) < _PREFIXES_KEPT:  # BYTES tensors vary in length
                    _PREFIXES[size] = prefix
            parts += (prefix, raw)
        return b"".join(parts)

    def _message_head(self, request: InferRequest) -> bytes:
        """The serialized `ModelInferRequest` of `request`'s layout, without tensor contents."""
        from tritonclient.grpc import service_pb2

        return service_pb2.ModelInferRequest(
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
        ).SerializeToString()

    def _send(self, wire: bytes) -> None:
        import grpc

        try:
            self._model_infer(wire, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            from tritonclient.utils import InferenceServerException

            raise InferenceServerException(
                msg=exc.details(), status=str(exc.code()), debug_details=exc.debug_error_string()
            ) from None


MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
# raw_input_contents is field 7 of ModelInferRequest (repeated bytes: wire type 2), its last
# field: appended after the rest, the bytes are those of protobuf's own serializer.
_RAW_INPUT_TAG = bytes([(7 << 3) | 2])
_PREFIXES: dict[int, bytes] = {}  # a tensor's byte length -> its entry's tag and length
_PREFIXES_KEPT = 4096


def _varint(value: int) -> bytes:
    """`value` as a protobuf base-128 varint (a length prefix)."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


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
