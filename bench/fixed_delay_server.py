"""An HTTP endpoint with a known fixed delay, for the timing-fidelity benchmark.

    python bench/fixed_delay_server.py PORT DELAY_MS     # prints the port it listens on

A gevent StreamServer, one process, HTTP/1.1 keep-alive: every request
waits DELAY_MS (`gevent.sleep`, so requests overlap) and gets 200 `{}`,
written in one `sendall` with TCP_NODELAY (a response split over two
writes meets Nagle + delayed ACK and costs 40 ms more). Its own overhead on
top of the delay is measured beside loadkit with `wrk --latency`.
"""

from __future__ import annotations

import socket
import sys

from gevent import monkey

monkey.patch_all()

import gevent  # noqa: E402
from gevent.server import StreamServer  # noqa: E402

DELAY_S = float(sys.argv[2]) / 1000.0 if len(sys.argv) > 2 else 0.010
RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
    b"Connection: keep-alive\r\n\r\n{}"
)


def handle(sock: socket.socket, _address: object) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    try:
        while True:
            while b"\r\n\r\n" not in buf:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                buf += chunk
            head, _, buf = buf.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(buf) < length:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                buf += chunk
            buf = buf[length:]
            gevent.sleep(DELAY_S)
            sock.sendall(RESPONSE)
    except OSError:
        return
    finally:
        sock.close()


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    server = StreamServer(("127.0.0.1", port), handle, backlog=4096)
    server.start()
    print(server.server_port, flush=True)
    server.serve_forever()
