"""The residual earns its confidence and says what moved episode by episode (issue 42, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from loadkit.analysis import analyze_run
from loadkit.analysis.causes.unexplained import CAUSE_CLIENT_NETWORK, CAUSE_COMPUTE
from loadkit.analysis.noise import EFFECT_MOVED
from loadkit.rundir import load_run
from loadkit.testing.synthetic import FaultWindow, RunSpec, write_run

W = FaultWindow
SLOW = tuple(W(t, t + 3.0, 2.5) for t in (12.0, 24.0, 36.0, 48.0, 60.0, 72.0))


def _order(a):
    return [(f.cause, f.confidence) for f in a.findings]


def _ev(finding, name):
    return next((e.value for e in finding.evidence if e.name == name), None)


def _said(summary: str) -> tuple[str, str]:
    """(the signals said unchanged, the text about those that moved) of a residual's summary."""
    rest = summary.split("no change in", 1)[1]
    return rest.split("(", 1)[0], rest.split("(moved too:", 1)[1].split(")", 1)[0]


def test_the_time_outside_the_server_earns_its_confidence(analyze_spec):
    # GIVEN a slow path (a proxy) adding 8 ms to the round trip for 3 s of every 12 s,
    # nothing on the server's side changing
    slow_path = tuple(W(w.start_s, w.end_s, 8.0) for w in SLOW)
    a = analyze_spec(RunSpec(rate_rps=200, network_delays=slow_path), "slow-path")
    # THEN the time outside the server is named first, and above weak: a localisation with
    # evidence, scored by the shared function like any cause
    assert a.findings, a.causes_checked
    top = a.findings[0]
    assert top.cause == CAUSE_CLIENT_NETWORK, _order(a)
    assert top.confidence in ("strong", "moderate"), (top.confidence, top.summary)
    assert len(top.episodes) >= 5 and top.lift is None, top
    assert "the time goes outside the server" in top.summary


def test_a_quota_in_two_of_six_episodes_is_not_no_change_in_them(analyze_spec):
    # GIVEN the model itself slowing in six windows, and a quota binding in two of them only
    quota = (W(24.0, 27.0, 0.05), W(60.0, 63.0, 0.05))
    a = analyze_spec(RunSpec(rate_rps=200, model_slowdowns=SLOW, cgroup_quotas=quota), "quota-2-6")
    (residual,) = [f for f in a.findings if f.cause == CAUSE_COMPUTE]
    assert len(residual.episodes) == 6, residual.summary
    # pooled over the six episodes the throttled periods hardly move ...
    assert abs(_ev(residual, "cgroup_throttled_moved")) < EFFECT_MOVED, residual.evidence
    # THEN judged per episode the quota moved in two of them, and is never "no change"
    assert _ev(residual, "cgroup_throttled_moved_episodes") == 2.0, residual.evidence
    unchanged, moved = _said(residual.summary)
    assert "cgroup quota" not in unchanged, residual.summary
    assert "cgroup quota in 2/6 episodes" in moved, residual.summary
    assert "GPU clock" in unchanged, residual.summary


def _raise_run_delay(
    run_dir: Path,
    windows: tuple[FaultWindow, ...],
    extra_ms_per_s: float,
    neighbour_core_pct: float = 0.0,
):
    """The server's threads wait `extra_ms_per_s` more for a CPU in `windows`; with
    `neighbour_core_pct`, a neighbour on one core takes that much more of it there (on 16
    cores the host's mean CPU hardly moves, the server's run delay does)."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    start = manifest["start_ns"]
    path = run_dir / "telemetry" / "host.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    added, last_t = 0.0, None
    for row in rows:
        t = (row["t_ns"] - start) / 1e9
        if last_t is not None and any(w.start_s <= last_t < w.end_s for w in windows):
            added += extra_ms_per_s * (t - last_t) * 1e6
        row["server_run_delay_ns"] += int(added)
        if neighbour_core_pct and any(w.start_s <= t < w.end_s for w in windows):
            cores = row["cpu_per_core_pct"]
            cores[0] = min(100.0, cores[0] + neighbour_core_pct)
            row["cpu_pct"] = round(sum(cores) / len(cores), 1)
        last_t = t
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_server_waiting_for_a_cpu_counts_as_cpu(tmp_path):
    # GIVEN the model slowing in six windows, and in two of them the server's run delay 5x
    # its usual 20 ms/s while the host's mean CPU stays where it was (a neighbour in every
    # spike would be CPU saturation's: test_thresholds_from_noise)
    spec = RunSpec(rate_rps=200, model_slowdowns=SLOW, run_delay_ms_per_s=20.0)
    run_dir = write_run(spec, tmp_path)
    _raise_run_delay(Path(run_dir), (SLOW[1], SLOW[4]), 80.0)
    a = analyze_run(load_run(run_dir))
    (residual,) = [f for f in a.findings if f.cause == CAUSE_COMPUTE]
    assert abs(_ev(residual, "cpu_mean_moved")) < EFFECT_MOVED, residual.evidence
    assert _ev(residual, "cpu_mean_moved_episodes") == 2.0, residual.evidence
    # THEN "CPU" moved (its run delay) in those two, never "no change in CPU"
    unchanged, moved = _said(residual.summary)
    assert "CPU" not in unchanged and "CPU in 2/6 episodes" in moved, residual.summary
    assert np.isfinite(_ev(residual, "cpu_run_delay_in_episodes"))
