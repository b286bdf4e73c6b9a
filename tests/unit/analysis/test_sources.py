"""The analysis side of the telemetry-source registry: aligned series by source name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from loadkit.analysis import pipeline
from loadkit.analysis import sources as analysis_sources
from loadkit.analysis.align import make_grid
from loadkit.analysis.sources import align_declared, declared
from loadkit.rundir import load_run
from loadkit.testing.synthetic import RunSpec, write_run

S = 1_000_000_000


def test_aligned_sources_are_named_as_the_recorded_ones() -> None:
    from loadkit.telemetry import sources as recorded

    assert {s.name for s in analysis_sources.REGISTRY} <= set(recorded.BY_NAME)


def test_declared_fields_aggregate_per_window_as_declared() -> None:
    grid = make_grid(0, 3 * S, 1.0)
    frame = pd.DataFrame(
        {
            "t_ns": [0, S // 2, S, 3 * S // 2, 2 * S],
            "temp_c": [50.0, 60.0, 70.0, 80.0, 90.0],
            "energy_j": [0.0, 100.0, 200.0, 10.0, 110.0],  # a reset at 1.5 s
        }
    )
    out = align_declared(frame, grid, {"temp_c": "max", "energy_j": "rate", "fan_pct": "mean"})
    assert out is not None
    assert out["temp_c"].tolist()[:2] == [60.0, 80.0]
    assert out["energy_j"][0] == pytest.approx(200.0)  # 100 J per 0.5 s
    assert out["fan_pct"] is None  # not in the rows
    assert out.counter_resets == 1
    assert align_declared(pd.DataFrame(), grid, {"temp_c": "max"}) is None


def test_an_unknown_aggregation_is_refused_when_declared() -> None:
    with pytest.raises(ValueError, match="unknown aggregation"):
        declared("fan", {"fan_pct": "median"})


def test_a_declared_source_is_aligned_and_reaches_the_signals_without_an_aligner(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # GIVEN a run that recorded a `fan` series beside the usual ones
    path = write_run(RunSpec(duration_s=30), tmp_path, run_id="fan")
    start = json.loads((path / "manifest.json").read_text())["start_ns"]
    with open(path / "telemetry" / "fan.jsonl", "w") as f:
        for i in range(60):
            f.write(json.dumps({"t_ns": start + i * S // 2, "fan_pct": 30.0 + i % 2}) + "\n")
    before = pipeline.align(load_run(path))
    # AND the fan source registered with its fields' aggregation (one entry)
    fan = declared("fan", {"fan_pct": "mean"})
    monkeypatch.setattr(analysis_sources, "REGISTRY", (*analysis_sources.REGISTRY, fan))
    # WHEN the run is aligned and attributed
    aligned = pipeline.align(load_run(path))
    attributed = pipeline.attribute(aligned, pipeline.detect(aligned))
    # THEN the fan's windows are there by name, next to the typed sources
    fan_pct = aligned.sources["fan"]["fan_pct"]
    assert np.nanmean(fan_pct) == pytest.approx(30.5)
    assert attributed.signals.sources["fan"] is aligned.sources["fan"]
    assert attributed.signals.gpu is aligned.gpu is aligned.sources["gpu"]
    assert attributed.signals.triton is aligned.sources["triton_stats"]
    # AND the usual sources' windows (analysis.json) are unchanged
    assert aligned.telemetry == before.telemetry
