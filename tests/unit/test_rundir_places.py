"""Reading where each series was sampled: recorded places, and manifests from before them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadkit.rundir import load_run
from loadkit.rundir.layout import MANIFEST_FILE
from loadkit.rundir.schema import (
    LOCATION_NOT_RECORDED,
    PLACE_CLIENT,
    PLACE_SERVER,
    PLACE_UNKNOWN,
    Manifest,
)

# A manifest written before issue 41: no `place` in its sources, no target_location.
OLD_SOURCES = [
    {"name": "gpu", "file": "telemetry/gpu.jsonl", "interval_s": 0.1, "simulated": False},
    {"name": "host", "file": "telemetry/host.jsonl", "interval_s": 0.5, "simulated": False},
    {"name": "triton_stats", "file": "telemetry/triton_stats.jsonl", "interval_s": 1.0},
    {"name": "metrics", "file": "telemetry/metrics.jsonl", "interval_s": 1.0},
]


def _old_run(tmp_path: Path, **manifest: Any) -> Path:
    """A version-2 run directory as loadkit wrote it before places were recorded."""
    path = tmp_path / "old"
    (path / "telemetry").mkdir(parents=True)
    for source in OLD_SOURCES:
        (path / source["file"]).write_text('{"t_ns": 1}\n')
    raw = {
        "schema_version": 2,
        "run_id": "old",
        "kind": "load",
        "status": "complete",
        "start_ns": 1,
        "end_ns": 2,
        "command_line": ["loadkit", "run"],
        "loadkit_version": "0.1.0",
        "scenario": None,
        "target": {"url": "http://10.0.0.7:8000", "protocol": "http", "embedded": False},
        "slo": None,
        "environment": {"host": {"hostname": "loadgen-1"}, "gpu": {"kind": "nvml"}},
        "sources": OLD_SOURCES,
        "notes": [],
        **manifest,
    }
    (path / MANIFEST_FILE).write_text(json.dumps(raw))
    return path


def test_an_old_run_loads_with_server_endpoints_as_server_and_the_rest_unknown(
    tmp_path: Path,
) -> None:
    run = load_run(_old_run(tmp_path))
    assert run.warnings == []
    info = run.info
    assert info.environment.target_location.local is None
    assert info.environment.target_location.how == LOCATION_NOT_RECORDED
    assert {s.name: s.place for s in info.sources} == {
        "gpu": PLACE_UNKNOWN,  # NVML of whichever machine loadkit ran on
        "host": PLACE_UNKNOWN,
        "triton_stats": PLACE_SERVER,  # answered by the server itself
        "metrics": PLACE_SERVER,
    }
    assert all(s.place_inferred for s in info.sources)
    assert run.place("host", "cgroup_nr_throttled") == PLACE_UNKNOWN
    assert run.place("triton_stats") == PLACE_SERVER


@pytest.mark.parametrize(
    "manifest",
    [
        {"target": {"url": "http://127.0.0.1:8000", "embedded": True}},  # loadkit demo
        {"kind": "production"},  # the server's exporters, through Prometheus
    ],
)
def test_old_runs_whose_series_are_all_the_servers_say_so(
    tmp_path: Path, manifest: dict[str, Any]
) -> None:
    run = load_run(_old_run(tmp_path, **manifest))
    assert {s.place for s in run.info.sources} == {PLACE_SERVER}
    assert run.place("host", "server_cpu_pct") == PLACE_SERVER


def test_an_old_simulated_gpu_is_the_servers() -> None:
    m = Manifest.from_dict(
        {"sources": [{"name": "gpu", "file": "telemetry/gpu.jsonl", "simulated": True}]}
    )
    assert m.place("gpu") == PLACE_SERVER


def test_recorded_places_are_read_per_series_and_per_part(tmp_path: Path) -> None:
    sources = [
        {**OLD_SOURCES[1], "place": "client", "host": "loadgen-1", "parts": {"process": "server"}},
        {
            "name": "gpu",
            "file": None,
            "interval_s": None,
            "simulated": False,
            "warning": "the target is not on this machine (address 198.18.0.2); ...",
            "place": "client",
            "host": "loadgen-1",
            "parts": {},
        },
        {**OLD_SOURCES[2], "place": "server", "host": "198.18.0.2", "parts": {}},
        {**OLD_SOURCES[1], "name": "gpu", "file": "telemetry/gpu-dmon.jsonl"},  # imported
    ]
    location = {"local": False, "how": "address of another host", "host": "198.18.0.2"}
    run = load_run(
        _old_run(
            tmp_path,
            sources=sources,
            environment={"host": {"hostname": "loadgen-1"}, "target_location": location},
        )
    )
    assert run.info.environment.target_location.local is False
    host = run.info.source("host")
    assert host is not None and not host.place_inferred and host.host == "loadgen-1"
    assert run.place("host") == PLACE_CLIENT
    assert run.place("host", "cpu_per_core_pct") == PLACE_CLIENT  # this machine's CPUs
    assert run.place("host", "cgroup_nr_throttled") == PLACE_SERVER  # the --server-pid part
    assert run.place("host", "server_ctx_invol_delta") == PLACE_SERVER
    assert run.place("triton_stats") == PLACE_SERVER
    assert run.place("gpu") == PLACE_CLIENT  # the entry that says why there is none
    assert run.place("gpu-dmon") == PLACE_UNKNOWN  # an imported file: nobody said where
    assert run.place("no_such_series") == PLACE_UNKNOWN


def test_a_place_that_is_not_one_reads_as_unknown() -> None:
    m = Manifest.from_dict(
        {"sources": [{"name": "host", "place": "rack 7", "parts": {"process": 3}}]}
    )
    source = m.sources[0]
    assert source.place == PLACE_UNKNOWN and source.parts == {"process": PLACE_UNKNOWN}
    assert source.place_inferred
