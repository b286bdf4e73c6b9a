"""Faults of a shared fleet with real processes: another model's sender, a slow TCP path."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from loadkit.faults import FaultSchedule, FaultUnavailable, NeighbourModel, SlowPath


class _Counting(BaseHTTPRequestHandler):
    """An HTTP server that counts POSTs by path and answers at once."""

    posts: dict[str, int] = {}

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        _Counting.posts[self.path] = _Counting.posts.get(self.path, 0) + 1
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    _Counting.posts = {}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _wait_for(predicate, timeout_s: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_the_neighbour_sends_to_the_other_model_only_in_its_windows(
    server: ThreadingHTTPServer, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{server.server_address[1]}"
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    fault = NeighbourModel(
        url, "doc ranker", body, FaultSchedule(duration_s=1.0), rate_rps=40.0, state_dir=tmp_path
    )
    path = "/v2/models/doc%20ranker/infer"
    fault._prepare()
    try:
        time.sleep(0.3)  # the sender is up and idle: nothing is sent
        assert _Counting.posts.get(path, 0) == 0
        fault._begin()
        assert _wait_for(lambda: _Counting.posts.get(path, 0) >= 20), _Counting.posts
        fault._end()
        time.sleep(0.3)  # requests in flight finish
        after = _Counting.posts[path]
        time.sleep(0.5)
        # THEN nothing more once the window ended
        assert _Counting.posts[path] == after
        assert json.loads((tmp_path / "neighbour_body.json").read_text()) == body
    finally:
        fault._cleanup()
    assert fault.process is None


def test_a_neighbour_without_a_rate_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FaultUnavailable, match="rate"):
        NeighbourModel(
            "http://x", "m", {}, FaultSchedule(duration_s=1.0), rate_rps=0, state_dir=tmp_path
        )


def _round_trip_s(port: int) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        started = time.monotonic()
        conn.request("POST", "/v2/models/ranker/infer", b"{}", {"Content-Type": "application/json"})
        assert conn.getresponse().read() == b"{}"
        return time.monotonic() - started
    finally:
        conn.close()


def test_the_slow_path_holds_requests_only_in_its_windows(
    server: ThreadingHTTPServer, tmp_path: Path
) -> None:
    fault = SlowPath(
        "127.0.0.1",
        server.server_address[1],
        FaultSchedule(duration_s=1.0),
        delay_ms=300.0,
        state_dir=tmp_path,
    )
    url = fault.listen()
    port = int(url.rsplit(":", 1)[1])
    try:
        # GIVEN the proxy with no delay: requests pass through it to the server
        assert _round_trip_s(port) < 0.3
        assert _Counting.posts["/v2/models/ranker/infer"] == 1
        # WHEN the window starts, THEN each request is held 300 ms
        fault._begin()
        assert _wait_for(lambda: _round_trip_s(port) >= 0.3)
        # ... and after it, no longer
        fault._end()
        assert _wait_for(lambda: _round_trip_s(port) < 0.3)
    finally:
        fault._cleanup()
    assert fault.process is None
