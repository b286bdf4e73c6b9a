"""Benchmark 2: loadkit's latency figures beside Triton's own perf_analyzer, same rates.

    .venv/bin/python bench/latency_vs_perf_analyzer.py                  # about 2 minutes
    .venv/bin/python bench/latency_vs_perf_analyzer.py --rates 100,300 --protocol grpc
    .venv/bin/python bench/latency_vs_perf_analyzer.py --model doc_ranker   # real data, both tools

Against one embedded Triton (the `ranker` model, 100 candidates per
request, default batching), at each constant rate, in turn:

- `perf_analyzer --request-rate-range R` (constant spacing), from the
  `tritonclient` 2.51.0 wheel (unpacked into `bench/.cache/` by
  `bench/fetch_perf_analyzer.sh`; its `libb64` and `libcudart` come from the
  `nvidia-pytriton` wheel's libs folder), `--measurement-interval` 4 s,
  at most 4 trials, stable within 50 %: its P50/P99 and throughput;
- loadkit's `scenarios/soak.py` at the same rate for `--seconds`: P50/P99
  from the merged HDR histograms of the steady part (2 s after load-start to
  load-end), both **corrected** (from the intended send time) and
  **service** (from the actual send, what perf_analyzer measures), and the
  completed rate.

With `--model doc_ranker` (the second test model: BYTES, INT32 with a
variable dimension, FP32) both tools send the same real data, one file in
perf_analyzer's input-data format: `tests/data/doc_ranker_input.json`
(`perf_analyzer --input-data FILE`, `loadkit run --input-data FILE`).

perf_analyzer times each request from its actual send: it does not correct
for coordinated omission, so compare its figures with loadkit's service
latency; the corrected figures add the generator's own lateness.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._support import CACHE, REPO, table  # noqa: E402
from loadkit.analysis.percentiles import merge  # noqa: E402
from loadkit.load.orchestrator import run_scenario  # noqa: E402
from loadkit.rundir import load_run  # noqa: E402
from loadkit.target.server import EmbeddedTriton  # noqa: E402

SECOND = 1_000_000_000
INPUT_DATA = REPO / "tests" / "data" / "doc_ranker_input.json"
PERF_ANALYZER = CACHE / "perf_analyzer"
PA_LIBS = CACHE / "lib"


def _inputs(model: str, candidates: int) -> tuple[list[str], dict[str, object]]:
    """perf_analyzer's input flags and loadkit's parameters for the same requests."""
    if model == "ranker":
        return ["--shape", f"ITEM_IDS:{candidates}"], {"candidates": candidates}
    return ["--input-data", str(INPUT_DATA)], {"model": model, "input_data": str(INPUT_DATA)}


def perf_analyzer(
    url: str, protocol: str, rate: float, candidates: int, model: str = "ranker"
) -> dict[str, float]:
    """One perf_analyzer measurement at a constant rate; latencies in ms."""
    if not PERF_ANALYZER.exists():
        raise SystemExit(f"{PERF_ANALYZER} is missing: run bench/fetch_perf_analyzer.sh first")
    out = Path(tempfile.mkdtemp(prefix="loadkit-bench-pa-")) / "pa.csv"
    argv = [str(PERF_ANALYZER), "-m", model, "-u", url, "-i", protocol]
    argv += ["--request-rate-range", str(int(rate)), "--request-distribution", "constant"]
    # A loose stability rule: on a shared 2-core machine the default 10 % never settles.
    argv += ["--measurement-interval", "4000", "--max-trials", "4", "--stability-percentage", "50"]
    argv += [*_inputs(model, candidates)[0], "-f", str(out)]
    env = {**os.environ, "LD_LIBRARY_PATH": str(PA_LIBS)}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not out.exists():
        # perf_analyzer exits non-zero when it could not stabilize; it still prints figures.
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        raise RuntimeError(f"perf_analyzer failed ({proc.returncode}): {' | '.join(tail)}")
    row = next(csv.DictReader(out.open()))
    return {
        "rate": float(row["Inferences/Second"]),
        "p50_ms": float(row["p50 latency"]) / 1000,
        "p99_ms": float(row["p99 latency"]) / 1000,
    }


def loadkit_run(
    url: str, protocol: str, rate: float, seconds: float, candidates: int, model: str = "ranker"
) -> dict:
    run_dir = run_scenario(
        REPO / "scenarios" / "soak.py",
        url,
        out_dir=Path(tempfile.mkdtemp(prefix="loadkit-bench-latency-")),
        params={
            "rate": rate,
            "duration_s": seconds,
            "protocol": protocol,
            **_inputs(model, candidates)[1],
        },
    )
    run = load_run(run_dir)
    ev = run.events
    start = int(ev[ev["name"] == "load-start"]["t_ns"].iloc[0]) + 2 * SECOND
    end = int(ev[ev["name"] == "load-end"]["t_ns"].iloc[0])
    steady = [h for h in run.latency_intervals if start <= h.start_ns and h.end_ns <= end]
    out: dict[str, float] = {}
    for kind in ("corrected", "service"):
        hist = merge([h.histogram for h in steady if h.kind == kind])
        out[f"{kind}_p50_ms"] = hist.get_value_at_percentile(50) / 1000
        out[f"{kind}_p99_ms"] = hist.get_value_at_percentile(99) / 1000
    load = run.load_intervals
    whole = load[(load["t_ns"] >= start) & (load["t_ns"] + SECOND <= end)]
    seconds_in = whole["t_ns"].nunique()
    out["rate"] = float(whole["ok"].sum()) / max(1, seconds_in)
    out["errors"] = float(whole["errors"].sum() + whole["dropped"].sum())
    return out


def _diff(a: float, b: float) -> str:
    return f"{(a - b) / b:+.0%}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="100,300,500")
    parser.add_argument("--seconds", type=float, default=15.0, help="loadkit run length per rate")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--model", choices=("ranker", "doc_ranker"), default="ranker")
    args = parser.parse_args(argv)
    rows: list[list[object]] = []
    log = Path(tempfile.mkdtemp(prefix="loadkit-bench-triton-")) / "triton.log"
    extra = ("doc_ranker",) if args.model == "doc_ranker" else ()
    with EmbeddedTriton(log_path=log, extra_models=extra) as triton:
        pa_url = triton.http_url.removeprefix("http://")
        lk_url = triton.http_url
        if args.protocol == "grpc":
            pa_url = lk_url = triton.grpc_url
        for rate in (float(r) for r in args.rates.split(",")):
            pa = perf_analyzer(pa_url, args.protocol, rate, args.candidates, args.model)
            lk = loadkit_run(lk_url, args.protocol, rate, args.seconds, args.candidates, args.model)
            print(f"  {rate:.0f}/s: perf_analyzer {pa}; loadkit {lk}", flush=True)
            rows.append(
                [
                    f"{rate:.0f}",
                    f"{pa['rate']:.1f}",
                    f"{lk['rate']:.1f}",
                    f"{pa['p50_ms']:.2f}",
                    f"{lk['service_p50_ms']:.2f} ({_diff(lk['service_p50_ms'], pa['p50_ms'])})",
                    f"{lk['corrected_p50_ms']:.2f}",
                    f"{pa['p99_ms']:.2f}",
                    f"{lk['service_p99_ms']:.2f} ({_diff(lk['service_p99_ms'], pa['p99_ms'])})",
                    f"{lk['corrected_p99_ms']:.2f}",
                ]
            )
    print()
    print(
        table(
            [
                "rate/s",
                "PA throughput/s",
                "loadkit throughput/s",
                "PA P50 ms",
                "loadkit service P50 ms (vs PA)",
                "loadkit corrected P50 ms",
                "PA P99 ms",
                "loadkit service P99 ms (vs PA)",
                "loadkit corrected P99 ms",
            ],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
