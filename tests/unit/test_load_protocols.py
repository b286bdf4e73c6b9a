"""The protocol registry, request presets and the generator/orchestrator split (docs/architecture.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadkit.errors import UsageError
from loadkit.kserve.metadata import GrpcServerClient, HttpServerClient, ModelSpec, TensorSpec
from loadkit.load import presets, protocols
from loadkit.load.preflight import plan_for
from loadkit.load.presets import Preset
from loadkit.load.request_options import RequestOptions
from loadkit.load.scenario import COMMON_PARAMS, Scenario
from loadkit.load.shapes import Constant
from loadkit.load.sources import plan_requests
from loadkit.load.transports import Transport

REPO = Path(__file__).resolve().parents[2]


def test_every_protocol_has_a_unique_name_user_class_and_its_own_transport() -> None:
    names = [p.name for p in protocols.REGISTRY]
    user_classes = [p.user_class for p in protocols.REGISTRY]
    assert len(set(names)) == len(names) and len(set(user_classes)) == len(user_classes)
    for protocol in protocols.REGISTRY:
        # WHEN a user's transport is made (no connection yet)
        transport = protocol.make_transport("http://127.0.0.1:1", "m", timeout_s=1.0, churn=False)
        # THEN it is a Transport from the protocol's own module
        assert isinstance(transport, Transport)
        assert type(transport).__module__ == protocol.transport.__module__


def test_the_three_protocols_read_metadata_as_before() -> None:
    clients = {p.name: p.metadata_client for p in protocols.REGISTRY}
    assert clients == {"http": HttpServerClient, "grpc": GrpcServerClient, "json": HttpServerClient}
    assert isinstance(protocols.get("grpc").open_client("127.0.0.1:1"), GrpcServerClient)


def test_the_protocol_parameter_and_its_errors_read_the_registry() -> None:
    assert COMMON_PARAMS["protocol"].help == (
        "http (Triton HTTP), grpc (Triton gRPC) or json (JSON over HTTP)"
    )
    with pytest.raises(UsageError, match="unknown protocol 'smtp'") as err:
        protocols.get("smtp")
    assert err.value.hint == "use http, grpc or json"
    scenario = Scenario(name="proto-test", shape=lambda p: Constant(1.0, 1.0))
    with pytest.raises(UsageError, match="is not one of http, grpc, json"):
        scenario.resolve({"protocol": "smtp"})


def test_request_bodies_need_a_protocol_that_sends_them(tmp_path: Path) -> None:
    bodies = tmp_path / "bodies.jsonl"
    bodies.write_text('{"user": 1}\n')
    params = {"input_data": str(bodies), "model": "m"}
    with pytest.raises(UsageError, match="needs protocol=json") as err:
        plan_for(None, "http", params)
    assert err.value.hint is not None and err.value.hint.startswith("--set protocol=json")
    plan, _ = plan_for(None, "json", params)
    assert plan.kind == "bodies"


def test_user_classes_are_built_from_the_registry_and_exported_by_loadkit_load() -> None:
    # In a child: importing the users attaches the runtime to Locust's events.
    code = (
        "import json, loadkit.load as load\n"
        "from loadkit.load import protocols\n"
        "print(json.dumps({p.user_class: [getattr(load, p.user_class).protocol,\n"
        "    getattr(load, p.user_class).abstract, getattr(load, p.user_class).__module__]\n"
        "    for p in protocols.REGISTRY}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    classes = json.loads(out.stdout.strip().splitlines()[-1])
    generator = "loadkit.load.generator.users"
    assert classes == {
        "TritonHttpUser": ["http", True, generator],
        "TritonGrpcUser": ["grpc", True, generator],
        "JsonHttpUser": ["json", True, generator],
    }


def test_a_shape_class_needs_a_loadkit_user_class_imported_first() -> None:
    code = (
        "from loadkit.errors import UsageError\n"
        "from loadkit.load.scenario import Scenario\n"
        "from loadkit.load.shapes import Constant\n"
        "s = Scenario(name='x', shape=lambda p: Constant(1.0, 1.0))\n"
        "try:\n"
        "    s.locust_shape()\n"
        "except UsageError as exc:\n"
        "    print('refused:', exc.hint)\n"
        "from loadkit.load import InferenceUser\n"
        "print(s.locust_shape().__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.splitlines()[-2:] == [
        "refused: import one first: from loadkit.load import InferenceUser",
        "LoadkitShape_x",
    ]


def test_the_ranker_preset_is_registered_by_its_entry_point_not_named_by_load() -> None:
    assert "ranker" in presets.names()
    assert presets.load("ranker", {"candidates": 7}).shapes == {"ITEM_IDS": (7,)}
    named = [
        str(path.relative_to(REPO))
        for path in (REPO / "loadkit" / "load").rglob("*.py")
        if "loadkit.target" in path.read_text(encoding="utf-8")
    ]
    assert named == []


def test_a_registered_preset_applies_to_a_model_whose_inputs_match(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(presets, "_REGISTERED", dict(presets._REGISTERED))
    spec = ModelSpec("tiny", (TensorSpec("IDS", "INT64", (-1,)),), max_batch_size=0)

    def tiny(params: object) -> Preset:
        return Preset(spec=spec, shapes={"IDS": (3,)}, int_ranges={"IDS": (5, 9)})

    presets.register("tiny", tiny)
    assert "tiny" in presets.names()
    plan = plan_requests(spec, RequestOptions())
    assert plan.inputs[0].shape == (3,) and plan.inputs[0].int_range == (5, 9)
    with pytest.raises(UsageError, match="no request preset 'nope'"):
        presets.load("nope", {})
