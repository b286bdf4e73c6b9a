"""`loadkit run --abort-on`: the real Triton is SIGSTOPped mid-run and the guard stops the load.

The target is made slow for real (SIGSTOP of the tritonserver process, SIGCONT
always in a finally), the run is the real CLI in its own process, and the
checks read the run directory it leaves, then `loadkit analyze` and
`loadkit report` on it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadkit.rundir import load_run
from loadkit.target.server import EmbeddedTriton

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SECOND = 1_000_000_000


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Our own server: SIGSTOP must not reach one that other tests use."""
    log = tmp_path_factory.mktemp("triton_guard") / "triton.log"
    with EmbeddedTriton(log_path=log) as t:
        yield t


def _events(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _phase_ns(run_dir: Path, name: str) -> int | None:
    rows = [e for e in _events(run_dir) if e["kind"] == "phase" and e["name"] == name]
    return int(rows[0]["t_ns"]) if rows else None


def test_sigstopped_target_trips_abort_on_p99_and_the_load_stops_within_1s(
    triton: Any, tmp_path: Path
) -> None:
    # GIVEN a 40 s soak at 50/s with a p99 guard, and the server stopped 4 s into the load
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
        "40",
        "--abort-on",
        "errors>50% for 5s",
        "--abort-on",
        "p99>200ms for 3s",
        "--out",
        str(tmp_path),
        "--run-id",
        "guarded",
        "--no-telemetry",
        "--progress-every",
        "1",
    ]
    run_dir = tmp_path / "guarded"
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stopped_ns: int | None = None
    try:
        deadline = time.monotonic() + 60
        load_start = None
        while load_start is None and time.monotonic() < deadline and proc.poll() is None:
            load_start = _phase_ns(run_dir, "load-start")
            time.sleep(0.05)
        assert load_start is not None, "the load never started"
        time.sleep(max(0.0, (load_start + 4 * SECOND - time.time_ns()) / 1e9))
        os.kill(triton.pid, signal.SIGSTOP)
        stopped_ns = time.time_ns()
        out, _ = proc.communicate(timeout=60)
    finally:
        os.kill(triton.pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(out)
    assert stopped_ns is not None

    # THEN exit status 1, the run aborted, the manifest naming the condition and the moment
    assert proc.returncode == 1, out
    run = load_run(run_dir)
    assert run.status == "aborted"
    abort = run.manifest["abort"]
    assert abort["by"] == "condition" and abort["condition"] == "p99>200ms for 3s"
    assert run.manifest["abort_on"] == ["errors>50% for 5s", "p99>200ms for 3s"]
    # three whole seconds of breach: the first began at most 1 s before the stall...
    assert stopped_ns - SECOND <= abort["since_ns"] <= stopped_ns
    assert abort["t_ns"] - abort["since_ns"] == 3 * SECOND
    assert all(v > 0.2 for v in abort["values"])
    # ...and it was seen within a second of holding
    assert 0 <= abort["detected_ns"] - abort["t_ns"] <= SECOND
    print(
        f"\nguard: stall at +{(stopped_ns - load_start) / 1e9:.2f} s, condition held at "
        f"+{(abort['t_ns'] - stopped_ns) / 1e9:.2f} s after it, detected "
        f"{(abort['detected_ns'] - abort['t_ns']) / 1e6:.0f} ms later"
    )

    # AND the load stopped within 1 s of the condition holding: no arrival after that
    load_stopped = _phase_ns(run_dir, "load-stopped")
    assert load_stopped is not None
    assert 0 <= load_stopped - abort["t_ns"] <= SECOND
    load = run.load_intervals
    offered = load[load["offered"] > 0]
    last_offered_interval = int(offered["t_ns"].max())
    assert last_offered_interval <= abort["t_ns"] + SECOND
    assert int(load[load["t_ns"] > load_stopped]["offered"].sum()) == 0
    print(f"load stopped {(load_stopped - abort['t_ns']) / 1e6:.0f} ms after the condition held")
    assert any(e["kind"] == "abort" and e["name"] == "abort-on" for e in _events(run_dir))
    assert "Aborted by --abort-on: p99>200ms for 3s" in out

    # AND analysis and report say so
    env = {**os.environ}
    for command in (["analyze", str(run_dir)], ["report", str(run_dir), "--format", "html"]):
        done = subprocess.run(
            [sys.executable, "-m", "loadkit.cli", *command],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    analysis = json.loads((run_dir / "analysis.json").read_text())
    assert analysis["run"]["status"] == "aborted"
    assert analysis["run"]["abort"]["condition"] == "p99>200ms for 3s"
    assert "Stopped at" in analysis["headline"] and "p99>200ms for 3s" in analysis["headline"]
    html = (run_dir / "report.html").read_text()
    assert 'id="abort"' in html and "ABORTED" in html and "p99&gt;200ms for 3s" in html
