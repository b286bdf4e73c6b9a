"""Samplers beside a real embedded Triton under threaded tritonclient load.

- the per-interval batch-size distribution sums to the execution-count deltas,
  and queue time per request rises under a burst;
- with the simulated GPU and a short cooling-fault period, the recorded SM
  clock and reason bits show each throttle interval and the ranker's compute
  time per batch (from Triton's statistics) rises in the same intervals.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from loadkit.target import EmbeddedTriton
from loadkit.target.smoke import ranker_inputs
from loadkit.telemetry import SIM_GPU_STATE_FILE, SamplerSet, start_simulated_gpu

pytestmark = pytest.mark.integration


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class ThreadedLoad:
    """N threads, one HTTP client each, sending requests with a small think time."""

    def __init__(self, url: str, think_s: float = 0.01) -> None:
        self.url = url.removeprefix("http://")
        self.think_s = think_s
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: list[str] = []

    def _user(self) -> None:
        client = httpclient.InferenceServerClient(self.url)
        ids = np.arange(16, dtype=np.int64).reshape(1, 16)
        feats = np.zeros((1, 16), dtype=np.float32)
        inputs = ranker_inputs(httpclient, ids, feats)
        while not self.stop.is_set():
            try:
                client.infer("ranker", inputs)
            except Exception as exc:  # noqa: BLE001
                self.errors.append(str(exc))
            self.stop.wait(self.think_s)
        client.close()

    def add_users(self, n: int) -> None:
        for _ in range(n):
            thread = threading.Thread(target=self._user, daemon=True)
            thread.start()
            self.threads.append(thread)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(5)


def wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    path = tmp_path / "run"
    path.mkdir()
    return path


def test_batch_distribution_and_queue_time_under_a_burst(run_dir: Path) -> None:
    # A slow-per-item model (a batch of 8 takes ~17 ms): 2 users fit, 16 saturate it.
    slow = {"gpu_time_us_per_batch": 1000, "gpu_time_us_per_item": 2000}
    with EmbeddedTriton(max_queue_delay_us=500, max_batch_size=8, model_params=slow) as triton:
        samplers = SamplerSet.start(
            run_dir,
            gpu="none",
            triton_url=triton.http_url,
            triton_models=["ranker"],
            server_pid=triton.pid,
            metrics_url=triton.metrics_url,
            rates={"triton_stats": 2.0, "host": 2.0},
        )
        load = ThreadedLoad(triton.http_url)
        try:
            assert samplers.wait_started(20), "samplers did not start"
            load.add_users(2)
            time.sleep(4.0)
            burst_start = time.time_ns()
            load.add_users(14)
            time.sleep(3.0)
            burst_end = time.time_ns()
            load.close()
            assert not any(t.is_alive() for t in load.threads), "a load thread did not stop"
            load_end = time.time_ns()
            # Let each sampler take one sample after the last request: their last rows
            # then count every execution, as the server does.
            wait_for(
                lambda: (
                    any(
                        r["t_ns"] + r["interval_ns"] > load_end
                        for r in rows(run_dir / "telemetry" / "triton_stats.jsonl")
                    )
                    and any(
                        r["t_ns"] > load_end and r["name"] == "nv_inference_exec_count"
                        for r in rows(run_dir / "telemetry" / "metrics.jsonl")
                    )
                ),
                10.0,
                "a statistics sample and a metrics scrape after the load stopped",
            )
            stats_url = f"{triton.http_url}/v2/models/ranker/stats"
            with urllib.request.urlopen(stats_url, timeout=5) as response:
                server_stats = json.loads(response.read())["model_stats"][0]
            server_executions = int(server_stats["execution_count"])
        finally:
            load.close()
            samplers.stop()
        info = samplers.manifest_info()

    assert load.errors == [], f"{len(load.errors)} requests failed, first: {load.errors[0]}"
    assert info["gpu"]["kind"] == "none"
    assert {s["name"] for s in info["sources"]} == {"host", "triton_stats", "metrics"}
    assert all(s["warning"] is None for s in info["sources"])

    stats = rows(run_dir / "telemetry" / "triton_stats.jsonl")
    assert len(stats) >= 10
    for row in stats:  # every interval's distribution sums to its execution delta
        assert sum(row["batch_sizes"].values()) == row["execution_count_delta"]
        assert row["reset"] is False
    assert sum(r["execution_count_delta"] for r in stats) > 50

    def queue_us(lo: int, hi: int) -> float:
        inside = [
            r
            for r in stats
            if lo <= r["t_ns"]
            and r["t_ns"] + r["interval_ns"] <= hi
            and r["queue_us_per_request"] is not None
        ]
        assert inside, "no complete interval in the window"
        return float(np.mean([r["queue_us_per_request"] for r in inside]))

    steady = queue_us(stats[0]["t_ns"], burst_start)
    burst = queue_us(burst_start + 500_000_000, burst_end)
    assert burst > 1.5 * steady, (steady, burst)
    burst_rows = [r for r in stats if burst_start <= r["t_ns"] < burst_end]
    assert max(r["batch_size_mean"] or 0 for r in burst_rows) > 1.5  # the batcher batches

    host = rows(run_dir / "telemetry" / "host.jsonl")
    assert len(host) >= 10
    assert any((r["server_cpu_pct"] or 0) > 5 for r in host)
    assert any(r["server_processes"] and r["server_processes"] >= 2 for r in host)  # + stub

    metrics = rows(run_dir / "telemetry" / "metrics.jsonl")
    exec_rows = [r for r in metrics if r["name"] == "nv_inference_exec_count"]
    values = [r["value"] for r in exec_rows]
    assert values == sorted(values) and sum(r["delta"] or 0 for r in exec_rows) > 50
    # The same executions, counted by the statistics rows, the metrics rows and the server
    # (all read after the last request), agree exactly; each row's count is the one before
    # it plus its delta, so the deltas add up to the total.
    for before, row in zip(stats, stats[1:], strict=False):
        assert row["execution_count"] - row["execution_count_delta"] == before["execution_count"], (
            f"statistics row at {row['t_ns']}: count {row['execution_count']} - delta "
            f"{row['execution_count_delta']} is not the previous row's {before['execution_count']}"
        )
    for before, row in zip(exec_rows, exec_rows[1:], strict=False):
        assert row["value"] - row["delta"] == before["value"], (
            f"metrics row at {row['t_ns']}: {row['value']} - delta {row['delta']} "
            f"is not the previous scrape's {before['value']}"
        )
    assert stats[-1]["execution_count"] == values[-1] == server_executions


def test_simulated_gpu_throttling_slows_the_ranker(run_dir: Path) -> None:
    state = run_dir / SIM_GPU_STATE_FILE
    # GIVEN a cooling fault of 3 s every 6 s (first at 4 s), moderate load
    sim = start_simulated_gpu(
        state,
        None,
        run_dir=run_dir,
        cooling_fault_period_s=6.0,
        cooling_fault_duration_s=3.0,
        cooling_fault_offset_s=4.0,
    )
    sim.stop()  # the demo's order: state file first, then Triton, then the simulator
    with EmbeddedTriton(sim_gpu_state=state, max_queue_delay_us=1000) as triton:
        sim = start_simulated_gpu(
            state,
            triton.http_url,
            run_dir=run_dir,
            cooling_fault_period_s=6.0,
            cooling_fault_duration_s=3.0,
            cooling_fault_offset_s=4.0,
        )
        samplers = SamplerSet.start(
            run_dir,
            gpu="sim",
            triton_url=triton.http_url,
            triton_models=["ranker"],
            server_pid=triton.pid,
            rates={"triton_stats": 4.0},
        )
        load = ThreadedLoad(triton.http_url, think_s=0.005)
        try:
            assert samplers.wait_started(20)
            load.add_users(4)
            wait_for(
                lambda: (run_dir / "events.jsonl").read_text().count('"thermal-throttle"') >= 4,
                timeout_s=25,
                what="two throttle episodes",
            )
            time.sleep(1.0)
        finally:
            load.close()
            samplers.stop()
            sim.stop()
        info = samplers.manifest_info()

    assert info["gpu"]["kind"] == "simulated" and info["gpu"]["devices"][0]["simulated"]
    assert next(s for s in info["sources"] if s["name"] == "gpu")["simulated"] is True

    # Ground truth: throttle intervals from the events log.
    events = rows(run_dir / "events.jsonl")
    throttle = [e for e in events if e["kind"] == "fault" and e["name"] == "thermal-throttle"]
    starts = [e["t_ns"] for e in throttle if e["action"] == "start"]
    ends = [e["t_ns"] for e in throttle if e["action"] == "end"]
    assert len(starts) >= 2 and len(ends) == len(starts)
    intervals = list(zip(starts, ends, strict=True))
    assert all(0.5e9 < end - start < 4e9 for start, end in intervals)

    def overlap(lo: int, hi: int) -> float:
        return sum(max(0, min(hi, e) - max(lo, s)) for s, e in intervals) / max(1, hi - lo)

    # THEN the GPU series shows each throttle interval: clock down, thermal bits set...
    gpu = rows(run_dir / "telemetry" / "gpu.jsonl")
    for start, end in intervals:
        inside = [r for r in gpu if start + 200_000_000 <= r["t_ns"] <= end - 200_000_000]
        assert inside, "no GPU samples inside a throttle interval"
        assert all(r["sm_clock_mhz"] < 0.65 * r["sm_clock_max_mhz"] for r in inside)
        assert all(r["reason_hw_thermal"] and r["reason_hw_slowdown"] for r in inside)
    outside = [r for r in gpu if overlap(r["t_ns"] - 300_000_000, r["t_ns"] + 300_000_000) == 0]
    assert outside and all(r["sm_clock_mhz"] == r["sm_clock_max_mhz"] for r in outside)
    assert not any(r["reason_hw_thermal"] for r in outside)

    # ...and Triton's compute time per batch rises in the same intervals, for
    # batches of the same size (the batcher may form other sizes while throttled).
    stats = rows(run_dir / "telemetry" / "triton_stats.jsonl")
    throttled: dict[str, list[float]] = {}
    normal: dict[str, list[float]] = {}
    for r in stats:
        share = overlap(r["t_ns"], r["t_ns"] + r["interval_ns"])
        target = throttled if share > 0.9 else normal if share == 0 else None
        if target is None:
            continue
        for size, us in r["compute_infer_us_by_batch_size"].items():
            target.setdefault(size, []).append(us)
    common = [s for s in throttled if len(throttled[s]) >= 2 and len(normal.get(s, [])) >= 2]
    assert common, (throttled, normal)
    size = max(common, key=lambda s: min(len(throttled[s]), len(normal[s])))
    ratio = np.median(throttled[size]) / np.median(normal[size])
    assert ratio > 1.4, (size, throttled[size], normal[size])


def test_two_models_on_the_simulated_gpu_delay_each_other(run_dir: Path) -> None:
    """A burst on doc_ranker takes the shared simulated GPU's time: the ranker's batches slow."""
    from loadkit.faults import FaultSchedule, NeighbourModel

    state = run_dir / SIM_GPU_STATE_FILE
    state.write_text(json.dumps({"clock_factor": 1.0}))
    # GIVEN doc_ranker with simulated accelerator time (8 ms a request of 8 rows) on the
    # ranker's simulated GPU, and the GPU shared by the two models
    with EmbeddedTriton(
        sim_gpu_state=state,
        max_queue_delay_us=500,
        extra_models=("doc_ranker",),
        extra_models_params={"gpu_time_us_per_batch": 4000, "gpu_time_us_per_item": 500},
        extra_models_queue_delay_us=0,
    ) as triton:
        sim = start_simulated_gpu(
            state, triton.http_url, run_dir=run_dir, shared_models=("doc_ranker",)
        )
        samplers = SamplerSet.start(
            run_dir, triton_url=triton.http_url, rates={"triton_stats": 4.0}
        )
        rows8 = 8
        body = {
            "inputs": [
                {"name": "QUERY", "datatype": "BYTES", "shape": [rows8, 1], "data": ["q"] * rows8},
                {"name": "DOC_IDS", "datatype": "INT32", "shape": [rows8, 4],
                 "data": list(range(4 * rows8))},
                {"name": "CONTEXT", "datatype": "FP32", "shape": [rows8, 4], "data": [0.5] * 32},
            ]
        }  # fmt: skip
        # WHEN doc_ranker gets 60 requests/s (about half the GPU) for 3 s, twice
        neighbour = NeighbourModel(
            triton.http_url,
            "doc_ranker",
            body,
            FaultSchedule(duration_s=3.0, period_s=7.0, first_start_s=3.0, count=2),
            rate_rps=60.0,
            state_dir=run_dir,
            run_dir=run_dir,
        )
        load = ThreadedLoad(triton.http_url, think_s=0.01)
        try:
            assert samplers.wait_started(20)
            load.add_users(2)
            neighbour.start()
            assert neighbour.join(30.0)
            time.sleep(1.5)
        finally:
            neighbour.stop()
            load.close()
            samplers.stop()
            sim.stop()

    events = [e for e in rows(run_dir / "events.jsonl") if e["name"] == "neighbour-model"]
    starts = [e["t_ns"] for e in events if e["action"] == "start"]
    ends = [e["t_ns"] for e in events if e["action"] == "end"]
    assert len(starts) == len(ends) == 2
    windows = list(zip(starts, ends, strict=True))

    def share(row: dict[str, Any]) -> float:
        lo, hi = row["t_ns"], row["t_ns"] + row["interval_ns"]
        return sum(max(0, min(hi, e) - max(lo, s)) for s, e in windows) / (hi - lo)

    # THEN Triton's statistics report both models, doc_ranker busy only in its windows ...
    stats = rows(run_dir / "telemetry" / "triton_stats.jsonl")
    doc = [r for r in stats if r["model"] == "doc_ranker"]
    assert sum(r["execution_count_delta"] for r in doc if share(r) == 0) == 0
    assert sum(r["execution_count_delta"] for r in doc if share(r) > 0.9) >= 60
    # ... and the ranker's batches of one take longer there: the GPU's time is shared
    ranker = [r for r in stats if r["model"] == "ranker"]
    inside = [r["compute_infer_us_by_batch_size"].get("1") for r in ranker if share(r) > 0.9]
    outside = [r["compute_infer_us_by_batch_size"].get("1") for r in ranker if share(r) == 0]
    inside, outside = [v for v in inside if v], [v for v in outside if v]
    assert len(inside) >= 4 and len(outside) >= 4, (inside, outside)
    ratio = np.median(inside) / np.median(outside)
    assert ratio > 1.4, (ratio, inside, outside)


def test_watch_records_a_run_directory_with_probe_latency(tmp_path: Path) -> None:
    from loadkit.cli import main
    from loadkit.rundir import load_run

    with EmbeddedTriton() as triton:
        code = main(
            [
                "watch",
                "--duration", "4",
                "--triton", triton.http_url,
                "--metrics", triton.metrics_url,
                "--model", "ranker",
                "--server-pid", str(triton.pid),
                "--gpu", "sim",
                "--probe-rate", "10",
                "--out", str(tmp_path),
                "--run-id", "incident",
            ]
        )  # fmt: skip
    assert code == 0
    run = load_run(tmp_path / "incident")
    assert run.manifest["kind"] == "watch" and run.manifest["status"] == "complete"
    assert run.manifest["environment"]["gpu"]["kind"] == "simulated"
    assert "GPU telemetry is simulated" in run.manifest["notes"]
    names = {s["name"] for s in run.manifest["sources"]}
    assert {"gpu", "host", "triton_stats", "metrics"} <= names
    for source in ("gpu", "host", "triton_stats", "metrics"):
        assert (tmp_path / "incident" / "telemetry" / f"{source}.jsonl").stat().st_size > 0
    probes = [h for h in run.latency_intervals if h.name == "probe"]
    assert sum(h.histogram.get_total_count() for h in probes if h.kind == "service") >= 25
    stats = rows(tmp_path / "incident" / "telemetry" / "triton_stats.jsonl")
    assert sum(r["execution_count_delta"] for r in stats) >= 20  # the probes were served
