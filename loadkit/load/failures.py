"""Failure classes for `load/<process>.jsonl` `error_kinds` (docs/run-format.md).

`classify_failure(exc)` turns whatever a client raised into a short, stable
kind: `timeout`, `refused`, `reset`, `queue_full` (Triton "Exceeds maximum
queue size"), `http_<status>`, `grpc_<CODE>`, `cancelled` (cut short when a
run stopped), `other`. Duck-typed on tritonclient's `InferenceServerException`
(`.status()`, `.message()`) so this module imports no client library.
"""

from __future__ import annotations

import errno
import socket

TIMEOUT = "timeout"
REFUSED = "refused"
RESET = "reset"
QUEUE_FULL = "queue_full"
CANCELLED = "cancelled"
OTHER = "other"

_QUEUE_FULL_TEXT = "exceeds maximum queue size"
_GRPC_TIMEOUT_CODES = {"DEADLINE_EXCEEDED"}


class HttpStatusError(Exception):
    """A non-2xx answer from a plain JSON-over-HTTP endpoint."""

    def __init__(self, status: int, body: str = ""):
        super().__init__(f"HTTP {status}: {body[:200]}")
        self.status_code = status
        self.body = body


def _grpc_code(status: str) -> str | None:
    # tritonclient.grpc reports str(grpc.StatusCode.X) == "StatusCode.X"
    if status.startswith("StatusCode."):
        return status.split(".", 1)[1]
    return None


def _is_timeout(exc: BaseException) -> bool:
    if isinstance(exc, TimeoutError | socket.timeout):
        return True
    # gevent.Timeout is a BaseException; match it by name to avoid importing gevent here.
    return type(exc).__name__ == "Timeout" and type(exc).__module__.startswith("gevent")


def classify_failure(exc: BaseException) -> str:
    """A short kind for a failed request (see module docstring)."""
    if type(exc).__name__ == "GreenletExit":
        return CANCELLED
    if _is_timeout(exc):
        return TIMEOUT
    if isinstance(exc, ConnectionRefusedError):
        return REFUSED
    if isinstance(exc, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
        return RESET
    if isinstance(exc, OSError) and exc.errno in (errno.ECONNREFUSED,):
        return REFUSED
    if isinstance(exc, HttpStatusError):
        if exc.status_code == 503 and _QUEUE_FULL_TEXT in exc.body.lower():
            return QUEUE_FULL
        return f"http_{exc.status_code}"
    status_fn = getattr(exc, "status", None)
    message_fn = getattr(exc, "message", None)
    if callable(status_fn):
        status = str(status_fn() or "")
        message = str((message_fn() if callable(message_fn) else None) or exc)
        if _QUEUE_FULL_TEXT in message.lower():
            return QUEUE_FULL
        code = _grpc_code(status)
        if code is not None:
            if code in _GRPC_TIMEOUT_CODES:
                return TIMEOUT
            if code == "CANCELLED":
                return CANCELLED
            return f"grpc_{code}"
        if status.isdigit():
            return f"http_{status}"
        lowered = message.lower()
        if "timed out" in lowered or "timeout" in lowered:
            return TIMEOUT
        if "connection refused" in lowered or "failed to connect" in lowered:
            return REFUSED
    return OTHER


_MESSAGE_CHARS = 300


def error_message(exc: BaseException) -> str:
    """The server's own words for a failure (tritonclient's message, an HTTP body's error).

    Cut to a few hundred characters: it is evidence for a person, kept per error kind.
    """
    text = ""
    if isinstance(exc, HttpStatusError):
        body = exc.body.strip()
        try:
            import json

            data = json.loads(body)
            if isinstance(data, dict) and data.get("error"):
                body = str(data["error"])
        except ValueError:
            pass
        text = f"HTTP {exc.status_code}: {body}" if body else f"HTTP {exc.status_code}"
    else:
        message_fn = getattr(exc, "message", None)
        if callable(message_fn):  # a server's exception (tritonclient): its words as they are
            try:
                text = str(message_fn() or "")
            except Exception:  # noqa: BLE001 - a broken message() must not lose the failure
                text = ""
        if not text:
            detail = str(exc).strip()
            text = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 3] + "..."
