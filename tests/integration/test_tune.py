"""`loadkit tune` against the real Triton in explicit model-control mode.

A small space (max_batch_size 1 or 8 on a ranker whose compute is mostly per
batch): tune profiles once, predicts both, verifies the best predicted one with
a capacity search and recommends it; a direct capacity search of the other
configuration confirms it holds less. The server's configuration is left as
it was found.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadkit.target.server import EmbeddedTriton

pytestmark = pytest.mark.integration

SEARCH = ["--gpu", "none", "--max-rate", "600", "--settle", "1", "--window", "1"]


@pytest.fixture(scope="module")
def explicit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("triton_tune") / "triton.log"
    params = {"gpu_time_us_per_batch": 20000, "gpu_time_us_per_item": 500}
    with EmbeddedTriton(
        model_control="explicit", max_batch_size=8, model_params=params, log_path=log
    ) as t:
        yield t


def _config(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/v2/models/ranker/config", timeout=10) as response:
        value: dict[str, Any] = json.loads(response.read())
        return value


def test_tune_recommends_what_a_direct_measurement_confirms_and_restores(
    explicit: Any, tmp_path: Path
) -> None:
    url = explicit.http_url
    before = _config(url)
    proc = subprocess.run(
        [sys.executable, "-m", "loadkit.cli", "tune", "soak", "--target", url,
         "--slo", "p99=100ms", "--space", "max_batch_size=1,8", "--verify", "1",
         "--profile-step", "1.5", "--set", "rate=20", "--set", "duration_s=20",
         "--max-duration", "40", "--start", "50", "--peak", "1000", "--out", str(tmp_path), "--run-id", "t",
         *SEARCH],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    tune = json.loads((tmp_path / "t" / "tune.json").read_text())
    # THEN the space, the profile, both predictions and one verification are in tune.json ...
    assert tune["space"] == {"max_batch_size": [1, 8]}
    assert set(tune["profile"]["compute_ms"]) == {"1"}
    assert (tmp_path / "t" / "profile.json").exists()
    predicted = {p["label"]: p["predicted"]["capacity_rps"] for p in tune["predictions"]}
    assert predicted["max_batch_size=8"] > predicted["max_batch_size=1"]
    (verified,) = tune["verifications"]
    assert verified["label"] == "max_batch_size=8" and verified["status"] == "measured"
    # ... the recommendation is the verified configuration, its replicas for the peak ...
    rec = tune["recommended"]
    assert rec["settings"] == {"max_batch_size": 8}
    assert rec["replicas"] >= 1 and rec["sentence"] in proc.stdout
    assert (tmp_path / "t" / "report.html").exists()
    # ... and the configuration is the one the server had
    assert tune["restored"]["ok"] is True
    assert _config(url) == before
    # a direct measurement of the other configuration confirms it holds less
    direct = subprocess.run(
        [sys.executable, "-m", "loadkit.cli", "sweep", "capacity", "--target", url,
         "--slo", "p99=100ms", "--vary", "max_batch_size=1", "--max-duration", "20", "--start", "20",
         "--out", str(tmp_path), "--run-id", "direct", *SEARCH],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert direct.returncode == 0, direct.stderr[-3000:]
    sweep = json.loads((tmp_path / "direct" / "sweep.json").read_text())
    other = sweep["points"][0]["numbers"]["capacity_rps"]
    assert other < verified["measured_capacity_rps"] / 2
    assert _config(url) == before
