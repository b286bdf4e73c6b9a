"""A synthetic run directory and a matching `Analysis`, built directly from the model.

The analysis is constructed value by value (not by the pipeline), so reporter
tests can assert that exactly these numbers reach the report.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from loadkit.analysis import model as m
from loadkit.rundir import Run, load_run, write_manifest

HOSTILE = "</script><img src=x onerror=alert(1)>"
T0_NS = 1_764_449_000_000_000_000
TITLES = {m.CAUSE_GPU_THERMAL: "GPU thermal throttling", m.CAUSE_BATCHING_WINDOW: "Batching window"}


def _series(values: np.ndarray) -> tuple[float | None, ...]:
    return tuple(None if not math.isfinite(float(v)) else round(float(v), 4) for v in values)


def make_manifest(
    run_id: str = "20251129-205000-burst",
    hostile: str | None = None,
    max_queue_delay_us: int = 2000,
) -> dict[str, Any]:
    model = hostile or "ranker"
    label = hostile or "burst"
    return {
        "schema_version": 1,
        "run_id": run_id,
        "kind": "load",
        "status": "complete",
        "start_ns": T0_NS,
        "end_ns": T0_NS + 600 * 10**9,
        "command_line": ["loadkit", "run", "scenarios/burst.py", "--rate", "100", "--label", label],
        "loadkit_version": "0.1.0",
        "scenario": {
            "name": label,
            "path": "scenarios/burst.py",
            "params": {"rate": 100, "burst": 2.0, "label": label},
        },
        "target": {
            "url": "http://127.0.0.1:8000",
            "protocol": "http",
            "model": model,
            "embedded": True,
        },
        "slo": {"p99_ms": 50, "errors_pct": 0.1},
        "environment": {
            "host": {
                "hostname": "ci-host",
                "os": "Linux 6.1",
                "python": "3.11.9",
                "cpu_model": "Xeon",
                "cores_logical": 2,
                "cores_physical": 1,
                "governor": "performance",
                "memory_bytes": 8 * 2**30,
            },
            "gpu": {
                "kind": "simulated",
                "devices": [
                    {
                        "index": 0,
                        "name": "Simulated H100",
                        "uuid": "GPU-sim",
                        "driver": "sim",
                        "cuda": "sim",
                        "power_limit_w": 400,
                        "max_sm_clock_mhz": 1980,
                        "max_mem_clock_mhz": 2619,
                        "slowdown_temp_c": 87,
                    }
                ],
            },
            "server": {
                "name": "triton",
                "version": "2.51.0",
                "extensions": [],
                "models": {
                    model: {
                        "name": model,
                        "max_batch_size": 32,
                        "dynamic_batching": {"max_queue_delay_microseconds": max_queue_delay_us},
                    }
                },
            },
        },
        "sources": [
            {
                "name": "gpu",
                "file": "telemetry/gpu.jsonl",
                "interval_s": 0.1,
                "simulated": True,
                "warning": None,
            }
        ],
        "notes": ["GPU telemetry is simulated"],
    }


def make_run(
    path: Path,
    hostile: str | None = None,
    run_id: str | None = None,
    max_queue_delay_us: int = 2000,
) -> Run:
    path.mkdir(parents=True, exist_ok=True)
    write_manifest(path, make_manifest(run_id or path.name, hostile, max_queue_delay_us))
    return load_run(path)


def make_analysis(
    n: int = 600,
    hostile: str | None = None,
    passed: bool = False,
    run_id: str = "20251129-205000-burst",
    p99_scale: float = 1.0,
    cause: str = m.CAUSE_GPU_THERMAL,
    seed: int = 0,
) -> m.Analysis:
    """`n` one-second windows: P99 ~20 ms with 3 s spikes every 30 s, a 2x burst at n/2."""
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=float)
    spike = (t % 30) < 3
    burst = (t >= n // 2) & (t < n // 2 + 10)
    p50 = 5 + rng.random(n)
    p99 = (20 + 60 * spike + 30 * burst + rng.random(n) * 3) * p99_scale
    offered = np.where(burst, 200.0, 100.0)
    clock = np.where(spike, 1200.0, 1980.0)
    sizes = tuple(range(1, 33))
    counts = tuple(
        tuple(int(x) for x in row) for row in rng.poisson(np.linspace(6, 0.2, 32), size=(n, 32))
    )
    text = hostile or ""
    model = hostile or "ranker"
    episodes = tuple(
        m.SpikeEpisode(
            episode_id=f"p99#{i + 1}",
            percentile="p99",
            kind="corrected",
            start_ns=T0_NS + int(s) * 10**9,
            end_ns=T0_NS + int(s + 3) * 10**9,
            start_s=float(s),
            duration_s=3.0,
            peak_ns=T0_NS + int(s + 1) * 10**9,
            peak_ms=82.0,
            baseline_ms=21.0,
            excess_ms=61.0,
            excess_area_ms_s=180.0,
            peak_ratio=3.9,
            peak_z=12.0,
            windows=3,
            causes=(cause,),
        )
        for i, s in enumerate(range(0, n, 30))
    )
    lat = lambda kind, scale: m.LatencyWindows(  # noqa: E731
        kind=kind,
        count=tuple([100] * n),
        p50_ms=_series(p50 * scale),
        p95_ms=_series(p50 * 2 * scale),
        p99_ms=_series(p99 * scale),
        p999_ms=_series(p99 * 1.4 * scale),
        max_ms=_series(p99 * 2 * scale),
        basis_count=tuple([100] * n),
    )
    windows = m.WindowSeries(
        window_s=1.0,
        t_ns=tuple(T0_NS + i * 10**9 for i in range(n)),
        t_s=tuple(float(x) for x in t),
        corrected=lat("corrected", 1.0),
        service=lat("service", 0.8),
        basis_s=tuple([1.0] * n),
        throughput_rps=_series(offered - rng.random(n)),
        offered_rps=_series(offered),
        errors_per_s=_series(np.zeros(n)),
        error_pct=_series(np.zeros(n)),
        dropped_per_s=_series(np.zeros(n)),
        in_flight=_series(np.full(n, 3.0)),
    )
    telemetry = m.TelemetryWindows(
        gpu_sm_clock_mhz=_series(clock),
        gpu_sm_clock_max_mhz=_series(np.full(n, 1980.0)),
        gpu_temp_c=_series(70 + 15 * ((t % 30) / 30)),
        gpu_power_w=_series(300 + 50 * rng.random(n)),
        gpu_power_limit_w=_series(np.full(n, 400.0)),
        gpu_util_pct=_series(60 + 20 * rng.random(n)),
        gpu_thermal_reason=_series(spike.astype(float)),
        cpu_core_max_pct=_series(50 + 40 * rng.random(n)),
        cpu_mean_pct=_series(30 + 20 * rng.random(n)),
        cgroup_throttled_pct=_series(np.zeros(n)),
        queue_ms_per_request=_series(1 + burst * 10 + rng.random(n)),
        compute_ms_per_request=_series(3 + spike * 4 + rng.random(n) * 0.2),
        batch_size_mean=_series(np.full(n, 4.0)),
        batch_sizes=m.BatchSizeMatrix(sizes=sizes, counts=counts),
    )
    summary = lambda kind, s: m.LatencySummary(  # noqa: E731
        kind=kind,
        count=100 * n,
        p50_ms=5.4 * s,
        p90_ms=9.0 * s,
        p95_ms=10.9 * s,
        p99_ms=78.5 * s * p99_scale,
        p999_ms=110.0 * s * p99_scale,
        max_ms=170.0 * s,
        mean_ms=7.0 * s,
    )
    overall = m.OverallStats(
        duration_s=float(n),
        offered=100 * n + 1000,
        completed=100 * n + 995,
        ok=100 * n + 990,
        errors=5,
        dropped=5,
        out_of_range=0,
        error_pct=0.0083,
        dropped_pct=0.0083,
        throughput_rps=101.6,
        offered_rps=101.7,
        corrected=summary("corrected", 1.0),
        service=summary("service", 0.8),
        error_kinds={text or "http_503": 5},
        error_messages={text or "http_503": [f"[503] {text or 'Exceeds maximum queue size'}"]},
    )
    finding = m.Finding(
        cause=cause,
        title=(f"{TITLES.get(cause, cause)} {text}").strip(),
        confidence="strong",
        episodes=tuple(e.episode_id for e in episodes),
        episodes_total=len(episodes),
        coincidence=1.0,
        baseline_rate=0.02,
        lift=50.0,
        p_value=1e-9,
        cliffs_delta=0.95,
        lag_s=-1.0,
        evidence=(
            m.Evidence(name="SM clock in episodes", value=1200.0, unit="MHz", note=text),
            m.Evidence(name="SM clock at baseline", value=1980.0, unit="MHz"),
            m.Evidence(name="thermal reason share", value=0.97, unit="fraction"),
        ),
        summary=f"SM clock fell from 1980 to 1200 MHz in every P99 spike {text}".strip() + ".",
        action=f"Check GPU cooling and airflow; cap clocks to a sustainable level. {text}".strip(),
    )
    burst_start = T0_NS + (n // 2) * 10**9
    return m.Analysis(
        schema_version=1,
        run=m.RunInfo(
            run_id=run_id,
            path=f"reports/{run_id}",
            kind="load",
            status="complete",
            scenario=hostile or "burst",
            target_url="http://127.0.0.1:8000",
            model=model,
            start_ns=T0_NS,
            end_ns=T0_NS + n * 10**9,
            duration_s=float(n),
            gpu_kind="simulated",
            simulated=True,
            loadkit_version="0.1.0",
            analyzed_with="0.1.0",
        ),
        window_s=1.0,
        windows=windows,
        telemetry=telemetry,
        phases=(
            m.PhaseMark(t_ns=burst_start, t_s=float(n // 2), name="burst-start", rate=200.0),
            m.PhaseMark(
                t_ns=burst_start + 10 * 10**9, t_s=float(n // 2 + 10), name="burst-end", rate=100.0
            ),
        ),
        overall=overall,
        nines=m.NinesDistribution(
            percentiles=(50.0, 90.0, 99.0, 99.9, 99.99, 99.999, 100.0),
            corrected_ms=(5.4, 9.0, 78.5 * p99_scale, 110.0 * p99_scale, 150.0, 165.0, 170.0),
            service_ms=(4.3, 7.2, 62.8, 88.0, 120.0, None, 136.0),
        ),
        episodes=episodes,
        periodicity=(
            m.Periodicity(
                percentile="p99",
                periodic=True,
                period_s=30.0,
                jitter_s=0.4,
                strength=0.8,
                p_value=1e-8,
                cycles=n / 30,
                episodes_used=len(episodes),
                reason="confirmed",
            ),
        ),
        findings=() if passed else (finding,),
        causes_checked=(
            m.CauseCheck(cause=cause, status="found", reason="signature in every episode"),
            m.CauseCheck(
                cause=m.CAUSE_CGROUP_THROTTLING,
                status="not_assessable",
                reason=f"no cgroup data {text}".strip(),
            ),
        ),
        verdict=m.Verdict(
            passed=passed,
            slos=(
                m.SloVerdict(
                    name="p99", threshold=50.0, unit="ms", observed=78.5 * p99_scale, passed=passed
                ),
                m.SloVerdict(name="errors", threshold=0.1, unit="%", observed=0.0083, passed=True),
            ),
            source="command line",
            summary="P99 78.5 ms exceeds 50 ms." if not passed else "All thresholds met.",
        ),
        alerts=(
            m.Alert(
                name="p99_ceiling",
                severity="warn",
                message=f"P99 above 80 ms for 20 windows {text}".strip(),
            ),
        ),
        recoveries=(
            m.BurstRecovery(
                burst_start_ns=burst_start,
                burst_end_ns=burst_start + 10 * 10**9,
                rate=200.0,
                pre_burst_p99_ms=21.0,
                band_upper_ms=26.0,
                recovered=True,
                recovery_s=6.0,
                recovered_at_ns=burst_start + 16 * 10**9,
                peak_p99_ms=53.0,
                peak_excess_ms=32.0,
                excess_area_ms_s=250.0,
                batch_size_mean_before=4.0,
                batch_size_mean_during=9.0,
                queue_ms_before=1.2,
                queue_ms_during=11.0,
            ),
        ),
        knee=None,
        soak=None,
        headline=(
            "FAIL: P99 78.5 ms exceeds the 50 ms SLO; spikes every 30 s are explained by GPU thermal throttling."
            if not passed
            else "PASS: all SLO thresholds met."
        ),
        notes=(f"window note {text}".strip(),),
    )
