"""Whether the target runs on this machine: the one rule (loadkit/placement.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadkit.errors import EXIT_USAGE, UsageError
from loadkit.placement import (
    locate_target,
    remote_gpu_warning,
    server_machine,
    this_host_addresses,
)
from loadkit.rundir.schema import (
    LOCATION_LOOPBACK,
    LOCATION_NO_TARGET,
    LOCATION_OTHER_HOST,
    LOCATION_SERVER_HOST,
    LOCATION_SERVER_PID,
    LOCATION_THIS_HOST,
    LOCATION_UNRESOLVED,
    PLACE_CLIENT,
    PLACE_SERVER,
    PLACE_UNKNOWN,
    TargetLocation,
)

# This test machine, as the rule sees it: its interfaces, its resolver, its name.
OWN = ("127.0.0.1", "::1", "10.1.2.3", "fe80::1")
NAMES = {"gpu-box.example": ("10.1.2.3",), "far.example": ("198.18.0.7",)}


def _locate(target: str | None, **flags: object) -> TargetLocation:
    return locate_target(
        target,
        addresses=lambda: OWN,
        resolve=lambda host: NAMES.get(host, (host,) if host[0].isdigit() or ":" in host else ()),
        hostname=lambda: "loadgen-1",
        **flags,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    "target",
    ["http://127.0.0.1:8000", "localhost:8001", "http://[::1]:8000", "grpc://127.0.0.2:8001"],
)
def test_a_loopback_target_is_on_this_machine(target: str) -> None:
    location = _locate(target)
    assert location.local is True and location.how == LOCATION_LOOPBACK
    assert location.host == "loadgen-1"  # this machine's name, not "127.0.0.1"
    assert location.machine_place == PLACE_SERVER


@pytest.mark.parametrize("target", ["http://10.1.2.3:8000", "gpu-box.example:8001"])
def test_one_of_this_hosts_own_addresses_is_this_machine(target: str) -> None:
    location = _locate(target)
    assert location == TargetLocation(True, LOCATION_THIS_HOST, "loadgen-1", "10.1.2.3")


def test_a_remote_address_is_another_machine_and_makes_this_machines_series_client() -> None:
    location = _locate("http://198.18.0.2:8000")
    assert location == TargetLocation(False, LOCATION_OTHER_HOST, "198.18.0.2", "198.18.0.2")
    assert location.machine_place == PLACE_CLIENT
    named = _locate("http://far.example:8000")
    assert named.local is False and named.host == "far.example"
    assert named.address == "198.18.0.7"


def test_a_server_pid_puts_the_server_on_this_machine_whatever_its_address() -> None:
    location = _locate("http://198.18.0.2:8000", server_pid=4242)
    assert location.local is True and location.how == LOCATION_SERVER_PID
    assert location.host == "loadgen-1"


def test_server_host_overrides_the_address_both_ways() -> None:
    # A port-forward: the server answers on loopback but runs elsewhere.
    forwarded = _locate("http://127.0.0.1:8000", server_host="remote")
    assert forwarded.local is False and forwarded.how == LOCATION_SERVER_HOST
    assert forwarded.host is None and forwarded.address == "127.0.0.1"
    # A NAT address that is really this machine.
    natted = _locate("http://198.18.0.2:8000", server_host="local")
    assert natted.local is True and natted.how == LOCATION_SERVER_HOST
    assert natted.host == "loadgen-1"
    # --server-host wins over --server-pid's "local" too, when they agree.
    assert _locate("http://198.18.0.2:8000", server_pid=1, server_host="local").local is True


def test_server_host_remote_with_a_server_pid_is_refused() -> None:
    with pytest.raises(UsageError, match="--server-pid names a process on this machine"):
        _locate("http://127.0.0.1:8000", server_pid=1, server_host="remote")
    with pytest.raises(UsageError, match="choose local or remote"):
        _locate("http://127.0.0.1:8000", server_host="elsewhere")


def test_no_target_or_a_name_that_does_not_resolve_leaves_it_unknown() -> None:
    assert _locate(None) == TargetLocation(None, LOCATION_NO_TARGET)
    unresolved = _locate("http://nowhere.invalid:8000")
    assert unresolved.local is None and unresolved.how == LOCATION_UNRESOLVED
    assert unresolved.machine_place == PLACE_UNKNOWN


@pytest.mark.platform_skip  # a sandbox may have loopback only
def test_this_machines_real_addresses_are_local() -> None:
    # GIVEN the real interfaces and resolver of the machine the tests run on
    own = sorted(a for a in this_host_addresses() if "." in a and not a.startswith("127."))
    assert "127.0.0.1" in this_host_addresses()
    assert locate_target("http://127.0.0.1:8000").how == LOCATION_LOOPBACK
    if not own:
        pytest.skip("no non-loopback IPv4 address here")
    assert locate_target(f"http://{own[0]}:8000").how == LOCATION_THIS_HOST
    assert locate_target("http://198.18.0.2:8000").local is False


def test_a_server_side_endpoint_is_named_after_the_target_machine() -> None:
    local = _locate("http://127.0.0.1:8000")
    assert server_machine("http://127.0.0.1:8002/metrics", local) == "loadgen-1"
    remote = _locate("http://far.example:8000")
    assert server_machine("http://far.example:8002/metrics", remote) == "far.example"
    assert server_machine("http://198.18.0.7:8002/metrics", remote) == "far.example"
    assert server_machine("http://other.example:9400/metrics", remote) == "other.example"
    assert server_machine("http://10.0.0.9:8000", None) == "10.0.0.9"


def test_the_remote_gpu_warning_names_the_address_and_where_gpu_telemetry_comes_from() -> None:
    text = remote_gpu_warning(_locate("http://198.18.0.2:8000"))
    assert text.startswith("the target is not on this machine (address 198.18.0.2)")
    assert "server's side" in text and "--triton-metrics" in text
    forwarded = remote_gpu_warning(_locate("http://127.0.0.1:8000", server_host="remote"))
    assert "(address 127.0.0.1), --server-host" in forwarded


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "burst_2x", "--target", "http://127.0.0.1:9"],
        ["watch", "--duration", "5", "--triton", "http://127.0.0.1:9"],
        ["capacity", "--target", "http://127.0.0.1:9", "--slo", "p99=50ms"],
    ],
)
def test_the_recording_commands_take_server_host_and_refuse_it_against_a_server_pid(
    argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from loadkit import cli

    parsed = cli.build_parser().parse_args([*argv, "--server-host", "local"])
    assert parsed.server_host == "local"
    # GIVEN flags that contradict each other THEN exit 2 before anything is started
    argv = [*argv, "--out", str(tmp_path), "--server-host", "remote", "--server-pid", "1"]
    assert cli.main(argv) == EXIT_USAGE
    assert "--server-pid names a process on this machine" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no run directory
