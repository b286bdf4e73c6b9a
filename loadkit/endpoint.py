"""The one rule for the server URLs a user gives (--target, --triton, --triton-stats, ...).

Checked before anything is started or connected to: a scheme loadkit speaks, a
host, a port in 1..65535. A URL that breaks the rule is refused at once (exit
2) with the accepted forms, instead of a connection attempt that times out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from loadkit.errors import UsageError

# What each kind of URL may be, for the hint of a refused one.
TARGET_SCHEMES = ("http", "https", "grpc")
HTTP_SCHEMES = ("http", "https")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST = re.compile(r"^[A-Za-z0-9._-]+$|^\[[0-9A-Fa-f:.]+\]$")


@dataclass(frozen=True)
class Endpoint:
    """A checked URL: scheme, host, port and the path after them ('' or '/metrics')."""

    scheme: str
    host: str
    port: int
    path: str

    @property
    def hostport(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def accepted_forms(schemes: tuple[str, ...], bare_scheme: str | None) -> str:
    forms = [f"{s}://HOST:PORT" for s in schemes]
    if bare_scheme is not None:
        forms.append(f"HOST:PORT ({'gRPC' if bare_scheme == 'grpc' else bare_scheme.upper()})")
    return ", ".join(forms)


def parse_endpoint(
    text: str,
    what: str = "--target",
    schemes: tuple[str, ...] = TARGET_SCHEMES,
    bare_scheme: str | None = "grpc",
) -> Endpoint:
    """`text` checked against the rule; UsageError (exit 2) naming `what` and the accepted forms.

    `bare_scheme`: the scheme of a URL given as HOST:PORT (None: a scheme is required).
    """
    hint = f"accepted: {accepted_forms(schemes, bare_scheme)}"
    value = text.strip()
    if not value:
        raise UsageError(f"{what} is empty", hint=hint)
    if "://" in value:
        scheme = value.split("://", 1)[0].lower()
        if scheme not in schemes:
            raise UsageError(
                f"{what} {text!r}: scheme {scheme!r} is not one loadkit speaks", hint=hint
            )
        parts = urlsplit(value)
    elif bare_scheme is None:
        raise UsageError(f"{what} {text!r} has no scheme", hint=hint)
    else:
        scheme = bare_scheme
        parts = urlsplit(f"{bare_scheme}://{value}")
    host = parts.hostname or ""
    netloc_host = parts.netloc.rsplit("@", 1)[-1]
    bracketed = netloc_host.startswith("[")
    shown = f"[{host}]" if bracketed else host
    if not host or not _HOST.match(shown):
        raise UsageError(f"{what} {text!r}: no valid host name or address", hint=hint)
    try:
        port = parts.port
    except ValueError:
        raise UsageError(
            f"{what} {text!r}: the port is not a number in 1..65535", hint=hint
        ) from None
    if port is None:
        if scheme not in _DEFAULT_PORTS:
            raise UsageError(f"{what} {text!r} has no port", hint=hint)
        port = _DEFAULT_PORTS[scheme]
    if not 0 < port <= 65535:
        raise UsageError(f"{what} {text!r}: the port is not a number in 1..65535", hint=hint)
    if parts.query or parts.fragment:
        raise UsageError(f"{what} {text!r}: a server URL has no ?query or #fragment", hint=hint)
    return Endpoint(scheme, host, port, parts.path.rstrip("/"))


def without_credentials(url: str) -> str:
    """`url` without a `user:password@` (what a manifest or a log may show of it)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
