"""ModelSlowdown: the state file the ranker reads holds the factor in each window, 1.0 after."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadkit.faults import ModelSlowdown
from loadkit.faults.schedule import FaultSchedule, FaultUnavailable
from tests.unit.faults_fakes import FakeClock


def test_writes_the_factor_in_each_window_and_resets_it(tmp_path: Path) -> None:
    state = tmp_path / "slowdown.json"
    fault = ModelSlowdown(
        state,
        FaultSchedule(duration_s=2.0, period_s=9, first_start_s=1, count=2),
        factor=2.5,
        run_dir=tmp_path,
        clock=FakeClock(),
    )
    written: list[float] = []
    original = fault._write

    def spy(factor: float) -> None:
        written.append(factor)
        original(factor)

    fault._write = spy  # type: ignore[method-assign]
    fault.start()
    assert fault.join(5.0)
    fault.stop()
    # reset at start, then on/off per window, and reset at stop
    assert written[:5] == [1.0, 2.5, 1.0, 2.5, 1.0] and written[-1] == 1.0
    assert json.loads(state.read_text()) == {"factor": 1.0}
    rows = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(r["name"], r["action"]) for r in rows] == [
        ("model-slowdown", "start"),
        ("model-slowdown", "end"),
    ] * 2
    assert rows[0]["factor"] == 2.5


def test_a_factor_below_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FaultUnavailable, match=">= 1"):
        ModelSlowdown(tmp_path / "s.json", FaultSchedule(duration_s=1), factor=0.5)


def test_the_ranker_reads_the_factor(tmp_path: Path) -> None:
    # The model file's reader class, loaded without Triton (its import of
    # triton_python_backend_utils is replaced by a stub module).
    import importlib.util
    import sys
    import types

    sys.modules.setdefault("triton_python_backend_utils", types.ModuleType("tpbu"))
    import loadkit

    path = Path(loadkit.__file__).parent / "target/model_repository/ranker/1/model.py"
    spec = importlib.util.spec_from_file_location("ranker_model_under_test", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    state = tmp_path / "slowdown.json"
    reader = module.ClockFactor(str(state), "factor", 0.999, 100.0)
    assert reader.get() == 1.0  # no file: no slowdown
    state.write_text(json.dumps({"factor": 3.0}))
    reader._checked = 0.0
    assert reader.get() == 3.0
