"""Request sources: plans from model metadata, synthetic values, perf_analyzer input data, bodies."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadkit.errors import UsageError
from loadkit.kserve.metadata import (
    ModelSpec,
    ServerClient,
    ServerRejected,
    describe_server,
    server_words,
)
from loadkit.load.failures import HttpStatusError, error_message
from loadkit.load.generator.recorder import MESSAGES_PER_KIND, LatencyRecorder
from loadkit.load.preflight import read_model, resolve_model
from loadkit.load.request_options import RequestOptions, parse_int_ranges, parse_shapes
from loadkit.load.sources import (
    BodySource,
    InputDataSource,
    SyntheticSource,
    build_source,
    plan_bodies,
    plan_requests,
)
from loadkit.load.transports import kserve_v2_json
from loadkit.rundir.reader import read_jsonl
from loadkit.target.requests import ranker_plan

# What Triton answers for a model with max_batch_size > 0 (batch dimension first, -1).
DOC_METADATA: dict[str, Any] = {
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
DOC_CONFIG: dict[str, Any] = {"name": "doc_ranker", "max_batch_size": 8, "input": []}


def doc_spec() -> ModelSpec:
    return ModelSpec.from_server(DOC_METADATA, DOC_CONFIG)


def test_model_spec_drops_the_batch_dimension_only_when_the_model_batches() -> None:
    spec = doc_spec()
    assert spec.batched and spec.max_batch_size == 8
    assert [t.shape for t in spec.inputs] == [(1,), (-1,), (4,)]
    assert spec.expects() == "batch + QUERY BYTES [1]; DOC_IDS INT32 [-1]; CONTEXT FP32 [4]"
    # No config endpoint (MLServer): the metadata's shapes, whole; batching unknown.
    bare = ModelSpec.from_server(DOC_METADATA, None)
    assert bare.max_batch_size is None and bare.inputs[1].shape == (-1, -1)
    assert ModelSpec.from_json(spec.to_json()) == spec


def test_a_variable_dimension_without_shape_is_an_error_naming_the_input() -> None:
    with pytest.raises(UsageError) as err:
        plan_requests(doc_spec(), RequestOptions())
    assert "DOC_IDS" in err.value.message and "variable shape [-1]" in err.value.message
    assert err.value.hint is not None and "--shape DOC_IDS:16" in err.value.hint


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (RequestOptions(shapes={"NOPE": (3,)}), "has no input 'NOPE'"),
        (RequestOptions(shapes={"DOC_IDS": (3,), "CONTEXT": (5,)}), "does not fit"),
        (RequestOptions(shapes={"DOC_IDS": (3, 2)}), "does not fit"),
        (RequestOptions(shapes={"DOC_IDS": (3,)}, batch_size=9), "above model"),
        (RequestOptions(shapes={"DOC_IDS": (3,)}, int_ranges={"DOC_IDS": (0, 2**40)}), "INT32"),
    ],
)
def test_options_that_do_not_fit_the_model_are_clear_errors(
    options: RequestOptions, words: str
) -> None:
    with pytest.raises(UsageError, match=words):
        plan_requests(doc_spec(), options)


def test_option_parsing() -> None:
    assert parse_shapes("A:16 B:2,3;C:1") == {"A": (16,), "B": (2, 3), "C": (1,)}
    assert parse_int_ranges("A:0,999") == {"A": (0, 999)}
    for bad in ("A", "A:x", "A:0"):
        with pytest.raises(UsageError):
            parse_shapes(bad)
    with pytest.raises(UsageError, match="HI is below LO"):
        parse_int_ranges("A:5,1")


def test_synthetic_requests_follow_the_plan_and_are_seeded_read_only_blocks() -> None:
    plan = plan_requests(
        doc_spec(),
        RequestOptions(shapes={"DOC_IDS": (16,)}, batch_size=4, string_length=5),
    )
    a, b = SyntheticSource(plan, seed=7, stream=3), SyntheticSource(plan, seed=7, stream=3)
    other = SyntheticSource(plan, seed=7, stream=4)
    rows = [a.next() for _ in range(200)]  # several blocks
    first = rows[0]
    assert [(n, d, arr.shape) for n, d, arr in first.inputs] == [
        ("QUERY", "BYTES", (4, 1)),
        ("DOC_IDS", "INT32", (4, 16)),
        ("CONTEXT", "FP32", (4, 4)),
    ]
    assert first.outputs == ("SCORES",)
    query, ids, ctx = (arr for _, _, arr in first.inputs)
    assert ids.dtype == np.int32 and ctx.dtype == np.float32 and query.dtype == object
    assert all(isinstance(q, bytes) and len(q) == 5 for q in query.ravel())
    all_ids = np.concatenate([r.inputs[1][2].ravel() for r in rows])
    assert all_ids.min() >= 0 and all_ids.max() <= 99  # the small default range
    assert len(np.unique(all_ids)) == 100
    assert not ids.flags.writeable and ids.flags.c_contiguous
    assert all(np.array_equal(r.inputs[1][2], b.next().inputs[1][2]) for r in rows)
    assert not np.array_equal(first.inputs[1][2], other.next().inputs[1][2])


@pytest.mark.parametrize(
    "datatype",
    ["BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"]
    + ["FP16", "FP32", "FP64", "BYTES"],
)
def test_every_kserve_datatype_gets_values_of_its_type(datatype: str) -> None:
    meta = {"name": "m", "inputs": [{"name": "X", "datatype": datatype, "shape": [3]}]}
    spec = ModelSpec.from_server(meta, {"max_batch_size": 0})
    request = SyntheticSource(plan_requests(spec, RequestOptions()), seed=1).next()
    name, dt, array = request.inputs[0]
    assert (name, dt, array.shape) == ("X", datatype, (3,))
    expected = {"BYTES": np.object_, "BOOL": np.bool_, "FP16": np.float16}.get(datatype)
    if expected is not None:
        assert array.dtype == expected
    body = json.loads(json.dumps(kserve_v2_json(request)))
    assert body["inputs"][0]["datatype"] == datatype and len(body["inputs"][0]["data"]) == 3


def test_int_range_is_inclusive_and_per_input() -> None:
    meta = {"name": "m", "inputs": [{"name": "X", "datatype": "INT64", "shape": [1000]}]}
    spec = ModelSpec.from_server(meta, {"max_batch_size": 0})
    plan = plan_requests(spec, RequestOptions(int_ranges={"X": (5, 7)}))
    values = SyntheticSource(plan, seed=0).next().inputs[0][2]
    assert set(np.unique(values).tolist()) == {5, 6, 7}


def test_the_ranker_preset_applies_when_the_inputs_match() -> None:
    plan = ranker_plan(100)
    request = build_source(plan, seed=0).next()
    ids = dict((n, a) for n, _, a in request.inputs)["ITEM_IDS"]
    assert ids.shape == (1, 100) and ids.max() > 1_000_000  # hashed ids: the wide range


def _write(tmp_path: Path, document: Any, name: str = "data.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_perf_analyzer_input_data_in_all_three_value_forms(tmp_path: Path) -> None:
    query_b64 = base64.b64encode(struct.pack("<I", 5) + b"hello").decode()
    ctx_b64 = base64.b64encode(np.arange(4, dtype="<f4").tobytes()).decode()
    path = _write(
        tmp_path,
        {
            "data": [
                {"QUERY": ["shoes"], "DOC_IDS": [1, 2, 3], "CONTEXT": [0.1, 0.2, 0.3, 0.4]},
                {
                    "QUERY": {"b64": query_b64},
                    "DOC_IDS": {"content": [4, 5, 6, 7], "shape": [4]},
                    "CONTEXT": {"b64": ctx_b64},
                },
            ]
        },
    )
    plan = plan_requests(doc_spec(), RequestOptions(input_data=str(path)))
    assert plan.kind == "input_data"
    source = InputDataSource(plan)
    first, second, third = source.next(), source.next(), source.next()
    got = {n: a for n, _, a in first.inputs}
    assert got["QUERY"].tolist() == [[b"shoes"]] and got["DOC_IDS"].tolist() == [[1, 2, 3]]
    got2 = {n: a for n, _, a in second.inputs}
    assert got2["QUERY"].tolist() == [[b"hello"]] and got2["DOC_IDS"].shape == (1, 4)
    assert got2["CONTEXT"].tolist() == [[0.0, 1.0, 2.0, 3.0]]
    assert third is first  # round-robin


def test_input_data_with_batch_size_stacks_consecutive_steps(tmp_path: Path) -> None:
    steps = [{"QUERY": [f"q{k}"], "DOC_IDS": [k, k], "CONTEXT": [k] * 4} for k in range(3)]
    path = _write(tmp_path, {"data": steps})
    plan = plan_requests(doc_spec(), RequestOptions(input_data=str(path), batch_size=2))
    source = InputDataSource(plan)
    ids = [dict((n, a) for n, _, a in source.next().inputs)["DOC_IDS"] for _ in range(2)]
    assert ids[0].tolist() == [[0, 0], [1, 1]] and ids[1].tolist() == [[2, 2], [0, 0]]


@pytest.mark.parametrize(
    ("step", "words"),
    [
        ({"QUERY": ["a"], "DOC_IDS": [1], "CONTEXT": [0] * 4, "EXTRA": [1]}, "no input 'EXTRA'"),
        ({"QUERY": ["a"], "DOC_IDS": [1]}, "input CONTEXT is missing"),
        (
            {"QUERY": ["a"], "DOC_IDS": [1], "CONTEXT": [0] * 3},
            "3 values do not fill shape \\[4\\]",
        ),
        (
            {"QUERY": ["a"], "DOC_IDS": [1], "CONTEXT": {"content": [0] * 4, "shape": [2, 2]}},
            "does not match the model's",
        ),
        (
            {"QUERY": ["a"], "DOC_IDS": [1], "CONTEXT": {"b64": base64.b64encode(b"abc").decode()}},
            "not a whole number of FP32",
        ),
        ({"QUERY": [1], "DOC_IDS": [1], "CONTEXT": [0] * 4}, "BYTES elements must be strings"),
    ],
)
def test_input_data_errors_name_the_step_and_the_input(
    tmp_path: Path, step: dict[str, Any], words: str
) -> None:
    good = {"QUERY": ["a"], "DOC_IDS": [1], "CONTEXT": [0] * 4}
    path = _write(tmp_path, {"data": [good, step]})
    with pytest.raises(UsageError, match=words) as err:
        plan_requests(doc_spec(), RequestOptions(input_data=str(path)))
    assert "step 1" in err.value.message


def test_request_bodies_are_replayed_as_is_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "bodies.jsonl"
    path.write_bytes(b'{"user": 1}\n\n{"user": 2}\n')
    source = BodySource(plan_bodies(str(path), "m"))
    assert [source.next().body for _ in range(3)] == [
        b'{"user": 1}',
        b'{"user": 2}',
        b'{"user": 1}',
    ]
    path.write_bytes(b'{"user": 1}\nnot json\n')
    with pytest.raises(UsageError, match="line 2 is not JSON"):
        plan_bodies(str(path), "m")


class _FakeServerException(Exception):
    """Shaped like tritonclient's InferenceServerException."""

    def __init__(self, msg: str, status: str):
        super().__init__(msg)
        self._msg, self._status = msg, status

    def message(self) -> str:
        return self._msg

    def status(self) -> str:
        return self._status


def test_error_messages_keep_the_servers_words() -> None:
    body = json.dumps({"error": "unexpected inference input 'ITEM_IDS' for model 'm'"})
    assert error_message(HttpStatusError(400, body)) == (
        "HTTP 400: unexpected inference input 'ITEM_IDS' for model 'm'"
    )
    exc = _FakeServerException("[400] unexpected shape for input 'X'", "400")
    assert error_message(exc) == "[400] unexpected shape for input 'X'"
    assert error_message(ConnectionRefusedError(111, "Connection refused")).startswith(
        "ConnectionRefusedError"
    )
    assert len(error_message(HttpStatusError(500, "x" * 5000))) <= 300
    assert server_words({"error": "Model m not found"}) == "Model m not found"


def test_recorder_keeps_a_few_distinct_messages_per_kind_in_events(tmp_path: Path) -> None:
    (tmp_path / "events.jsonl").touch()
    recorder = LatencyRecorder(tmp_path, "local", clock_ns=lambda: 5 * 10**9)
    for k in range(10_000):
        recorder.started("infer", 10**9)
        recorder.completed(
            "infer",
            intended_ns=10**9,
            sent_ns=10**9,
            done_ns=2 * 10**9,
            ok=False,
            error_kind="http_400" if k % 2 else "http_404",
            error_message=f"message {k % 7}",
        )
    recorder.close()
    kept = [e for e in read_jsonl(tmp_path / "events.jsonl", []) if e["kind"] == "server_error"]
    by_kind = {
        kind: [e["message"] for e in kept if e["name"] == kind] for kind in ("http_400", "http_404")
    }
    assert all(len(m) == MESSAGES_PER_KIND == len(set(m)) for m in by_kind.values())
    assert all(e["process"] == "local" for e in kept)


class _FakeClient(ServerClient):
    """A server without Triton's config endpoint and with gRPC-style JSON (strings for int64)."""

    protocol = "grpc"

    def __init__(self, names: list[str] | None, configs: bool = False) -> None:
        super().__init__("127.0.0.1:1")
        self.names, self.configs = names, configs

    def server_metadata(self) -> dict[str, Any]:
        return {"name": "mlserver", "version": "1.7.1", "extensions": []}

    def model_metadata(self, model: str) -> dict[str, Any]:
        if model not in (self.names or [model]):
            raise ServerRejected(f"model {model!r}: Model {model} not found", server_message="nf")
        return {**DOC_METADATA, "name": model}

    def model_config(self, model: str) -> dict[str, Any] | None:
        if not self.configs:
            return None
        return {"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": "20000"}}

    def model_names(self) -> list[str] | None:
        return self.names


def test_describe_server_records_what_there_is_and_says_what_is_missing() -> None:
    described = describe_server(_FakeClient(["doc_scorer"]))
    assert (described["name"], described["models"]) == ("mlserver", {})
    assert "doc_scorer" in described["model_metadata"]
    assert "no Triton configuration endpoint" in described["not_recorded"][0]
    with_config = describe_server(_FakeClient(["a", "b"], configs=True))
    assert set(with_config["models"]) == {"a", "b"} and with_config["not_recorded"] == []
    unlisted = describe_server(_FakeClient(None))
    assert unlisted["models"] == {} and "repository index" in unlisted["not_recorded"][0]


def test_the_model_defaults_to_the_only_one_and_an_unknown_one_lists_the_loaded() -> None:
    assert resolve_model(_FakeClient(["only"]), "") == "only"
    with pytest.raises(UsageError, match="serves 2 models") as many:
        resolve_model(_FakeClient(["a", "b"]), "")
    assert many.value.hint is not None and "a, b" in many.value.hint
    with pytest.raises(ServerRejected, match="cannot list its models"):
        resolve_model(_FakeClient(None), "")
    with pytest.raises(ServerRejected) as missing:
        read_model(_FakeClient(["a", "b"]), "nope")
    assert missing.value.exit_code == 2 and "loaded models: a, b" in (missing.value.hint or "")
