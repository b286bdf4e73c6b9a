"""`loadkit sweep` against the real Triton in explicit model-control mode.

A batching-window sweep at a low rate (P50 grows with the window; the small
window is recommended), and the server's configuration left as it was found:
after the sweep, after a point Triton refuses, and after SIGINT mid-sweep. A
server not in explicit mode is refused with how to start it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadkit.kserve.repository import read_settings
from loadkit.rundir import load_run
from loadkit.target.server import EmbeddedTriton

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def explicit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("triton_sweep") / "triton.log"
    with EmbeddedTriton(model_control="explicit", log_path=log) as t:
        yield t


def _sweep_argv(target: str, out: Path, run_id: str, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "loadkit.cli", "sweep", "soak", "--target", target,
        "--gpu", "none", "--set", "candidates=10", "--out", str(out), "--run-id", run_id, *args,
    ]  # fmt: skip


def _settings(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/v2/models/ranker/config", timeout=10) as response:
        return read_settings(json.loads(response.read()))


def _ready(url: str) -> bool:
    request = urllib.request.Request(f"{url}/v2/models/ranker/ready")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def test_window_sweep_at_a_low_rate_recommends_the_small_window(
    explicit: Any, tmp_path: Path
) -> None:
    original = _settings(explicit.http_url)
    # GIVEN 20 req/s (batches of 1: nothing to wait for) and three batching windows
    proc = subprocess.run(
        _sweep_argv(explicit.http_url, tmp_path, "window", "--vary")
        + ["max_queue_delay_us=1000,8000,20000", "--set", "rate=20"]
        + ["--duration", "8", "--warmup", "3"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = json.loads((tmp_path / "window" / "sweep.json").read_text())
    points = sweep["points"]
    assert [p["settings"]["max_queue_delay_us"] for p in points] == [1000, 8000, 20000]
    assert all(p["status"] == "measured" for p in points)
    # THEN P50 rises with the window (each request waits it out at this load) ...
    p50 = [p["numbers"]["p50_ms"] for p in points]
    assert p50[0] < p50[1] < p50[2], p50
    assert p50[2] - p50[0] > 10.0  # about the 19 ms between the windows
    # ... the small window is recommended, and the long one is called useless here
    assert sweep["recommended"]["settings"] == {"max_queue_delay_us": 1000}
    assert any(r["rule"] == "window useless" for r in points[2]["rules"])
    # ... each point is a run with its configuration in the manifest, read by report/compare
    for p in points:
        run = load_run(p["run"])
        assert run.info.sweep is not None
        assert run.info.sweep["settings"] == p["settings"]
        model = run.info.environment.server.models["ranker"]
        assert read_settings(model)["max_queue_delay_us"] == p["settings"]["max_queue_delay_us"]
    assert (tmp_path / "window" / "report.html").exists()
    compare = subprocess.run(
        [sys.executable, "-m", "loadkit.cli", "compare", points[0]["run"], points[2]["run"]]
        + ["-o", str(tmp_path / "cmp.html")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert compare.returncode == 0, compare.stderr
    # ... the same comparison from the runs alone (no repository control needed)
    from_runs = subprocess.run(
        [sys.executable, "-m", "loadkit.cli", "sweep", "--from-runs", points[0]["run"]]
        + [points[2]["run"], "--out", str(tmp_path), "--run-id", "by-hand"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert from_runs.returncode == 0, from_runs.stderr
    by_hand = json.loads((tmp_path / "by-hand" / "sweep.json").read_text())
    assert by_hand["recommended"]["settings"] == {"max_queue_delay_us": 1000}
    assert (tmp_path / "by-hand" / "report.html").exists()
    # ... and the server is left as it was found
    assert sweep["restored"]["ok"] is True
    assert _settings(explicit.http_url) == original


def test_a_point_triton_refuses_is_recorded_and_the_config_restored(
    explicit: Any, tmp_path: Path
) -> None:
    original = _settings(explicit.http_url)
    # GIVEN a preferred batch size above max_batch_size (32): Triton refuses to load it
    proc = subprocess.run(
        _sweep_argv(explicit.http_url, tmp_path, "refused", "--vary", "preferred_batch_size=64")
        + ["--duration", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # THEN the point is failed with Triton's words, no point measured (exit 3) ...
    assert proc.returncode == 3, proc.stderr
    sweep = json.loads((tmp_path / "refused" / "sweep.json").read_text())
    assert sweep["points"][0]["status"] == "failed" and sweep["points"][0]["error"]
    # ... and the original configuration is loaded back, the model ready
    assert sweep["restored"]["ok"] is True
    assert _settings(explicit.http_url) == original and _ready(explicit.http_url)


def test_sigint_mid_sweep_restores_the_original_configuration(
    explicit: Any, tmp_path: Path
) -> None:
    original = _settings(explicit.http_url)
    proc = subprocess.Popen(
        _sweep_argv(explicit.http_url, tmp_path, "stopped", "--vary")
        + ["max_queue_delay_us=7000,9000", "--set", "rate=10", "--duration", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # WHEN the first point is loaded and measuring, Ctrl-C
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if _settings(explicit.http_url)["max_queue_delay_us"] == 7000 and list(
                (tmp_path / "stopped").glob("01-*/load/*.jsonl")
            ):
                break
            time.sleep(0.5)
        else:
            pytest.fail("the first point never started")
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    # THEN the sweep ends as interrupted (130) with the server as it was found
    assert proc.returncode == 130, stderr
    sweep = json.loads((tmp_path / "stopped" / "sweep.json").read_text())
    assert sweep["status"] == "interrupted" and sweep["restored"]["ok"] is True
    assert _settings(explicit.http_url) == original and _ready(explicit.http_url)
    assert "Traceback" not in stderr


def test_a_server_not_in_explicit_mode_is_one_line_saying_how_to_start_it(
    tmp_path: Path,
) -> None:
    with EmbeddedTriton() as t:  # model control mode none
        proc = subprocess.run(
            _sweep_argv(t.http_url, tmp_path, "none", "--vary", "max_queue_delay_us=1000"),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert proc.returncode == 3, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and "explicit model-control mode" in errors[0], proc.stderr
    assert "--model-control explicit" in proc.stderr and "Traceback" not in proc.stderr


def test_at_a_higher_rate_batches_grow_with_the_window(explicit: Any, tmp_path: Path) -> None:
    original = _settings(explicit.http_url)
    # GIVEN 100 req/s, enough for requests to meet in a 30 ms window
    proc = subprocess.run(
        _sweep_argv(explicit.http_url, tmp_path, "batches", "--vary")
        + ["max_queue_delay_us=0,30000", "--set", "rate=100"]
        + ["--duration", "8", "--warmup", "3"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    points = json.loads((tmp_path / "batches" / "sweep.json").read_text())["points"]
    mean = [p["numbers"]["batch_size_mean"] for p in points]
    # THEN the window forms larger batches (Triton's own batch statistics)
    assert mean[1] > mean[0] + 1.0, mean
    assert _settings(explicit.http_url) == original
