"""The ranker's numpy code and its simulated-GPU hook, outside Triton.

model.py imports Triton's `triton_python_backend_utils`, which exists only in
the stub; a stand-in module lets us load it here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

from loadkit.target.config import template_dir


@pytest.fixture(scope="module")
def model_module() -> types.ModuleType:
    sys.modules.setdefault(
        "triton_python_backend_utils", types.ModuleType("triton_python_backend_utils")
    )
    spec = importlib.util.spec_from_file_location("ranker_model", template_dir() / "1" / "model.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_model(model_module: types.ModuleType, **params: str) -> object:
    model = model_module.TritonPythonModel()
    config = {"parameters": {k: {"string_value": v} for k, v in params.items()}}
    model.initialize({"model_config": json.dumps(config)})
    return model


def test_scores_are_deterministic_probabilities(model_module: types.ModuleType) -> None:
    ids = np.array([[1, 2, 3, -5, 2**62]], dtype=np.int64)
    user = np.linspace(-1, 1, 16, dtype=np.float32)[None]
    a = make_model(model_module)._score(ids, user)
    b = make_model(model_module)._score(ids, user)
    assert a.shape == (1, 5) and a.dtype == np.float32
    assert np.all((a > 0) & (a < 1)) and a.std() > 0.01
    np.testing.assert_array_equal(a, b)
    # A candidate's score does not depend on its batch-mates.
    np.testing.assert_allclose(
        make_model(model_module)._score(ids[:, :2], user), a[:, :2], rtol=1e-5
    )


def test_clock_factor_file(model_module: types.ModuleType, tmp_path: Path) -> None:
    state = tmp_path / "gpu.json"
    clock = model_module.ClockFactor(str(state))
    assert clock.get() == 1.0  # missing file: no slowdown
    state.write_text('{"clock_factor": 0.5}')
    clock._checked = 0.0
    assert clock.get() == 0.5
    state.write_text('{"clock_fa')  # torn write: keep the last good value
    os.utime(state, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    clock._checked = 0.0
    assert clock.get() == 0.5
    state.write_text('{"clock_factor": 7}')  # nonsense: treated as full speed
    os.utime(state, ns=(time.time_ns(), time.time_ns() + 2_000_000))
    clock._checked = 0.0
    assert clock.get() == 1.0
    assert model_module.ClockFactor("").get() == 1.0
