"""A tiny keep-alive HTTP client for samplers and the watch probe (stdlib only), and the
one rule for reading an HTTP answer: at most so many bytes, complete by a deadline.

Samplers run outside gevent and poll the same endpoint many times a second;
`http.client` with one persistent connection keeps that cheap, and importing
tritonclient (which pulls in gevent) is avoided on purpose.

Every HTTP read of loadkit's telemetry (this getter, the scrapes built on it, the
Prometheus API client of `import --prometheus`) goes through `read_limited`: an
endpoint that drips its answer forever, or serves a page far larger than any
exporter's, stops the read at its deadline or its size cap with a
`ResponseLimitError` that says which, instead of holding a sampler (and the memory)
for ever.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# The most loadkit reads of one answer: a 60k-sample cAdvisor page is about 15 MiB (and
# took 3.4 s to parse); twice that still parses, a larger one is no page a scrape can use.
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
# One read's most: each read returns what has arrived, so a slow answer is read as it comes.
READ_CHUNK_BYTES = 64 * 1024
# `ResponseLimitError.kind`: which limit stopped the read.
TOO_LARGE = "too_large"
DEADLINE = "deadline"

monotonic = time.monotonic  # patched by tests


class HttpGetError(Exception):
    """The endpoint did not answer (or, for GET, answered with a non-200 status)."""

    def __init__(self, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind  # e.g. "ConnectionRefusedError", "http_503"


class ResponseLimitError(HttpGetError):
    """An answer cut off at a limit: over its size cap (`TOO_LARGE`) or past its
    deadline (`DEADLINE`); the connection it came on is of no further use."""


def read_limited(
    response: http.client.HTTPResponse,
    *,
    what: str,
    max_bytes: int,
    deadline: float,
    within_s: float | None = None,
    sock: socket.socket | None = None,
) -> bytes:
    """The whole body of `response`, or a `ResponseLimitError` naming `what` and the limit.

    `deadline` is a `monotonic()` time (`within_s`: its length, for the message). Each
    read returns what has arrived (`read1`) and the deadline is checked between reads,
    so an answer that drips a byte at a time stops at it; with the connection's `sock`,
    no single read waits past it either (else one read waits at most the connection's
    own timeout). A declared Content-Length over `max_bytes` stops before the body is
    read. The status line and headers are http.client's to read, within its own caps
    (64 KiB a line, 100 headers) and the socket's timeout.
    """
    declared = response.getheader("Content-Length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(what, max_bytes, f"it declares {_mib(int(declared))}")
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - monotonic()
        if left <= 0:
            raise _too_late(what, within_s, size)
        if sock is not None:
            sock.settimeout(left)
        try:
            chunk = response.read1(min(READ_CHUNK_BYTES, max_bytes + 1 - size))
        except TimeoutError:
            if sock is not None or monotonic() >= deadline:
                raise _too_late(what, within_s, size) from None
            raise  # the connection's own timeout: nothing arrived for that long
        if not chunk:
            # `read1` leaves a length-delimited response open at its end (http.client
            # closes it only from `read()`), and the next request on the kept-alive
            # connection then fails with ResponseNotReady: every other probe did.
            response.close()
            return b"".join(chunks)
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(what, max_bytes, "it goes on")
        chunks.append(chunk)


def _mib(n: int) -> str:
    return f"{n / 2**20:.3g} MiB" if n >= 2**20 else f"{n} bytes"


def _too_large(what: str, max_bytes: int, why: str) -> ResponseLimitError:
    return ResponseLimitError(
        f"{what}: answer over {_mib(max_bytes)} ({why}), the most loadkit reads of one "
        "answer; stopped reading",
        kind=TOO_LARGE,
    )


def _too_late(what: str, within_s: float | None, size: int) -> ResponseLimitError:
    by = f"within {within_s:g} s" if within_s is not None else "by its deadline"
    return ResponseLimitError(
        f"{what}: answer not complete {by} ({_mib(size)} read: an endpoint that drips its "
        "answer or never ends it); stopped reading",
        kind=DEADLINE,
    )


def read_bearer_token(path: str | Path) -> str:
    """The bearer token in file `path` (surrounding whitespace dropped): a token is only
    ever read from a file, never from a command line that `ps` shows. ValueError saying
    why when the file cannot be read or holds none."""
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not token:
        raise ValueError(f"{path} holds no token (it is empty)")
    return token


def bearer_header(token: str | None) -> dict[str, str]:
    """The `Authorization` header that carries `token` (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


class KeepAliveGetter:
    """GETs on one kept-alive connection to `base_url`.

    `timeout_s`: the most one GET takes, its whole answer included (the deadline of
    `read_limited`); `max_bytes`: the most it reads; `headers`: sent on every request
    (an `Authorization` bearer token, say).
    """

    def __init__(
        self,
        base_url: str,
        timeout_s: float = 2.0,
        *,
        max_bytes: int = MAX_RESPONSE_BYTES,
        headers: Mapping[str, str] | None = None,
    ) -> None:
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
        self.max_bytes = max_bytes
        self.headers = dict(headers or {})
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
        """GET prefix+path within `timeout_s` in all; one retry, in the time left, on a
        dropped keep-alive connection (none on a limit)."""
        target = (self.prefix + path) or "/"
        deadline = monotonic() + self.timeout_s
        last: Exception | None = None
        for _attempt in range(2):
            try:
                resp, body = self._exchange("GET", target, None, self.headers, deadline)
            except (OSError, http.client.HTTPException) as exc:
                last = exc
                if monotonic() < deadline:
                    continue
                break
            if resp.status != 200:
                raise HttpGetError(f"GET {target}: HTTP {resp.status}", kind=f"http_{resp.status}")
            return body
        raise HttpGetError(f"GET {target}: {last}")

    def post_json(self, path: str, body: bytes) -> int:
        """POST a JSON body once (no retry); the HTTP status. Raises HttpGetError if unanswered."""
        target = self.prefix + path
        headers = {**self.headers, "Content-Type": "application/json"}
        try:
            resp, _ = self._exchange("POST", target, body, headers, monotonic() + self.timeout_s)
        except (OSError, http.client.HTTPException) as exc:
            raise HttpGetError(
                f"POST {target}: {type(exc).__name__}: {exc}", kind=type(exc).__name__
            ) from exc
        return resp.status

    def _exchange(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str], deadline: float
    ) -> tuple[http.client.HTTPResponse, bytes]:
        """One request and its whole answer by `deadline`; the connection is closed on failure
        (an answer cut off at a limit is still on its way)."""
        conn = self._connection()
        left = max(deadline - monotonic(), 0.001)
        conn.timeout = left  # connecting, and waiting for the status line and headers
        if conn.sock is not None:
            conn.sock.settimeout(left)
        try:
            conn.request(method, target, body=body, headers=headers)
            resp = conn.getresponse()
            data = read_limited(
                resp,
                what=f"{method} {target}",
                max_bytes=self.max_bytes,
                deadline=deadline,
                within_s=self.timeout_s,
                sock=conn.sock,
            )
        except (OSError, http.client.HTTPException, ResponseLimitError):
            self.close()
            raise
        return resp, data

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
