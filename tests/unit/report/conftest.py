"""Fixtures for the reporter tests (the builder itself is in analysis_builder.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from analysis_builder import make_analysis, make_run

from loadkit.analysis.model import Analysis
from loadkit.rundir import Run


@pytest.fixture
def synthetic(tmp_path: Path) -> tuple[Run, Analysis]:
    """A 10-minute run: periodic P99 spikes from GPU thermal throttling and a 2x burst."""
    return make_run(tmp_path / "20251129-205000-burst"), make_analysis()
