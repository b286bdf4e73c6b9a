"""CPU cost of each telemetry sampler at its default rate.

Starts the embedded Triton (ranker model) with a light background load, the
simulated GPU, and every sampler (GPU through the fake NVML, host, Triton
statistics, Triton /metrics) as `loadkit watch` would, then measures each
sampler process's CPU time (user + system, psutil) over a window after start-up
(interpreter start and imports excluded). Run:

    .venv/bin/python bench/sampler_overhead.py [--seconds 20] [--gpu sim|nvml]

Prints one line per sampler: % of one core, and CPU ms per sample.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import tritonclient.http as httpclient

from loadkit.target import EmbeddedTriton
from loadkit.target.smoke import ranker_inputs
from loadkit.telemetry import SIM_GPU_STATE_FILE, SamplerSet, start_simulated_gpu


def background_load(url: str, stop: threading.Event) -> None:
    client = httpclient.InferenceServerClient(url.removeprefix("http://"))
    ids = np.arange(16, dtype=np.int64).reshape(1, 16)
    feats = np.zeros((1, 16), dtype=np.float32)
    inputs = ranker_inputs(httpclient, ids, feats)
    while not stop.wait(0.02):  # ~40 req/s: the samplers have something to read
        client.infer("ranker", inputs)


def cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--gpu", choices=("sim", "nvml"), default="sim")
    args = parser.parse_args()
    run_dir = Path(tempfile.mkdtemp(prefix="loadkit-bench-"))
    state = run_dir / SIM_GPU_STATE_FILE
    sim = start_simulated_gpu(state, None, run_dir=run_dir) if args.gpu == "sim" else None
    with EmbeddedTriton(sim_gpu_state=state if sim else None) as triton:
        if sim is not None:
            sim.stop()
            sim = start_simulated_gpu(state, triton.http_url, run_dir=run_dir)
        stop = threading.Event()
        load = threading.Thread(target=background_load, args=(triton.http_url, stop), daemon=True)
        load.start()
        samplers = SamplerSet.start(
            run_dir,
            gpu=args.gpu,
            triton_url=triton.http_url,
            triton_models=["ranker"],
            server_pid=triton.pid,
            metrics_url=triton.metrics_url,
            sim_gpu_state=state,
        )
        try:
            samplers.wait_started(30)
            time.sleep(2.0)  # past start-up (imports, first samples)
            procs = {c.spec.source: (c.process.pid, c.spec.interval_s) for c in samplers.children}
            if sim is not None:
                procs["sim_gpu (simulator)"] = (sim.pid, 0.1)
            before = {name: cpu_s(pid) for name, (pid, _) in procs.items()}
            t0 = time.monotonic()
            time.sleep(args.seconds)
            elapsed = time.monotonic() - t0
            after = {name: cpu_s(pid) for name, (pid, _) in procs.items()}
        finally:
            stop.set()
            samplers.stop()
            if sim is not None:
                sim.stop()
    print(f"window {elapsed:.1f} s, {psutil.cpu_count()} logical CPUs, GPU: {args.gpu}")
    print(f"{'sampler':22} {'rate Hz':>8} {'% of a core':>12} {'CPU ms/sample':>14}")
    for name, (_pid, interval) in procs.items():
        used = after[name] - before[name]
        samples = elapsed / interval
        print(
            f"{name:22} {1 / interval:8.1f} {100 * used / elapsed:12.2f} {1000 * used / samples:14.3f}"
        )


if __name__ == "__main__":
    main()
