"""Synthetic runs shared by the analysis tests (written once per module through the real writers)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from loadkit.analysis import analyze_run
from loadkit.analysis.model import Analysis
from loadkit.rundir import load_run
from loadkit.testing.synthetic import DEFAULT_START_NS, RunSpec, write_run


@pytest.fixture(scope="module")
def analyze_spec(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Analysis]:
    """Write a run for a spec, analyze it; cached per spec within the module."""
    cache: dict[str, Analysis] = {}
    root: Path = tmp_path_factory.mktemp("runs")

    def run(
        spec: RunSpec, name: str = "run", start_ns: int = DEFAULT_START_NS, **slo: float
    ) -> Analysis:
        key = f"{name}:{start_ns}:{spec!r}"
        if key not in cache:
            path = write_run(spec, root, run_id=f"{name}-{len(cache)}", start_ns=start_ns)
            cache[key] = analyze_run(load_run(path), slo=slo or None)
        return cache[key]

    return run
