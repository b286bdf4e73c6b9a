"""Whether the target runs on this machine: the one rule, and what it makes each series' place.

Most load tests send load from other machines than the server's. A series
sampled here (this machine's CPUs, its GPUs through NVML, a process's cgroup)
describes the server only when the target runs here; otherwise it describes a
load machine. `locate_target` decides it once per recording, in this order:

1. `--server-host local|remote`: the user said so (a port-forward or tunnel makes
   a remote server answer on 127.0.0.1; a NAT address can be this machine's);
2. `--server-pid PID`: a process of this machine is the server, so it runs here;
3. the target's address: a loopback address (`localhost`, 127.0.0.0/8, ::1) or
   one of this machine's interface addresses (`psutil.net_if_addrs`) is here;
   any other address is another machine; a name that does not resolve, or no
   target at all (`loadkit watch` without `--triton`), leaves it unknown.

The answer is the manifest's `environment.target_location`
(`loadkit.rundir.schema.TargetLocation`); each telemetry source's `plan` reads
it to give its series a place (`server`, `client`, `unknown`) and `--gpu auto`
to decide whether this machine's GPUs are the server's. docs/telemetry.md,
"Where each series was sampled".
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from functools import cache

import psutil

from loadkit.endpoint import TARGET_SCHEMES, parse_endpoint
from loadkit.errors import UsageError
from loadkit.rundir.schema import (
    LOCATION_LOOPBACK,
    LOCATION_NO_TARGET,
    LOCATION_OTHER_HOST,
    LOCATION_SERVER_HOST,
    LOCATION_SERVER_PID,
    LOCATION_THIS_HOST,
    LOCATION_UNRESOLVED,
    TargetLocation,
)

SERVER_HOST_CHOICES = ("local", "remote")
SERVER_HOST_HELP = (
    "where the server runs: 'local' (this machine) or 'remote' (another one); default: "
    "decided from --server-pid or the target's address (loopback or this machine's own "
    "address: local). Host and GPU telemetry describe the server only when it is local"
)
# Where GPU telemetry of a server on another machine comes from, for the warning.
SERVER_SIDE_GPU = (
    "GPU telemetry must come from the server's side (--scrape dcgm=URL for its dcgm-exporter, "
    "--agent URL for a `loadkit agent` on its host, "
    "--triton-metrics for Triton's nv_gpu_*, `loadkit watch --gpu nvml` on the server's host, "
    "`loadkit import` of its dcgm-exporter or nvidia-smi logs, "
    "`loadkit import --prometheus URL --run DIR` afterwards)"
)


def this_hostname() -> str:
    return socket.gethostname()


@cache
def this_host_addresses() -> frozenset[str]:
    """Every address of this machine's interfaces (read once per process)."""
    out: set[str] = set()
    try:
        interfaces = psutil.net_if_addrs()
    except OSError:
        return frozenset()
    for addrs in interfaces.values():
        for addr in addrs:
            if addr.family in (socket.AF_INET, socket.AF_INET6):
                out.add(_normal(addr.address))
    return frozenset(out)


def resolve_host(host: str) -> tuple[str, ...]:
    """The addresses `host` resolves to here (an address resolves to itself); () if none."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return ()
    seen: dict[str, None] = {}
    for *_, sockaddr in infos:
        seen[_normal(str(sockaddr[0]))] = None
    return tuple(seen)


def _normal(address: str) -> str:
    """An address without its IPv6 zone (`fe80::1%eth0`), IPv4-mapped IPv6 as IPv4."""
    address = address.split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def target_host(target: str) -> str:
    """The host of a target URL or HOST:PORT (`http://10.0.0.7:8000` -> `10.0.0.7`)."""
    return parse_endpoint(target, "--target", TARGET_SCHEMES, "grpc").host


def check_server_flags(server_pid: int | None, server_host: str | None) -> None:
    """UsageError for flags that contradict each other, before anything starts."""
    if server_host is not None and server_host not in SERVER_HOST_CHOICES:
        raise UsageError(
            f"--server-host {server_host!r}: choose {' or '.join(SERVER_HOST_CHOICES)}"
        )
    if server_host == "remote" and server_pid is not None:
        raise UsageError(
            "--server-pid names a process on this machine, but --server-host remote says "
            "the server runs on another one",
            hint="drop --server-pid (its CPU cannot be read from here) or say --server-host local",
        )


def locate_target(
    target: str | None,
    *,
    server_pid: int | None = None,
    server_host: str | None = None,
    addresses: Callable[[], Iterable[str]] = this_host_addresses,
    resolve: Callable[[str], tuple[str, ...]] = resolve_host,
    hostname: Callable[[], str] = this_hostname,
) -> TargetLocation:
    """Whether the target (a URL or HOST:PORT; None: none) runs on this machine, and why.

    `addresses`, `resolve` and `hostname` are this machine's, replaceable in tests.
    """
    check_server_flags(server_pid, server_host)
    given = target_host(target) if target else None
    if server_host is not None:
        local = server_host == "local"
        return TargetLocation(local, LOCATION_SERVER_HOST, hostname() if local else None, given)
    if server_pid is not None:
        return TargetLocation(True, LOCATION_SERVER_PID, hostname(), given)
    if given is None:
        return TargetLocation(None, LOCATION_NO_TARGET)
    resolved = ("127.0.0.1",) if given.lower() == "localhost" else resolve(given)
    if not resolved:
        return TargetLocation(None, LOCATION_UNRESOLVED, given, None)
    loopback = [a for a in resolved if _is_loopback(a)]
    if loopback:
        return TargetLocation(True, LOCATION_LOOPBACK, hostname(), loopback[0])
    own = set(addresses())
    mine = [a for a in resolved if a in own]
    if mine:
        return TargetLocation(True, LOCATION_THIS_HOST, hostname(), mine[0])
    return TargetLocation(False, LOCATION_OTHER_HOST, given, resolved[0])


def server_machine(url: str | None, location: TargetLocation | None) -> str | None:
    """The name of the machine a server-side endpoint (`url`) runs on, as far as is known.

    The target's machine when the endpoint is on the target's host (or, for a local
    target, on loopback); else the endpoint's own host as given.
    """
    if url is None:
        return location.host if location is not None else None
    host = target_host(url)
    if location is None:
        return host
    if location.local and (_is_loopback(_normal(host)) or host.lower() == "localhost"):
        return location.host
    if host in (location.address, location.host) and location.host is not None:
        return location.host
    return host


def remote_gpu_warning(location: TargetLocation) -> str:
    """Why `--gpu auto` sampled no GPU here: the target is on another machine."""
    where = location.address or location.host
    at = f" (address {where})" if where else ""
    by = f", {location.how}" if location.how == LOCATION_SERVER_HOST else ""
    return (
        f"the target is not on this machine{at}{by}; this machine's GPUs are not the "
        f"server's, so none were sampled; {SERVER_SIDE_GPU}"
    )


__all__ = [
    "SERVER_HOST_CHOICES",
    "SERVER_HOST_HELP",
    "SERVER_SIDE_GPU",
    "TargetLocation",
    "check_server_flags",
    "locate_target",
    "remote_gpu_warning",
    "resolve_host",
    "server_machine",
    "target_host",
    "this_host_addresses",
    "this_hostname",
]
