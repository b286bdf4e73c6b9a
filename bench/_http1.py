"""The benchmark servers' HTTP/1.1 keep-alive connection loop (bench/fixed_delay_server.py,
bench/instant_server.py).

Hand-written, not a framework: these servers exist to add as little time as
possible on top of what they measure (gevent's WSGI server costs ~100 µs a
request), and they only need a request's head, its length and its path. No
imports beyond the standard library, so the servers start (and monkey-patch)
before anything else loads. A response goes out in one `sendall` with
TCP_NODELAY: one split over two writes meets Nagle + delayed ACK, 40 ms more.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple


class Request(NamedTuple):
    method: bytes
    path: str  # without the query
    headers: dict[bytes, bytes]  # names lower-cased
    head_ns: int  # perf_counter_ns when the head was complete


def requests(sock: socket.socket) -> Iterator[Request]:
    """The requests on one connection (body read and dropped) until the peer closes it."""
    buf = b""
    while True:
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                return
            buf += chunk
        head_ns = time.perf_counter_ns()
        head, _, buf = buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        method, target = lines[0].split(b" ", 2)[:2]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get(b"content-length", 0))
        if b"expect" in headers and len(buf) < length:
            sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        while len(buf) < length:
            chunk = sock.recv(65536)
            if not chunk:
                return
            buf += chunk
        buf = buf[length:]
        yield Request(method, target.decode().split("?", 1)[0], headers, head_ns)


def connection_handler(
    answer: Callable[[socket.socket, Request], None],
) -> Callable[[socket.socket, object], None]:
    """A StreamServer handler calling `answer(sock, request)` for each request of a connection."""

    def handle(sock: socket.socket, _address: object) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            for request in requests(sock):
                answer(sock, request)
        except OSError:
            return
        finally:
            sock.close()

    return handle
