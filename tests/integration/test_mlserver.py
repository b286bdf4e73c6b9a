"""MLServer 1.7 as a second real KServe v2 server: loadkit loads it and says what it cannot see.

MLServer has no Triton configuration endpoint, no statistics extension and
no binary tensors over HTTP. Its own venv (`scripts/setup.sh --with-mlserver`,
which `make test` runs) keeps its numpy 2 away from loadkit's pins. The model
`doc_scorer` takes the same inputs as the Triton test model `doc_ranker`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadkit.load.orchestrator import run_scenario
from loadkit.load.summary import summarize_run
from loadkit.rundir import load_run
from loadkit.target.ports import choose_ports

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MLSERVER = REPO / ".venv-mlserver" / "bin" / "mlserver"
MODELS = Path(__file__).parent / "mlserver_models"
SOAK = REPO / "scenarios" / "soak.py"
INPUT_DATA = REPO / "tests" / "data" / "doc_ranker_input.json"
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class MLServer:
    def __init__(self, http: int, grpc: int) -> None:
        self.http_url = f"http://127.0.0.1:{http}"
        self.grpc_url = f"127.0.0.1:{grpc}"


def _ready(url: str) -> bool:
    try:
        with _OPENER.open(f"{url}/v2/models/doc_scorer/ready", timeout=1.0) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def mlserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MLServer]:
    if not MLSERVER.exists():
        pytest.skip("MLServer is not installed: run `bash scripts/setup.sh --with-mlserver`")
    ports = choose_ports({"http": 0, "grpc": 0, "metrics": 0})
    env = {
        **os.environ,
        "MLSERVER_HOST": "127.0.0.1",
        "MLSERVER_HTTP_PORT": str(ports["http"]),
        "MLSERVER_GRPC_PORT": str(ports["grpc"]),
        "MLSERVER_METRICS_PORT": str(ports["metrics"]),
        "MLSERVER_PARALLEL_WORKERS": "0",  # one process: nothing forked to leak
    }
    env.pop("PYTHONPATH", None)
    log = tmp_path_factory.mktemp("mlserver") / "mlserver.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(MLSERVER), "start", str(MODELS)],
            cwd=MODELS,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: stopped as one below
        )
    server = MLServer(ports["http"], ports["grpc"])
    try:
        deadline = time.monotonic() + 90
        while not _ready(server.http_url):
            assert proc.poll() is None, log.read_text(errors="replace")[-2000:]
            assert time.monotonic() < deadline, "MLServer not ready after 90 s"
            time.sleep(0.2)
        yield server
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def _analysis_notes(run_dir: Path) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "loadkit.cli", "analyze", str(run_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    notes: list[str] = json.loads(proc.stdout)["notes"]
    return notes


@pytest.mark.parametrize(
    ("protocol", "params"),
    [("grpc", {"shape": "DOC_IDS:16"}), ("json", {"input_data": str(INPUT_DATA)})],
)
def test_mlserver_runs_record_load_and_say_what_they_cannot_see(
    mlserver: MLServer, tmp_path: Path, protocol: str, params: dict[str, str]
) -> None:
    url = mlserver.grpc_url if protocol == "grpc" else mlserver.http_url
    run_dir = run_scenario(
        SOAK,
        url,
        duration_s=3,
        out_dir=tmp_path,
        params={"rate": 20, "protocol": protocol, **params},  # model: the server's only one
        telemetry=None,
    )
    summary = summarize_run(run_dir)
    print(summary.text())
    assert summary.status == "complete" and summary.errors == 0 and summary.ok >= 50
    manifest = load_run(run_dir).manifest
    assert manifest["target"]["model"] == "doc_scorer"
    server = manifest["environment"]["server"]
    assert (server["name"], server["version"]) == ("mlserver", "1.7.1")
    assert server["models"] == {} and "doc_scorer" in server["model_metadata"]
    assert any("no Triton configuration endpoint" in n for n in server["not_recorded"])
    notes = _analysis_notes(run_dir)
    print("\n".join(notes))
    assert any("not recorded from the server" in n and "batching_window" in n for n in notes)
    assert any("no triton_stats telemetry" in n for n in notes)


def test_http_binary_tensors_are_refused_with_the_way_out(
    mlserver: MLServer, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "loadkit.cli", "run", str(SOAK), "--target", mlserver.http_url]
        + ["--shape", "DOC_IDS:16", "--duration", "2", "--no-progress", "--no-telemetry"]
        + ["--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    print(proc.stderr)
    assert proc.returncode == 2
    assert "binary_tensor_data" in proc.stderr and "protocol=json" in proc.stderr
