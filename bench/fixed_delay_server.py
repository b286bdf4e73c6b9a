"""An HTTP endpoint with a known fixed delay, for the timing-fidelity benchmark.

    python bench/fixed_delay_server.py PORT DELAY_MS     # prints the port it listens on

A gevent StreamServer, one process, HTTP/1.1 keep-alive: every request
waits DELAY_MS (`gevent.sleep`, so requests overlap) and gets 200 `{}`,
written in one `sendall` with TCP_NODELAY (the connection loop is
bench/_http1.py, shared with bench/instant_server.py). Its own overhead on
top of the delay is measured beside loadkit with `wrk --latency`.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from gevent import monkey

monkey.patch_all()

import gevent  # noqa: E402
from gevent.server import StreamServer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._http1 import Request, connection_handler  # noqa: E402

DELAY_S = float(sys.argv[2]) / 1000.0 if len(sys.argv) > 2 else 0.010
RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
    b"Connection: keep-alive\r\n\r\n{}"
)


def answer(sock: socket.socket, _request: Request) -> None:
    gevent.sleep(DELAY_S)
    sock.sendall(RESPONSE)


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    server = StreamServer(("127.0.0.1", port), connection_handler(answer), backlog=4096)
    server.start()
    print(server.server_port, flush=True)
    server.serve_forever()
