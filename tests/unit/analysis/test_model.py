import json
import math

import pytest

from loadkit.analysis.model import (
    Analysis,
    Evidence,
    Finding,
    LatencyWindows,
    from_jsonable,
    to_jsonable,
)
from loadkit.errors import RunFormatError
from loadkit.testing.synthetic import demo_spec


def test_nan_and_inf_become_null_and_numpy_scalars_plain():
    import numpy as np

    data = to_jsonable(Evidence("x", float("nan"), "ms"))
    assert data["value"] is None
    assert to_jsonable((np.float64(1.5), np.int64(2), math.inf)) == [1.5, 2, None]


def test_nested_dataclasses_round_trip():
    finding = Finding(
        cause="gpu_clock_thermal",
        title="t",
        confidence="strong",
        episodes=("p99#1",),
        episodes_total=1,
        coincidence=1.0,
        baseline_rate=0.0,
        lift=None,
        p_value=0.01,
        cliffs_delta=0.9,
        lag_s=-1.0,
        evidence=(Evidence("clock", 1100.0, "MHz"),),
        summary="s",
        action="a",
    )
    again = from_jsonable(Finding, json.loads(json.dumps(to_jsonable(finding))))
    assert again == finding
    lw = LatencyWindows(
        "corrected", (1, 2), (1.0, None), (1.0, None), (1.0, None), (1.0, None), (1.0, None), (1, 0)
    )
    assert from_jsonable(LatencyWindows, to_jsonable(lw)) == lw


def test_analysis_file_round_trips_and_refuses_unknown_versions(analyze_spec, tmp_path):
    analysis = analyze_spec(demo_spec(1), "demo")
    path = tmp_path / "analysis.json"
    analysis.save(path)
    assert Analysis.load(path) == analysis
    data = json.loads(path.read_text())
    data["schema_version"] = 99
    with pytest.raises(RunFormatError, match="schema_version 99"):
        Analysis.from_dict(data)


def test_every_window_series_has_one_value_per_window(analyze_spec):
    a = analyze_spec(demo_spec(1), "demo")
    n = len(a.windows.t_ns)
    assert n == 90
    for name in (
        "throughput_rps",
        "offered_rps",
        "errors_per_s",
        "error_pct",
        "dropped_per_s",
        "basis_s",
    ):
        assert len(getattr(a.windows, name)) == n, name
    for name in ("p50_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms", "count"):
        assert len(getattr(a.windows.corrected, name)) == n
        assert len(getattr(a.windows.service, name)) == n
    t = a.telemetry
    for name in (
        "gpu_sm_clock_mhz",
        "gpu_temp_c",
        "cpu_core_max_pct",
        "batch_size_mean",
        "queue_ms_per_request",
    ):
        assert len(getattr(t, name)) == n, name
    assert t.batch_sizes is not None and len(t.batch_sizes.counts) == n
    assert a.nines.percentiles[-1] == 100.0 and len(a.nines.corrected_ms) == len(
        a.nines.percentiles
    )
