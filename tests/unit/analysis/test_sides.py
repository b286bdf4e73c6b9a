"""The analyzer reads the right machine: server causes the server's telemetry, the load
machine's trouble a cause of its own (issue 41, item 3; docs/analysis.md, "Whose machine")."""

from __future__ import annotations

import json
import re
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadkit.analysis import analyze_run
from loadkit.analysis.causes import REGISTRY
from loadkit.analysis.causes.base import NO_CLIENT_TELEMETRY, NO_SERVER_TELEMETRY
from loadkit.analysis.model import Analysis, SeriesPlace
from loadkit.analysis.places import CLIENT_SIDE, SERVER_SIDE, sources_at
from loadkit.analysis.telemetry import HOST_PARTS, HostSeries, TritonSeries
from loadkit.cli import build_parser
from loadkit.commands.options import server_telemetry
from loadkit.rundir import load_run
from loadkit.rundir.layout import MANIFEST_FILE
from loadkit.rundir.writer import write_manifest
from loadkit.telemetry.scrape import SCRAPE_OPTION
from loadkit.testing.synthetic import FaultWindow, RunSpec, demo_spec, write_run

W = FaultWindow
SENTENCE = (
    "not assessable: no telemetry from the server's host (give --scrape, --agent or --server-pid)"
)
# The load machine's container capped for 3 s every 9 s (loadkit's own cgroup throttled, its
# requests sent and read late); the server untouched.
LOAD_QUOTA = RunSpec(
    duration_s=80,
    rate_rps=300,
    client_quotas=tuple(W(12 + 9 * k, 15 + 9 * k, 15.0) for k in range(7)),
)
LOAD_MACHINE = "load_machine_saturated"


def _check(a: Analysis, cause: str) -> tuple[str, str]:
    (check,) = [c for c in a.causes_checked if c.cause == cause]
    return check.status, check.reason


def _causes(a: Analysis) -> list[str]:
    return [f.cause for f in a.findings]


def test_the_sentence_s_advice_is_what_loadkit_run_takes_to_read_the_server_s_host():
    # GIVEN each flag the not-assessable sentence tells the user to give
    flags = re.findall(r"--[a-z][a-z-]*", NO_SERVER_TELEMETRY)
    assert flags, NO_SERVER_TELEMETRY
    given = {
        "--scrape": ("node=http://gpu-host:9100/metrics", ["node"]),
        "--agent": ("http://gpu-host:9477", ["agent-gpu", "agent-host"]),
        "--server-pid": ("4321", []),
    }
    for flag in flags:
        value, scraped = given[flag]
        # THEN `loadkit run` takes it, and it reads the server's host on its machine
        args = build_parser("run").parse_args(
            ["run", "scenario.py", "--target", "http://gpu-host:8000", flag, value]
        )
        targets = server_telemetry(args).get(SCRAPE_OPTION, [])
        assert [t.family for t in targets] == scraped, flag
        assert args.server_pid == (4321 if flag == "--server-pid" else None), flag


def test_a_quota_on_the_load_machine_is_the_load_machine_s_not_the_server_s(analyze_spec):
    # GIVEN a target on another machine, and the host series (its cores, and the cgroup of
    # loadkit's own process) sampled on the load machine, whose quota throttles every 9 s
    a = analyze_spec(replace(LOAD_QUOTA, target_local=False), "remote-load-quota")
    # THEN no finding says the server uses up its quota ...
    assert "cgroup_throttling" not in _causes(a), a.findings
    assert not any("Container CPU quota" in f.summary for f in a.findings), a.findings
    # ... the server's quota is not assessable, saying why ...
    assert _check(a, "cgroup_throttling") == ("not_assessable", SENTENCE)
    for cause in ("cpu_saturation", "gpu_clock_thermal", "gpu_underused"):
        assert _check(a, cause) == ("not_assessable", SENTENCE), cause
    # ... and the load machine is named first, by name, with a client-side action
    top = a.findings[0]
    assert top.cause == LOAD_MACHINE, _causes(a)
    assert top.confidence in ("strong", "moderate")
    assert "loadgen-1" in top.summary and "load generator's own" in top.summary, top.summary
    assert "--workers" in top.action and "CPU limit" in top.action
    throttled = next(e for e in top.evidence if e.name.startswith("load_machine_throttled"))
    assert throttled.value is not None and throttled.value >= 10.0
    lag = next(e.value for e in top.evidence if e.name == "generator_lag_in_episodes")
    base = next(e.value for e in top.evidence if e.name == "generator_lag_baseline")
    assert lag is not None and base is not None and lag > base


def test_loadkit_s_own_cgroup_beside_a_local_server_is_the_load_machine_s(analyze_spec):
    # GIVEN the target on this machine but no --server-pid: the cgroup read is loadkit's own
    a = analyze_spec(replace(LOAD_QUOTA, target_local=True), "local-own-cgroup")
    # THEN the server's quota is not judged on it; the load machine's is
    assert _check(a, "cgroup_throttling") == ("not_assessable", SENTENCE)
    assert _causes(a)[:1] == [LOAD_MACHINE], _causes(a)
    # ... while the machine's cores are the server's: CPU saturation is still assessed
    assert _check(a, "cpu_saturation")[0] != "not_assessable"


def _unknown_places(path: Path) -> Path:
    """The run as an older loadkit recorded it against a target it did not embed: no places."""
    manifest: dict[str, Any] = json.loads((path / MANIFEST_FILE).read_text())
    manifest["target"]["embedded"] = False
    for source in manifest["sources"]:
        source["simulated"] = False
    write_manifest(path, manifest)
    return path


@pytest.mark.parametrize("where", ["server", "unknown"])
def test_the_server_s_own_quota_is_found_as_before(analyze_spec, tmp_path, where):
    # GIVEN the same throttling, in a host series sampled on the server's machine with
    # --server-pid, or in an older run that did not record where
    if where == "server":
        a = analyze_spec(replace(LOAD_QUOTA, target_local=True, server_pid=True), "server-quota")
    else:
        a = analyze_run(load_run(_unknown_places(write_run(LOAD_QUOTA, tmp_path, run_id="old"))))
        assert {s.place for s in a.run.sources} == {"unknown", "server"}, a.run.sources
    # THEN cgroup throttling is found first, as it always was ...
    assert _causes(a)[:1] == ["cgroup_throttling"], _causes(a)
    assert _check(a, "cgroup_throttling")[0] == "found"
    # ... and the load machine has no telemetry of its own to be judged on
    assert _check(a, LOAD_MACHINE) == ("not_assessable", NO_CLIENT_TELEMETRY)


def test_a_thermal_throttle_on_the_load_machine_s_gpu_is_not_the_server_s(analyze_spec):
    # GIVEN the demo's thermal sawtooth, on a GPU sampled on the load machine (--gpu nvml
    # against a target elsewhere)
    a = analyze_spec(replace(demo_spec(1), target_local=False), "remote-gpu-thermal")
    gpu = next(s for s in a.run.sources if s.name == "gpu")
    assert gpu.place == "client"
    # THEN no clock cause is found: each is not assessable, saying why
    assert not {"gpu_clock_thermal", "gpu_clock_power", "gpu_clock_other"} & set(_causes(a))
    for cause in ("gpu_clock_thermal", "gpu_clock_power", "gpu_clock_other"):
        assert _check(a, cause) == ("not_assessable", SENTENCE), cause


def test_the_demo_s_thermal_throttle_on_the_server_s_gpu_is_still_found(analyze_spec):
    # GIVEN the same run with the GPU on the server's machine (the target here, --server-pid)
    a = analyze_spec(replace(demo_spec(1), target_local=True, server_pid=True), "server-thermal")
    assert next(s for s in a.run.sources if s.name == "gpu").place == "server"
    # THEN thermal throttling is found as in the demo; nothing is blamed on a load machine
    assert "gpu_clock_thermal" in _causes(a)[:2], _causes(a)
    assert _check(a, "gpu_clock_thermal")[0] == "found"
    assert _check(a, LOAD_MACHINE) == ("not_assessable", NO_CLIENT_TELEMETRY)


def test_a_residual_cites_no_load_machine_signal_as_the_server_s(analyze_spec):
    # GIVEN the model itself slowing every 9 s on a server elsewhere, and the host series of
    # the load machine
    slow = tuple(W(12 + 9 * k, 15 + 9 * k, 2.5) for k in range(7))
    spec = RunSpec(duration_s=80, rate_rps=200, model_slowdowns=slow, target_local=False)
    a = analyze_spec(spec, "remote-model-slowdown")
    (f,) = [f for f in a.findings if f.cause == "unexplained_compute_slowdown"]
    # THEN "no change in CPU, cgroup quota" is not said from the load machine's series
    names = {e.name for e in f.evidence}
    assert not any(n.startswith(("cpu_mean", "cgroup_throttled")) for n in names), names
    assert "CPU, cgroup quota not measured" in f.summary, f.summary


# --- the mechanism --------------------------------------------------------------------


def _host(n: int = 4) -> HostSeries:
    ones = np.ones(n)
    return HostSeries(
        cpu_core_max_pct=ones,
        cpu_mean_pct=ones,
        busy_core_frac=ones,
        idle_cores=ones,
        psi_some_avg10=ones,
        cgroup_throttled_pct=ones,
        cgroup_throttled_ms_per_s=ones,
        server_rss_bytes=ones,
        tcp_new_connections_per_s=ones,
        server_new_connections_per_s=ones,
        has_per_core=True,
        has_cgroup=True,
        has_tcp=True,
        has_server_tcp=True,
        counter_resets=0,
        cpu_contention=ones,
        server_preemptions_per_cpu_s=ones,
        server_run_delay_ms_per_s=ones,
    )


def test_every_host_field_belongs_to_one_part():
    named = [n for part in HOST_PARTS.values() for n in part]
    assert len(named) == len(set(named))
    assert set(named) | {"counter_resets"} == {f.name for f in fields(HostSeries)}


def _place(name: str, place: str, parts: dict[str, str] | None = None) -> SeriesPlace:
    return SeriesPlace(name, place, "h", False, parts or {}, file=f"telemetry/{name}.jsonl")


def test_each_side_sees_its_own_part_of_the_host_and_the_server_s_statistics():
    # GIVEN the server's machine (cores) with loadkit's own process part (no --server-pid)
    triton = object.__new__(TritonSeries)
    sources: dict[str, Any] = {"host": _host(), "gpu": object(), "triton_stats": triton}
    places = (
        _place("host", "server", {"process": "client"}),
        _place("gpu", "client"),
        _place("triton_stats", "server"),
    )
    server = sources_at(sources, places, SERVER_SIDE)
    client = sources_at(sources, places, CLIENT_SIDE)
    # THEN the server's view keeps the cores, not the cgroup; the load machine's the reverse
    assert server["host"].has_per_core and not server["host"].has_cgroup
    assert np.all(np.isnan(server["host"].cgroup_throttled_pct))
    assert server["host"].server_run_delay_ms_per_s is None
    assert client["host"].has_cgroup and not client["host"].has_per_core
    assert np.all(np.isnan(client["host"].busy_core_frac))
    # ... a series wholly elsewhere is as if not recorded; the server's statistics stay in both
    assert server["gpu"] is None and client["gpu"] is sources["gpu"]
    assert server["triton_stats"] is triton and client["triton_stats"] is triton
    # ... and without places everything is the server's, as before
    assert sources_at(sources, (), SERVER_SIDE) == sources


def test_only_the_load_machine_s_cause_reads_the_load_machine():
    readers = {c.id: c.side for c in REGISTRY}
    assert [c for c, side in readers.items() if side == CLIENT_SIDE] == [LOAD_MACHINE]
    needs = {c.id: c.server_series for c in REGISTRY if c.server_series}
    assert needs == {
        "gpu_clock_thermal": ("gpu",),
        "gpu_clock_power": ("gpu",),
        "gpu_clock_other": ("gpu",),
        "cpu_saturation": ("host",),
        "cgroup_throttling": ("host.process",),
        "gpu_underused": ("gpu",),
    }


# --- the verdicts about the server outside the causes ------------------------------------


def test_a_hot_load_machine_gpu_raises_no_server_alert_and_shades_no_span(analyze_spec):
    remote = analyze_spec(replace(demo_spec(1), target_local=False), "remote-gpu-thermal")
    server = analyze_spec(
        replace(demo_spec(1), target_local=True, server_pid=True), "server-thermal"
    )
    # GIVEN the same hot GPU: on the server's machine it alerts and shades the timeline ...
    assert {"gpu_temp_throttling", "gpu_temp_high"} <= {x.name for x in server.alerts}
    assert "gpu_thermal" in {i.kind for i in server.intervals}
    # ... on the load machine it does neither (the injected faults stay shaded: ground truth)
    assert not [x for x in remote.alerts if x.name.startswith("gpu_")], remote.alerts
    assert {i.kind for i in remote.intervals} == {"fault:thermal-throttle"}


MIB = 2**20
LEAK = RunSpec(
    duration_s=660, rate_rps=5, gpu_interval_s=1.0, rss_drift_bytes_per_s=400 * MIB / 3600
)


def _leak(tmp_path: Path, spec: RunSpec, host: dict[str, Any] | None = None) -> Analysis:
    """A soak whose `server_rss_bytes` grow, on a 64 GiB loadkit machine; `host`: the host
    source's place as recorded instead (e.g. the server's exporter scraped)."""
    path = write_run(spec, tmp_path, run_id="leak")
    manifest: dict[str, Any] = json.loads((path / MANIFEST_FILE).read_text())
    manifest["environment"]["host"]["memory_bytes"] = 64 * 2**30
    for source in manifest["sources"]:
        if source["name"] == "host" and host is not None:
            source.update(host)
    write_manifest(path, manifest)
    return analyze_run(load_run(path))


def _drifts(a: Analysis) -> dict[str, dict[str, float | None]]:
    assert a.soak is not None
    return {f.drift: {e.name: e.value for e in f.evidence} for f in a.soak.findings}


def test_memory_drift_reads_the_server_s_process_and_its_machine_s_memory(tmp_path):
    # GIVEN the server here (--server-pid): its RSS grows, and fills this machine's memory
    here = _drifts(_leak(tmp_path / "here", replace(LEAK, target_local=True, server_pid=True)))
    assert here["server_memory_growth"]["hours_to_host_memory"] is not None
    # GIVEN a target elsewhere: the process part is loadkit's own, not the server's
    remote = _leak(tmp_path / "remote", replace(LEAK, target_local=False))
    assert "server_memory_growth" not in _drifts(remote)
    # GIVEN the server's host series from its own machine (an exporter on it): its RSS grows,
    # but loadkit's machine's memory says nothing of when it fills the server's
    scraped = {"place": "server", "host": "198.18.0.2", "parts": {"process": "server"}}
    there = _drifts(_leak(tmp_path / "there", replace(LEAK, target_local=False), scraped))
    assert "hours_to_host_memory" not in there["server_memory_growth"]


def test_beside_the_servers_scraped_host_the_load_machine_s_copy_is_read_as_its_own(
    tmp_path: Path,
) -> None:
    # GIVEN a remote target whose host series came from its exporters (`--scrape node=`,
    # place server, a quiet server) while this machine's copy, throttled every 9 s by the
    # load machine's quota, was written beside it as `host-local` (docs/telemetry.md)
    path = write_run(replace(LOAD_QUOTA, target_local=False), tmp_path, run_id="scraped")
    telemetry = path / "telemetry"
    (telemetry / "host.jsonl").rename(telemetry / "host-local.jsonl")
    quiet = []
    for line in (telemetry / "host-local.jsonl").read_text().splitlines():
        row = json.loads(line)
        for key in row:
            if key.startswith("cgroup_"):
                row[key] = None
        row["cpu_per_core_pct"] = [5.0 for _ in row.get("cpu_per_core_pct") or [0.0]]
        quiet.append(json.dumps(row))
    (telemetry / "host.jsonl").write_text("\n".join(quiet) + "\n")
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    (local,) = [s for s in manifest["sources"] if s["name"] == "host"]
    server = {**local, "place": "server", "host": "198.18.0.2", "parts": {}}
    local.update(name="host-local", file="telemetry/host-local.jsonl")
    manifest["sources"].append(server)
    write_manifest(path, manifest)
    a = analyze_run(load_run(path))
    # THEN the load machine's quota is found from its own copy, by its name ...
    assert a.findings and a.findings[0].cause == LOAD_MACHINE, _causes(a)
    assert "loadgen-1" in a.findings[0].summary, a.findings[0].summary
    # ... and the server's host series, quiet, names no server cause
    assert "cgroup_throttling" not in _causes(a) and "cpu_saturation" not in _causes(a)


def test_a_load_machine_busy_all_run_long_still_shows_its_quota_coming_and_going(
    tmp_path: Path,
) -> None:
    # GIVEN the load machine's container throttled every 9 s, on a load machine whose
    # cores are all busy all run long (a loaded CI runner: the sign holds everywhere)
    path = write_run(replace(LOAD_QUOTA, target_local=False), tmp_path, run_id="busy")
    host = path / "telemetry" / "host.jsonl"
    rows = [json.loads(line) for line in host.read_text().splitlines()]
    for row in rows:
        row["cpu_per_core_pct"] = [99.0 for _ in row.get("cpu_per_core_pct") or [0.0, 0.0]]
    host.write_text("".join(json.dumps(r) + "\n" for r in rows))
    a = analyze_run(load_run(path))
    # THEN the quota that came with the spikes is named; the standing busy cores are not
    # what hides it (they held in every baseline window too) and the note says so
    top = a.findings[0]
    assert top.cause == LOAD_MACHINE, _causes(a)
    assert "container throttled" in top.summary and "cores at" not in top.summary, top.summary
    assert "cores busy in most baseline windows" in top.summary


def test_one_saturated_worker_machine_is_named(tmp_path: Path) -> None:
    # GIVEN a run with --master: the master's machine quiet, and one worker machine (lg-2)
    # whose container is throttled every 9 s (its host series shipped by the worker)
    path = write_run(replace(LOAD_QUOTA, target_local=False), tmp_path, run_id="workers")
    telemetry = path / "telemetry"
    (telemetry / "host.jsonl").rename(telemetry / "host-worker-lg-2.jsonl")
    quiet = []
    for line in (telemetry / "host-worker-lg-2.jsonl").read_text().splitlines():
        row = json.loads(line)
        row.update({k: None for k in row if k.startswith("cgroup_")})
        row["cpu_per_core_pct"] = [5.0 for _ in row.get("cpu_per_core_pct") or [0.0]]
        quiet.append(json.dumps(row))
    (telemetry / "host.jsonl").write_text("\n".join(quiet) + "\n")
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    (master,) = [s for s in manifest["sources"] if s["name"] == "host"]
    worker = {
        **master,
        "name": "host-worker-lg-2",
        "file": "telemetry/host-worker-lg-2.jsonl",
        "host": "lg-2",
        "parts": {},
    }
    manifest["sources"].append(worker)
    write_manifest(path, manifest)
    a = analyze_run(load_run(path))
    # THEN the load machine's cause names the worker's machine, not the master's
    top = a.findings[0]
    assert top.cause == LOAD_MACHINE, _causes(a)
    assert "lg-2 (a worker)" in top.summary and "loadgen-1" not in top.summary, top.summary
    assert "container throttled" in top.summary
    # AND no server cause reads the worker's machine
    assert _check(a, "cgroup_throttling") == ("not_assessable", SENTENCE)


def test_gaps_within_a_quota_period_while_the_load_machine_is_throttled_are_not_a_stall(
    analyze_spec,
):
    # GIVEN the load machine's quota every 9 s, and in each throttled spell a 90 ms span
    # where the client read no answer: its process paused until the next quota period
    gaps = tuple(W(13 + 9 * k, 13.09 + 9 * k) for k in range(7))
    a = analyze_spec(replace(LOAD_QUOTA, target_local=False, stalls=gaps), "load-quota-gaps")
    # THEN the load machine is named first, and the gaps are not called the server's stop
    assert a.findings and a.findings[0].cause == LOAD_MACHINE, _causes(a)
    assert "process_stall" not in _causes(a), a.findings
