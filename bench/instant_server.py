"""A KServe v2 server that answers instantly, for measuring the clients themselves.

    python bench/instant_server.py http 0 STATS_FILE     # prints the port it listens on
    python bench/instant_server.py grpc 0 STATS_FILE

It describes the embedded `ranker` (same name, inputs, outputs and config as
`loadkit.target`), so loadkit's metadata-built requests and perf_analyzer's
`--shape ITEM_IDS:N` send what they send to the real model, and it answers
every inference with one prebuilt response (SCORES, FP32 [1, N]): binary
tensors when the request used the binary extension, JSON tensors otherwise,
a prebuilt `ModelInferResponse` over gRPC. No model runs.

- `http`: a gevent StreamServer with the minimal HTTP/1.1 keep-alive loop of
  `bench/_http1.py` (shared with `bench/fixed_delay_server.py`; `Expect:
  100-continue` answered), one `sendall` per response with TCP_NODELAY.
- `grpc`: `grpcio`'s server with tritonclient's generated servicer.

**The server's own time** per inference is timed inside the server, from the
moment a request is complete (HTTP: head and body read; gRPC: the servicer
called) to the moment its response is handed to the socket (HTTP: `sendall`
returned; gRPC: the servicer returned), into an HDR histogram in ns. On
SIGUSR1 the server writes that histogram's percentiles to STATS_FILE (JSON,
atomically) and starts a new one, so a benchmark brackets each measurement.
It cannot see time a request waits in the kernel or in its own event loop
before it is read: at high rates that wait is part of what both clients
measure, and only their difference cancels it.

Statistics (`/v2/models/ranker/stats`, gRPC `ModelStatistics`) are kept as
Triton keeps them (cumulative counts and ns), because perf_analyzer reads them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._http1 import Request, connection_handler  # noqa: E402

MODEL = "ranker"
USER_DIM = 16  # = loadkit.target.config.USER_DIM
CANDIDATES = int(os.environ.get("INSTANT_CANDIDATES", "100"))
PERCENTILES = (50.0, 90.0, 99.0, 99.9)

METADATA = {
    "name": MODEL,
    "versions": ["1"],
    "platform": "python",
    "inputs": [
        {"name": "ITEM_IDS", "datatype": "INT64", "shape": [-1, -1]},
        {"name": "USER_FEATURES", "datatype": "FP32", "shape": [-1, USER_DIM]},
    ],
    "outputs": [{"name": "SCORES", "datatype": "FP32", "shape": [-1, -1]}],
}
CONFIG = {
    "name": MODEL,
    "platform": "",
    "backend": "python",
    "version_policy": {"latest": {"num_versions": 1}},
    "max_batch_size": 32,
    "input": [
        {"name": "ITEM_IDS", "data_type": "TYPE_INT64", "format": "FORMAT_NONE", "dims": [-1]},
        {
            "name": "USER_FEATURES",
            "data_type": "TYPE_FP32",
            "format": "FORMAT_NONE",
            "dims": [USER_DIM],
        },
    ],
    "output": [{"name": "SCORES", "data_type": "TYPE_FP32", "dims": [-1]}],
    "instance_group": [{"name": MODEL, "kind": "KIND_CPU", "count": 1}],
    "dynamic_batching": {},
}
SCORES = bytes(4 * CANDIDATES)  # FP32 zeros


class ServerTimes:
    """The server's own time per inference (ns), and Triton-style cumulative statistics."""

    def __init__(self, stats_file: str):
        self.stats_file = stats_file
        self.hist = HdrHistogram(1, 60_000_000_000, 3)
        self.count = 0
        self.total_ns = 0
        self._lock = threading.Lock()

    def record(self, ns: int) -> None:
        with self._lock:
            self.hist.record_value(max(1, ns))
            self.count += 1
            self.total_ns += ns

    def dump(self) -> None:
        """Write this histogram's figures to the stats file and start a new one."""
        with self._lock:
            hist, self.hist = self.hist, HdrHistogram(1, 60_000_000_000, 3)
        out: dict[str, Any] = {"count": hist.get_total_count()}
        for p in PERCENTILES:
            out[f"p{p:g}_us"] = hist.get_value_at_percentile(p) / 1000
        out["max_us"] = hist.get_max_value() / 1000
        tmp = f"{self.stats_file}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(out, f)
        os.replace(tmp, self.stats_file)

    def statistics(self) -> dict[str, Any]:
        n, ns = self.count, self.total_ns
        zero = {"count": 0, "ns": 0}
        stat = {"count": n, "ns": ns}
        return {
            "model_stats": [
                {
                    "name": MODEL,
                    "version": "1",
                    "last_inference": int(time.time() * 1000),
                    "inference_count": n,
                    "execution_count": n,
                    "inference_stats": {
                        "success": stat,
                        "fail": zero,
                        "queue": {"count": n, "ns": 0},
                        "compute_input": {"count": n, "ns": 0},
                        "compute_infer": stat,
                        "compute_output": {"count": n, "ns": 0},
                        "cache_hit": zero,
                        "cache_miss": zero,
                    },
                    "batch_stats": [],
                    "memory_usage": [],
                }
            ]
        }


# ------------------------------------------------------------------ HTTP
def _http_response(status: str, body: bytes, extra: str = "") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}Connection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


def _infer_body(**scores: Any) -> dict[str, Any]:
    """The one inference answer; `scores`: SCORES' `parameters` (binary) or `data` (JSON)."""
    output = {"name": "SCORES", "datatype": "FP32", "shape": [1, CANDIDATES], **scores}
    return {"model_name": MODEL, "model_version": "1", "outputs": [output]}


def _binary_infer_response() -> bytes:
    header = json.dumps(_infer_body(parameters={"binary_data_size": len(SCORES)})).encode()
    extra = f"Inference-Header-Content-Length: {len(header)}\r\n"
    return _http_response("200 OK", header + SCORES, extra)


def _json_infer_response() -> bytes:
    body = json.dumps(_infer_body(data=[0.0] * CANDIDATES)).encode()
    return _http_response("200 OK", body)


def serve_http(port: int, times: ServerTimes) -> None:
    from gevent import monkey

    monkey.patch_all()
    import gevent
    from gevent.server import StreamServer

    binary_reply = _binary_infer_response()
    json_reply = _json_infer_response()
    ok = b'{"ready": true}'
    server_meta = json.dumps(
        {"name": "instant", "version": "2.51.0", "extensions": ["binary_tensor_data", "statistics"]}
    ).encode()
    model_meta = json.dumps(METADATA).encode()
    config = json.dumps(CONFIG).encode()
    not_found = json.dumps({"error": "unknown path"}).encode()
    perf = time.perf_counter_ns

    def route(method: bytes, path: str) -> bytes:
        if "/versions/" in path:  # /v2/models/ranker/versions/1/... -> /v2/models/ranker/...
            head, _, tail = path.partition("/versions/")
            path = head + tail[tail.find("/") :] if "/" in tail else head
        if path in ("/v2", "/v2/"):
            return _http_response("200 OK", server_meta)
        if path.startswith("/v2/health"):
            return _http_response("200 OK", ok)
        if path == "/v2/repository/index":
            body = json.dumps([{"name": MODEL, "version": "1", "state": "READY"}]).encode()
            return _http_response("200 OK", body)
        if path == f"/v2/models/{MODEL}":
            return _http_response("200 OK", model_meta)
        if path == f"/v2/models/{MODEL}/config":
            return _http_response("200 OK", config)
        if path == f"/v2/models/{MODEL}/ready":
            return _http_response("200 OK", ok)
        if path == f"/v2/models/{MODEL}/stats":
            return _http_response("200 OK", json.dumps(times.statistics()).encode())
        return _http_response("404 Not Found", not_found)

    def answer(sock: socket.socket, request: Request) -> None:
        if request.method == b"POST" and request.path.endswith("/infer"):
            binary = b"inference-header-content-length" in request.headers
            sock.sendall(binary_reply if binary else json_reply)
            times.record(perf() - request.head_ns)
        else:
            sock.sendall(route(request.method, request.path))

    gevent.signal_handler(signal.SIGUSR1, times.dump)
    server = StreamServer(("127.0.0.1", port), connection_handler(answer), backlog=4096)
    server.start()
    print(server.server_port, flush=True)
    server.serve_forever()


# ------------------------------------------------------------------ gRPC
def serve_grpc(port: int, times: ServerTimes) -> None:
    from concurrent import futures

    import grpc
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

    reply = service_pb2.ModelInferResponse(model_name=MODEL, model_version="1")
    out = reply.outputs.add()
    out.name, out.datatype = "SCORES", "FP32"
    out.shape.extend([1, CANDIDATES])
    reply.raw_output_contents.append(SCORES)
    config = json_format.ParseDict(CONFIG, model_config_pb2.ModelConfig())
    meta = service_pb2.ModelMetadataResponse(name=MODEL, versions=["1"], platform="python")
    for kind, items in (("inputs", METADATA["inputs"]), ("outputs", METADATA["outputs"])):
        for t in items:  # type: ignore[attr-defined]
            getattr(meta, kind).add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
    perf = time.perf_counter_ns

    class Servicer(service_pb2_grpc.GRPCInferenceServiceServicer):
        def ServerLive(self, request, context):  # type: ignore[no-untyped-def]
            return service_pb2.ServerLiveResponse(live=True)

        def ServerReady(self, request, context):  # type: ignore[no-untyped-def]
            return service_pb2.ServerReadyResponse(ready=True)

        def ModelReady(self, request, context):  # type: ignore[no-untyped-def]
            return service_pb2.ModelReadyResponse(ready=request.name == MODEL)

        def ServerMetadata(self, request, context):  # type: ignore[no-untyped-def]
            return service_pb2.ServerMetadataResponse(
                name="instant", version="2.51.0", extensions=["statistics"]
            )

        def ModelMetadata(self, request, context):  # type: ignore[no-untyped-def]
            if request.name != MODEL:
                context.abort(grpc.StatusCode.NOT_FOUND, f"no model {request.name!r}")
            return meta

        def ModelConfig(self, request, context):  # type: ignore[no-untyped-def]
            if request.name != MODEL:
                context.abort(grpc.StatusCode.NOT_FOUND, f"no model {request.name!r}")
            return service_pb2.ModelConfigResponse(config=config)

        def ModelStatistics(self, request, context):  # type: ignore[no-untyped-def]
            return json_format.ParseDict(
                times.statistics(),
                service_pb2.ModelStatisticsResponse(),
                ignore_unknown_fields=True,
            )

        def RepositoryIndex(self, request, context):  # type: ignore[no-untyped-def]
            return service_pb2.RepositoryIndexResponse(
                models=[service_pb2.RepositoryIndexResponse.ModelIndex(name=MODEL, state="READY")]
            )

        def ModelInfer(self, request, context):  # type: ignore[no-untyped-def]
            t0 = perf()
            result = reply
            times.record(perf() - t0)
            return result

    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=16),
        options=[
            ("grpc.max_send_message_length", 2**31 - 1),
            ("grpc.max_receive_message_length", 2**31 - 1),
        ],
    )
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Servicer(), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    signal.signal(signal.SIGUSR1, lambda *_: times.dump())
    signal.signal(signal.SIGTERM, lambda *_: server.stop(0))
    server.start()
    print(bound, flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    mode, port_arg, stats = sys.argv[1], sys.argv[2], sys.argv[3]
    recorder = ServerTimes(stats)
    (serve_http if mode == "http" else serve_grpc)(int(port_arg), recorder)
