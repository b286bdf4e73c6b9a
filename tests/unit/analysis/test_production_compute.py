"""A production window at a coarse step still names the model's own compute (issue 42, item 8).

Triton's counters from a fake Prometheus (tests/unit/telemetry/test_prometheus_import.py):
120 req/s, the model 12x slower for 5 s of every 16 s, batches larger while it is slow,
and a 60 s summary P99 that is flat all along. At a 5 s step the slow spells and their
margins leave fewer than 3 calm windows between them, so the baseline is the quietest
windows; read from the flat P99 they were any windows, slow ones among them, and the
compute fit learnt "bigger batches take 25 ms more each": no cause found. Read from the
series the episodes were found on (the mean), they are the calm steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadkit.analysis.causes.unexplained import CAUSE_COMPUTE
from loadkit.analysis.pipeline import analyze_run
from loadkit.cli import main
from loadkit.rundir import load_run
from tests.unit.telemetry.test_prometheus_import import START, Series, fake  # noqa: F401

RATE = 120.0
PERIOD_S, SLOW_S = 16, 5
WINDOW_S = 20 * PERIOD_S


def _slow(s: int) -> bool:
    return s % PERIOD_S < SLOW_S


def _per_second(s: int) -> tuple[float, float, float]:
    """(executions, compute per batch in us, latency per request in us) in second s."""
    jitter = 1.0 + 0.03 * ((s * 7919) % 11 - 5) / 5  # deterministic +-3 %
    if _slow(s):
        return RATE / 5, 48_000.0 * jitter, 60_000.0 * jitter
    return RATE / 2, 4_000.0 * jitter, 6_000.0 * jitter


def _cumulative(part: int) -> Any:
    def value(t: float) -> float:
        total = 0.0
        for s in range(int(t)):
            execs, compute, latency = _per_second(s)
            # Triton charges every request of a batch the batch's whole compute time
            total += (execs, RATE * compute, RATE * latency)[part]
        return total

    return value


def _series() -> Series:
    labels = {"model": "ranker", "version": "1", "job": "triton"}
    return {
        "nv_inference_request_success": [(labels, lambda t: RATE * int(t))],
        "nv_inference_count": [(labels, lambda t: RATE * int(t))],
        "nv_inference_exec_count": [(labels, _cumulative(0))],
        "nv_inference_compute_infer_duration_us": [(labels, _cumulative(1))],
        "nv_inference_request_duration_us": [(labels, _cumulative(2))],
        "nv_inference_queue_duration_us": [(labels, lambda t: 1000.0 * RATE * int(t))],
        "nv_inference_request_summary_us": [
            ({**labels, "quantile": q}, lambda t, v=v: v)
            for q, v in (("0.5", 6_000.0), ("0.99", 75_000.0))
        ],
    }


def test_a_coarse_production_window_names_the_models_compute_first(
    fake: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    server = fake(_series())
    # WHEN the window is imported at a 5 s step and analyzed
    assert (
        main(
            ["import", "--prometheus", server.url, "--window", f"{WINDOW_S}s"]
            + ["--end", str(START + WINDOW_S), "--step", "5s"]
            + ["--out", str(tmp_path), "--run-id", "prod"]
        )
        == 0
    )
    analysis = analyze_run(load_run(tmp_path / "prod"))
    assert analysis.window_s == 5.0 and analysis.primary == "mean"
    # THEN the model's own compute is the first finding, every 16 s, nothing else moved
    assert analysis.findings, [(c.cause, c.reason) for c in analysis.causes_checked]
    top = analysis.findings[0]
    assert top.cause == CAUSE_COMPUTE, analysis.headline
    assert top.confidence == "strong", top.summary
    assert len(top.episodes) >= 0.8 * top.episodes_total, top.summary
    assert "at the same batch size" in top.summary and "moved" not in top.summary, top.summary
    assert analysis.headline.startswith(
        "FAIL. Unexplained compute slowdown (strong) explains"
    ) or analysis.headline.startswith("PASS. Unexplained compute slowdown (strong) explains")
    assert "every 16 s" in analysis.headline, analysis.headline
