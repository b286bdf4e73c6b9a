"""Acceptance check of the simulated GPU: a cooling fault every 20 s under load.

Runs the embedded Triton with the simulated GPU (fault 6 s every 20 s), a
threaded load (4 users), and the GPU + Triton-statistics samplers for
--seconds, then prints each ground-truth throttle interval with the recorded
SM clock and reason bits inside it and the ranker's compute time per batch
(Triton statistics) inside vs outside throttling. Run:

    .venv/bin/python bench/sim_gpu_throttle.py [--seconds 65] [--period 20] [--duration 6]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from loadkit.target import EmbeddedTriton
from loadkit.target.smoke import ranker_inputs
from loadkit.telemetry import SIM_GPU_STATE_FILE, SamplerSet, start_simulated_gpu


def user(url: str, stop: threading.Event) -> None:
    client = httpclient.InferenceServerClient(url.removeprefix("http://"))
    ids = np.arange(16, dtype=np.int64).reshape(1, 16)
    feats = np.zeros((1, 16), dtype=np.float32)
    inputs = ranker_inputs(httpclient, ids, feats)
    while not stop.wait(0.01):
        client.infer("ranker", inputs)


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=65.0)
    parser.add_argument("--period", type=float, default=20.0)
    parser.add_argument("--duration", type=float, default=6.0)
    args = parser.parse_args()
    run_dir = Path(tempfile.mkdtemp(prefix="loadkit-simgpu-"))
    state = run_dir / SIM_GPU_STATE_FILE
    faults = {"cooling_fault_period_s": args.period, "cooling_fault_duration_s": args.duration}
    start_simulated_gpu(state, None, run_dir=None, **faults).stop()
    with EmbeddedTriton(sim_gpu_state=state) as triton:
        sim = start_simulated_gpu(state, triton.http_url, run_dir=run_dir, **faults)
        samplers = SamplerSet.start(
            run_dir, gpu="sim", triton_url=triton.http_url, triton_models=["ranker"],
            sim_gpu_state=state, rates={"triton_stats": 2.0},
        )  # fmt: skip
        stop = threading.Event()
        threads = [threading.Thread(target=user, args=(triton.http_url, stop)) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(args.seconds)
        stop.set()
        for t in threads:
            t.join()
        samplers.stop()
        sim.stop()
    events = [e for e in rows(run_dir / "events.jsonl") if e.get("name") == "thermal-throttle"]
    starts = [e["t_ns"] for e in events if e["action"] == "start"]
    ends = [e["t_ns"] for e in events if e["action"] == "end"]
    intervals = list(zip(starts, ends, strict=False))
    gpu = rows(run_dir / "telemetry" / "gpu.jsonl")
    stats = [r for r in rows(run_dir / "telemetry" / "triton_stats.jsonl")
             if r["compute_infer_us_per_batch"] is not None]  # fmt: skip
    t0 = min(r["t_ns"] for r in gpu)

    def overlap(lo: int, hi: int) -> float:
        return sum(max(0, min(hi, e) - max(lo, s)) for s, e in intervals) / max(1, hi - lo)

    print(f"run directory {run_dir}; fault {args.duration:g} s every {args.period:g} s")
    for s, e in intervals:
        inside = [r for r in gpu if s <= r["t_ns"] <= e]
        clocks = sorted({r["sm_clock_mhz"] for r in inside})
        bits = sorted({r["clocks_event_reasons"] for r in inside})
        per_batch = [r["compute_infer_us_per_batch"] for r in stats
                     if s <= r["t_ns"] and r["t_ns"] + r["interval_ns"] <= e]  # fmt: skip
        print(
            f"throttle {(s - t0) / 1e9:6.1f}-{(e - t0) / 1e9:6.1f} s ({(e - s) / 1e9:.1f} s): "
            f"SM clock {clocks} MHz, reasons {[hex(b) for b in bits]}, "
            f"{len(inside)} GPU rows; compute per batch "
            f"{np.median(per_batch) if per_batch else float('nan'):.0f} us"
        )
    throttled = [r["compute_infer_us_per_batch"] for r in stats
                 if overlap(r["t_ns"], r["t_ns"] + r["interval_ns"]) > 0.9]  # fmt: skip
    normal = [r["compute_infer_us_per_batch"] for r in stats
              if overlap(r["t_ns"], r["t_ns"] + r["interval_ns"]) == 0]  # fmt: skip
    outside_clock = {r["sm_clock_mhz"] for r in gpu if overlap(r["t_ns"] - 1, r["t_ns"] + 1) == 0}
    print(f"SM clock outside throttling: {sorted(outside_clock)} MHz")
    by_size: dict[str, tuple[list[float], list[float]]] = {}
    for r in stats:
        share = overlap(r["t_ns"], r["t_ns"] + r["interval_ns"])
        for size, us in r["compute_infer_us_by_batch_size"].items():
            pair = by_size.setdefault(size, ([], []))
            if share > 0.9:
                pair[0].append(us)
            elif share == 0:
                pair[1].append(us)
    for size, (thr, nor) in sorted(by_size.items(), key=lambda kv: int(kv[0])):
        if thr and nor:
            print(
                f"batch size {size}: compute {np.median(nor):.0f} us outside, "
                f"{np.median(thr):.0f} us throttled: x{np.median(thr) / np.median(nor):.2f} "
                f"({len(nor)}/{len(thr)} intervals)"
            )
    print(
        f"compute per batch, all sizes (Triton stats): median {np.median(normal):.0f} us outside "
        f"({len(normal)} intervals), {np.median(throttled):.0f} us throttled "
        f"({len(throttled)} intervals): x{np.median(throttled) / np.median(normal):.2f}"
    )


if __name__ == "__main__":
    main()
