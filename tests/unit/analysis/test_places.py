"""The analysis says which machine each timeline comes from (analysis.json, the summary)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from loadkit.analysis import analyze_run
from loadkit.analysis.model import Analysis, SeriesPlace
from loadkit.analysis.places import is_server_side, place_of
from loadkit.commands.analyze import print_summary
from loadkit.rundir import load_run
from loadkit.rundir.layout import MANIFEST_FILE
from loadkit.rundir.writer import write_manifest
from loadkit.testing.synthetic import RunSpec, write_run

SPEC = RunSpec(duration_s=20, rate_rps=40, sources=("host", "triton_stats"), gpu_kind="none")
REMOTE = {
    "local": False,
    "how": "address of another host",
    "host": "198.18.0.2",
    "address": "198.18.0.2",
}


def _with_places(path: Path) -> Path:
    """The synthetic run as a load machine would record it against a remote target."""
    manifest: dict[str, Any] = json.loads((path / MANIFEST_FILE).read_text())
    manifest["target"]["embedded"] = False
    manifest["environment"]["host"]["hostname"] = "loadgen-1"
    manifest["environment"]["target_location"] = REMOTE
    places = {
        "host": {"place": "client", "host": "loadgen-1", "parts": {"process": "client"}},
        "triton_stats": {"place": "server", "host": "198.18.0.2", "parts": {}},
    }
    for source in manifest["sources"]:
        source.update(places[source["name"]], simulated=False)
    manifest["sources"].append(
        {
            "name": "gpu",
            "file": None,
            "interval_s": None,
            "simulated": False,
            "warning": "the target is not on this machine (address 198.18.0.2); ...",
            "place": "client",
            "host": "loadgen-1",
            "parts": {},
        }
    )
    write_manifest(path, manifest)
    return path


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Analysis:
    path = write_run(SPEC, tmp_path_factory.mktemp("runs"), run_id="remote")
    return analyze_run(load_run(_with_places(path)))


def test_analysis_json_lists_each_series_with_its_place_and_machine(remote: Analysis) -> None:
    run = remote.to_dict()["run"]
    assert run["target_location"] == REMOTE
    assert [(s["name"], s["place"], s["host"], s["loadkit_host"]) for s in run["sources"]] == [
        ("host", "client", "loadgen-1", True),
        ("triton_stats", "server", "198.18.0.2", False),
        ("gpu", "client", "loadgen-1", True),
    ]
    assert run["sources"][0]["parts"] == {"process": "client"}
    assert all(s["recorded"] for s in run["sources"])
    # and it reads back as it was written
    assert Analysis.from_dict(json.loads(remote.to_json())).run == remote.run


def test_the_summary_says_where_the_target_and_each_timeline_are(remote: Analysis) -> None:
    out = io.StringIO()
    print_summary(remote, out)
    lines = out.getvalue().splitlines()
    assert "target: not on loadkit's machine (address of another host 198.18.0.2)" in lines
    assert (
        "telemetry: host (client: loadgen-1, loadkit's machine), "
        "triton_stats (server: 198.18.0.2), gpu: not recorded"
    ) in lines


def test_an_old_run_says_its_places_were_inferred(tmp_path: Path) -> None:
    # GIVEN a synthetic run written as before places: embedded target, no place recorded
    analysis = analyze_run(load_run(write_run(SPEC, tmp_path, run_id="old")))
    assert analysis.run.target_location is not None
    assert analysis.run.target_location.how == "not recorded"
    assert {s.place for s in analysis.run.sources} == {"server"}
    assert not any(s.recorded for s in analysis.run.sources)
    out = io.StringIO()
    print_summary(analysis, out)
    text = out.getvalue()
    assert "target: location not recorded\n" in text
    assert (
        "telemetry (places inferred: the run did not record them): "
        "host (server), triton_stats (server)\n"
    ) in text


def test_an_analysis_json_from_before_places_still_loads(remote: Analysis) -> None:
    data = remote.to_dict()
    del data["run"]["sources"], data["run"]["target_location"]
    old = Analysis.from_dict(data)
    assert old.run.sources == () and old.run.target_location is None
    out = io.StringIO()
    print_summary(old, out)
    lines = out.getvalue().splitlines()
    assert not [line for line in lines if line.startswith(("telemetry:", "target:"))]


def test_a_cause_can_ask_whether_a_series_or_a_field_is_the_servers() -> None:
    places = (
        SeriesPlace("host", "client", "loadgen-1", True, {"process": "server"}, file="h"),
        SeriesPlace("gpu", "client", "loadgen-1", True, warning="remote", file=None),
        SeriesPlace("gpu", "server", "gpu-box", False, file="telemetry/gpu.jsonl"),
    )
    assert not is_server_side(places, "host")
    assert not is_server_side(places, "host", "cpu_per_core_pct")
    assert is_server_side(places, "host", "cgroup_nr_throttled_delta")
    assert is_server_side(places, "gpu")  # the entry with a file wins
    assert place_of(places, "triton_stats") == "unknown"
