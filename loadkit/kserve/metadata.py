"""Read a KServe v2 server's metadata, its models' metadata and (Triton) configuration.

A `ServerClient` reads over HTTP (`HttpServerClient`, plain urllib: no
gevent, safe in the orchestrator) or gRPC (`GrpcServerClient`,
`tritonclient.grpc`); each protocol's registry entry names its own
(`loadkit.load.protocols`, `Protocol.open_client`). Failures
keep the server's own words: `ServerUnreachable` (exit 3) when nothing
answers, `ServerRejected` (exit 2) when the server answered "no".

`describe_server()` is what a run records as `manifest.environment.server`:
server name, version and extensions, and every model's configuration
(Triton's `/config`), or, on a server without that endpoint, the model
metadata and a line saying what could not be recorded and why.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from loadkit.errors import TargetError, UsageError

DEFAULT_TIMEOUT_S = 5.0
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy


class ServerUnreachable(TargetError):
    """Nothing answered at the target (refused, timed out, not a KServe v2 server)."""


class ServerRejected(UsageError):
    """The server answered and refused: unknown model, wrong inputs, ...; keeps its words."""

    def __init__(self, message: str, hint: str | None = None, server_message: str = "") -> None:
        super().__init__(message, hint)
        self.server_message = server_message


@dataclass(frozen=True)
class TensorSpec:
    """One input or output: name, KServe v2 datatype, shape (-1 = variable)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    optional: bool = False

    def text(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        return f"{self.name} {self.datatype} [{dims}]"


@dataclass(frozen=True)
class ModelSpec:
    """A model as its server describes it.

    `inputs[i].shape` excludes the batch dimension when `max_batch_size > 0`
    (as Triton's config and perf_analyzer's `--shape` do); `max_batch_size`
    is None when the server has no configuration endpoint (then shapes are
    the metadata's, whole).
    """

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...] = ()
    max_batch_size: int | None = None
    platform: str = ""
    versions: tuple[str, ...] = ()
    config: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def batched(self) -> bool:
        return bool(self.max_batch_size and self.max_batch_size > 0)

    def expects(self) -> str:
        """What the model takes, for error messages: `A INT64 [16]; B BYTES [1]`."""
        batch = "batch + " if self.batched else ""
        items = "; ".join(t.text() for t in self.inputs) or "no inputs"
        return f"{batch}{items}"

    def input(self, name: str) -> TensorSpec | None:
        return next((t for t in self.inputs if t.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "platform": self.platform,
            "versions": list(self.versions),
            "max_batch_size": self.max_batch_size,
            "inputs": [_tensor_json(t) for t in self.inputs],
            "outputs": [_tensor_json(t) for t in self.outputs],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelSpec:
        return cls(
            name=str(data["name"]),
            inputs=tuple(_tensor(t) for t in data.get("inputs") or []),
            outputs=tuple(_tensor(t) for t in data.get("outputs") or []),
            max_batch_size=data.get("max_batch_size"),
            platform=str(data.get("platform") or ""),
            versions=tuple(str(v) for v in data.get("versions") or []),
        )

    @classmethod
    def from_server(cls, metadata: dict[str, Any], config: dict[str, Any] | None) -> ModelSpec:
        """From `GET /v2/models/{m}` (and Triton's `/config`, when there is one)."""
        max_batch: int | None = None
        optional: set[str] = set()
        if config is not None:
            max_batch = int(config.get("max_batch_size") or 0)
            optional = {str(i.get("name")) for i in config.get("input") or [] if i.get("optional")}
        strip = 1 if max_batch else 0

        def specs(items: list[dict[str, Any]]) -> tuple[TensorSpec, ...]:
            out = []
            for item in items:
                shape = tuple(int(d) for d in item.get("shape") or [])
                name = str(item["name"])
                out.append(
                    TensorSpec(name, str(item["datatype"]).upper(), shape[strip:], name in optional)
                )
            return tuple(out)

        return cls(
            name=str(metadata.get("name")),
            inputs=specs(metadata.get("inputs") or []),
            outputs=specs(metadata.get("outputs") or []),
            max_batch_size=max_batch,
            platform=str(metadata.get("platform") or ""),
            versions=tuple(str(v) for v in metadata.get("versions") or []),
            config=config,
        )


def _tensor_json(t: TensorSpec) -> dict[str, Any]:
    return {"name": t.name, "datatype": t.datatype, "shape": list(t.shape), "optional": t.optional}


def _tensor(d: dict[str, Any]) -> TensorSpec:
    shape = tuple(int(x) for x in d.get("shape") or [])
    return TensorSpec(str(d["name"]), str(d["datatype"]), shape, bool(d.get("optional")))


class ServerClient(ABC):
    """The metadata calls of one protocol; each raises ServerUnreachable/ServerRejected."""

    protocol = ""

    def __init__(self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.url = url
        self.timeout_s = timeout_s

    @abstractmethod
    def server_metadata(self) -> dict[str, Any]: ...

    @abstractmethod
    def model_metadata(self, model: str) -> dict[str, Any]: ...

    @abstractmethod
    def model_config(self, model: str) -> dict[str, Any] | None:
        """Triton's model configuration; None when the server has no such endpoint."""

    @abstractmethod
    def model_names(self) -> list[str] | None:
        """Names of the ready models; None when the server cannot list them."""

    def close(self) -> None:
        return None

    def model_spec(self, model: str) -> ModelSpec:
        metadata = self.model_metadata(model)
        return ModelSpec.from_server(metadata, self.model_config(model))

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class HttpServerClient(ServerClient):
    """KServe v2 over HTTP with urllib (no gevent, no connection pool to leak)."""

    protocol = "http"

    def __init__(self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(url, timeout_s)
        base = url if "://" in url else f"http://{url}"
        parts = urlsplit(base)
        if not parts.hostname:
            raise UsageError(f"bad --target {url!r}", hint="e.g. http://127.0.0.1:8000")
        self.base = f"{parts.scheme}://{parts.netloc}"

    def _call(self, path: str, body: bytes | None = None) -> tuple[int, Any]:
        request = urllib.request.Request(
            self.base + path,
            data=body,
            headers={"Content-Type": "application/json"} if body is not None else {},
            method="POST" if body is not None else "GET",
        )
        try:
            with _OPENER.open(request, timeout=self.timeout_s) as response:
                return int(response.status), _json_or_text(response.read())
        except urllib.error.HTTPError as exc:
            return int(exc.code), _json_or_text(exc.read())
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServerUnreachable(
                f"cannot reach {self.base}: {reason}",
                hint="is the server running, and is this its HTTP port? "
                "`loadkit target` starts a local Triton to try things on",
            ) from None

    def _get(self, path: str, what: str) -> dict[str, Any]:
        status, data = self._call(path)
        if status != 200 or not isinstance(data, dict):
            raise ServerRejected(
                f"{what}: HTTP {status}: {server_words(data)}", server_message=server_words(data)
            )
        return data

    def server_metadata(self) -> dict[str, Any]:
        status, data = self._call("/v2")
        if status != 200 or not isinstance(data, dict):
            raise ServerUnreachable(
                f"{self.base} is not a KServe v2 server: GET /v2 answered HTTP {status}: "
                f"{server_words(data)}",
                hint="give the server's KServe v2 HTTP URL (Triton: port 8000)",
            )
        return data

    def model_metadata(self, model: str) -> dict[str, Any]:
        return self._get(f"/v2/models/{quote(model, safe='')}", f"model {model!r}")

    def model_config(self, model: str) -> dict[str, Any] | None:
        status, data = self._call(f"/v2/models/{quote(model, safe='')}/config")
        if status == 200 and isinstance(data, dict) and ("name" in data or "input" in data):
            return data
        return None

    def model_names(self) -> list[str] | None:
        status, data = self._call("/v2/repository/index", b"{}")
        if status != 200 or not isinstance(data, list):
            return None
        return _ready_names(data)


class GrpcServerClient(ServerClient):
    """KServe v2 over gRPC with `tritonclient.grpc` (blocking; no gevent needed)."""

    protocol = "grpc"

    def __init__(self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(url, timeout_s)
        import tritonclient.grpc as grpcclient

        hostport = url.split("://", 1)[1] if "://" in url else url
        self._client = grpcclient.InferenceServerClient(hostport.rstrip("/"))

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args, as_json=True, client_timeout=self.timeout_s)
        except Exception as exc:  # tritonclient raises InferenceServerException
            status = str(getattr(exc, "status", lambda: "")() or "")
            words = _exception_words(exc)
            if status.endswith(("UNAVAILABLE", "DEADLINE_EXCEEDED")):
                raise ServerUnreachable(
                    f"cannot reach {self.url} over gRPC: {words}",
                    hint="is the server running, and is this its gRPC port (Triton: 8001)?",
                ) from None
            raise ServerRejected(f"{what}: {words}", server_message=words) from None

    def server_metadata(self) -> dict[str, Any]:
        return dict(self._call("server metadata", self._client.get_server_metadata))

    def model_metadata(self, model: str) -> dict[str, Any]:
        return dict(self._call(f"model {model!r}", self._client.get_model_metadata, model))

    def model_config(self, model: str) -> dict[str, Any] | None:
        try:
            data = self._call("config", self._client.get_model_config, model)
        except ServerRejected:
            return None  # UNIMPLEMENTED (not Triton) or no config
        config = data.get("config") if isinstance(data, dict) else None
        return dict(config) if isinstance(config, dict) else None

    def model_names(self) -> list[str] | None:
        try:
            data = self._call("index", self._client.get_model_repository_index)
        except ServerRejected:
            return None
        return _ready_names((data or {}).get("models") or [])

    def close(self) -> None:
        self._client.close()


def _ready_names(models: list[Any]) -> list[str]:
    names = []
    for m in models:
        if isinstance(m, dict) and m.get("name"):
            # MLServer's gRPC index says "State.READY"
            state = str(m.get("state") or "READY").upper().rsplit(".", 1)[-1]
            if state == "READY" and str(m["name"]) not in names:
                names.append(str(m["name"]))
    return names


def _json_or_text(raw: bytes) -> Any:
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def server_words(data: Any) -> str:
    """The server's own error message from a KServe v2 error body (`{"error": ...}`)."""
    if isinstance(data, dict):
        for key in ("error", "detail", "message"):
            if data.get(key):
                value = data[key]
                return value if isinstance(value, str) else json.dumps(value)
        return json.dumps(data)[:500]
    return str(data).strip()[:500] or "(empty answer)"


def _exception_words(exc: BaseException) -> str:
    message = getattr(exc, "message", None)
    if callable(message):
        text = message()
        if text:
            return str(text)
    return str(exc) or type(exc).__name__


def describe_server(client: ServerClient, models: list[str] | None = None) -> dict[str, Any]:
    """`manifest.environment.server` for any KServe v2 server (see module docstring)."""
    meta = client.server_metadata()
    names = list(models) if models else (client.model_names() or [])
    configs: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    not_recorded: list[str] = []
    if not models and not names:
        not_recorded.append(
            "the model list: the server has no repository index; name the model to record it"
        )
    for name in names:
        try:
            metadata[name] = client.model_metadata(name)
        except ServerRejected as exc:
            not_recorded.append(f"model {name}: {exc.server_message or exc.message}")
            continue
        config = client.model_config(name)
        if config is not None:
            configs[name] = config
    missing = sorted(set(metadata) - set(configs))
    if missing:
        not_recorded.append(
            f"model configuration of {', '.join(missing)}: {meta.get('name') or 'the server'} "
            "has no Triton configuration endpoint, so max batch size, dynamic batching and "
            "instances are unknown (batching_window and the batching capacity are not "
            "assessable)"
        )
    return {
        "name": meta.get("name"),
        "version": meta.get("version"),
        "extensions": list(meta.get("extensions") or []),
        "protocol": client.protocol,
        "url": client.url,
        "models": configs,
        "model_metadata": metadata,
        "not_recorded": not_recorded,
    }
