"""How long `loadkit capacity` takes, and how close it lands to long fixed-rate runs.

    python bench/capacity_search.py                     # 40 ms per batch, max batch 1
    python bench/capacity_search.py --batch-ms 20 --check-s 60

Starts the embedded Triton with one instance, max batch 1 and a fixed
simulated compute per batch (capacity 1000 / batch_ms req/s, less the
Python backend's overhead), times one `loadkit capacity` search, then runs
`soak` at the found capacity and at the bracket's failing rate for
`--check-s` seconds each and reports whether the long runs agree (the
capacity holds: achieved >= 97 % of offered, no growing backlog; the failing
rate does not). Prints one JSON object. Not part of CI; record its numbers in
docs/benchmarks.md with the host's state (a busy host moves them).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loadkit.load.orchestrator import run_scenario
from loadkit.rundir import load_run
from loadkit.target.server import EmbeddedTriton

REPO = Path(__file__).resolve().parents[1]


def fixed_rate(target: str, rate: float, seconds: float, out: Path) -> dict[str, float]:
    """Offered, achieved and the last 10 s backlog of a constant-rate soak."""
    run_dir = run_scenario(
        REPO / "scenarios" / "soak.py",
        target,
        out_dir=out,
        params={"rate": rate, "duration_s": seconds, "candidates": 10},
    )
    load = load_run(run_dir).load_intervals
    by_t = load.groupby("t_ns")[["offered", "ok", "errors", "in_flight"]].sum().sort_index()
    steady = by_t[by_t["offered"] > 0].iloc[2:-2]  # whole seconds of load only
    offered = float(steady["offered"].mean())
    achieved = float((steady["ok"] + steady["errors"]).mean())
    growth = int(steady["in_flight"].iloc[-1] - steady["in_flight"].iloc[0])
    return {
        "rate": rate,
        "offered_rps": round(offered, 2),
        "achieved_rps": round(achieved, 2),
        "in_flight_growth": growth,
        "holds": bool(achieved >= 0.97 * offered and growth < 5),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-ms", type=float, default=40.0)
    parser.add_argument("--check-s", type=float, default=60.0)
    parser.add_argument("--resolution", default="5%")
    args = parser.parse_args()
    params = {"gpu_time_us_per_batch": int(args.batch_ms * 1000), "gpu_time_us_per_item": 0}
    out = Path(tempfile.mkdtemp(prefix="capacity-bench-"))
    with EmbeddedTriton(max_batch_size=1, max_queue_delay_us=0, model_params=params) as t:
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "loadkit.cli", "capacity", "--target", t.http_url]
            + ["--slo", "p99=1s,errors=1%", "--start", str(round(250 / args.batch_ms, 1))]
            + ["--max-rate", str(4000 / args.batch_ms), "--resolution", args.resolution]
            + ["--gpu", "none", "--set", "candidates=10", "--out", str(out), "--run-id", "cap"],
            capture_output=True,
            text=True,
            check=False,
        )
        search_s = time.monotonic() - started
        if proc.returncode != 0:
            sys.exit(proc.stderr)
        cap = json.loads((out / "cap" / "analysis.json").read_text())["capacity"]
        checks = [
            fixed_rate(t.http_url, r, args.check_s, out) for r in (cap["low_rps"], cap["high_rps"])
        ]
    print(
        json.dumps(
            {
                "batch_ms": args.batch_ms,
                "analytic_rps": 1000.0 / args.batch_ms,
                "search_s": round(search_s, 1),
                "probes": len(cap["probes"]),
                "rate_rps": cap["rate_rps"],
                "bracket": [cap["low_rps"], cap["high_rps"]],
                "predicted_rps": (cap["prediction"] or {}).get("rps"),
                "limited_by": cap["limited_by"],
                "long_runs": checks,
                "agree": checks[0]["holds"] and not checks[1]["holds"],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
