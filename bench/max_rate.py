"""Highest open-model rate one generator process sustains, against a target.

    python bench/max_rate.py embedded            # the embedded Triton (HTTP)
    python bench/max_rate.py trivial             # bench/trivial_http_server.py (JSON user)
    python bench/max_rate.py embedded --rates 200,400,800 --seconds 6

For each rate it runs scenarios/soak.py for a few seconds (one Locust
process) and calls the rate sustained when, in every whole second of load,
the generator started and completed at least 98 % of the scheduled
arrivals and dropped none, and the typical (median over seconds) worst
dispatch lag stayed under 10 ms (`generator_check.LAG_MS`, the rule the run
summary uses): past that, the generator itself is the
bottleneck and corrected latency measures it, not the server.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from loadkit.load.orchestrator import run_scenario
from loadkit.rundir import load_run
from loadkit.rundir.generator_check import LAG_MS

REPO = Path(__file__).resolve().parents[1]
SECOND = 1_000_000_000


def measure(target: str, rate: float, seconds: float, params: dict, out: Path) -> dict:
    run_dir = run_scenario(
        REPO / "scenarios" / "soak.py",
        target,
        out_dir=out,
        params={"rate": rate, "duration_s": seconds, **params},
    )
    return judge_run(run_dir, rate)


def judge_run(run_dir: Path, rate: float | None = None) -> dict:
    """Per-second figures of a finished open-model run and whether it was sustained.

    Sustained: every whole second started and completed >= 98 % of its
    offered arrivals, nothing was dropped, and the median of the per-second
    worst dispatch lag stayed under `LAG_MS` (10 ms).
    """
    run = load_run(run_dir)
    ev = run.events
    start = int(ev[ev["name"] == "load-start"]["t_ns"].iloc[0])
    end = int(ev[ev["name"] == "load-end"]["t_ns"].iloc[0])
    per: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in run.load_intervals.to_dict("records"):
        t = int(row["t_ns"])
        if t >= start and t + SECOND <= end:
            for key in ("offered", "started", "ok", "dropped"):
                per[t][key] += row[key]
            per[t]["lag"] = max(per[t]["lag"], row.get("dispatch_lag_max_ms") or 0.0)
    seconds_ok = [
        p["started"] >= 0.98 * p["offered"] and p["ok"] >= 0.98 * p["offered"] and p["dropped"] == 0
        for p in per.values()
    ]
    lags = sorted(p["lag"] for p in per.values())
    median_lag = lags[len(lags) // 2] if lags else 0.0
    return {
        "rate": rate,
        "offered_per_s": sum(p["offered"] for p in per.values()) / max(1, len(per)),
        "started_per_s_min": min((p["started"] for p in per.values()), default=0.0),
        "ok_per_s_min": min((p["ok"] for p in per.values()), default=0.0),
        "lag_ms_max": lags[-1] if lags else 0.0,
        "lag_ms_median_of_max": median_lag,
        "dropped": sum(p["dropped"] for p in per.values()),
        "sustained": bool(seconds_ok) and all(seconds_ok) and median_lag < LAG_MS,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("target", choices=("embedded", "trivial"))
    parser.add_argument("--rates", default="200,400,600,800,1000,1200,1500")
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    out = Path(tempfile.mkdtemp(prefix="loadkit-maxrate-"))
    results = []
    if args.target == "embedded":
        from loadkit.target.server import EmbeddedTriton

        with EmbeddedTriton(log_path=out / "triton.log") as t:
            for rate in rates:
                results.append(measure(t.http_url, rate, args.seconds, {}, out))
                print(results[-1], flush=True)
    else:
        server = subprocess.Popen(
            [sys.executable, str(REPO / "bench" / "trivial_http_server.py"), "0"],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            for rate in rates:
                params = {"protocol": "json", "json_path": "/"}
                results.append(measure(f"http://127.0.0.1:{port}", rate, args.seconds, params, out))
                print(results[-1], flush=True)
        finally:
            server.terminate()
            server.wait(timeout=10)
    best = max((r["rate"] for r in results if r["sustained"]), default=None)
    print(f"highest sustained rate against {args.target}: {best}/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
