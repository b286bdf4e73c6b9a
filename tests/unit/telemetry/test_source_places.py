"""Every series has a place: what each source's plan says, and what the manifest gets.

NVML is the fake one (loadkit.telemetry.fake_nvml over a simulated GPU's state)
standing in for a real driver, so "NVML is present here" without a GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadkit.rundir.schema import (
    LOCATION_LOOPBACK,
    LOCATION_NO_TARGET,
    LOCATION_OTHER_HOST,
    LOCATION_SERVER_HOST,
    PLACE_CLIENT,
    PLACE_SERVER,
    PLACE_UNKNOWN,
    TargetLocation,
)
from loadkit.telemetry import fake_nvml, gpu, supervisor
from loadkit.telemetry.base import SamplerOptions, SourcePlace, SourcePlan
from loadkit.telemetry.simgpu import SimGpuModel
from loadkit.telemetry.simgpu_runner import write_state
from loadkit.telemetry.supervisor import SamplerSet, plan_sources, sampling_rates

LOCAL = TargetLocation(True, LOCATION_LOOPBACK, "gpu-box", "127.0.0.1")
REMOTE = TargetLocation(False, LOCATION_OTHER_HOST, "198.18.0.2", "198.18.0.2")
UNKNOWN = TargetLocation(None, LOCATION_NO_TARGET)


@pytest.fixture(autouse=True)
def _this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("loadkit.telemetry.base.this_hostname", lambda: "loadgen-1")


@pytest.fixture
def nvml_present(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """NVML initializes here (the fake one); yields a log of every time it was loaded."""
    state = tmp_path / "nvml-state.json"
    write_state(state, SimGpuModel().state)
    fake_nvml.configure(state)
    loads: list[str] = []

    def load() -> Any:
        loads.append("pynvml")
        return fake_nvml

    monkeypatch.setattr(gpu, "load_pynvml", load)
    yield loads
    fake_nvml.configure(None)


def _plans(tmp_path: Path, target: TargetLocation | None, **options: Any) -> dict[str, SourcePlan]:
    opts = SamplerOptions(run_dir=tmp_path, target=target, **options)
    return dict(plan_sources(opts, sampling_rates(None)))


def test_gpu_auto_with_a_remote_target_samples_no_gpu_here_and_says_why(
    tmp_path: Path, nvml_present: list[str]
) -> None:
    # GIVEN NVML works on this machine, WHEN the target is on another one
    plan = _plans(tmp_path, REMOTE, gpu="auto")["gpu"]
    # THEN no GPU sampler, no devices, and the reason names the address
    assert plan.spec is None
    assert plan.environment == {"kind": "none", "devices": []}
    assert plan.warning is not None
    assert plan.warning.startswith("the target is not on this machine (address 198.18.0.2)")
    assert "GPU telemetry must come from the server's side" in plan.warning
    assert plan.place == SourcePlace(PLACE_CLIENT, "loadgen-1")
    assert nvml_present == []  # not even probed


def test_gpu_auto_with_a_local_target_samples_nvml_as_the_servers(
    tmp_path: Path, nvml_present: list[str]
) -> None:
    plan = _plans(tmp_path, LOCAL, gpu="auto")["gpu"]
    assert plan.spec is not None and plan.spec.kind == "gpu-nvml"
    assert plan.environment is not None and plan.environment["kind"] == "nvml"
    assert plan.warning is None
    assert plan.place == SourcePlace(PLACE_SERVER, "loadgen-1")
    assert nvml_present == ["pynvml"]


def test_gpu_auto_without_a_known_location_still_samples_but_its_place_is_unknown(
    tmp_path: Path, nvml_present: list[str]
) -> None:
    for target in (UNKNOWN, None):
        plan = _plans(tmp_path, target, gpu="auto")["gpu"]
        assert plan.spec is not None and plan.spec.kind == "gpu-nvml"
        assert plan.place is not None and plan.place.place == PLACE_UNKNOWN


def test_gpu_nvml_asked_for_is_sampled_even_for_a_remote_target_as_a_client_series(
    tmp_path: Path, nvml_present: list[str]
) -> None:
    plan = _plans(tmp_path, REMOTE, gpu="nvml")["gpu"]
    assert plan.spec is not None and plan.spec.kind == "gpu-nvml"
    assert plan.warning is None
    assert plan.place == SourcePlace(PLACE_CLIENT, "loadgen-1")


def test_the_simulated_gpu_belongs_to_the_embedded_target(tmp_path: Path) -> None:
    state = tmp_path / "sim.json"
    write_state(state, SimGpuModel().state)
    try:
        plan = _plans(tmp_path, REMOTE, gpu="sim", sim_gpu_state=state)["gpu"]
    finally:
        fake_nvml.configure(None)
    assert plan.spec is not None and plan.spec.simulated
    assert plan.place is not None and plan.place.place == PLACE_SERVER


@pytest.mark.parametrize(
    ("target", "server_pid", "machine", "process"),
    [
        (LOCAL, 4242, PLACE_SERVER, PLACE_SERVER),  # --server-pid on a local target
        (LOCAL, None, PLACE_SERVER, PLACE_CLIENT),  # local, but the cgroup is loadkit's own
        (REMOTE, None, PLACE_CLIENT, PLACE_CLIENT),  # everything here is the load machine
        (UNKNOWN, None, PLACE_UNKNOWN, PLACE_CLIENT),
    ],
)
def test_the_host_series_machine_part_and_process_part(
    tmp_path: Path, target: TargetLocation, server_pid: int | None, machine: str, process: str
) -> None:
    plan = _plans(tmp_path, target, gpu="none", server_pid=server_pid)["host"]
    assert plan.place == SourcePlace(machine, "loadgen-1", {"process": process})


def test_triton_statistics_and_metrics_are_the_servers_named_after_its_machine(
    tmp_path: Path,
) -> None:
    urls = {
        "triton_url": "http://198.18.0.2:8000",
        "metrics_url": "http://198.18.0.2:8002/metrics",
    }
    plans = _plans(tmp_path, REMOTE, gpu="none", **urls)
    assert plans["triton_stats"].place == SourcePlace(PLACE_SERVER, "198.18.0.2")
    assert plans["metrics"].place == SourcePlace(PLACE_SERVER, "198.18.0.2")
    local = _plans(tmp_path, LOCAL, gpu="none", triton_url="http://127.0.0.1:8000")
    assert local["triton_stats"].place == SourcePlace(PLACE_SERVER, "gpu-box")


class _Process:
    """A sampler process that is never started (unit tests start no processes)."""

    pid = 1
    stdout = None

    def poll(self) -> int:
        return 0

    def wait(self, timeout: float | None = None) -> int:
        return 0


def test_the_manifest_sources_carry_each_series_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nvml_present: list[str]
) -> None:
    monkeypatch.setattr(supervisor, "_spawn_sampler", lambda spec, run_dir: _Process())
    # GIVEN a remote target and `--gpu auto`
    with SamplerSet.start(
        tmp_path,
        gpu="auto",
        triton_url="http://198.18.0.2:8000",
        target_location=REMOTE,
    ) as samplers:
        info = samplers.manifest_info()
    by_name = {s["name"]: s for s in info["sources"]}
    # THEN the started sources say where they sample, and the GPU entry says why it has no file
    assert by_name["host"] == {
        "name": "host",
        "file": "telemetry/host.jsonl",
        "interval_s": 0.5,
        "simulated": False,
        "warning": None,
        "place": PLACE_CLIENT,
        "host": "loadgen-1",
        "parts": {"process": PLACE_CLIENT},
    }
    assert by_name["triton_stats"]["place"] == PLACE_SERVER
    assert by_name["triton_stats"]["host"] == "198.18.0.2"
    assert by_name["gpu"]["file"] is None and by_name["gpu"]["place"] == PLACE_CLIENT
    assert "not on this machine (address 198.18.0.2)" in by_name["gpu"]["warning"]
    assert info["gpu"] == {"kind": "none", "devices": []}


def test_server_host_remote_over_loopback_keeps_gpu_auto_off_this_machines_gpus(
    tmp_path: Path, nvml_present: list[str]
) -> None:
    forwarded = TargetLocation(False, LOCATION_SERVER_HOST, None, "127.0.0.1")
    plan = _plans(tmp_path, forwarded, gpu="auto")["gpu"]
    assert plan.spec is None and plan.warning is not None
    assert "--server-host" in plan.warning
