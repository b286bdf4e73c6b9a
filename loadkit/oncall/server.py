"""The HTTP side of `loadkit oncall`: Alertmanager's webhook, the index, the reports.

- `POST /alertmanager`: a notification (Alertmanager's webhook, version 4). With a
  token configured, `Authorization: Bearer <token>` must match (401 otherwise). A
  body over the size limit is refused unread (413), a body without a length 411,
  one that is not a v4 notification 400; each refusal is one log line.
- `GET /`: the incidents, newest first (loadkit/report/templates/oncall_index.html.j2,
  autoescaped: labels and annotations are outside text).
- `GET /incidents/<id>/report.html`, `analysis.json`, `incident.json`: an incident's files.
- `GET /healthz`: 200 while it runs.

stdlib `ThreadingHTTPServer`, as `loadkit agent`; 127.0.0.1 unless told.
"""

from __future__ import annotations

import hmac
import socket
import sys
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from loadkit import __version__
from loadkit.oncall.incidents import (
    ANALYSIS_FILE,
    NS,
    REPORT_FILE,
    STATE_FILE,
    Incident,
)
from loadkit.oncall.payload import PayloadError, parse_notification
from loadkit.oncall.service import OncallService

DEFAULT_PORT = 9478
DEFAULT_BIND = "127.0.0.1"
WEBHOOK_PATH = "/alertmanager"
DEFAULT_MAX_PAYLOAD = 1024 * 1024  # Alertmanager's notifications are kilobytes
SERVED = {
    REPORT_FILE: "text/html; charset=utf-8",
    ANALYSIS_FILE: "application/json",
    STATE_FILE: "application/json",
}

Log = Callable[[str], None]


def _iso(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ns / NS))


def index_row(service: OncallService, incident: Incident) -> dict[str, Any]:
    result = incident.result or {}
    window = incident.window or incident.window_asked
    base = f"/incidents/{quote(incident.id)}/"
    folder = service.store.path(incident)
    return {
        "opened": _iso(incident.opened_ns),
        "alert": incident.alertname,
        "summary": incident.annotations.get("summary", ""),
        "status": incident.status,
        "labels": sorted(incident.labels.items()),
        "state": incident.state,
        "error": incident.error,
        "notifications": incident.notifications,
        "analyses": len(incident.analyses),
        "verdict": result.get("verdict"),
        "passed": result.get("passed"),
        "finding": result.get("finding"),
        "period_s": result.get("period_s"),
        "window": f"{_iso(window[0])} .. {_iso(window[1])}" if window[1] else "",
        "has_report": (folder / REPORT_FILE).exists(),
        "report_href": base + REPORT_FILE,
        "analysis_href": base + ANALYSIS_FILE,
        "deliveries": [
            f"{d.receiver} ({d.format}): {d.state}"
            + (f" after {d.attempts} attempt(s): {d.last_error}" if d.state == "failed" else "")
            for d in incident.deliveries
        ],
    }


def render_index(service: OncallService, prometheus: str) -> str:
    from loadkit.report.templating import environment

    template = environment().get_template("oncall_index.html.j2")
    return template.render(
        version=__version__,
        prometheus=prometheus,
        incidents=[index_row(service, i) for i in service.store.newest_first()],
        queued=len(service.worker.pending),
    )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: OncallServer

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if urlsplit(self.path).path.rstrip("/") != WEBHOOK_PATH:
            self._refuse(404, f"no such endpoint (Alertmanager's webhook is {WEBHOOK_PATH})")
            return
        token = self.server.token
        if token is not None:
            given = self.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                self._refuse(401, "missing or wrong bearer token", drain=True)
                return
        length_text = self.headers.get("Content-Length")
        if length_text is None or not length_text.isdigit():
            self._refuse(411, "no Content-Length", close=True)
            return
        length = int(length_text)
        if length > self.server.max_payload:
            self._refuse(
                413, f"payload of {length} bytes over {self.server.max_payload}", close=True
            )
            return
        body = self.rfile.read(length)
        try:
            notification = parse_notification(body)
        except PayloadError as exc:
            self._refuse(400, f"malformed payload: {exc}")
            return
        answer = self.server.service.receive(notification)
        if answer.status >= 400:
            self.server.log(
                f"{answer.status} for POST {WEBHOOK_PATH} from {self.client_address[0]}: {answer.message}"
            )
        self._send(answer.status, (answer.message + "\n").encode(), "text/plain; charset=utf-8")

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = unquote(urlsplit(self.path).path)
        if path in ("/", "/index.html"):
            body = render_index(self.server.service, self.server.prometheus).encode()
            self._send(200, body, "text/html; charset=utf-8")
            return
        if path == "/healthz":
            self._send(200, b"ok\n", "text/plain")
            return
        parts = path.strip("/").split("/")
        if len(parts) == 3 and parts[0] == "incidents" and parts[2] in SERVED:
            incident = self.server.service.store.get(parts[1])
            if incident is not None:  # only a known id: no path from the request reaches disk
                try:
                    body = (self.server.service.store.path(incident) / parts[2]).read_bytes()
                except OSError:
                    pass
                else:
                    self._send(200, body, SERVED[parts[2]])
                    return
        self._send(404, b"not found\n", "text/plain")

    def _refuse(self, status: int, message: str, close: bool = False, drain: bool = False) -> None:
        self.server.log(
            f"refused POST {self.path[:80]} from {self.client_address[0]}: {status} {message}"
        )
        if drain:  # a small unauthorized body is read so that the connection stays usable
            length = self.headers.get("Content-Length", "")
            if length.isdigit() and int(length) <= self.server.max_payload:
                self.rfile.read(int(length))
            else:
                close = True
        if close:
            self.close_connection = True
        self._send(status, (message + "\n").encode(), "text/plain; charset=utf-8", close)

    def _send(self, status: int, body: bytes, content_type: str, close: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="loadkit oncall"')
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - its signature
        pass  # refusals and incidents are logged by loadkit itself, one line each


class OncallServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        bind: str,
        port: int,
        service: OncallService,
        *,
        prometheus: str,
        token: str | None,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        log: Log,
    ) -> None:
        self.service = service
        self.prometheus = prometheus
        self.token = token
        self.max_payload = max_payload
        self.log = log
        if ":" in bind:
            self.address_family = socket.AF_INET6
        super().__init__((bind, port), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{name}]" if ":" in name else name
        return f"http://{shown}:{port}"
