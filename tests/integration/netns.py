"""A server on "another machine" for integration tests: a network namespace of its own.

The load machine and the server are one host here, so a test gives the server an
address of its own: a network namespace joined to ours by a veth pair, with a /30 of
the range reserved for benchmark networks (198.18.0.0/15, RFC 2544). The server's
side is `.2`, ours `.1`; nothing is routed anywhere else, so traffic goes to no
address outside what the test made. A process is started inside with
(`nsenter --net`, which execs it: the PID is the process's own, and it dies with us like
every child, `lifeline.popen`). Both the namespace and the pair are removed at the end, after the
processes inside were stopped by PID.

Only root may create namespaces; elsewhere the tests that need one are skipped with
the reason.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from loadkit import lifeline

BENCHMARK_NET = ipaddress.ip_network("198.18.0.0/15")


@dataclass
class ServerHost:
    """The namespace standing for the server's machine, and what runs in it."""

    name: str
    address: str  # the server's address, inside the namespace
    peer: str  # ours, on the load machine's end of the pair
    started: list[subprocess.Popen[Any]] = field(default_factory=list)

    def url(self, port: int, path: str = "") -> str:
        return f"http://{self.address}:{port}{path}"

    def start(
        self, argv: Sequence[str], *, log: IO[bytes] | None = None, **kwargs: Any
    ) -> subprocess.Popen[Any]:
        """`argv` inside the namespace; stopped by PID when the namespace goes."""
        proc: subprocess.Popen[Any] = lifeline.popen(
            [*self.enter, *argv],
            stdin=subprocess.DEVNULL,
            stdout=log if log is not None else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL,
            **kwargs,
        )
        self.started.append(proc)
        return proc

    @property
    def enter(self) -> list[str]:
        """The prefix that runs a command in the namespace, with this machine's /sys.

        Not `ip netns exec`: it remounts /sys for the namespace, without the cgroup
        hierarchy under it, and a server's machine has its cgroups. nsenter joins only
        the network namespace and execs the command.
        """
        return ["nsenter", f"--net=/run/netns/{self.name}", "--"]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def _subnet() -> tuple[str, str]:
    """A /30 of the benchmark range chosen by our PID: parallel test workers differ."""
    slots = BENCHMARK_NET.num_addresses // 4
    base = BENCHMARK_NET.network_address + 4 * (os.getpid() % slots)
    return str(base + 1), str(base + 2)


def stop(proc: subprocess.Popen[Any], grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s`; reaped either way."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextmanager
def server_host() -> Iterator[ServerHost]:
    """A namespace with the server's address, joined to this one; removed at the end."""
    if os.geteuid() != 0:
        pytest.skip("creating a network namespace needs root")
    tag = f"lk{os.getpid()}"
    ours, theirs = f"{tag}a", f"{tag}b"
    peer, address = _subnet()
    made = _ip("netns", "add", tag, check=False)
    if made.returncode != 0:
        pytest.skip(f"ip netns add failed: {made.stderr.strip()}")
    host = ServerHost(tag, address, peer)
    try:
        _ip("link", "add", ours, "type", "veth", "peer", "name", theirs)
        _ip("link", "set", theirs, "netns", tag)
        _ip("addr", "add", f"{peer}/30", "dev", ours)
        _ip("link", "set", ours, "up")
        for args in (
            ("addr", "add", f"{address}/30", "dev", theirs),
            ("link", "set", theirs, "up"),
            ("link", "set", "lo", "up"),
        ):
            _ip("-n", tag, *args)
        yield host
    finally:
        for proc in reversed(host.started):
            stop(proc)
        _ip("link", "del", ours, check=False)
        _ip("netns", "del", tag, check=False)


def wait_ready(
    url: str, timeout_s: float = 60.0, proc: subprocess.Popen[Any] | None = None
) -> None:
    """Until `url` answers 200, or fail with why (the process died, or time ran out)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{proc.args} exited with {proc.returncode} before {url} answered")
        with suppress(OSError):
            with urllib.request.urlopen(url, timeout=1.0) as answer:
                if answer.status == 200:
                    return
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {timeout_s} s")


@dataclass(frozen=True)
class RemoteTriton:
    """Triton in the server's namespace: its URLs and the PID of its `loadkit target`."""

    host: ServerHost
    pid: int
    http_url: str
    metrics_url: str
    log: Path


def start_triton(host: ServerHost, log: Path, *extra: str) -> RemoteTriton:
    """`loadkit target --bind <the server's address>` in the namespace, ready.

    A fresh namespace has no listener, so Triton's own default ports are free.
    """
    import sys

    out = log.open("wb")
    proc = host.start(
        [sys.executable, "-m", "loadkit.cli", "target", "--bind", host.address, *extra],
        log=out,
    )
    triton = RemoteTriton(host, proc.pid, host.url(8000), host.url(8002, "/metrics"), log)
    wait_ready(host.url(8000, "/v2/health/ready"), timeout_s=90, proc=proc)
    return triton
