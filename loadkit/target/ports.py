"""Loopback port checks for the embedded server: fail early and clearly on a taken port."""

from __future__ import annotations

import socket
from contextlib import ExitStack

from loadkit.errors import TargetError

HOST = "127.0.0.1"


def _bind(port: int, host: str = HOST) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Triton's listeners use SO_REUSEADDR too: a TIME_WAIT leftover is no conflict,
    # a live listener still is.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def choose_ports(requested: dict[str, int], host: str = HOST) -> dict[str, int]:
    """Map service -> port: fixed ports checked free, 0 replaced by distinct free ports.

    A free ephemeral port can still be taken by someone else before Triton binds
    it; the launcher detects that from the log and retries.
    """
    fixed = [port for port in requested.values() if port]
    if len(fixed) != len(set(fixed)):
        raise TargetError(f"the same port is given for two services: {requested}")
    chosen: dict[str, int] = {}
    with ExitStack() as held:
        for service, port in requested.items():
            if not 0 <= port <= 65535:
                raise TargetError(f"{service} port {port} is not a valid TCP port")
            try:
                sock = held.enter_context(_bind(port, host))
            except OSError as exc:
                raise TargetError(
                    f"{service} port {host}:{port} is already in use ({exc.strerror})",
                    hint=f"pass --{service}-port 0 to pick a free port, or stop the process "
                    f"listening there (ss -ltnp | grep :{port})",
                ) from None
            chosen[service] = sock.getsockname()[1]
    return chosen
