"""`loadkit demo` as users run it: the report must tell the true story, found by the analyzer.

Real Triton, real Locust, the simulated GPU with a periodic cooling fault, real
samplers. The assertions read analysis.json: nothing about the story is
written into the demo, so these fail if detection or attribution breaks.

`loadkit demo --short` (60 s, its cooling failing every 7 s: 9 cycles), run once
per session from the installed wheel (the `demo_run` fixture in conftest). Its
cycle is what makes it enough: with the full demo's 10 s cycles a 60 s run left
5-6 spike onsets after the 8 s warm-up, and with 5 a single onset landing one 1 s
window late (the throttle crossing a window boundary) lifted the Rayleigh p-value
from 0.0016 to about 0.003, over the analyzer's strict level; 8 onsets tolerate
such slips with a wide margin.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import psutil
import pytest

from loadkit.analysis.model import CAUSE_GPU_THERMAL
from tests.integration.support import DemoRun

pytestmark = pytest.mark.integration

PERIOD_S = 7.0  # --short's cycle (loadkit.commands.demo.SHORT_FAULT_PERIOD_S)


def _analysis(demo: DemoRun) -> dict:
    assert demo.returncode == 0, demo.output[-3000:]
    return json.loads((demo.run_dir / "analysis.json").read_text())


def _fault_starts_s(demo: DemoRun, name: str) -> list[float]:
    """When each of the simulated GPU's `name` faults began, in seconds of wall clock."""
    events = [json.loads(line) for line in (demo.run_dir / "events.jsonl").read_text().splitlines()]
    return [
        e["t_ns"] / 1e9
        for e in events
        if e["kind"] == "fault" and e["name"] == name and e["action"] == "start"
    ]


@pytest.mark.quiet_host
def test_the_demo_s_gpu_throttled_on_its_cycle(demo_run: DemoRun) -> None:
    # The period the other tests expect of the analysis is what the demo's GPU did, read
    # from the events it logged as each throttle began, not from the demo's settings.
    starts = _fault_starts_s(demo_run, "thermal-throttle")
    assert len(starts) >= 5, starts
    gaps = np.diff(starts)
    assert float(np.median(gaps)) == pytest.approx(PERIOD_S, rel=0.05), gaps
    assert all(abs(g - PERIOD_S) < 1.0 for g in gaps), gaps


@pytest.mark.quiet_host
def test_periodic_p99_spikes_are_attributed_to_thermal_throttling(demo_run: DemoRun) -> None:
    a = _analysis(demo_run)
    p99 = next(p for p in a["periodicity"] if p["percentile"] == "p99")
    assert p99["periodic"], p99["reason"]
    assert p99["period_s"] == pytest.approx(PERIOD_S, rel=0.1)
    top = a["findings"][0]
    assert top["cause"] == CAUSE_GPU_THERMAL, [f["cause"] for f in a["findings"]]
    assert top["confidence"] in ("strong", "moderate")
    assert len(top["episodes"]) >= 3
    evidence = {e["name"]: e["value"] for e in top["evidence"]}
    # the evidence a person can check: the clock fell while busy, the thermal
    # reason bit was set, and compute per batch grew about as the clock predicts
    assert evidence["sm_clock_in_episodes"] < 0.8 * evidence["sm_clock_max"]
    assert evidence["thermal_reason_share"] > 0.5
    assert evidence["compute_inflation_observed"] > 1.3


@pytest.mark.quiet_host
def test_burst_raises_batch_sizes_and_queue_time_and_latency_recovers(demo_run: DemoRun) -> None:
    a = _analysis(demo_run)
    assert len(a["recoveries"]) == 1
    r = a["recoveries"][0]
    assert r["batch_size_mean_during"] > r["batch_size_mean_before"]
    assert r["queue_ms_during"] > r["queue_ms_before"]
    assert r["recovered"], r["detail"]
    assert r["recovery_s"] is not None and 0 <= r["recovery_s"] < 20


@pytest.mark.quiet_host
def test_report_is_written_and_labels_the_gpu_simulated(demo_run: DemoRun) -> None:
    html = (demo_run.run_dir / "report.html").read_text()
    assert "simulated" in html.lower()
    manifest = json.loads((demo_run.run_dir / "manifest.json").read_text())
    assert manifest["environment"]["gpu"]["kind"] == "simulated"
    assert manifest["environment"]["server"]["models"]["ranker"]["max_batch_size"] == 16
    assert manifest["target"]["embedded"] is True
    faults = [
        json.loads(line)
        for line in (demo_run.run_dir / "events.jsonl").read_text().splitlines()
        if '"fault"' in line
    ]
    assert sum(1 for f in faults if f["name"] == "thermal-throttle" and f["action"] == "start") >= 5


def test_ctrl_c_stops_everything_and_keeps_what_was_recorded(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    # GIVEN the real `loadkit demo` command running in its own session
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadkit.cli",
            "demo",
            "--short",
            "--no-progress",
            "--out",
            str(tmp_path),
            "--run-id",
            "interrupted",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen: set[int] = set()
    run_dir = tmp_path / "interrupted"
    deadline = time.monotonic() + 60
    try:
        # wait until load is flowing (latency histograms written), noting every descendant
        while time.monotonic() < deadline:
            try:
                seen |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
            except psutil.NoSuchProcess:
                break
            hlogs = list((run_dir / "latency").glob("*.hlog")) if run_dir.exists() else []
            if hlogs and any(h.stat().st_size > 2000 for h in hlogs):
                break
            time.sleep(0.2)
        seen |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        # WHEN the user presses Ctrl-C
        os.kill(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # THEN it exits 130, leaves nothing running, and the run is aborted but reported
    assert proc.returncode == 130, out
    assert len(seen) >= 4, f"expected Triton, Locust and samplers among {seen}"
    alive = [p for p in seen if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    assert not alive, f"left running after Ctrl-C: {alive}\n{out}"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "aborted"
    assert (run_dir / "report.html").exists()
    assert (run_dir / "analysis.json").exists()


@pytest.mark.quiet_host
def test_the_summary_fits_a_first_screen(demo_run: DemoRun) -> None:
    # GIVEN what `loadkit demo` printed, from the run's line to the report's link
    lines = demo_run.output.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("demo-test  ("))
    last = next(i for i, line in enumerate(lines) if line.startswith("report: "))
    screen = lines[first : last + 2]  # and the file:// link under it
    text = "\n".join(screen)
    # THEN it fits in 18 lines (25 before issue 55) ...
    assert len(screen) <= 18, text
    assert screen[-1].startswith("file://"), text
    # ... and still says the verdict, where it ran, the headline, the first finding with its
    # evidence and action, the burst's recovery, the alerts and the report's path
    assert screen[1].startswith("verdict: FAIL: p99 "), text
    assert "target and telemetry: this machine (" in text, text
    assert any(line.startswith(("FAIL. ", "PASS. ")) for line in screen), text
    assert " 1. [" in text and "    evidence: " in text and "    action: " in text, text
    assert "burst at " in text and "alert [critical]: GPU temperature" in text, text
    assert sum(line.startswith("note: ") for line in screen) <= 2, text
