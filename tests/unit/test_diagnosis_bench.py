"""The diagnosis benchmark's plans and scoring (no servers: runs are built by hand)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.diagnosis.generate import CASES, plan_case
from bench.diagnosis.run import parse_seeds
from bench.diagnosis.score import (
    CASE_CAUSES,
    CONTROL_CASES,
    CONTROL_FAULTS,
    RunScore,
    ground_truth,
    summarize,
    true_period,
)
from loadkit.analysis import model as m
from loadkit.analysis.causes import CAUSE_IDS
from loadkit.rundir import RunWriter, append_event, load_run

S = 1_000_000_000


def test_plans_are_seeded_and_differ_between_seeds() -> None:
    assert plan_case("stall", 4).to_json() == plan_case("stall", 4).to_json()
    assert plan_case("stall", 4).faults != plan_case("stall", 5).faults


@pytest.mark.parametrize("case", CASES)
def test_every_case_maps_to_analyzer_causes(case: str) -> None:
    plan = plan_case(case, 1)
    assert set(plan.faults) <= set(CASE_CAUSES) | CONTROL_FAULTS
    assert all(CASE_CAUSES[f] in CAUSE_IDS for f in plan.faults if f not in CONTROL_FAULTS)
    assert (case == "clean") == (not plan.faults)
    # a control case has only faults that must not be blamed
    assert (case in CONTROL_CASES) == all(f in CONTROL_FAULTS for f in plan.faults)
    for fault in plan.faults.values():
        schedule = fault.get("schedule")
        if isinstance(schedule, dict):
            # at least 4 windows fit in the run, so a period can be tested
            assert schedule["first_start_s"] + 3 * schedule["period_s"] < plan.duration_s


@pytest.mark.parametrize("seed", [1, 2, 3, 11, 12])
def test_batching_case_is_low_load_with_a_window_of_5_to_30_ms(seed: int) -> None:
    plan = plan_case("batching-window", seed)
    assert 5.0 <= plan.rate <= 30.0
    assert 5_000 <= plan.triton["max_queue_delay_us"] <= 30_000


@pytest.mark.parametrize("seed", range(1, 13))
def test_stalls_are_sub_second_to_1_5_s_at_random_phases(seed: int) -> None:
    s = plan_case("stall", seed).faults["stall"]["schedule"]
    assert 0.2 <= s["duration_s"] <= 1.5
    assert s["first_start_s"] % 1.0 not in (0.0, 0.5)  # not aligned to window edges by design


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bursts_exceed_the_burst_cases_server_capacity(seed: int) -> None:
    plan = plan_case("bursts", seed)
    params = plan.triton["model_params"]
    full = plan.triton["max_batch_size"]
    batch_s = (params["gpu_time_us_per_batch"] + full * params["gpu_time_us_per_item"]) / 1e6
    capacity = full / batch_s  # requests/s at full batches
    peak = plan.rate * plan.load["burst_multiplier"]
    assert plan.rate < 0.5 * capacity  # the base load is comfortable
    assert capacity < peak <= 600  # a burst exceeds capacity (before overhead), within one Locust
    assert plan.load["users"] >= 2 * peak  # the backlog is served, not dropped


def test_cpu_burners_run_at_ordinary_and_at_raised_priority() -> None:
    faults = [plan_case("cpu-burn", seed).faults["cpu-burn"] for seed in range(1, 13)]
    assert {f["nice"] for f in faults} == {0, -10}
    assert all(f["own_session"] for f in faults)  # like a co-located job
    assert all(f["processes_per_core"] == 1 for f in faults if f["nice"] < 0)


def test_parse_seeds() -> None:
    assert parse_seeds("2-4,7") == [2, 3, 4, 7]
    assert parse_seeds("1") == [1]


def test_ground_truth_pairs_fault_events_and_burst_phases(tmp_path: Path) -> None:
    writer = RunWriter.create(out_dir=tmp_path, run_id="r", kind="load")
    t0 = writer.manifest["start_ns"]
    run_dir = writer.path
    append_event(run_dir, "fault", "stall", action="start", window=0, t_ns=t0 + 5 * S)
    append_event(run_dir, "fault", "stall", action="end", window=0, t_ns=t0 + 7 * S)
    append_event(run_dir, "fault", "cooling-fault", action="start", t_ns=t0 + 8 * S)
    append_event(run_dir, "fault", "thermal-throttle", action="start", t_ns=t0 + 9 * S)
    append_event(run_dir, "fault", "thermal-throttle", action="end", t_ns=t0 + 12 * S)
    append_event(run_dir, "phase", "burst-start", t_ns=t0 + 20 * S)
    append_event(run_dir, "phase", "burst-end", t_ns=t0 + 23 * S)
    append_event(run_dir, "phase", "burst-start", t_ns=t0 + 30 * S)  # still open at the end
    writer.finalize()
    truth = ground_truth(load_run(run_dir))
    assert [(t.cause, (t.start_ns - t0) // S, (t.end_ns - t0) // S) for t in truth[:3]] == [
        (m.CAUSE_PROCESS_STALL, 5, 7),
        (m.CAUSE_GPU_THERMAL, 9, 12),
        (m.CAUSE_ARRIVAL_BURST, 20, 23),
    ]
    assert truth[3].cause == m.CAUSE_ARRIVAL_BURST and truth[3].start_ns == t0 + 30 * S


def test_true_period_only_for_one_periodic_fault() -> None:
    assert (
        true_period(plan_case("stall", 1).to_json())
        == plan_case("stall", 1).faults["stall"]["schedule"]["period_s"]
    )
    assert true_period(plan_case("thermal+stall", 1).to_json()) is None
    assert true_period(plan_case("churn", 1).to_json()) is None


def score(case: str, causes: list[str], findings: list[tuple[str, str]], **kw: object) -> RunScore:
    base = dict(
        run_id=case,
        case=case,
        seed=1,
        true_causes=causes,
        findings=findings,
        ranks={
            c: ([f for f, _ in findings].index(c) + 1 if c in dict(findings) else None)
            for c in causes
        },
        truth_windows=4,
        episodes=5,
        episodes_matched=4,
        windows_recalled=4,
        true_period_s=10.0,
        detected_period_s=10.3,
        period_error=0.03,
        headline="",
    )
    base.update(kw)
    return RunScore(**base)  # type: ignore[arg-type]


def test_summary_ac_at_k_confusion_and_clean_runs() -> None:
    stall, thermal, cpu = m.CAUSE_PROCESS_STALL, m.CAUSE_GPU_THERMAL, m.CAUSE_CPU_SATURATION
    scores = [
        score("stall", [stall], [(stall, "strong")]),
        score("stall", [stall], [(cpu, "weak"), (stall, "moderate")]),
        # two faults: each counts at k when within the first k + 1 findings
        score("thermal+stall", [thermal, stall], [(thermal, "strong"), (stall, "strong")]),
        score("clean", [], [(cpu, "moderate")], true_period_s=None, period_error=None),
        score("clean", [], [], true_period_s=None, period_error=None),
    ]
    summary = summarize(scores)
    assert summary["per_cause"][stall]["runs"] == 3
    assert summary["per_cause"][stall]["ac1"] == pytest.approx(2 / 3)
    assert summary["per_cause"][stall]["ac3"] == 1.0
    assert summary["per_cause"][thermal]["ac1"] == 1.0
    assert summary["per_cause"][stall]["episode_precision"] == pytest.approx(12 / 15)
    assert summary["confusion"]["stall"] == {stall: 1, cpu: 1}
    assert summary["confusion"]["clean"] == {cpu: 1, "none": 1}
    assert summary["clean"]["above_weak"] == 1
    assert summary["per_cause"][stall]["period_within_5pct"] == 3


def test_quiet_gate_waits_for_an_idle_host_and_gives_up_after_its_bound(monkeypatch):
    import psutil

    from bench.diagnosis.generate import host_load, wait_for_quiet_host

    readings = iter([90.0, 80.0, 20.0])
    monkeypatch.setattr(psutil, "cpu_percent", lambda interval=None: next(readings))
    gate = wait_for_quiet_host(max_busy_pct=35.0, max_wait_s=60.0, log=lambda s: None)
    assert gate["quiet"] is True and gate["busy_pct"] == 20.0
    monkeypatch.setattr(psutil, "cpu_percent", lambda interval=None: 95.0)
    said: list[str] = []
    gate = wait_for_quiet_host(max_busy_pct=35.0, max_wait_s=0.0, log=said.append)
    assert gate["quiet"] is False and "generating anyway" in said[0]
    assert set(host_load()) >= {"load1", "load5", "load15", "cores"}
