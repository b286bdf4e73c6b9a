"""Spans shaded on timelines: GPU and cgroup throttling from telemetry, faults from events."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from loadkit.analysis import analyze_run
from loadkit.analysis.align import NS
from loadkit.analysis.intervals import fault_intervals
from loadkit.rundir import load_run
from loadkit.testing.synthetic import FaultWindow as W
from loadkit.testing.synthetic import RunSpec, demo_spec, periodic_clock_drops, write_run

T0 = 1_764_449_000 * NS


def _kinds(a, kind):
    return [(i.start_s, i.end_s) for i in a.intervals if i.kind == kind]


def _covered(spans, start, end, slack=1.0):
    return any(s <= start + slack and e >= end - slack for s, e in spans)


def test_fault_events_pair_into_ground_truth_intervals():
    events = pd.DataFrame(
        [
            {"t_ns": T0 + 5 * NS, "kind": "fault", "name": "stall", "action": "start"},
            {"t_ns": T0 + 7 * NS, "kind": "fault", "name": "stall", "action": "end"},
            {"t_ns": T0 + 2 * NS, "kind": "fault", "name": "cpu-burn", "action": "end"},
            {"t_ns": T0 + 50 * NS, "kind": "fault", "name": "cooling-fault", "action": "start",
             "simulated": True},
            {"t_ns": T0 + 9 * NS, "kind": "fault", "name": "kick"},
            {"t_ns": T0 + 8 * NS, "kind": "phase", "name": "burst-start"},
        ]
    )  # fmt: skip
    found = {i.kind: i for i in fault_intervals(events, T0, T0 + 60 * NS)}
    assert set(found) == {"fault:stall", "fault:cpu-burn", "fault:cooling-fault", "fault:kick"}
    assert (found["fault:stall"].start_s, found["fault:stall"].end_s) == (5.0, 7.0)
    assert found["fault:stall"].start_ns == T0 + 5 * NS
    assert (found["fault:cpu-burn"].start_s, found["fault:cpu-burn"].end_s) == (0.0, 2.0)
    assert found["fault:cooling-fault"].end_s == 60.0  # still on when the run ended
    assert "simulated GPU" in found["fault:cooling-fault"].label
    assert found["fault:kick"].start_s == found["fault:kick"].end_s == 9.0
    assert all(i.ground_truth and "ground truth" in i.label for i in found.values())


def test_thermal_throttle_intervals_cover_each_injected_drop(analyze_spec):
    spec = demo_spec()
    a = analyze_spec(spec, "demo")
    thermal = _kinds(a, "gpu_thermal")
    assert thermal and not _kinds(a, "gpu_power") and not _kinds(a, "gpu_clock_other")
    for drop in spec.clock_drops:
        assert _covered(thermal, drop.start_s, drop.end_s), (drop, thermal)
        assert _covered(_kinds(a, "fault:thermal-throttle"), drop.start_s, drop.end_s, 0.01)
    assert len(thermal) == len(spec.clock_drops)
    assert all(i.ground_truth == i.kind.startswith("fault:") for i in a.intervals)
    assert [i.start_ns for i in a.intervals] == sorted(i.start_ns for i in a.intervals)


@pytest.mark.parametrize("kind", ["power", "other"])
def test_power_and_other_clock_drops_get_their_own_kind(analyze_spec, kind):
    drops = periodic_clock_drops(12, 3, first_s=5, until_s=90, factor=1.7, kind=kind)
    a = analyze_spec(RunSpec(rate_rps=250, clock_drops=drops), f"gpu-{kind}")
    expected = {"power": "gpu_power", "other": "gpu_clock_other"}[kind]
    spans = _kinds(a, expected)
    assert len(spans) == len(drops)
    assert all(_covered(spans, d.start_s, d.end_s) for d in drops)
    assert not _kinds(a, "gpu_thermal")


def test_cgroup_throttled_intervals_follow_the_quota(analyze_spec):
    spec = RunSpec(rate_rps=200, cgroup_quotas=(W(20, 30, 1.5), W(60, 70, 1.5)))
    a = analyze_spec(spec, "cgroup")
    spans = _kinds(a, "cgroup_throttled")
    assert len(spans) == 2 and all(_covered(spans, q.start_s, q.end_s) for q in spec.cgroup_quotas)
    assert all("periods throttled" in i.label for i in a.intervals if i.kind == "cgroup_throttled")


def test_quiet_run_has_no_throttle_intervals(analyze_spec):
    a = analyze_spec(RunSpec(rate_rps=200), "quiet")
    assert a.intervals == ()


def test_fault_events_never_change_the_findings(tmp_path: Path):
    """Ground truth is shown, not used: removing the fault events leaves attribution as it was."""
    spec = RunSpec(rate_rps=200, cgroup_quotas=(W(20, 30, 1.5), W(60, 70, 1.5)))
    path = write_run(spec, tmp_path, run_id="with-faults")
    blind = tmp_path / "without-faults"
    shutil.copytree(path, blind)
    events = blind / "events.jsonl"
    rows = [json.loads(line) for line in events.read_text().splitlines()]
    events.write_text("".join(json.dumps(r) + "\n" for r in rows if r["kind"] != "fault"))
    with_faults = analyze_run(load_run(path))
    without = analyze_run(load_run(blind))
    assert any(i.kind.startswith("fault:") for i in with_faults.intervals)
    assert not any(i.kind.startswith("fault:") for i in without.intervals)
    assert with_faults.findings == without.findings
    assert with_faults.causes_checked == without.causes_checked
    assert with_faults.episodes == without.episodes


def test_timeline_throttle_spans_follow_attributions_rule():
    """A reason bit while the clock holds throttles nothing: no span, as no finding."""
    import numpy as np

    from loadkit.analysis.causes._gpu_clock import throttle_classes
    from loadkit.analysis.intervals import gpu_throttle_classes
    from loadkit.analysis.telemetry import GpuSeries

    n = 6
    ratio = np.array([1.0, 1.0, 0.5, 0.5, 0.5, 1.0])  # the clock drops in windows 2-4 only
    gpu = GpuSeries(
        sm_clock_mhz=1980.0 * ratio,
        sm_clock_max_mhz=np.full(n, 1980.0),
        clock_ratio_busy=ratio,
        temp_c=np.full(n, 70.0),
        power_w=np.full(n, 300.0),
        power_limit_w=np.full(n, 700.0),
        util_pct=np.full(n, 60.0),
        mem_used_bytes=np.full(n, 1e9),
        mem_total_bytes=8e10,
        thermal_reason=np.array([1.0, 1.0, 1.0, 0.0, 0.0, 1.0]),
        power_reason=np.array([0.0, 0.0, 0.0, 1.0, 0.0, 0.0]),
        has_reasons=True,
    )
    shaded = gpu_throttle_classes(gpu)
    assert shaded["gpu_thermal"].tolist() == [False, False, True, False, False, False]
    assert shaded["gpu_power"].tolist() == [False, False, False, True, False, False]
    assert shaded["gpu_clock_other"].tolist() == [False, False, False, False, True, False]
    found = throttle_classes(gpu)
    assert [m.tolist() for m in found.values()] == [m.tolist() for m in shaded.values()]
