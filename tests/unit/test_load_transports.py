"""Transports encode requests ahead: the bytes on the wire are tritonclient's own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc._utils import _get_inference_request
from tritonclient.utils import InferenceServerException

from loadkit.kserve.metadata import ModelSpec
from loadkit.load.failures import classify_failure, error_message
from loadkit.load.protocols.json_http import JsonHttpTransport
from loadkit.load.protocols.triton_grpc import TritonGrpcTransport
from loadkit.load.protocols.triton_http import TritonHttpTransport, _http_error
from loadkit.load.request_options import RequestOptions
from loadkit.load.sources import build_source, plan_requests
from loadkit.load.transports import kserve_v2_json
from loadkit.target.requests import ranker_plan

DATA = Path(__file__).resolve().parents[1] / "data" / "doc_ranker_input.json"
DOC_METADATA = {
    "name": "doc_ranker",
    "versions": ["1"],
    "platform": "python",
    "inputs": [
        {"name": "QUERY", "datatype": "BYTES", "shape": [-1, 1]},
        {"name": "DOC_IDS", "datatype": "INT32", "shape": [-1, -1]},
        {"name": "CONTEXT", "datatype": "FP32", "shape": [-1, 4]},
    ],
    "outputs": [{"name": "SCORES", "datatype": "FP32", "shape": [-1, -1]}],
}


def _plans() -> list:
    spec = ModelSpec.from_server(DOC_METADATA, {"name": "doc_ranker", "max_batch_size": 8})
    synthetic = plan_requests(spec, RequestOptions(shapes={"DOC_IDS": (5,)}, batch_size=3))
    real = plan_requests(spec, RequestOptions(input_data=str(DATA)))
    return [ranker_plan(7), synthetic, real]


def _http_inputs(request):  # type: ignore[no-untyped-def]
    inputs = []
    for name, datatype, array in request.inputs:
        tensor = httpclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array, binary_data=True)
        inputs.append(tensor)
    return inputs


@pytest.mark.parametrize("plan", _plans(), ids=["ranker", "doc-synthetic", "doc-input-data"])
def test_http_body_ahead_is_the_body_tritonclient_sends(plan) -> None:  # type: ignore[no-untyped-def]
    transport = TritonHttpTransport("http://127.0.0.1:1", plan.model, timeout_s=1, churn=False)
    source = build_source(plan, seed=3, encode=transport.encode_block)
    for _ in range(70):  # past one block
        request = source.next()
        assert request.wire is not None and transport.prepare(request) is request.wire
        outputs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in request.outputs]
        body, json_size = httpclient.InferenceServerClient.generate_request_body(
            _http_inputs(request), outputs=outputs
        )
        assert request.wire.body == body
        assert request.wire.headers == {"Inference-Header-Content-Length": str(json_size)}


@pytest.mark.parametrize("plan", _plans(), ids=["ranker", "doc-synthetic", "doc-input-data"])
def test_grpc_message_ahead_is_the_message_tritonclient_sends(plan) -> None:  # type: ignore[no-untyped-def]
    transport = TritonGrpcTransport("127.0.0.1:1", plan.model, timeout_s=1, churn=False)
    source = build_source(plan, seed=3, encode=transport.encode_block)
    for _ in range(70):
        request = source.next()
        inputs = []
        for name, datatype, array in request.inputs:
            tensor = grpcclient.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        outputs = [grpcclient.InferRequestedOutput(n) for n in request.outputs]
        expected = _get_inference_request(
            model_name=plan.model,
            inputs=inputs,
            model_version="",
            request_id="",
            outputs=outputs,
            sequence_id=0,
            sequence_start=False,
            sequence_end=False,
            priority=0,
            timeout=None,
            parameters=None,
        )
        assert request.wire == expected.SerializeToString()


def _same_values(sent: dict, expected: dict) -> bool:  # type: ignore[type-arg]
    """Equal bodies, each input's numbers compared in its own datatype (FP32 as FP32)."""
    if [i["datatype"] for i in sent["inputs"]] != [i["datatype"] for i in expected["inputs"]]:
        return False
    for a, b in zip(sent["inputs"], expected["inputs"], strict=True):
        if (a["name"], a["shape"]) != (b["name"], b["shape"]):
            return False
        dtype = {"FP32": np.float32, "FP16": np.float16, "FP64": np.float64}.get(a["datatype"])
        if dtype is None:
            if a["data"] != b["data"]:
                return False
        elif not np.array_equal(np.array(a["data"], dtype), np.array(b["data"], dtype)):
            return False
    return sent.get("outputs") == expected.get("outputs")


@pytest.mark.parametrize(
    "datatype",
    ["FP32", "FP16", "FP64", "INT8", "INT32", "INT64", "UINT8", "UINT64", "BOOL", "BYTES"],
)
def test_json_body_bytes_carry_every_datatype_exactly(datatype: str) -> None:
    from loadkit.load.sources import SyntheticSource
    from loadkit.load.transports import kserve_v2_json_bytes

    meta = {"name": "m", "inputs": [{"name": "X", "datatype": datatype, "shape": [2, 3]}]}
    spec = ModelSpec.from_server(meta, {"max_batch_size": 0})
    request = SyntheticSource(plan_requests(spec, RequestOptions()), seed=3).next()
    assert _same_values(json.loads(kserve_v2_json_bytes(request)), kserve_v2_json(request))


def test_a_scenario_body_orjson_refuses_is_still_sent_as_json() -> None:
    from loadkit.load.transports import dumps_json

    body = {"big": 2**70, 1: "non-string key", "a": np.arange(3)}
    assert json.loads(dumps_json(body)) == {"big": 2**70, "1": "non-string key", "a": [0, 1, 2]}


def test_json_bodies_are_encoded_ahead_unless_the_scenario_builds_its_own() -> None:
    plan = ranker_plan(3)
    transport = JsonHttpTransport("http://127.0.0.1:1", "ranker", timeout_s=1, churn=False)
    request = build_source(plan, seed=0, encode=transport.encode_block).next()
    assert _same_values(json.loads(request.wire), kserve_v2_json(request))

    calls = []

    def own(req):  # type: ignore[no-untyped-def]
        calls.append(req)
        return {"n": len(calls)}

    custom = JsonHttpTransport("http://127.0.0.1:1", "ranker", timeout_s=1, churn=False, body=own)
    request = build_source(plan, seed=0, encode=custom.encode_block).next()
    assert request.wire is None and not calls  # not called when the block was drawn
    assert json.loads(custom.prepare(request)) == {"n": 1}


def test_an_http_error_keeps_the_servers_words_and_classifies_as_tritonclients_would() -> None:
    body = json.dumps({"error": "Exceeds maximum queue size"}).encode()
    exc = _http_error(503, body)
    assert isinstance(exc, InferenceServerException)
    assert classify_failure(exc) == "queue_full"
    assert error_message(exc) == "Exceeds maximum queue size"
    assert classify_failure(_http_error(400, b"not json")) == "http_400"
    assert error_message(_http_error(400, b"not json")) == "not json"


def test_raw_bytes_are_row_major_copies_of_views() -> None:
    from loadkit.load.transports import raw_bytes

    block = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    view = block[1, :, ::2]  # not contiguous
    assert raw_bytes("INT64", view) == np.ascontiguousarray(view).tobytes()


def test_the_http_client_checks_a_kept_connection_without_yielding_to_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import select
    import socket

    import gevent.select
    from gevent.monkey import _state
    from geventhttpclient.connectionpool import ConnectionPool

    from loadkit.load.transports import open_http_client

    # GIVEN select patched as gevent's monkey.patch_select leaves it (the original saved,
    # gevent's in its place), and gevent's yields counted
    monkeypatch.setitem(_state.saved, "select", {"select": select.select})
    monkeypatch.setattr(select, "select", gevent.select.select)
    yields: list[object] = []
    monkeypatch.setattr(gevent.select, "_g_sleep", lambda *args: yields.append(args))
    client = open_http_client("http://127.0.0.1:1", 1.0)
    pool = client._connection_pool
    a, b = socket.socketpair()
    # the library's own check of an open, idle connection yields
    assert ConnectionPool._is_socket_alive(pool, a) is True and len(yields) == 1
    yields.clear()
    # WHEN this client checks: THEN the same answers (open; peer closed; closed; none), no yield
    alive = pool._is_socket_alive
    assert alive(a) is True
    b.close()
    assert alive(a) is False
    a.close()
    assert alive(a) is False and alive(None) is False
    assert yields == []
    client.close()


def _tensors(*inputs: tuple[str, str, np.ndarray], outputs: tuple[str, ...] = ()) -> Any:
    from loadkit.load.sources import tensors_request

    return tensors_request(list(inputs), outputs)


_RNG = np.random.default_rng(5)
_FRAGMENT_CASES = {
    "fp32 batch, outputs": _tensors(
        ("INPUT0", "FP32", _RNG.random((4, 16), dtype=np.float32)), outputs=("OUT", "SCORES")
    ),
    "several dtypes and shapes": _tensors(
        ("ids", "INT64", _RNG.integers(-(2**40), 2**40, (2, 3, 5))),
        ("mask", "BOOL", _RNG.random((2, 5)) > 0.5),
        ("half", "FP16", _RNG.random(7).astype(np.float16)),
        ("pix", "UINT8", _RNG.integers(0, 255, (1, 2, 2, 3), dtype=np.uint8)),
        ("wide", "FP64", _RNG.random((3, 1))),
    ),
    "strings (BYTES)": _tensors(
        ("query", "BYTES", np.array([b"caf\xc3\xa9", b"", b'a "quoted" \\ word'], dtype=object)),
        ("text", "BYTES", np.array([["x", "y"]], dtype=object)),
        outputs=("OUT",),
    ),
    "a scalar and an empty tensor": _tensors(
        ("s", "INT32", np.array(7, dtype=np.int32)),
        ("e", "FP32", np.zeros((0, 4), dtype=np.float32)),
    ),
    "no inputs": _tensors(outputs=("OUT",)),
    "orjson refuses (big-endian)": _tensors(("b", "FP32", np.arange(4, dtype=">f4"))),
}


@pytest.mark.parametrize("case", list(_FRAGMENT_CASES))
def test_json_bodies_from_fragments_are_the_old_builders_bytes(case: str) -> None:
    from loadkit.load.transports import KserveV2JsonBodies, kserve_v2_json_bytes

    bodies = KserveV2JsonBodies()
    request = _FRAGMENT_CASES[case]
    # the first request builds the fragments, the next ones reuse them with new values
    assert bodies.encode(request) == kserve_v2_json_bytes(request)
    for _ in range(3):
        changed = request._replace(
            arrays=tuple(
                a if a.dtype == object else _RNG.permutation(a.ravel()).reshape(a.shape)
                for a in request.arrays
            )
        )
        assert bodies.encode(changed) == kserve_v2_json_bytes(changed)


@pytest.mark.parametrize("plan", _plans(), ids=["ranker", "doc-synthetic", "doc-input-data"])
def test_json_bodies_ahead_from_fragments_are_the_old_builders_bytes(plan) -> None:  # type: ignore[no-untyped-def]
    from loadkit.load.transports import kserve_v2_json_bytes

    transport = JsonHttpTransport("http://127.0.0.1:1", plan.model, timeout_s=1, churn=False)
    source = build_source(plan, seed=0, encode=transport.encode_block)
    for _ in range(70):  # past one block
        request = source.next()
        assert request.wire == kserve_v2_json_bytes(request)


def test_grpc_messages_from_fragments_are_protobufs_own_bytes_for_large_and_string_tensors() -> (
    None
):
    from tritonclient.grpc import service_pb2

    from loadkit.load.transports import raw_bytes

    # GIVEN tensors whose lengths need 1-, 2- and 3-byte varints, and a BYTES tensor
    transport = TritonGrpcTransport("127.0.0.1:1", "m", timeout_s=1, churn=False)
    fields = service_pb2.ModelInferRequest.DESCRIPTOR.fields
    assert max(f.number for f in fields) == 7 == fields[-1].number  # raw_input_contents last
    for size in (0, 5, 40, 5000, 70_000):
        request = _tensors(
            ("a", "FP32", np.arange(size, dtype=np.float32)),
            ("s", "BYTES", np.array([b"x" * (size % 300), b"caf\xc3\xa9"], dtype=object)),
            outputs=("OUT",),
        )
        wire = transport.encode(request)
        # THEN the bytes are protobuf's own serialization of the whole message
        expected = service_pb2.ModelInferRequest(
            model_name="m",
            inputs=[
                service_pb2.ModelInferRequest.InferInputTensor(
                    name=n, datatype=d, shape=list(a.shape)
                )
                for n, d, a in request.inputs
            ],
            outputs=[service_pb2.ModelInferRequest.InferRequestedOutputTensor(name="OUT")],
            raw_input_contents=[
                raw_bytes(d, a) for d, a in zip(request.datatypes, request.arrays, strict=True)
            ],
        )
        assert wire == expected.SerializeToString()
        assert service_pb2.ModelInferRequest.FromString(wire) == expected


def test_an_ip_address_is_resolved_once_a_name_on_every_connection() -> None:
    from loadkit.load.transports import open_http_client

    # GIVEN clients for an IPv4, an IPv6 address and a host name
    v4 = open_http_client("http://127.0.0.1:8000", 5.0)._connection_pool
    v6 = open_http_client("http://[::1]:8000", 5.0)._connection_pool
    name = open_http_client("http://localhost:8000", 5.0)._connection_pool
    # THEN an address needs no resolver (no thread hand-off per new connection) ...
    assert v4._resolve()[0][-1] == ("127.0.0.1", 8000)
    assert v6._resolve()[0][-1][:2] == ("::1", 8000)
    assert "_resolve" in vars(v4) and "_resolve" in vars(v6)
    # ... while a name is still looked up per connection (DNS round robin)
    assert "_resolve" not in vars(name)
