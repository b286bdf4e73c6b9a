"""`loadkit import --prometheus`: a real Prometheus scrapes the real Triton under load.

Debian's `prometheus` and `prometheus-node-exporter` are started by the test on
127.0.0.1 (ephemeral ports, temporary storage, 1 s scrapes) and stopped by PID.
They scrape the embedded Triton (summary latencies on) while `loadkit run` puts
load on it and the model slows down every 5 s. Then `loadkit import
--prometheus` pulls that window, and the analysis of Prometheus's data alone
finds the spikes and their period, the same period (within 5 %) as the load
test's own run directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadkit.analysis.periodicity import run_period
from loadkit.analysis.pipeline import DEFAULT_WARMUP_S, analyze_run
from loadkit.cli import main
from loadkit.faults.model_slowdown import ModelSlowdown
from loadkit.faults.schedule import FaultSchedule
from loadkit.rundir import load_run
from loadkit.target.server import EmbeddedTriton
from tests.integration.prometheus_server import free_port, needs_prometheus, running_prometheus

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PERIOD_S = 5.0
LOAD_S = 60.0


@pytest.fixture
def slow_triton(tmp_path: Path) -> Iterator[tuple[EmbeddedTriton, Path]]:
    state = tmp_path / "slowdown.json"
    with EmbeddedTriton(
        log_path=tmp_path / "triton.log",
        metrics_config=("summary_latencies=true",),
        model_params={"slowdown_state": str(state)},
    ) as triton:
        yield triton, state


@pytest.fixture
def prometheus(tmp_path: Path, slow_triton: tuple[EmbeddedTriton, Path]) -> Iterator[str]:
    triton, _ = slow_triton
    with running_prometheus(tmp_path, triton.metrics_url) as url:
        yield url


def _loadkit(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadkit.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@needs_prometheus
def test_prometheus_window_finds_the_spikes_and_the_load_tests_period(
    slow_triton: tuple[EmbeddedTriton, Path], prometheus: str, tmp_path: Path
) -> None:
    triton, state = slow_triton
    # GIVEN load on the real Triton, its model 20x slower for 1.5 s every 5 s
    fault = ModelSlowdown(
        state, FaultSchedule(duration_s=1.5, period_s=PERIOD_S, first_start_s=10.0), factor=20.0
    )
    with fault:
        load = _loadkit(
            "run", str(REPO / "scenarios" / "soak.py"), "--target", triton.http_url,
            "--set", "rate=120", "--duration", str(LOAD_S), "--out", str(tmp_path),
            "--run-id", "load", "--no-telemetry", "--no-progress",
            timeout=LOAD_S + 60,
        )  # fmt: skip
    assert load.returncode in (0, 1), load.stderr[-2000:]
    load_run_dir = tmp_path / "load"
    manifest = json.loads((load_run_dir / "manifest.json").read_text())
    time.sleep(2.0)  # the last scrapes of the window

    # WHEN that window (after the load test's 8 s warm-up, which its analysis leaves
    # out too) is imported from Prometheus alone and analyzed
    window_s = (manifest["end_ns"] - manifest["start_ns"]) / 1e9 - DEFAULT_WARMUP_S
    imported = _loadkit(
        "import", "--prometheus", prometheus, "--window", f"{window_s:.1f}s",
        "--end", f"{manifest['end_ns'] / 1e9:.3f}", "--step", "1s",
        "--selector", '{job="triton"}', "--selector", 'node={job="node"}',
        "--out", str(tmp_path), "--run-id", "prod",
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr[-2000:]
    prod = load_run(tmp_path / "prod")
    assert prod.info.kind == "production"
    assert prod.info.production is not None
    assert prod.info.production["latency_source"] == "triton-summary"
    assert prod.has_series("host") and prod.has_series("triton_stats")
    # every core's busy share, as the imported PromQL gives it, is a share (0-100 %)
    rows = prod.series("host")["cpu_per_core_pct"].dropna()
    per_core = [v for row in rows for v in row if v is not None and v == v]  # NaN: no point
    assert per_core and 0.0 <= min(per_core) and max(per_core) <= 100.0, per_core
    from_prometheus = analyze_run(prod)
    from_load_test = analyze_run(load_run(load_run_dir))

    # THEN Prometheus's data shows the spikes and the period the load test saw
    assert from_prometheus.episodes, from_prometheus.notes
    # the run's period, as the headline states it (the primary's, else the most significant)
    prom_period = run_period(from_prometheus.periodicity, from_prometheus.primary)
    load_period = run_period(from_load_test.periodicity, from_load_test.primary)
    assert load_period is not None and load_period.period_s, from_load_test.periodicity
    assert prom_period is not None and prom_period.period_s, from_prometheus.periodicity
    assert load_period.period_s == pytest.approx(PERIOD_S, rel=0.1)
    assert prom_period.period_s == pytest.approx(load_period.period_s, rel=0.05)
    # per-request causes are not guessed from metrics, and every series' source is said
    checks = {c.cause: c for c in from_prometheus.causes_checked}
    assert checks["process_stall"].status == "not_assessable"
    assert "not assessable from metrics" in checks["process_stall"].reason
    assert any("at a 1 s step" in n for n in from_prometheus.notes)
    assert any(
        n.startswith("series production_latency from triton-summary")
        and "nv_inference_request_summary_us" in n
        for n in from_prometheus.notes
    )

    # AND `loadkit analyze` and `loadkit report` read it like any run, the sources stated
    assert main(["analyze", str(tmp_path / "prod")]) == 0
    assert main(["report", str(tmp_path / "prod")]) == 0
    html = (tmp_path / "prod" / "report.html").read_text()
    assert "at a 1 s step" in html and "not assessable from metrics" in html
    assert "mean (not a percentile)" in html

    # AND an application histogram (Prometheus's own, scraped every second) is read with
    # histogram_quantile per step when there are no summaries
    histogram = _loadkit(
        "import", "--prometheus", prometheus, "--window", f"{window_s:.1f}s",
        "--end", f"{manifest['end_ns'] / 1e9:.3f}", "--step", "2s",
        "--selector", '{job="triton"}', "--selector", 'triton-summary={job="none"}',
        "--latency-histogram", "prometheus_http_request_duration_seconds",
        "--selector", 'app-histogram={job="prometheus",handler="/metrics"}',
        "--out", str(tmp_path), "--run-id", "hist",
    )  # fmt: skip
    assert histogram.returncode == 0, histogram.stderr[-2000:]
    hist_run = load_run(tmp_path / "hist")
    assert hist_run.info.production is not None
    assert hist_run.info.production["latency_source"] == "app-histogram"
    p99 = hist_run.series("production_latency")["p99_ms"].dropna()
    assert len(p99) > 10 and (p99 > 0).all()


@needs_prometheus
def test_unreachable_prometheus_is_one_line_exit_3(tmp_path: Path) -> None:
    proc = _loadkit(
        "import", "--prometheus", f"http://127.0.0.1:{free_port()}", "--window", "1h",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 3
    assert "cannot reach Prometheus" in proc.stderr
    assert "Traceback" not in proc.stderr
