"""Benchmark 2: loadkit's latency figures beside Triton's own perf_analyzer, same rates.

    .venv/bin/python bench/latency_vs_perf_analyzer.py --concurrent          # ~5 min
    .venv/bin/python bench/latency_vs_perf_analyzer.py --concurrent --model doc_ranker
    .venv/bin/python bench/latency_vs_perf_analyzer.py                  # in turn, ~2 minutes
    .venv/bin/python bench/latency_vs_perf_analyzer.py --rates 100,300 --protocol grpc
    .venv/bin/python bench/latency_vs_perf_analyzer.py --model doc_ranker   # real data, both tools

Against one embedded Triton (the `ranker` model, 100 candidates per
request, default batching).

**`--concurrent`** (the comparison to trust on a shared machine): for each
total rate R, `--trials` times, perf_analyzer and loadkit run **at the same
time at R/2 each** against the one server, so whatever else the machine does
hits both. The tool started first alternates between trials (odd trials
perf_analyzer first, even trials loadkit first). Both are read over the same
wall-clock window, the overlap of perf_analyzer's measurement windows with
loadkit's steady part: perf_analyzer's every request in it (from
`--profile-export-file`: send and response timestamps), loadkit's 1 s service
histograms that lie wholly inside it. Reported: per trial the P50/P99 of each
and loadkit's P99 minus perf_analyzer's; over trials the median with the
spread (min..max).

**In turn** (default, the older figures): at each constant rate, first

- `perf_analyzer --request-rate-range R` (constant spacing), from the
  `tritonclient` 2.51.0 wheel (unpacked into `bench/.cache/` by
  `bench/fetch_perf_analyzer.sh`; its `libb64` and `libcudart` come from the
  `nvidia-pytriton` wheel's libs folder), `--measurement-interval` 4 s,
  at most 4 trials, stable within 50 %: its P50/P99 and throughput;
- then loadkit's `scenarios/soak.py` at the same rate for `--seconds`: P50/P99
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
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

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
    # perf_analyzer needs the variable dimension's size even with real data (its first step
    # is a flat array): "DOC_IDS ... needs to have its shape fully defined".
    pa = ["--input-data", str(INPUT_DATA), "--shape", "DOC_IDS:8"]
    return pa, {"model": model, "input_data": str(INPUT_DATA)}


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


# ------------------------------------------------------------------ concurrent comparison
PA_WINDOW_MS = 3000  # three windows, always accepted: ~9 s of measurement
LOADKIT_CHILD = """
import json, sys
from loadkit.load.orchestrator import run_scenario
a = json.loads(sys.argv[1])
print(run_scenario(a["scenario"], a["url"], out_dir=a["out"], params=a["params"]), flush=True)
"""


def _start_perf_analyzer(
    url: str, protocol: str, rate: float, candidates: int, model: str, export: Path
) -> subprocess.Popen[str]:
    if not PERF_ANALYZER.exists():
        raise SystemExit(f"{PERF_ANALYZER} is missing: run bench/fetch_perf_analyzer.sh first")
    argv = [str(PERF_ANALYZER), "-m", model, "-u", url, "-i", protocol]
    argv += ["--request-rate-range", str(int(rate)), "--request-distribution", "constant"]
    argv += ["--measurement-interval", str(PA_WINDOW_MS), "--max-trials", "3"]
    argv += ["--stability-percentage", "9999", "--profile-export-file", str(export)]
    argv += _inputs(model, candidates)[0]
    env = {**os.environ, "LD_LIBRARY_PATH": str(PA_LIBS)}
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _start_loadkit(
    url: str, protocol: str, rate: float, seconds: float, candidates: int, model: str, out: Path
) -> subprocess.Popen[str]:
    params = {"rate": rate, "duration_s": seconds, "protocol": protocol}
    params |= _inputs(model, candidates)[1]
    arg = {"scenario": str(REPO / "scenarios" / "soak.py"), "url": url, "out": str(out)}
    arg["params"] = params  # type: ignore[assignment]
    return subprocess.Popen(
        [sys.executable, "-c", LOADKIT_CHILD, json.dumps(arg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_load_start(out: Path, lk: subprocess.Popen[str], timeout_s: float = 120) -> None:
    """Until a run under `out` has written its load-start phase (loadkit is sending)."""
    deadline = time.monotonic() + timeout_s
    seen = {p.parent for p in out.glob("*/events.jsonl")}
    while time.monotonic() < deadline and lk.poll() is None:
        for events in out.glob("*/events.jsonl"):
            if events.parent in seen:
                continue
            if '"load-start"' in events.read_text():
                return
        time.sleep(0.1)
    raise RuntimeError("loadkit did not start its load")


def _pa_requests(export: Path) -> tuple[np.ndarray, np.ndarray]:
    """perf_analyzer's requests: send times (wall ns) and latencies (µs)."""
    requests = json.loads(export.read_text())["experiments"][0]["requests"]
    sent = np.array([r["timestamp"] for r in requests], dtype=np.int64)
    done = np.array([r["response_timestamps"][-1] for r in requests], dtype=np.int64)
    return sent, (done - sent) / 1e3


def one_concurrent_trial(
    triton: EmbeddedTriton,
    protocol: str,
    rate: float,
    candidates: int,
    model: str,
    pa_first: bool,
    workdir: Path,
) -> dict[str, float]:
    """perf_analyzer and loadkit at `rate`/2 each, at once; both read over one window."""
    pa_url = triton.http_url.removeprefix("http://")
    lk_url = triton.http_url
    if protocol == "grpc":
        pa_url = lk_url = triton.grpc_url
    half = rate / 2
    export = workdir / f"pa-{rate:.0f}-{time.monotonic_ns()}.json"
    seconds = 3 * PA_WINDOW_MS / 1000 + 10  # covers perf_analyzer's windows either way round
    # loadkit's start-up (pre-flight, Locust) takes seconds, more on a busy machine: start
    # perf_analyzer once loadkit's load has begun, at once (perf_analyzer's warm-up and
    # windows start inside loadkit's warm-up) or 3 s later (loadkit's load established).
    lk = _start_loadkit(lk_url, protocol, half, seconds, candidates, model, workdir)
    _wait_for_load_start(workdir, lk)
    if not pa_first:
        time.sleep(3.0)
    pa = _start_perf_analyzer(pa_url, protocol, half, candidates, model, export)
    pa_out, _ = pa.communicate(timeout=300)
    lk_out, lk_err = lk.communicate(timeout=300)
    if lk.returncode != 0:
        raise RuntimeError(f"loadkit failed: {lk_err.strip().splitlines()[-3:]}")
    if not export.exists():
        raise RuntimeError(f"perf_analyzer failed: {pa_out.strip().splitlines()[-3:]}")
    sent, pa_lat = _pa_requests(export)
    export.unlink()
    run = load_run(Path(lk_out.strip().splitlines()[-1]))
    ev = run.events
    lk_start = int(ev[ev["name"] == "load-start"]["t_ns"].iloc[0]) + 2 * SECOND
    lk_end = int(ev[ev["name"] == "load-end"]["t_ns"].iloc[0])
    t0, t1 = max(lk_start, int(sent[0])), min(lk_end, int(sent[-1]))
    t0 = -(-t0 // SECOND) * SECOND  # whole loadkit intervals
    t1 = t1 // SECOND * SECOND
    if t1 - t0 < 3 * SECOND:
        raise RuntimeError(f"the two tools overlapped only {(t1 - t0) / 1e9:.1f} s")
    inside = (sent >= t0) & (sent < t1)
    hist = merge(
        [
            h.histogram
            for h in run.latency_intervals
            if h.kind == "service" and t0 <= h.start_ns and h.end_ns <= t1
        ]
    )
    return {
        "window_s": (t1 - t0) / 1e9,
        "pa_n": float(inside.sum()),
        "lk_n": float(hist.get_total_count()),
        "pa_p50": float(np.percentile(pa_lat[inside], 50)) / 1000,
        "pa_p99": float(np.percentile(pa_lat[inside], 99)) / 1000,
        "lk_p50": hist.get_value_at_percentile(50) / 1000,
        "lk_p99": hist.get_value_at_percentile(99) / 1000,
        "load1": os.getloadavg()[0],
    }


def _spread(values: list[float], fmt: str = "{:.2f}") -> str:
    return (
        f"{fmt.format(statistics.median(values))} "
        f"({fmt.format(min(values))}..{fmt.format(max(values))})"
    )


def concurrent_main(args: argparse.Namespace) -> int:
    log = Path(tempfile.mkdtemp(prefix="loadkit-bench-triton-")) / "triton.log"
    workdir = Path(tempfile.mkdtemp(prefix="loadkit-bench-concurrent-"))
    extra = ("doc_ranker",) if args.model == "doc_ranker" else ()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    rows: list[list[object]] = []
    with EmbeddedTriton(log_path=log, extra_models=extra) as triton:
        for rate in (float(r) for r in args.rates.split(",")):
            trials = []
            for k in range(args.trials):
                res = one_concurrent_trial(
                    triton, args.protocol, rate, args.candidates, args.model, k % 2 == 0, workdir
                )
                res["pa_first"] = float(k % 2 == 0)
                trials.append(res)
                print(f"  {rate:.0f}/s trial {k + 1}: {json.dumps(res)}", flush=True)
            diff = [t["lk_p99"] - t["pa_p99"] for t in trials]
            allowed = [max(0.3, 0.1 * t["pa_p99"]) for t in trials]
            rows.append(
                [
                    f"{rate:.0f} ({rate / 2:.0f} + {rate / 2:.0f})",
                    len(trials),
                    _spread([t["pa_p50"] for t in trials]),
                    _spread([t["lk_p50"] for t in trials]),
                    _spread([t["pa_p99"] for t in trials]),
                    _spread([t["lk_p99"] for t in trials]),
                    _spread(diff, "{:+.2f}"),
                    f"{statistics.median(diff):+.2f} <= {statistics.median(allowed):.2f}: "
                    + ("yes" if statistics.median(diff) <= statistics.median(allowed) else "no"),
                    _spread([t["load1"] for t in trials], "{:.1f}"),
                ]
            )
    print(f"load average at end: {os.getloadavg()}")
    print()
    print(
        table(
            [
                "total rate/s (PA + loadkit)",
                "trials",
                "PA P50 ms",
                "loadkit service P50 ms",
                "PA P99 ms",
                "loadkit service P99 ms",
                "loadkit - PA P99 ms",
                "goal (<= max(0.3 ms, 10 %))",
                "load average",
            ],
            rows,
        )
    )
    print("medians over trials, (min..max) in brackets")
    return 0


def _diff(a: float, b: float) -> str:
    return f"{(a - b) / b:+.0%}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="100,300,500")
    parser.add_argument("--seconds", type=float, default=15.0, help="loadkit run length per rate")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--model", choices=("ranker", "doc_ranker"), default="ranker")
    parser.add_argument(
        "--concurrent", action="store_true", help="both tools at once, at half the rate each"
    )
    parser.add_argument("--trials", type=int, default=4, help="with --concurrent, per rate")
    args = parser.parse_args(argv)
    if args.concurrent:
        return concurrent_main(args)
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
