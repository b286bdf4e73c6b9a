"""Pre-flight: before anything is recorded, prove the server accepts what we will send.

1. resolve the model (`model` unset and one model loaded: that one);
2. read its metadata and configuration and build the `RequestPlan`
   (`loadkit.load.sources`): a clear error naming the input when a shape
   is missing or does not fit;
3. send one request as the run will send it;
4. describe the server for `manifest.environment.server`.

A failure is one error with the server's own words and the fix: exit 2
(`ServerRejected`/`UsageError`) when the server said no, listing what the
model expects (or the loaded models when the model is not there), exit 3
(`ServerUnreachable`) when nothing answered. `loadkit run` runs this in the
scenario-describing child (`loadkit.load.describe`), which has the
scenario's user class (its `json_body`) at hand.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadkit.errors import LoadkitError, UsageError
from loadkit.kserve.metadata import (
    ModelSpec,
    ServerClient,
    ServerRejected,
    ServerUnreachable,
    describe_server,
)
from loadkit.load import presets, protocols
from loadkit.load.failures import REFUSED, RESET, TIMEOUT, classify_failure, error_message
from loadkit.load.request_options import RequestOptions
from loadkit.load.sources import (
    RequestPlan,
    build_source,
    is_perf_analyzer_json,
    plan_bodies,
    plan_requests,
)

_UNREACHABLE_KINDS = {REFUSED, RESET, TIMEOUT}


@dataclass(frozen=True)
class Preflight:
    plan: RequestPlan
    server: dict[str, Any]
    latency_ms: float | None  # of the one request; None when not sent

    def to_json(self) -> dict[str, Any]:
        return {"plan": self.plan.to_json(), "server": self.server, "latency_ms": self.latency_ms}


def resolve_model(client: ServerClient, requested: str) -> str:
    """`requested`, or the server's only model."""
    if requested:
        return requested
    names = client.model_names()
    if names is None:
        raise ServerRejected(
            f"the server at {client.url} cannot list its models, so loadkit cannot pick one",
            hint="name the model: --set model=NAME",
        )
    if len(names) == 1:
        return names[0]
    if not names:
        raise ServerRejected(f"the server at {client.url} has no ready model")
    raise UsageError(
        f"the server at {client.url} serves {len(names)} models; which one?",
        hint=f"--set model=NAME, one of: {', '.join(names)}",
    )


def read_model(client: ServerClient, model: str) -> ModelSpec:
    """The model's spec; not found -> the server's words and the loaded models."""
    try:
        return client.model_spec(model)
    except ServerRejected as exc:
        try:
            names = client.model_names()
        except LoadkitError:
            names = None
        loaded = (
            f"loaded models: {', '.join(names)}" if names else "the server did not list its models"
        )
        raise ServerRejected(
            f"model {model!r} is not available at {client.url}: {exc.server_message or exc.message}",
            hint=f"{loaded}; choose one with --set model=NAME",
            server_message=exc.server_message,
        ) from None


def plan_for(
    client: ServerClient | None, protocol: str, params: Mapping[str, Any]
) -> tuple[RequestPlan, ModelSpec | None]:
    """The request plan the scenario's parameters ask for (metadata read through `client`)."""
    options = RequestOptions.from_params(params)
    model = str(params.get("model") or "")
    source = str(params.get("requests") or "metadata")
    if options.input_data and not is_perf_analyzer_json(Path(options.input_data)):
        if not protocols.get(protocol).sends_bodies:
            senders = [p.name for p in protocols.REGISTRY if p.sends_bodies]
            raise UsageError(
                f'--input-data {options.input_data} is not perf_analyzer\'s {{"data": [...]}} '
                "JSON; a JSON Lines file of request bodies needs "
                + " or ".join(f"protocol={name}" for name in senders),
                hint=", ".join(f"--set protocol={name}" for name in senders)
                + ", or give perf_analyzer's input-data format",
            )
        return plan_bodies(options.input_data, model), None
    if source in presets.names():
        spec = presets.load(source, params).spec
        if model:
            spec = ModelSpec(model, spec.inputs, spec.outputs, spec.max_batch_size, spec.platform)
    elif source == "metadata":
        if client is None:
            raise UsageError("reading the model's metadata needs the server")
        spec = read_model(client, resolve_model(client, model))
    else:
        raise UsageError(
            f"requests={source!r}: not a request source",
            hint="metadata (default: from the model's metadata), or " + ", ".join(presets.names()),
        )
    return plan_requests(spec, options, protocol=protocol), spec


def send_one(
    plan: RequestPlan,
    protocol: str,
    target: str,
    params: Mapping[str, Any],
    *,
    seed: int = 0,
    json_body: Any = None,
    expects: Callable[[], str | None] | None = None,
    extension_listed: bool | None = None,
) -> float:
    """Send the run's first request; return its latency (ms) or raise with the server's words.

    `expects()` says what the model takes, asked only on failure (default: the plan's spec);
    `extension_listed` whether the server lists the extension the protocol needs.
    """
    entry = protocols.get(protocol)
    request = build_source(plan, seed, 0).next()
    transport = entry.make_transport(
        target,
        plan.model,
        timeout_s=float(params.get("timeout_s") or 10.0),
        churn=False,
        json_path=str(params.get("json_path") or "/v2/models/{model}/infer"),
        json_body=json_body,
    )
    started = time.monotonic()
    try:
        transport.connect()
        transport.infer(request)
    except Exception as exc:  # every client error: classified and quoted
        kind = classify_failure(exc)
        words = error_message(exc)
        if kind in _UNREACHABLE_KINDS:
            raise ServerUnreachable(
                f"the pre-flight request to {target} failed ({kind}): {words}",
                hint=f"is the server up, and is this the right port for protocol={protocol}?",
            ) from None
        takes = expects() if expects is not None else None
        if takes is None and plan.spec is not None:
            takes = plan.spec.expects()
        said = f"model {plan.model!r} expects {takes}; " if takes else ""
        if entry.required_extension and extension_listed is False:
            said = (
                f"the server does not list the {entry.required_extension} extension: "
                f"{entry.without_extension}; " + said
            )
        raise ServerRejected(
            f"the server rejected loadkit's pre-flight request ({kind}): {words}",
            hint=f"{said}loadkit sent {request.describe()}",
            server_message=words,
        ) from None
    finally:
        transport.close()
    return (time.monotonic() - started) * 1000.0


def server_description(client: ServerClient | None, model: str) -> dict[str, Any]:
    """`describe_server`, or what could not be recorded and why (the run goes on)."""
    if client is None:
        return {"not_recorded": ["server metadata: not a KServe v2 server (request bodies only)"]}
    try:
        return describe_server(client)
    except LoadkitError as exc:
        note = f"server metadata: {exc.message}"
        if model:
            try:
                return describe_server(client, [model])
            except LoadkitError:
                pass
        return {"not_recorded": [note]}


def run_preflight(
    target: str,
    params: Mapping[str, Any],
    *,
    seed: int = 0,
    json_body: Any = None,
) -> Preflight:
    """Steps 1-4 of the module docstring; raises LoadkitError (exit 2 or 3) on failure."""
    protocol = str(params.get("protocol") or "http")
    source = str(params.get("requests") or "metadata")
    needs_metadata = source == "metadata" and not _is_bodies(params)
    entry = protocols.get(protocol)
    client = entry.open_client(target)
    try:
        listed: bool | None = None
        if needs_metadata:
            meta = client.server_metadata()  # unreachable / not KServe v2: exit 3 here
            if entry.required_extension:
                listed = entry.required_extension in (meta.get("extensions") or [])
        plan, _ = plan_for(client, protocol, params)
        expects = None if needs_metadata else lambda: _server_expects(client, plan.model)
        latency = send_one(
            plan,
            protocol,
            target,
            params,
            seed=seed,
            json_body=json_body,
            expects=expects,
            extension_listed=listed,
        )
        server = server_description(client, plan.model)
    finally:
        client.close()
    return Preflight(plan, server, latency)


def _server_expects(client: ServerClient, model: str) -> str | None:
    """What the server says the model takes, when the plan did not come from it."""
    try:
        return client.model_spec(model).expects()
    except LoadkitError:
        return None


def _is_bodies(params: Mapping[str, Any]) -> bool:
    path = str(params.get("input_data") or "")
    return bool(path) and not is_perf_analyzer_json(Path(path))
