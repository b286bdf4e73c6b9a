"""Every HTTP read of loadkit's telemetry stops at a size cap and a total deadline.

Real misbehaving servers on 127.0.0.1 (a raw socket server in a thread): one that
drips a byte every 0.1 s and never ends its answer, one that serves a page far over
the cap (declared in Content-Length, or streamed without one). The samplers' getter,
a scrape and the Prometheus API client each stop at the limit and say which, once.
The limits are the tests' own (a fraction of a second, a few KiB), not production's.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from loadkit.errors import TargetError
from loadkit.telemetry.base import SourceUnavailable
from loadkit.telemetry.http import (
    DEADLINE,
    TOO_LARGE,
    KeepAliveGetter,
    ResponseLimitError,
)
from loadkit.telemetry.prometheus.client import PrometheusClient
from loadkit.telemetry.scrape import ScrapeSampler, ScrapeTarget

DRIP_EVERY_S = 0.1
CAP = 64 * 1024  # the tests' size cap
PAGE = 4 * 1024 * 1024  # an oversized page: 64 times the cap
DEADLINE_S = 0.4  # the tests' deadline

Answer = Callable[[socket.socket, threading.Event], None]


class MisbehavingServer:
    """A TCP server on 127.0.0.1 that reads each request's head and then runs `answer`."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        self.requests = 0
        self.declared = False  # an oversized page: says its length in Content-Length
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            self.requests += 1
            try:
                self.answer(conn, self.stop)
            except OSError:
                pass  # the client gave up: what the tests want

    def close(self) -> None:
        self.stop.set()
        self.listener.close()
        for thread in self._threads:
            thread.join(2.0)


def drip_forever(conn: socket.socket, stop: threading.Event) -> None:
    """200, no length: then a byte every 0.1 s until the client hangs up."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n# HELP ")
    while not stop.wait(DRIP_EVERY_S):
        conn.sendall(b"x")


def oversized(declared: bool) -> Answer:
    def answer(conn: socket.socket, stop: threading.Event) -> None:
        length = f"Content-Length: {PAGE}\r\n" if declared else "Connection: close\r\n"
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n{length}\r\n".encode())
        line = b"node_load1 1.5\n" * 4096
        sent = 0
        while sent < PAGE and not stop.is_set():
            conn.sendall(line)
            sent += len(line)

    return answer


@pytest.fixture
def dripping() -> Iterator[MisbehavingServer]:
    server = MisbehavingServer(drip_forever)
    yield server
    server.close()


@pytest.fixture(params=[True, False], ids=["declared", "streamed"])
def huge(request: pytest.FixtureRequest) -> Iterator[MisbehavingServer]:
    server = MisbehavingServer(oversized(request.param))
    server.declared = request.param
    yield server
    server.close()


# --- the samplers' getter --------------------------------------------------------------
def test_a_never_ending_answer_stops_at_the_getters_deadline(dripping: MisbehavingServer) -> None:
    getter = KeepAliveGetter(dripping.url, timeout_s=DEADLINE_S)
    started = time.monotonic()
    with pytest.raises(ResponseLimitError) as caught:
        getter.get("")
    took = time.monotonic() - started
    # THEN it stops at the deadline (not at a per-read timeout a drip never trips)
    assert caught.value.kind == DEADLINE
    assert DEADLINE_S * 0.9 <= took < DEADLINE_S + 0.5
    assert "GET /metrics: answer not complete within 0.4 s" in str(caught.value)
    assert "drips" in str(caught.value)
    # AND it is not retried: one request, and the cut-off connection is closed
    assert dripping.requests == 1 and getter._conn is None


def test_an_oversized_page_stops_at_the_getters_cap(huge: MisbehavingServer) -> None:
    getter = KeepAliveGetter(huge.url, timeout_s=3.0, max_bytes=CAP)
    started = time.monotonic()
    with pytest.raises(ResponseLimitError) as caught:
        getter.get("")
    assert caught.value.kind == TOO_LARGE
    assert time.monotonic() - started < 1.5
    assert "answer over 65536 bytes" in str(caught.value)
    assert "stopped reading" in str(caught.value)
    # a declared length over the cap stops before the body; a streamed page at the cap
    why = "it declares 4 MiB" if huge.declared else "it goes on"
    assert f"({why})" in str(caught.value)
    assert huge.requests == 1 and getter._conn is None


# --- a scrape: one warning per exporter, and the run goes on ---------------------------
def test_a_scrape_of_a_dripping_exporter_stops_at_its_deadline_and_warns_once(
    dripping: MisbehavingServer,
) -> None:
    sampler = ScrapeSampler("host", [ScrapeTarget("node", dripping.url)], 1.0, deadline_s=0.3)
    try:
        started = time.monotonic()
        rows = [sampler.sample(i) for i in range(2)]
        took = time.monotonic() - started
    finally:
        sampler.close()
    assert rows == [[], []] and took < 2 * 0.3 + 0.6
    (warning,) = sampler.drain_warnings()
    assert warning.startswith(f"node {dripping.url}: GET /metrics: answer not complete within")
    assert "retried every tick" in warning


def test_a_scrape_of_an_oversized_page_stops_at_its_cap_and_warns_once(
    huge: MisbehavingServer,
) -> None:
    sampler = ScrapeSampler("host", [ScrapeTarget("node", huge.url)], 1.0, max_bytes=CAP)
    try:
        # an exporter over the cap from the start: the source is missing, in one line
        with pytest.raises(SourceUnavailable, match="answer over 65536 bytes"):
            sampler.open()
        rows = [sampler.sample(i) for i in range(2)]
    finally:
        sampler.close()
    assert rows == [[], []]
    assert sampler.drain_warnings() == []  # the opening line said it: no more lines


# --- `import --prometheus` -------------------------------------------------------------
def test_the_prometheus_client_stops_a_dripping_answer_at_its_deadline(
    dripping: MisbehavingServer,
) -> None:
    client = PrometheusClient(f"http://127.0.0.1:{dripping.port}", deadline_s=DEADLINE_S)
    started = time.monotonic()
    with pytest.raises(TargetError) as caught:
        client.query_range("up", 0, 60 * 10**9, 15.0)
    assert time.monotonic() - started < DEADLINE_S + 0.5
    assert "answer not complete within 0.4 s" in str(caught.value)
    assert caught.value.hint is not None and "--window" in caught.value.hint


def test_the_prometheus_client_stops_an_oversized_answer_at_its_cap(
    huge: MisbehavingServer,
) -> None:
    client = PrometheusClient(f"http://127.0.0.1:{huge.port}", max_bytes=CAP)
    with pytest.raises(TargetError, match="answer over 65536 bytes"):
        client.query_range("up", 0, 60 * 10**9, 15.0)


def test_a_well_behaved_server_keeps_one_connection_for_every_get_and_post() -> None:
    # GIVEN a keep-alive HTTP/1.1 server that counts the connections it accepts
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    accepted: list[object] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            accepted.append(self.client_address)
            super().setup()

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer  # noqa: N815 - http.server's names

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    getter = KeepAliveGetter(f"http://127.0.0.1:{server.server_address[1]}", timeout_s=5.0)
    try:
        # WHEN probes and scrapes alternate on one getter
        statuses = [getter.post_json("/infer", b"{}") for _ in range(5)]
        bodies = [getter.get_json("/stats") for _ in range(5)]
        statuses += [getter.post_json("/infer", b"{}") for _ in range(5)]
    finally:
        getter.close()
        server.shutdown()
        server.server_close()
    # THEN every one is answered on the one kept-alive connection (a response left open
    # at its end made every other request fail, ResponseNotReady, and reconnect)
    assert statuses == [200] * 10 and bodies == [{"ok": True}] * 5
    assert len(accepted) == 1, accepted
