"""A trivial HTTP endpoint for measuring the load generator itself: any request -> 200 `{}`.

    python bench/trivial_http_server.py PORT

gevent's WSGI server, one process; it answers far faster than any model, so
the rate a generator reaches against it is the generator's own limit (on a
shared machine, minus the CPU this server takes).
"""

from __future__ import annotations

import sys

from gevent import monkey

monkey.patch_all()

from gevent.pywsgi import WSGIServer  # noqa: E402


def app(environ, start_response):  # type: ignore[no-untyped-def]
    environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", "2")])
    return [b"{}"]


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    server = WSGIServer(("127.0.0.1", port), app, log=None)
    server.start()
    print(server.server_port, flush=True)
    server.serve_forever()
