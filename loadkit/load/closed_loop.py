"""A short closed-loop load from plain threads: N clients, each sending its next request
as soon as its last one answered.

`loadkit tune` profiles a model's compute per batch size (docs/capacity.md): a
closed loop of N clients keeps about N requests at the server, so Triton's
dynamic batcher forms batches around N whatever the model's speed. No arrival
schedule is needed, so this is not a Locust run: plain threads, one keep-alive
HTTP connection each, V2 JSON tensors (the request plan of the pre-flight), and
a bounded length. The client latencies come back for the profile's overhead.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from loadkit.errors import TargetError
from loadkit.load.sources import InferRequest, RequestPlan, build_source
from loadkit.load.transports import kserve_v2_json_bytes

REQUEST_TIMEOUT_S = 10.0


@dataclass
class ClosedLoopResult:
    """What the clients saw: latencies (ms) of the answered requests, and the failures."""

    clients: int
    duration_s: float
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None

    @property
    def throughput_rps(self) -> float:
        return len(self.latencies_ms) / self.duration_s if self.duration_s > 0 else 0.0


def json_body(request: InferRequest) -> bytes:
    """The request as KServe v2 JSON tensors (no binary extension needed), as Locust sends it."""
    return request.body if request.body is not None else kserve_v2_json_bytes(request)


def run_closed_loop(
    url: str, plan: RequestPlan, clients: int, duration_s: float, seed: int = 0
) -> ClosedLoopResult:
    """`clients` threads loop for `duration_s` seconds (bounded), each on its own connection."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    path = f"/v2/models/{quote(plan.model, safe='')}/infer"
    source = build_source(plan, seed)
    bodies = [json_body(source.next()) for _ in range(max(8, clients))]
    result = ClosedLoopResult(clients=clients, duration_s=duration_s)
    lock = threading.Lock()
    deadline = time.monotonic() + duration_s

    def client(k: int) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=REQUEST_TIMEOUT_S)
        mine: list[float] = []
        errors, first = 0, None
        i = k
        try:
            while time.monotonic() < deadline:
                body = bodies[i % len(bodies)]
                i += clients
                t0 = time.perf_counter()
                try:
                    conn.request("POST", path, body, {"Content-Type": "application/json"})
                    response = conn.getresponse()
                    text = response.read()
                except (OSError, http.client.HTTPException) as exc:
                    errors, first = errors + 1, first or str(exc)
                    conn.close()
                    conn = http.client.HTTPConnection(host, port, timeout=REQUEST_TIMEOUT_S)
                    continue
                if response.status == 200:
                    mine.append((time.perf_counter() - t0) * 1000.0)
                else:
                    errors += 1
                    first = first or f"HTTP {response.status}: {text[:200]!r}"
        finally:
            conn.close()
            with lock:
                result.latencies_ms.extend(mine)
                result.errors += errors
                result.first_error = result.first_error or first

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(duration_s + REQUEST_TIMEOUT_S + 5.0)
    if not result.latencies_ms and result.errors:
        raise TargetError(f"the closed-loop clients got no answer: {result.first_error}")
    return result


def request_plan(url: str, params: Mapping[str, Any]) -> RequestPlan:
    """The requests the scenario's parameters ask for, as the pre-flight plans them."""
    from loadkit.kserve.metadata import HttpServerClient
    from loadkit.load.preflight import plan_for

    plan, _ = plan_for(HttpServerClient(url), "http", params)
    return plan


__all__ = ["ClosedLoopResult", "json_body", "request_plan", "run_closed_loop"]
