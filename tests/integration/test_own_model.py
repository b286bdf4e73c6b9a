"""A model loadkit was not written for: `doc_ranker` on the real Triton, and the pre-flight.

`doc_ranker` takes QUERY BYTES [1], DOC_IDS INT32 [-1] (ids in [0, 999]) and
CONTEXT FP32 [4], with max_batch_size 8 and dynamic batching. Requests are
built from its metadata, or from a perf_analyzer input-data file, and sent
over HTTP binary, gRPC and JSON; pre-flight failures stop `loadkit run`
within seconds with the server's own words.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadkit.errors import LoadkitError
from loadkit.load.orchestrator import run_scenario
from loadkit.load.summary import summarize_run
from loadkit.rundir import load_run
from loadkit.target.ports import choose_ports
from loadkit.target.server import EmbeddedTriton

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SOAK = REPO / "scenarios" / "soak.py"
LOADKIT = [sys.executable, "-m", "loadkit.cli"]
PREFLIGHT_LIMIT_S = 30.0  # CLI start-up + scenario import + one request, on a busy 2-core CI box


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTriton]:
    log = tmp_path_factory.mktemp("triton") / "triton.log"
    with EmbeddedTriton(log_path=log, extra_models=("doc_ranker",)) as t:
        yield t


def _url(triton: EmbeddedTriton, protocol: str) -> str:
    return triton.grpc_url if protocol == "grpc" else triton.http_url


def _run(triton: EmbeddedTriton, tmp_path: Path, protocol: str, **params: Any) -> Path:
    return run_scenario(
        SOAK,
        _url(triton, protocol),
        duration_s=2,
        out_dir=tmp_path,
        params={"rate": 20, "protocol": protocol, "model": "doc_ranker", **params},
        telemetry=None,
    )


def _input_data(tmp_path: Path, first_ids: list[int] | None = None) -> Path:
    steps = [
        {"QUERY": ["red shoes"], "DOC_IDS": first_ids or [1, 2], "CONTEXT": [0.1, 0.2, 0.3, 0.4]},
        {
            "QUERY": {"content": ["blue hat"], "shape": [1]},
            "DOC_IDS": {"content": [7, 8, 9, 10, 11], "shape": [5]},
            "CONTEXT": [1.0, 0.0, 0.0, -1.0],
        },
        {"QUERY": ["x"], "DOC_IDS": [999] * 9, "CONTEXT": [0.0] * 4},
    ]
    path = tmp_path / "doc_ranker.json"
    path.write_text(json.dumps({"data": steps}), encoding="utf-8")
    return path


@pytest.mark.parametrize("protocol", ["http", "grpc", "json"])
def test_requests_from_the_models_metadata(
    triton: EmbeddedTriton, tmp_path: Path, protocol: str
) -> None:
    run_dir = _run(triton, tmp_path, protocol, shape="DOC_IDS:16", batch_size=2)
    summary = summarize_run(run_dir)
    print(summary.text())
    assert summary.status == "complete" and summary.errors == 0 and summary.ok >= 35
    manifest = load_run(run_dir).manifest
    requests = manifest["target"]["requests"]
    assert requests["kind"] == "synthetic"
    assert [(i["name"], i["datatype"], i["shape"]) for i in requests["inputs"]] == [
        ("QUERY", "BYTES", [2, 1]),
        ("DOC_IDS", "INT32", [2, 16]),
        ("CONTEXT", "FP32", [2, 4]),
    ]
    server = manifest["environment"]["server"]
    assert server["name"] == "triton" and server["protocol"] == (
        "grpc" if protocol == "grpc" else "http"
    )
    config = server["models"]["doc_ranker"]
    assert int(config["max_batch_size"]) == 8
    assert [int(b) for b in config["dynamic_batching"]["preferred_batch_size"]] == [4, 8]
    assert set(server["models"]) == {"doc_ranker", "ranker"}  # every model's configuration


INPUT_DATA = REPO / "tests" / "data" / "doc_ranker_input.json"  # also bench's, for perf_analyzer


@pytest.mark.parametrize("protocol", ["http", "grpc", "json"])
def test_requests_from_a_perf_analyzer_input_data_file(
    triton: EmbeddedTriton, tmp_path: Path, protocol: str
) -> None:
    run_dir = _run(triton, tmp_path, protocol, input_data=str(INPUT_DATA), batch_size=2)
    summary = summarize_run(run_dir)
    print(summary.text())
    assert summary.status == "complete" and summary.errors == 0 and summary.ok >= 35
    assert load_run(run_dir).manifest["target"]["requests"]["kind"] == "input_data"


def test_server_errors_keep_their_words_in_events_summary_and_analysis(
    triton: EmbeddedTriton, tmp_path: Path
) -> None:
    # GIVEN an input-data file whose third step has an id outside the model's table
    path = _input_data(tmp_path)
    document = json.loads(path.read_text())
    document["data"][2]["DOC_IDS"] = [5000]
    path.write_text(json.dumps(document))
    # WHEN a run sends it (the pre-flight sends step 0, which is fine)
    run_dir = _run(triton, tmp_path, "http", input_data=str(path))
    # THEN every third request fails, and the server's words are kept, once
    summary = summarize_run(run_dir)
    print(summary.text())
    assert summary.errors >= 10 and set(summary.error_kinds) == {"http_500"}
    words = "DOC_IDS value 5000 is outside [0, 999]"
    assert any(words in m for m in summary.error_messages["http_500"])
    assert words in summary.text()
    events = load_run(run_dir).events
    kept = events[events["kind"] == "server_error"]
    assert len(kept) == 1 and words in kept["message"].iloc[0]
    analyze = subprocess.run(
        [*LOADKIT, "analyze", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert words in analyze.stdout, analyze.stdout + analyze.stderr
    assert words in (run_dir / "analysis.json").read_text()


def _bodies(tmp_path: Path, body: dict[str, Any]) -> Path:
    path = tmp_path / "bodies.jsonl"
    path.write_text(json.dumps(body) + "\n", encoding="utf-8")
    return path


def _json_body(context_shape: list[int], name: str = "CONTEXT") -> dict[str, Any]:
    count = 1
    for d in context_shape:
        count *= d
    return {
        "inputs": [
            {"name": "QUERY", "shape": [1, 1], "datatype": "BYTES", "data": ["q"]},
            {"name": "DOC_IDS", "shape": [1, 2], "datatype": "INT32", "data": [1, 2]},
            {"name": name, "shape": context_shape, "datatype": "FP32", "data": [0.5] * count},
        ]
    }


def _cli_run(tmp_path: Path, target: str, *args: str) -> tuple[int, str, float]:
    started = time.monotonic()
    proc = subprocess.run(
        [*LOADKIT, "run", str(SOAK), "--target", target, "--duration", "2", "--no-progress"]
        + ["--no-telemetry", "--out", str(tmp_path / "runs"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return proc.returncode, proc.stderr, time.monotonic() - started


@pytest.mark.parametrize(
    ("case", "args", "words", "fix"),
    [
        (
            "wrong model name",
            ["--model", "no_such_model"],
            "Request for unknown model: 'no_such_model' is not found",
            "loaded models: doc_ranker, ranker",
        ),
        (
            "wrong input",
            ["--model", "doc_ranker", "--set", "protocol=json", "--input-data", "BODIES"],
            "unexpected inference input 'WRONG'",
            "loadkit sent a",
        ),
        (
            "wrong shape",
            ["--model", "doc_ranker", "--set", "protocol=json", "--input-data", "SHAPE"],
            "unexpected shape for input 'CONTEXT'",
            "expects batch + QUERY BYTES [1]; DOC_IDS INT32 [-1]; CONTEXT FP32 [4]",
        ),
        (
            "another model's inputs",
            ["--model", "doc_ranker", "--set", "requests=ranker"],
            "missing required input(s) ['QUERY','DOC_IDS','CONTEXT']",
            "expects batch + QUERY BYTES [1]",
        ),
        (
            "missing variable shape",
            ["--model", "doc_ranker"],
            "input DOC_IDS of model 'doc_ranker' has a variable shape [-1]",
            "--shape DOC_IDS:16",
        ),
    ],
)
def test_preflight_rejection_exits_2_within_seconds_with_the_servers_words(
    triton: EmbeddedTriton, tmp_path: Path, case: str, args: list[str], words: str, fix: str
) -> None:
    (tmp_path / "wrong").mkdir()
    (tmp_path / "shape").mkdir()
    files = {
        "BODIES": _bodies(tmp_path / "wrong", _json_body([1, 4], name="WRONG")),
        "SHAPE": _bodies(tmp_path / "shape", _json_body([1, 3])),
    }
    args = [str(files[a]) if a in files else a for a in args]
    rc, stderr, elapsed = _cli_run(tmp_path, triton.http_url, *args)
    print(f"{case}: exit {rc} in {elapsed:.1f} s\n{stderr}")
    assert rc == 2, stderr
    assert words in stderr and fix in stderr
    assert elapsed < PREFLIGHT_LIMIT_S
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_preflight_unreachable_server_exits_3(tmp_path: Path) -> None:
    port = choose_ports({"http": 0})["http"]  # free: nothing listens there
    rc, stderr, elapsed = _cli_run(tmp_path, f"http://127.0.0.1:{port}")
    print(stderr)
    assert rc == 3 and "Connection refused" in stderr and elapsed < PREFLIGHT_LIMIT_S


def test_the_only_model_is_the_default_and_an_unknown_one_is_refused_in_process(
    tmp_path: Path,
) -> None:
    with EmbeddedTriton() as only_ranker:  # serves one model: `ranker`
        run_dir = run_scenario(
            SOAK,
            only_ranker.http_url,
            duration_s=1,
            out_dir=tmp_path,
            params={"rate": 10},
            telemetry=None,
        )
        assert load_run(run_dir).manifest["target"]["model"] == "ranker"
        with pytest.raises(LoadkitError) as err:
            run_scenario(
                SOAK,
                only_ranker.grpc_url,
                duration_s=1,
                out_dir=tmp_path / "refused",
                params={"protocol": "grpc", "model": "nope"},
                telemetry=None,
            )
        assert err.value.exit_code == 2 and "nope" in err.value.message
        assert "loaded models: ranker" in (err.value.hint or "")


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 90.0) -> None:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "loadkit target exited"
        try:
            with opener.open(f"{url}/v2/health/ready", timeout=1.0) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"loadkit target at {url} not ready after {timeout_s:.0f} s")


def test_loadkit_target_on_its_own_is_described_and_its_batching_window_found(
    tmp_path: Path,
) -> None:
    # GIVEN `loadkit target` started on its own (not the demo) with a 20 ms batching window
    ports = choose_ports({"http": 0, "grpc": 0, "metrics": 0})
    target = subprocess.Popen(
        [*LOADKIT, "target", "--max-queue-delay-us", "20000"]
        + [f"--{service}-port={port}" for service, port in ports.items()],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{ports['http']}"
    try:
        _wait_ready(url, target)
        # WHEN loadkit runs 10 req/s against it, and watches it
        runs = tmp_path / "runs"
        proc = subprocess.run(
            [*LOADKIT, "run", str(SOAK), "--target", url, "--set", "rate=10", "--duration", "20"]
            + ["--gpu", "none", "--no-progress", "--out", str(runs), "--run-id", "bw"],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        watch = subprocess.run(
            [*LOADKIT, "watch", "--triton", url, "--duration", "1", "--gpu", "none"]
            + ["--metrics", f"http://127.0.0.1:{ports['metrics']}/metrics"]
            + ["--out", str(runs), "--run-id", "watch"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert watch.returncode == 0, watch.stderr
    finally:
        target.terminate()
        target.wait(30)
    # THEN both record the server and the model's configuration ...
    for run_id in ("bw", "watch"):
        server = load_run(runs / run_id).manifest["environment"]["server"]
        assert server["name"] == "triton" and server["version"]
        batching = server["models"]["ranker"]["dynamic_batching"]
        assert int(batching["max_queue_delay_microseconds"]) == 20000
    # ... and the analysis finds the batching window from it
    analyze = subprocess.run(
        [*LOADKIT, "analyze", str(runs / "bw"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert analyze.returncode == 0, analyze.stderr
    findings = json.loads(analyze.stdout)["findings"]
    print([(f["cause"], f["confidence"]) for f in findings])
    assert findings and findings[0]["cause"] == "batching_window"
