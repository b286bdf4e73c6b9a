"""The faults around a run (issue 29): the real CLI in its own process against a real Triton.

Each test asserts the one-line message, the exit code, what was kept, and that
no traceback reached the user.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from loadkit.rundir import load_run
from loadkit.target.server import EmbeddedTriton

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SECOND = 1_000_000_000


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadkit.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _phase_ns(run_dir: Path, name: str) -> int | None:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line being written
        if event.get("kind") == "phase" and event.get("name") == name:
            return int(event["t_ns"])
    return None


def _no_traceback(*texts: str) -> None:
    for text in texts:
        assert "Traceback" not in text, text[-3000:]


def test_target_sigkilled_mid_run_is_an_outage_exit_3_and_named_with_its_start(
    tmp_path: Path,
) -> None:
    # GIVEN our own Triton (it is killed) and an 18 s run at 50/s
    with EmbeddedTriton(log_path=tmp_path / "triton.log") as triton:
        argv = [
            sys.executable,
            "-m",
            "loadkit.cli",
            "run",
            str(REPO / "scenarios" / "soak.py"),
            "--target",
            triton.http_url,
            "--set",
            "rate=50",
            "--set",
            "timeout_s=2",
            "--duration",
            "18",
            "--out",
            str(tmp_path),
            "--run-id",
            "killed",
            "--no-telemetry",
            "--no-progress",
        ]
        run_dir = tmp_path / "killed"
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            load_start = None
            while load_start is None and time.monotonic() < deadline and proc.poll() is None:
                load_start = _phase_ns(run_dir, "load-start")
                time.sleep(0.05)
            assert load_start is not None, "the load never started"
            # WHEN the server is SIGKILLed 6 s into the load
            time.sleep(max(0.0, (load_start + 6 * SECOND - time.time_ns()) / 1e9))
            os.kill(triton.pid, signal.SIGKILL)
            killed_ns = time.time_ns()
            out, err = proc.communicate(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    print(out, err)

    # THEN one line first says the target stopped answering, and the exit status is 3
    _no_traceback(out, err)
    assert out.splitlines()[0].startswith("TARGET UNREACHABLE: The target stopped answering at")
    assert "did not come back" in out.splitlines()[0]
    assert proc.returncode == 3, (out, err)
    assert "ERROR: the target was unreachable for" in err
    # AND everything recorded is kept: a complete run with the errors and the server's words
    run = load_run(run_dir)
    assert run.status == "complete"
    load = run.load_intervals
    assert int(load["ok"].sum()) > 5 * 40 and int(load["errors"].sum()) > 5 * 40

    # AND the analysis names the outage with its start (to the second) as its first finding
    done = _cli("analyze", str(run_dir))
    _no_traceback(done.stdout, done.stderr)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[0].startswith("TARGET UNREACHABLE:")
    analysis: dict[str, Any] = json.loads((run_dir / "analysis.json").read_text())
    top = analysis["findings"][0]
    assert top["cause"] == "target_unreachable"
    evidence = {e["name"]: e["value"] for e in top["evidence"]}
    killed_s = (killed_ns - run.start_ns) / 1e9
    assert killed_s - 1.0 <= evidence["start_s"] <= killed_s + 1.5, (killed_s, evidence)
    assert evidence["came_back"] == 0
    assert analysis["headline"].startswith("FAIL. The target stopped answering at")
    print(f"killed at {killed_s:.1f} s; the outage found from {evidence['start_s']:.0f} s")
