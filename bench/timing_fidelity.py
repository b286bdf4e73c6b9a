"""Benchmark 3: timing fidelity against a server with a known fixed delay.

    .venv/bin/python bench/timing_fidelity.py                 # about 2 minutes
    .venv/bin/python bench/timing_fidelity.py --delay-ms 10 --rates 100,500,1000,2000

`bench/fixed_delay_server.py` answers every request after exactly
`--delay-ms` (gevent sleep, one process). First `wrk --latency` (C,
closed loop, 4 connections) measures what the server and loopback really
take; then loadkit's `scenarios/soak.py` (JSON user, one candidate, auto
user pool) runs at each rate, ascending, until two rates in a row are not
sustained (`bench/max_rate.py`'s rule). For each: the error of loadkit's
measured P50/P99 against the configured delay (service: from the actual
send; corrected: from the intended send time), and the lag between the
intended and the actual send time (from the request sample: every
request's `sent_ns - t_ns`), plus the scheduler's own per-second worst
lateness (`dispatch_lag_max_ms`).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._support import REPO, table, wait_for_port  # noqa: E402
from bench.generator_capacity import _sustained  # noqa: E402
from loadkit.analysis.percentiles import merge  # noqa: E402
from loadkit.load.orchestrator import run_scenario  # noqa: E402
from loadkit.rundir import load_run  # noqa: E402

SECOND = 1_000_000_000
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def wrk_reference(port: int, seconds: int = 5) -> dict[str, float]:
    wrk = shutil.which("wrk")
    if wrk is None:
        raise SystemExit("wrk is not installed: apt-get install -y wrk")
    out = subprocess.run(
        [wrk, "-t1", "-c4", f"-d{seconds}s", "--latency", f"http://127.0.0.1:{port}/"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found = dict(re.findall(r"^\s+(\d+)%\s+([\d.]+\w+)$", out, re.MULTILINE))

    def ms(text: str) -> float:
        m = re.match(r"([\d.]+)(\w+)", text)
        assert m is not None
        return float(m.group(1)) * _UNITS[m.group(2)]

    return {"p50_ms": ms(found["50"]), "p99_ms": ms(found["99"])}


def measure(port: int, rate: float, seconds: float, out: Path) -> dict[str, float | bool]:
    run_dir = run_scenario(
        REPO / "scenarios" / "soak.py",
        f"http://127.0.0.1:{port}",
        out_dir=out,
        params={"rate": rate, "duration_s": seconds, "protocol": "json", "json_path": "/"}
        | {"requests": "ranker", "candidates": 1},  # not a KServe v2 server: no metadata
    )
    run = load_run(run_dir)
    ev = run.events
    start = int(ev[ev["name"] == "load-start"]["t_ns"].iloc[0]) + 2 * SECOND
    end = int(ev[ev["name"] == "load-end"]["t_ns"].iloc[0])
    steady = [h for h in run.latency_intervals if start <= h.start_ns and h.end_ns <= end]
    res: dict[str, float | bool] = {"rate": rate}
    for kind in ("service", "corrected"):
        hist = merge([h.histogram for h in steady if h.kind == kind])
        res[f"{kind}_p50_ms"] = hist.get_value_at_percentile(50) / 1000
        res[f"{kind}_p99_ms"] = hist.get_value_at_percentile(99) / 1000
    sample = run.request_samples
    sample = sample[(sample["t_ns"] >= start) & (sample["t_ns"] < end)]
    reservoir = sample[sample["sampled"] == "reservoir"] if "sampled" in sample else sample
    lag_ms = (reservoir["sent_ns"] - reservoir["t_ns"]).to_numpy() / 1e6
    res["send_lag_p50_ms"] = float(np.percentile(lag_ms, 50))
    res["send_lag_p99_ms"] = float(np.percentile(lag_ms, 99))
    res["send_lag_max_ms"] = float(lag_ms.max())
    sustained, _offered, dispatch_lag = _sustained(run_dir)
    res["dispatch_lag_ms"] = dispatch_lag
    res["sustained"] = sustained
    return res


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-ms", type=float, default=10.0)
    parser.add_argument("--rates", default="100,500,1000,1500,2000,2500,3000")
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args(argv)
    out = Path(tempfile.mkdtemp(prefix="loadkit-bench-fidelity-"))
    server = subprocess.Popen(
        [sys.executable, str(REPO / "bench" / "fixed_delay_server.py"), "0", str(args.delay_ms)],
        stdout=subprocess.PIPE,
        text=True,
    )
    results = []
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        wait_for_port(port)
        ref = wrk_reference(port)
        print(f"  wrk -c4: P50 {ref['p50_ms']:.2f} ms, P99 {ref['p99_ms']:.2f} ms", flush=True)
        misses = 0
        for rate in (float(r) for r in args.rates.split(",")):
            res = measure(port, rate, args.seconds, out)
            results.append(res)
            print(f"  {res}", flush=True)
            misses += 0 if res["sustained"] else 1
            if misses >= 2:
                break
    finally:
        server.terminate()
        server.wait(timeout=10)
    d = args.delay_ms

    def err(v: object) -> str:
        return f"{float(v):.2f} ({float(v) - d:+.2f})"  # type: ignore[arg-type]

    rows = [
        [
            f"{r['rate']:.0f}",
            "yes" if r["sustained"] else "no",
            err(r["service_p50_ms"]),
            err(r["service_p99_ms"]),
            err(r["corrected_p50_ms"]),
            err(r["corrected_p99_ms"]),
            f"{r['send_lag_p50_ms']:.2f} / {r['send_lag_p99_ms']:.2f} / {r['send_lag_max_ms']:.1f}",
            f"{r['dispatch_lag_ms']:.1f}",
        ]
        for r in results
    ]
    print()
    print(
        f"configured delay {d:.1f} ms; wrk -c4 reference: P50 {ref['p50_ms']:.2f} ms, "
        f"P99 {ref['p99_ms']:.2f} ms"
    )
    print(
        table(
            [
                "rate/s",
                "sustained",
                "service P50 ms (error)",
                "service P99 ms (error)",
                "corrected P50 ms (error)",
                "corrected P99 ms (error)",
                "send lag P50 / P99 / max ms",
                "dispatch lag ms (median of per-s worst)",
            ],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
