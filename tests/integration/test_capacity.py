"""`loadkit capacity` against the real Triton: a capacity known analytically, the generator's
own limit, and bad input.

The model is the embedded `ranker` with one instance, max batch 1 and a fixed
simulated compute of 40 ms per batch (a sleep: no CPU, so the shared host
does not move it much): one request at a time, 40 ms each, so its capacity is
1 / 0.040 = 25 req/s, less the Python backend's own overhead per batch. The
search must land within 10 % of it.
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadkit.rundir import load_run
from loadkit.target.server import EmbeddedTriton

pytestmark = pytest.mark.integration

ANALYTIC_RPS = 25.0  # 1 / 40 ms, one instance, batches of 1


@pytest.fixture(scope="module")
def fixed_compute(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("triton_capacity") / "triton.log"
    params = {"gpu_time_us_per_batch": 40000, "gpu_time_us_per_item": 0}
    with EmbeddedTriton(
        max_batch_size=1, max_queue_delay_us=0, model_params=params, log_path=log
    ) as t:
        yield t


def _capacity(*args: str, timeout: float = 150.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadkit.cli", "capacity", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _probe_phases(run_dir: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == "phase" and r["name"] == "probe-end"]


def test_capacity_of_a_fixed_compute_model_is_found_within_10_percent(
    fixed_compute: Any, tmp_path: Path
) -> None:
    # GIVEN one instance that computes 40 ms per batch of 1 (25 req/s analytically)
    # WHEN the search runs with a loose latency SLO, so throughput is what binds
    proc = _capacity(
        "--target",
        fixed_compute.http_url,
        "--slo",
        "p99=1s,errors=1%",
        "--start",
        "16",
        "--max-rate",
        "64",
        "--resolution",
        "10%",
        "--settle",
        "1",
        "--window",
        "1",
        "--peak",
        "100",
        "--headroom",
        "50%",
        "--max-duration",
        "110",
        "--gpu",
        "none",
        "--set",
        "candidates=10",
        "--out",
        str(tmp_path),
        "--run-id",
        "cap",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "cap"
    analysis = json.loads((run_dir / "analysis.json").read_text())
    cap = analysis["capacity"]
    # THEN the capacity is within 10 % of 25 req/s, bracketed by a failing rate above it
    assert cap["found"], cap["answer"]
    assert abs(cap["rate_rps"] - ANALYTIC_RPS) <= 0.10 * ANALYTIC_RPS, cap["answer"]
    assert cap["low_rps"] == cap["rate_rps"] < cap["high_rps"]
    assert cap["high_rps"] <= cap["low_rps"] * 1.10 + 1e-6  # --resolution 10 %
    # ... bound by the model's one instance, and named so from Triton's statistics
    assert cap["limited_by"] == "model_instances", cap["limited_by_evidence"]
    prediction = cap["prediction"]
    assert prediction is not None and prediction["batch_size"] == 1
    assert abs(prediction["rps"] - ANALYTIC_RPS) <= 0.10 * ANALYTIC_RPS
    # ... and in replicas for a 100 req/s peak with 50 % headroom, from the bracket
    assert cap["replicas"] == math.ceil(100 / (cap["low_rps"] * 0.5))
    assert cap["replicas_low"] == math.ceil(100 / (cap["high_rps"] * 0.5))
    assert "linear scale-out" in cap["scale_out_assumption"]
    # ... every probe is a phase of one run of kind `capacity`, with its verdict
    run = load_run(run_dir)
    assert run.info.kind == "capacity" and run.info.status == "complete"
    ends = _probe_phases(run_dir)
    assert len(ends) == len(cap["probes"]) >= 3
    assert any(p["passed"] for p in ends) and any(not p["passed"] for p in ends)
    assert "Capacity:" in proc.stdout and "replica" in proc.stdout
    report = (run_dir / "report.html").read_text()
    assert 'id="capacity"' in report


def test_a_rate_the_generator_cannot_send_is_named_the_generators_limit(tmp_path: Path) -> None:
    # GIVEN a server with room to spare (batches up to 32) and a generator of ONE user,
    # which can carry only one 20 ms request at a time (about 45 req/s)
    params = {"gpu_time_us_per_batch": 20000, "gpu_time_us_per_item": 0}
    with EmbeddedTriton(max_batch_size=32, max_queue_delay_us=0, model_params=params) as t:
        proc = _capacity(
            "--target",
            t.http_url,
            "--slo",
            "p99=500ms",
            "--start",
            "15",
            "--max-rate",
            "200",
            "--settle",
            "1",
            "--window",
            "1",
            "--max-duration",
            "80",
            "--gpu",
            "none",
            "--set",
            "users=1",
            "--set",
            "candidates=10",
            "--out",
            str(tmp_path),
            "--run-id",
            "gen",
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    cap = json.loads((tmp_path / "gen" / "analysis.json").read_text())["capacity"]
    # THEN the failing rate is the generator's limit, never the server's capacity
    assert cap["limited_by"] == "generator", cap["answer"]
    assert cap["generator_limited"] is True
    assert "generator's limit" in cap["answer"] and "not the server's capacity" in cap["answer"]
    failing = [p for p in cap["probes"] if p["generator_limited"]]
    assert failing and failing[0]["rate_rps"] > 45


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("case", "code", "says"),
    [
        ("bad_slo", 2, "cannot read SLO item"),
        ("unreachable", 3, "cannot connect to the target"),
        ("no_model", 2, "nosuch"),
    ],
)
def test_bad_input_is_one_line_and_the_documented_exit_code(
    fixed_compute: Any, tmp_path: Path, case: str, code: int, says: str
) -> None:
    target = fixed_compute.http_url
    slo = "p99=50ms"
    extra: list[str] = []
    if case == "bad_slo":
        slo = "p99=fast"
    elif case == "unreachable":
        target = f"http://127.0.0.1:{_free_port()}"
    else:
        extra = ["--model", "nosuch"]
    proc = _capacity("--target", target, "--slo", slo, *extra, "--out", str(tmp_path), timeout=60)
    assert proc.returncode == code, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and says in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_sigint_mid_search_keeps_the_probes_so_far(fixed_compute: Any, tmp_path: Path) -> None:
    import signal
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "loadkit.cli", "capacity", "--target", fixed_compute.http_url]
        + ["--slo", "p99=1s", "--start", "8", "--settle", "1", "--window", "1", "--gpu", "none"]
        + ["--set", "candidates=10", "--out", str(tmp_path), "--run-id", "stopped"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # WHEN the first probe has been judged, Ctrl-C
        deadline = time.monotonic() + 60
        events = tmp_path / "stopped" / "events.jsonl"
        while time.monotonic() < deadline:
            if events.exists() and _probe_phases(tmp_path / "stopped"):
                break
            time.sleep(0.3)
        else:
            pytest.fail("no probe was judged within 60 s")
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    # THEN exit 130, the run aborted with its probes analyzed
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    run = load_run(tmp_path / "stopped")
    assert run.info.status == "aborted"
    cap = json.loads((tmp_path / "stopped" / "analysis.json").read_text())["capacity"]
    assert len(cap["probes"]) >= 1 and cap["probes"][0]["passed"]
