"""The embedded target against a real tritonserver 2.51 on 127.0.0.1 (no GPU needed).

One server is shared by the module (starting and stopping costs ~3 s); tests that
need their own lifecycle (failures, stop) start small dedicated ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from loadkit.errors import TargetError
from loadkit.target.server import EmbeddedTriton, group_members

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

REPO_ROOT = Path(__file__).resolve().parents[2]


def write_clock_factor(path: Path, factor: float) -> None:
    """Atomic write, as the simulated GPU does (the model must never see half a file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"clock_factor": factor}))
    os.replace(tmp, path)


@pytest.fixture(scope="module")
def sim_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("simgpu") / "gpu_state.json"
    write_clock_factor(path, 1.0)
    return path


@pytest.fixture(scope="module")
def server(sim_state: Path) -> Iterator[EmbeddedTriton]:
    with EmbeddedTriton(
        max_batch_size=16, max_queue_delay_us=3000, instances=2, sim_gpu_state=sim_state
    ) as triton:
        yield triton


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def model_stats(server: EmbeddedTriton) -> dict:
    return get_json(f"{server.http_url}/v2/models/ranker/stats")["model_stats"][0]


def batch_executions(stats: dict) -> dict[int, tuple[int, int]]:
    """batch size -> (executions, total compute_infer ns); entries have no `count` of their own."""
    return {
        int(entry["batch_size"]): (
            int(entry["compute_infer"]["count"]),
            int(entry["compute_infer"]["ns"]),
        )
        for entry in stats.get("batch_stats", [])
    }


def metric_totals(server: EmbeddedTriton) -> dict[str, float]:
    with urllib.request.urlopen(server.metrics_url, timeout=5) as response:
        text = response.read().decode()
    totals: dict[str, float] = {}
    # Keyed by family name: the parser renames counter samples to `<family>_total`
    # (nv_inference_count -> nv_inference_count_total) although Triton has no suffix.
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("model") == "ranker":
                totals[family.name] = totals.get(family.name, 0.0) + sample.value
    return totals


def http_inputs(ids: np.ndarray, user: np.ndarray) -> list[httpclient.InferInput]:
    inputs = [
        httpclient.InferInput("ITEM_IDS", list(ids.shape), "INT64"),
        httpclient.InferInput("USER_FEATURES", list(user.shape), "FP32"),
    ]
    inputs[0].set_data_from_numpy(ids, binary_data=True)
    inputs[1].set_data_from_numpy(user, binary_data=True)
    return inputs


def request(rows: int = 1, items: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 2**62, size=(rows, items), dtype=np.int64)
    return ids, rng.standard_normal((rows, 16)).astype(np.float32)


def http_client(server: EmbeddedTriton) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))


def test_describe_reports_server_and_model_config(server: EmbeddedTriton) -> None:
    info = server.describe()
    assert info["name"] == "triton"
    assert info["version"].startswith("2.51")
    assert "statistics" in info["extensions"]
    assert "binary_tensor_data" in info["extensions"]
    assert info["models"]["ranker"]["backend"] == "python"
    assert server.grpc_url.startswith("127.0.0.1:")
    assert server.metrics_url.startswith("http://127.0.0.1:")


def test_config_honours_launcher_arguments(server: EmbeddedTriton, sim_state: Path) -> None:
    config = get_json(f"{server.http_url}/v2/models/ranker/config")
    assert config["max_batch_size"] == 16
    assert int(config["dynamic_batching"]["max_queue_delay_microseconds"]) == 3000
    assert [(g["count"], g["kind"]) for g in config["instance_group"]] == [(2, "KIND_CPU")]
    assert config["parameters"]["sim_gpu_state"]["string_value"] == str(sim_state)


def test_http_binary_and_grpc_give_the_same_scores(server: EmbeddedTriton) -> None:
    ids, user = request(rows=2, items=7, seed=1)
    client = http_client(server)
    try:
        result = client.infer(
            "ranker",
            http_inputs(ids, user),
            outputs=[httpclient.InferRequestedOutput("SCORES", binary_data=True)],
        )
        http_scores = result.as_numpy("SCORES")
    finally:
        client.close()
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        inputs = [
            grpcclient.InferInput("ITEM_IDS", list(ids.shape), "INT64"),
            grpcclient.InferInput("USER_FEATURES", list(user.shape), "FP32"),
        ]
        inputs[0].set_data_from_numpy(ids)
        inputs[1].set_data_from_numpy(user)
        grpc_scores = grpc.infer("ranker", inputs).as_numpy("SCORES")
    finally:
        grpc.close()
    assert http_scores is not None and grpc_scores is not None
    assert http_scores.shape == (2, 7) and http_scores.dtype == np.float32
    assert np.all((http_scores > 0) & (http_scores < 1))
    np.testing.assert_allclose(http_scores, grpc_scores, rtol=1e-6)
    assert http_scores.std() > 0.01  # scores actually depend on the items


def test_concurrent_load_is_batched_and_counted(server: EmbeddedTriton) -> None:
    before_stats, before_metrics = model_stats(server), metric_totals(server)
    deadline = time.monotonic() + 2.0
    done = [0] * 16
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        client = http_client(server)  # one client per thread: they are not thread-safe
        try:
            # Different candidate counts per thread: ragged requests still batch.
            inputs = http_inputs(*request(items=5 + index, seed=index))
            while time.monotonic() < deadline:
                client.infer("ranker", inputs)
                done[index] += 1
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors[:3]
    assert sum(done) > 50

    after_stats, after_metrics = model_stats(server), metric_totals(server)
    before_batches, after_batches = batch_executions(before_stats), batch_executions(after_stats)
    batched = {
        size: count - before_batches.get(size, (0, 0))[0]
        for size, (count, _) in after_batches.items()
        if size > 1
    }
    assert sum(batched.values()) > 0, after_stats["batch_stats"]
    executions = int(after_stats["execution_count"]) - int(before_stats["execution_count"])
    inferences = int(after_stats["inference_count"]) - int(before_stats["inference_count"])
    assert inferences >= sum(done)
    assert executions < inferences  # i.e. mean batch size > 1

    for name in ("nv_inference_count", "nv_inference_exec_count"):
        assert after_metrics[name] > before_metrics.get(name, 0.0), name
    assert after_metrics["nv_inference_count"] - before_metrics.get(
        "nv_inference_count", 0.0
    ) >= sum(done)


def test_sim_gpu_clock_factor_slows_compute(server: EmbeddedTriton, sim_state: Path) -> None:
    ids, user = request(items=10, seed=3)
    client = http_client(server)

    def execution_ms() -> float:
        """One request alone (a batch of 1), and its compute time from the server's statistics."""
        before = batch_executions(model_stats(server)).get(1, (0, 0))
        client.infer("ranker", http_inputs(ids, user))
        after = batch_executions(model_stats(server))[1]
        assert after[0] - before[0] == 1, "another execution ran meanwhile"
        return (after[1] - before[1]) / 1e6

    # The model sleeps its simulated kernel time divided by the clock factor: at a factor
    # of 0.1 each execution takes 9 x that time longer, far above what a busy host adds.
    params = get_json(f"{server.http_url}/v2/models/ranker/config")["parameters"]
    kernel_ms = (
        float(params["gpu_time_us_per_batch"]["string_value"])
        + float(params["gpu_time_us_per_item"]["string_value"])
    ) / 1e3
    factor = 0.1
    extra_ms = kernel_ms * (1 / factor - 1)
    try:
        # Medians: one execution delayed by another process on a busy host is not the model.
        full_speed = float(np.median([execution_ms() for _ in range(12)]))
        write_clock_factor(sim_state, factor)
        # THEN the server's own compute times show the slower clock (each instance re-reads
        # the file at most every 100 ms, when it executes), well within 5 s
        recent: deque[float] = deque(maxlen=8)
        deadline = time.monotonic() + 5.0
        while len(recent) < 8 or np.median(recent) < full_speed + 0.75 * extra_ms:
            assert time.monotonic() < deadline, (
                f"clock factor {factor} not seen in the server's statistics within 5 s: "
                f"{full_speed:.2f} ms per execution at full speed, expected about "
                f"{full_speed + extra_ms:.1f} ms, got " + ", ".join(f"{ms:.2f}" for ms in recent)
            )
            recent.append(execution_ms())
        throttled = float(np.median(recent))
    finally:
        write_clock_factor(sim_state, 1.0)
        client.close()
    print(
        f"\ncompute per execution: {full_speed:.2f} ms at full clock, "
        f"{throttled:.2f} ms at {factor} (expected +{extra_ms:.2f} ms)"
    )


def test_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(TargetError) as info:
            EmbeddedTriton(grpc_port=port).start()
    assert f"127.0.0.1:{port} is already in use" in info.value.message
    assert info.value.hint and "--grpc-port 0" in info.value.hint


def test_a_server_bound_to_another_address_listens_there_only() -> None:
    # GIVEN the server bound to 127.0.0.2 (the first step of a server on another host:
    # a network namespace's address works the same way), on ports this test holds on
    # 127.0.0.1, bound but not listening: no other process of a parallel suite can take
    # them there (one did in a pass-1 run: its server answered on 127.0.0.1 at that port)
    held = [socket.socket() for _ in range(3)]
    for s in held:
        s.bind(("127.0.0.1", 0))
    http, grpc, metrics = (s.getsockname()[1] for s in held)
    with contextlib.ExitStack() as stack:
        for s in held:
            stack.enter_context(s)
        triton = stack.enter_context(
            EmbeddedTriton(host="127.0.0.2", http_port=http, grpc_port=grpc, metrics_port=metrics)
        )
        assert triton.http_url.startswith("http://127.0.0.2:")
        with urllib.request.urlopen(f"{triton.http_url}/v2/health/ready", timeout=5) as r:
            assert r.status == 200
        # THEN nothing listens on 127.0.0.1 at its ports
        for url in (triton.http_url, triton.metrics_url):
            port = int(url.split(":")[2].split("/")[0])
            with socket.socket() as probe:
                assert probe.connect_ex(("127.0.0.1", port)) != 0, url
    # AND the command's smoke test runs against that address
    result = run_cli("target", "--smoke", "--bind", "127.0.0.2")
    assert result.returncode == 0, result.stderr
    assert "smoke test passed" in result.stdout


def test_model_load_failure_shows_tritons_reason(tmp_path: Path) -> None:
    log = tmp_path / "triton.log"
    with pytest.raises(TargetError) as info:
        EmbeddedTriton(model_params={"gpu_time_us_per_batch": "fast"}, log_path=log).start()
    assert "failed to load model 'ranker'" in info.value.message
    assert "could not convert string to float: 'fast'" in info.value.message
    assert log.exists()  # the user's log is kept for the post-mortem


def _shared_memory_of(pids: list[int]) -> set[str]:
    """The /dev/shm files the processes have mapped (the Python backend's regions)."""
    out: set[str] = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        out |= {line.split()[-1] for line in maps.splitlines() if "/dev/shm/" in line}
    return out


def test_stop_leaves_no_process_behind() -> None:
    triton = EmbeddedTriton(instances=2).start()
    pid = triton.pid
    members = group_members(pid)
    assert pid in members and len(members) >= 3  # the server and one stub per instance
    regions = _shared_memory_of(members)
    assert regions, "the Python backend's stubs map no shared memory: the check below is void"
    triton.stop()
    # ... nor its stubs' shared memory (a SIGKILL right after the server's exit left a
    # 1 MB region per stop in /dev/shm)
    assert not [r for r in regions if Path(r).exists()], regions
    triton.stop()  # idempotent
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert group_members(pid) == []
    for member in members:
        assert not psutil.pid_exists(member) or (
            psutil.Process(member).status() == psutil.STATUS_ZOMBIE
        )


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadkit.cli", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_cli_smoke() -> None:
    result = run_cli("target", "--smoke")
    assert result.returncode == 0, result.stderr
    assert "http ok" in result.stdout and "grpc ok" in result.stdout
    assert "smoke test passed" in result.stdout


def test_cli_serves_until_interrupted(tmp_path: Path) -> None:
    log = tmp_path / "target.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadkit.cli",
            "target",
            "--http-port",
            "0",
            "--grpc-port",
            "0",
            "--metrics-port",
            "0",
            "--log",
            str(log),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("Press Ctrl-C"):
                break
        banner = "".join(lines)
        assert "loadkit run" in banner and "curl -s http://127.0.0.1:" in banner, banner
        server_pid = int(banner.split("pid ")[1].split(")")[0])
        assert group_members(server_pid)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert group_members(server_pid) == []
    assert "Started HTTPService" in log.read_text()
