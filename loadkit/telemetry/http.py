"""A tiny keep-alive HTTP client for samplers and the watch probe (stdlib only).

Samplers run outside gevent and poll the same endpoint many times a second;
`http.client` with one persistent connection keeps that cheap, and importing
tritonclient (which pulls in gevent) is avoided on purpose.
"""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit


class HttpGetError(Exception):
    """The endpoint did not answer (or, for GET, answered with a non-200 status)."""

    def __init__(self, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind  # e.g. "ConnectionRefusedError", "http_503"


class KeepAliveGetter:
    def __init__(self, base_url: str, timeout_s: float = 2.0) -> None:
        if "://" not in base_url:
            base_url = "http://" + base_url
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port
        self.prefix = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = (
                http.client.HTTPSConnection
                if self.scheme == "https"
                else http.client.HTTPConnection
            )
            self._conn = cls(self.host, self.port, timeout=self.timeout_s)
        return self._conn

    def get(self, path: str) -> bytes:
        """GET prefix+path; one retry on a dropped keep-alive connection."""
        target = (self.prefix + path) or "/"
        last: Exception | None = None
        for _attempt in range(2):
            conn = self._connection()
            try:
                conn.request("GET", target)
                resp = conn.getresponse()
                body = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                last = exc
                continue
            if resp.status != 200:
                raise HttpGetError(f"GET {target}: HTTP {resp.status}", kind=f"http_{resp.status}")
            return body
        raise HttpGetError(f"GET {target}: {last}")

    def post_json(self, path: str, body: bytes) -> int:
        """POST a JSON body once (no retry); the HTTP status. Raises HttpGetError if unanswered."""
        conn = self._connection()
        try:
            conn.request(
                "POST", self.prefix + path, body=body, headers={"Content-Type": "application/json"}
            )
            resp = conn.getresponse()
            resp.read()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise HttpGetError(
                f"POST {self.prefix + path}: {type(exc).__name__}: {exc}", kind=type(exc).__name__
            ) from exc
        return resp.status

    def get_json(self, path: str) -> Any:
        body = self.get(path)
        try:
            return json.loads(body)
        except ValueError as exc:
            raise HttpGetError(f"GET {self.prefix + path}: not JSON ({exc})") from exc

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
