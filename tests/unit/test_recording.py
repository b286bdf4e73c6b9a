"""Recording: the run directory, the samplers, the simulated GPU and the manifest's merges."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadkit.recording import SIMULATED_TELEMETRY_NOTE, Recording, imported_environment
from loadkit.rundir import load_run
from loadkit.rundir.layout import EVENTS_FILE, MANIFEST_FILE


def _on_disk(recording: Recording) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((recording.path / MANIFEST_FILE).read_text())
    return data


class FakeSamplers:
    """A sampler set that records what was asked of it; `stop` adds a warning, as a late one."""

    def __init__(self, log: list[str], kind: str = "none") -> None:
        self.log = log
        self.kind = kind
        self.warning: str | None = None

    def wait_started(self, timeout_s: float = 15.0) -> bool:
        self.log.append(f"wait {timeout_s:g}")
        return True

    def stop(self) -> None:
        self.log.append("samplers stop")
        self.warning = "host: stopped late"

    def manifest_info(self) -> dict[str, Any]:
        return {
            "gpu": {"kind": self.kind, "devices": []},
            "sources": [
                {
                    "name": "host",
                    "file": "telemetry/host.jsonl",
                    "interval_s": 0.5,
                    "simulated": False,
                    "warning": self.warning,
                }
            ],
        }


class FakeGpu:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def describe(self) -> dict[str, Any]:
        return {"kind": "simulated", "cooling_fault": {"period_s": 10.0}}

    def stop(self) -> None:
        self.log.append("gpu stop")


def _create(tmp_path: Path, **keywords: Any) -> Recording:
    return Recording.create(out_dir=tmp_path, run_id="r", command_line=["test"], **keywords)


def test_create_makes_the_run_directory_with_this_hosts_environment(tmp_path: Path) -> None:
    recording = _create(tmp_path, kind="watch", server={"name": "triton"})
    assert recording.path == tmp_path / "r"
    manifest = _on_disk(recording)
    assert manifest["status"] == "running" and manifest["kind"] == "watch"
    assert list(manifest["environment"]) == ["host", "server"]
    assert "hostname" in manifest["environment"]["host"]
    assert manifest["sources"] == [] and manifest["notes"] == []
    assert "run-start" in (recording.path / EVENTS_FILE).read_text()


def test_merge_goes_one_level_into_dicts_and_extends_lists(tmp_path: Path) -> None:
    recording = _create(tmp_path, target={"url": "u", "embedded": False})
    recording.add_note("first")
    recording.merge({"target": {"embedded": True}, "notes": ["second"], "demo": {"x": 1}})
    recording.set_environment(server={"name": "s"})
    manifest = _on_disk(recording)
    assert manifest["target"] == {"url": "u", "embedded": True}
    assert manifest["notes"] == ["first", "second"]
    assert manifest["demo"] == {"x": 1}
    assert list(manifest["environment"]) == ["host", "server"]


def test_samplers_are_recorded_at_start_and_stop_and_stopped_at_finish(tmp_path: Path) -> None:
    log: list[str] = []
    recording = _create(tmp_path)
    recording.adopt_samplers(FakeSamplers(log), wait_s=15.0)
    manifest = _on_disk(recording)
    assert manifest["environment"]["gpu"] == {"kind": "none", "devices": []}
    assert [s["name"] for s in manifest["sources"]] == ["host"]
    assert manifest["sources"][0]["warning"] is None
    recording.finish()
    recording.finish()  # twice is harmless
    assert log == ["wait 15", "samplers stop"]
    manifest = _on_disk(recording)
    assert manifest["status"] == "complete"
    assert manifest["sources"][0]["warning"] == "host: stopped late"  # recorded after the stop
    assert SIMULATED_TELEMETRY_NOTE not in manifest["notes"]


def test_start_samplers_passes_its_keywords_to_the_sampler_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loadkit.telemetry import supervisor

    calls: list[tuple[Path, dict[str, Any]]] = []
    log: list[str] = []

    def start(run_dir: Path, **keywords: Any) -> FakeSamplers:
        calls.append((run_dir, keywords))
        return FakeSamplers(log)

    monkeypatch.setattr(supervisor.SamplerSet, "start", start)
    recording = _create(tmp_path)
    recording.start_samplers(gpu="none", triton_url="http://127.0.0.1:1")
    assert calls == [(recording.path, {"gpu": "none", "triton_url": "http://127.0.0.1:1"})]
    assert log == []  # no wait_s: no wait
    recording.finish()
    assert log == ["samplers stop"]


def test_simulated_gpu_is_noted_described_and_stopped_after_the_samplers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loadkit.telemetry import simgpu_runner

    log: list[str] = []
    started: list[dict[str, Any]] = []

    def start_simulated_gpu(state: Path, url: str | None, **keywords: Any) -> FakeGpu:
        started.append({"state": state, "url": url, **keywords})
        return FakeGpu(log)

    monkeypatch.setattr(simgpu_runner, "start_simulated_gpu", start_simulated_gpu)
    recording = _create(tmp_path)
    recording.start_simulated_gpu(tmp_path / "state.json", "http://t", note="sim!", model="m")
    assert started == [
        {
            "state": tmp_path / "state.json",
            "url": "http://t",
            "run_dir": recording.path,
            "model": "m",
        }
    ]
    recording.adopt_samplers(FakeSamplers(log, kind="simulated"), note_simulated=True)
    manifest = _on_disk(recording)
    assert manifest["environment"]["gpu"]["simulator"]["cooling_fault"] == {"period_s": 10.0}
    assert manifest["notes"] == ["sim!", SIMULATED_TELEMETRY_NOTE]
    recording.finish()
    assert log == ["samplers stop", "gpu stop"]
    manifest = _on_disk(recording)
    assert manifest["notes"] == ["sim!", SIMULATED_TELEMETRY_NOTE]  # noted once
    assert "simulator" in manifest["environment"]["gpu"]


def test_an_undescribed_simulated_gpu_leaves_environment_gpu_as_the_samplers_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The demo's simulated GPU: its schedule is in the manifest's `demo` instead.
    from loadkit.telemetry import simgpu_runner

    log: list[str] = []
    monkeypatch.setattr(simgpu_runner, "start_simulated_gpu", lambda *a, **k: FakeGpu(log))
    recording = _create(tmp_path)
    recording.start_simulated_gpu(tmp_path / "s.json", None, note="demo sim", describe=False)
    recording.adopt_samplers(FakeSamplers(log, kind="simulated"))
    recording.finish()
    manifest = _on_disk(recording)
    assert manifest["environment"]["gpu"] == {"kind": "simulated", "devices": []}
    assert manifest["notes"] == ["demo sim"]


def test_interrupt_marks_the_run_aborted_and_keeps_what_was_written(tmp_path: Path) -> None:
    log: list[str] = []
    recording = _create(tmp_path)
    # GIVEN a recording with samplers and a series half written
    with pytest.raises(KeyboardInterrupt), recording:
        recording.adopt_samplers(FakeSamplers(log))
        recording.writer.series("host").write({"t_ns": 1, "cpu_percent": 5.0})
        recording.add_note("before the interrupt")
        # WHEN Ctrl-C arrives
        raise KeyboardInterrupt
    # THEN the samplers were stopped, the run is aborted and everything is kept
    assert log == ["samplers stop"]
    manifest = _on_disk(recording)
    assert manifest["status"] == "aborted" and manifest["end_ns"] is not None
    assert manifest["notes"] == ["before the interrupt"]
    assert [s["name"] for s in manifest["sources"]] == ["host"]
    assert (recording.path / "telemetry" / "host.jsonl").read_text().strip()
    assert '"run-end"' in (recording.path / EVENTS_FILE).read_text()


def test_a_sampler_set_that_fails_to_stop_still_stops_the_gpu_and_finalizes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loadkit.telemetry import simgpu_runner

    log: list[str] = []

    class Stuck(FakeSamplers):
        def stop(self) -> None:
            raise OSError("stuck")

    monkeypatch.setattr(simgpu_runner, "start_simulated_gpu", lambda *a, **k: FakeGpu(log))
    recording = _create(tmp_path)
    recording.start_simulated_gpu(tmp_path / "s.json", None, note="sim")
    recording.adopt_samplers(Stuck(log))
    with pytest.raises(OSError):
        recording.finish("aborted")
    assert log == ["gpu stop"]
    assert _on_disk(recording)["status"] == "aborted"


def test_an_import_is_a_recording_without_samplers(tmp_path: Path) -> None:
    # GIVEN an imported file's series, sources and notes
    recording = _create(tmp_path, kind="import", environment=imported_environment())
    recording.writer.series("gpu").write({"t_ns": 1_000_000_000, "gpu": 0, "sm_clock_mhz": 1400})
    recording.add_source(
        {
            "name": "gpu",
            "file": "telemetry/gpu.jsonl",
            "interval_s": None,
            "simulated": False,
            "warning": None,
            "imported_from": {"format": "dmon", "path": "dmon.log"},
            "unknown_fields": [],
        }
    )
    recording.add_note("times are the local time of the machine that wrote them")
    recording.finish()
    # THEN it is a complete run directory that reads back
    run = load_run(recording.path)
    assert run.status == "complete"
    assert run.manifest["environment"] == {"host": {}, "gpu": {"kind": "imported", "devices": []}}
    assert [s["name"] for s in run.manifest["sources"]] == ["gpu"]
    # AND another file joins it later (`loadkit import --run`)
    joined = Recording.join(recording.path)
    joined.add_note("joined")
    joined.finish()
    manifest = _on_disk(joined)
    assert manifest["status"] == "complete"
    assert manifest["notes"][-1] == "joined"


def test_the_target_location_is_recorded_and_handed_to_the_samplers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loadkit.rundir.schema import LOCATION_OTHER_HOST, TargetLocation
    from loadkit.telemetry import supervisor

    calls: list[dict[str, Any]] = []

    def start(run_dir: Path, **keywords: Any) -> FakeSamplers:
        calls.append(keywords)
        return FakeSamplers([])

    monkeypatch.setattr(supervisor.SamplerSet, "start", start)
    # GIVEN a target on another machine
    remote = TargetLocation(False, LOCATION_OTHER_HOST, "198.18.0.2", "198.18.0.2")
    recording = _create(tmp_path, target_location=remote)
    # THEN the manifest says so from the start, and the samplers are told
    assert _on_disk(recording)["environment"]["target_location"] == {
        "local": False,
        "how": "address of another host",
        "host": "198.18.0.2",
        "address": "198.18.0.2",
    }
    recording.start_samplers(gpu="auto")
    assert calls == [{"gpu": "auto", "target_location": remote}]
    recording.finish()
    assert load_run(recording.path).info.environment.target_location == remote
