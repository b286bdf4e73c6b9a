"""One inference over HTTP and one over gRPC against the `ranker` model.

Used by `loadkit target --smoke` to prove the whole path works (server, Python
backend, numpy in the stub, both protocols) before a load test relies on it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadkit.errors import TargetError
from loadkit.target.config import MODEL_NAME, USER_DIM

# tritonclient is imported inside the functions: it is slow to import and
# `loadkit --help` should not pay for it.


def example_request(n_items: int = 8, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """(ITEM_IDS [1, n_items] int64, USER_FEATURES [1, USER_DIM] fp32), deterministic."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, 10_000_000, size=(1, n_items), dtype=np.int64)
    user = rng.standard_normal((1, USER_DIM)).astype(np.float32)
    return ids, user


def curl_example(http_url: str) -> str:
    """A copy-pasteable JSON-tensor request for the server's HTTP endpoint."""
    features = ",".join(["0.1"] * USER_DIM)
    body = (
        '{"inputs":['
        '{"name":"ITEM_IDS","shape":[1,3],"datatype":"INT64","data":[101,202,303]},'
        f'{{"name":"USER_FEATURES","shape":[1,{USER_DIM}],"datatype":"FP32","data":[{features}]}}'
        "]}"
    )
    return f"curl -s {http_url}/v2/models/{MODEL_NAME}/infer -d '{body}'"


@dataclass(frozen=True)
class SmokeResult:
    protocol: str
    item_ids: list[int]
    scores: list[float]
    latency_ms: float

    def top(self, k: int = 3) -> list[tuple[int, float]]:
        order = np.argsort(self.scores)[::-1][:k]
        return [(self.item_ids[i], self.scores[i]) for i in order]


def run_smoke(http_url: str, grpc_url: str) -> list[SmokeResult]:
    """Infer the example request over both protocols; TargetError if either fails."""
    ids, user = example_request()
    results = []
    for protocol, infer, url in (("HTTP", infer_http, http_url), ("gRPC", infer_grpc, grpc_url)):
        try:
            results.append(infer(url, ids, user))
        except Exception as exc:  # tritonclient raises several unrelated types
            raise TargetError(
                f"{protocol} inference on {url} failed: {exc}",
                hint="check the server log for the model's error",
            ) from None
    if not np.allclose(results[0].scores, results[1].scores, atol=1e-6):
        raise TargetError("HTTP and gRPC returned different scores for the same request")
    return results


def ranker_inputs(client_module: Any, ids: np.ndarray, user: np.ndarray) -> list[Any]:
    """The ranker's two input tensors for `tritonclient.http` or `tritonclient.grpc`."""
    inputs = [
        client_module.InferInput("ITEM_IDS", list(ids.shape), "INT64"),
        client_module.InferInput("USER_FEATURES", list(user.shape), "FP32"),
    ]
    inputs[0].set_data_from_numpy(ids)
    inputs[1].set_data_from_numpy(user)
    return inputs


def infer_http(http_url: str, ids: np.ndarray, user: np.ndarray) -> SmokeResult:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(http_url.removeprefix("http://"))
    try:
        inputs = ranker_inputs(httpclient, ids, user)  # binary tensors by default
        output = httpclient.InferRequestedOutput("SCORES", binary_data=True)
        started = time.perf_counter()
        result = client.infer(MODEL_NAME, inputs, outputs=[output])
        latency_ms = (time.perf_counter() - started) * 1e3
        scores = result.as_numpy("SCORES")
    finally:
        client.close()
    assert scores is not None
    return SmokeResult("http", ids[0].tolist(), scores[0].tolist(), latency_ms)


def infer_grpc(grpc_url: str, ids: np.ndarray, user: np.ndarray) -> SmokeResult:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        inputs = ranker_inputs(grpcclient, ids, user)
        started = time.perf_counter()
        result = client.infer(MODEL_NAME, inputs)
        latency_ms = (time.perf_counter() - started) * 1e3
        scores = result.as_numpy("SCORES")
    finally:
        client.close()
    assert scores is not None
    return SmokeResult("grpc", ids[0].tolist(), scores[0].tolist(), latency_ms)
