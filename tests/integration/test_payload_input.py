"""The ranker's optional PAYLOAD input on the real Triton: the diagnosis benchmark's data-movement
mechanism. Requests with and without it are served; a large one grows Triton's compute_input."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from loadkit.load.protocols.triton_http import TritonHttpTransport
from loadkit.load.sources import tensors_request
from loadkit.target.server import EmbeddedTriton

pytestmark = pytest.mark.integration

PAYLOAD_BYTES = 8 << 20
REQUESTS = 8


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTriton]:
    log = tmp_path_factory.mktemp("triton") / "triton.log"
    with EmbeddedTriton(log_path=log, payload_input=True, max_queue_delay_us=0) as t:
        yield t


def _compute_input_us(url: str) -> tuple[int, int]:
    with urllib.request.urlopen(f"{url}/v2/models/ranker/stats", timeout=10) as response:
        stats = json.load(response)["model_stats"][0]["inference_stats"]["compute_input"]
    return int(stats["count"]), int(stats["ns"])


def _per_request_input_us(triton: EmbeddedTriton, payload: int) -> float:
    inputs = [
        ("ITEM_IDS", "INT64", np.arange(100, dtype=np.int64)[None]),
        ("USER_FEATURES", "FP32", np.zeros((1, 16), np.float32)),
    ]
    if payload:
        inputs.append(("PAYLOAD", "UINT8", np.zeros((1, payload), np.uint8)))
    transport = TritonHttpTransport(triton.http_url, "ranker", timeout_s=30.0, churn=False)
    transport.connect()
    try:
        wire = transport.prepare(tensors_request(inputs))
        transport.send(wire)  # the backend's shared memory grows on the first large one
        transport.send(wire)
        count0, ns0 = _compute_input_us(triton.http_url)
        for _ in range(REQUESTS):
            transport.send(wire)  # raises on any error status
        count1, ns1 = _compute_input_us(triton.http_url)
    finally:
        transport.close()
    # Triton counts a request just after answering it: the last one may land in either read
    assert REQUESTS - 1 <= count1 - count0 <= REQUESTS + 1
    return (ns1 - ns0) / (count1 - count0) / 1e3


def test_requests_with_and_without_the_payload_are_served_and_the_copy_shows_in_compute_input(
    triton: EmbeddedTriton, tmp_path: Path
) -> None:
    config = json.loads(
        urllib.request.urlopen(f"{triton.http_url}/v2/models/ranker/config", timeout=10).read()
    )
    payload = next(i for i in config["input"] if i["name"] == "PAYLOAD")
    assert payload["optional"] is True and payload["data_type"] == "TYPE_UINT8"
    without = _per_request_input_us(triton, 0)
    with_payload = _per_request_input_us(triton, PAYLOAD_BYTES)
    print(f"compute_input per request: {without:.0f} us without, {with_payload:.0f} us with 8 MiB")
    # copying 8 MiB takes hundreds of microseconds at the very least (~1.1 ms measured on a
    # busy 2-core VM); the request without it, tens
    assert with_payload > 5 * without and with_payload > 200.0
