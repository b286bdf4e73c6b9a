"""Benchmark 1: generator capacity of loadkit beside bare Locust and wrk, in one run.

    .venv/bin/python -m bench.generator_capacity            # about 3 minutes
    .venv/bin/python -m bench.generator_capacity --seconds 8 --rates 800,1000,1200

Target: nginx (Debian) on 127.0.0.1, answering every request with 200 `{}`
(bench/_support.py). Each generator runs in turn against the same nginx:

- `wrk` (C, one thread, 20 connections, POST of the same body): the
  physical reference, what this machine's loopback + nginx can do;
- bare Locust (`bench/locust_bare.py`: FastHttpUser, `wait_time = 0`,
  a fixed body, no recording), 20 users, one process; and the same paced with
  `constant_throughput` to the open model's highest sustained rate (below): the
  two at a rate both sustain;
- loadkit, closed model (`bench/closed_json.py`), 20 users, one process,
  full recording (corrected and service HDR histograms, request sample);
- loadkit, open model (`scenarios/soak.py`, JSON user, one candidate), one
  process, at increasing rates: the highest rate it sustains;
- the same with `--workers 2` (master + 2 worker processes).

Every figure comes from one measurement window per run (the steady part,
2 s after the first request to 1 s before the last): requests from nginx's
own counter (`stub_status`), CPU from the generator's processes (psutil),
both polled at the same instants. "Per core" is requests per CPU-second of
the generator's processes, so it does not depend on how busy the rest of
the (shared) machine was.

"Sustained" (open model) is `bench/max_rate.py`'s rule: every whole second
started and completed >= 98 % of the scheduled arrivals, none dropped, and
the median per-second worst dispatch lag under 10 ms.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bench._support import (
    REPO,
    Meter,
    bare_body,
    children_matching,
    load_window,
    nginx_endpoint,
    nginx_meter,
    table,
)
from bench.max_rate import judge_run
from loadkit.load.orchestrator import run_scenario

USERS = 20
# The servers here are not KServe v2 (no metadata): the ranker's request preset, 1 candidate.
JSON_PARAMS: dict[str, Any] = {
    "protocol": "json",
    "json_path": "/",
    "requests": "ranker",
    "candidates": 1,
}


@dataclass
class Measured:
    generator: str
    processes: int
    rate: float  # requests/s completed in the window (nginx's counter)
    cpu_cores: float  # generator CPU seconds per second in the window
    target_cores: float  # nginx CPU seconds per second in the window
    sustained: bool | None = None  # open model only
    offered: float | None = None
    lag_ms: float | None = None  # median per-second worst dispatch lag

    @property
    def per_core(self) -> float:
        return self.rate / self.cpu_cores if self.cpu_cores > 0 else float("nan")


def _window_figures(meter: Meter) -> tuple[float, float, float]:
    t0, t1, seconds = load_window(meter)
    # Each poll of nginx's status page is one request: subtract them.
    polls = sum(1 for t, _ in meter.samples if t0 <= t < t1)
    requests = meter.between("requests", t0, t1) - polls
    cpu = meter.between("cpu", t0, t1) / seconds
    return requests / seconds, cpu, meter.between("nginx_cpu", t0, t1) / seconds


def _meter(port: int, word: str) -> Meter:
    return nginx_meter(port, cpu=children_matching(word), nginx_cpu=_nginx_process)


_NGINX: list[psutil.Process] = []


def _nginx_process() -> list[psutil.Process]:
    return _NGINX


def run_wrk(port: int, seconds: float, body: str) -> Measured:
    script = Path(tempfile.mkdtemp(prefix="loadkit-bench-wrk-")) / "post.lua"
    script.write_text(
        'wrk.method = "POST"\n'
        f"wrk.body = [[{body}]]\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    wrk = shutil.which("wrk")
    if wrk is None:
        raise RuntimeError("wrk is not installed: apt-get install -y wrk")
    with _meter(port, "wrk") as meter:
        subprocess.run(
            [wrk, "-t1", f"-c{USERS}", f"-d{int(seconds)}s", "-s", str(script)]
            + [f"http://127.0.0.1:{port}/"],
            check=True,
            capture_output=True,
        )
    return Measured("wrk (C, 1 thread)", 1, *_window_figures(meter))


def run_bare_locust(port: int, seconds: float, rate: float = 0.0) -> Measured:
    """Saturated (`wait_time = 0`), or paced to `rate` requests/s with `constant_throughput`."""
    argv = [sys.executable, "-m", "locust", "-f", str(REPO / "bench" / "locust_bare.py")]
    argv += ["--headless", "-u", str(USERS), "-r", str(USERS), "-t", f"{int(seconds)}s"]
    argv += ["--host", f"http://127.0.0.1:{port}", "--only-summary", "--loglevel", "WARNING"]
    env = {**os.environ, "LOADKIT_BARE_RATE": str(rate), "LOADKIT_BARE_USERS": str(USERS)}
    with _meter(port, "locust_bare") as meter:
        subprocess.run(argv, check=True, capture_output=True, cwd=REPO, env=env)
    name = f"bare Locust FastHttpUser, {USERS} users"
    if rate:
        name += f", constant_throughput to {rate:.0f}/s"
    return Measured(name, 1, *_window_figures(meter), offered=rate or None)


def run_loadkit_closed(port: int, seconds: float, out: Path) -> Measured:
    with _meter(port, "locust") as meter:
        run_scenario(
            REPO / "bench" / "closed_json.py",
            f"http://127.0.0.1:{port}",
            out_dir=out,
            params={**JSON_PARAMS, "users": USERS, "duration_s": seconds},
        )
    return Measured(f"loadkit closed model, {USERS} users", 1, *_window_figures(meter))


def _sustained(run_dir: Path) -> tuple[bool, float, float]:
    """(sustained, offered/s, median per-second worst dispatch lag) as bench/max_rate.py."""
    judged = judge_run(run_dir)
    return judged["sustained"], judged["offered_per_s"], judged["lag_ms_median_of_max"]


def run_loadkit_open(
    port: int, rate: float, seconds: float, workers: int, out: Path, users: int = 0
) -> Measured:
    with _meter(port, "locust") as meter:
        run_dir = run_scenario(
            REPO / "scenarios" / "soak.py",
            f"http://127.0.0.1:{port}",
            out_dir=out,
            workers=workers,
            params={**JSON_PARAMS, "rate": rate, "duration_s": seconds, "users": users},
        )
    achieved, cpu, target_cpu = _window_figures(meter)
    sustained, offered, lag = _sustained(run_dir)
    processes = 1 if workers == 0 else workers + 1
    name = "loadkit open model" + (f", --workers {workers}" if workers else ", 1 process")
    name += f", {users} users" if users else ", auto users"
    return Measured(name, processes, achieved, cpu, target_cpu, sustained, offered, lag)


def ladder(
    port: int, rates: list[float], seconds: float, workers: int, users: int, out: Path
) -> list[Measured]:
    """Ascending rates until two are not sustained."""
    results: list[Measured] = []
    misses = 0
    for rate in rates:
        m = run_loadkit_open(port, rate, seconds, workers, out, users)
        results.append(m)
        print(
            f"  {m.generator} @ {rate:.0f}/s: achieved {m.rate:.0f}/s, "
            f"CPU {m.cpu_cores:.2f} cores, lag {m.lag_ms:.1f} ms, sustained={m.sustained}",
            flush=True,
        )
        misses += 0 if m.sustained else 1
        if misses >= 2:
            break
    return results


def _fmt(m: Measured) -> list[object]:
    sustained = "" if m.sustained is None else ("yes" if m.sustained else "no")
    offered = "" if m.offered is None else f"{m.offered:.0f}"
    return [
        m.generator,
        m.processes,
        offered,
        f"{m.rate:.0f}",
        f"{m.cpu_cores:.2f}",
        f"{m.per_core:.0f}",
        f"{m.target_cores:.2f}",
        sustained,
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each run")
    parser.add_argument("--rates", default="1000,1400,1800,2200", help="open model, auto users")
    parser.add_argument("--fixed-rates", default="2000,3000,4000,5000,6000,7000")
    parser.add_argument("--worker-rates", default="3000,4000,5000,6000,7000,8000")
    parser.add_argument("--users", type=int, default=100, help="pool for the fixed-user ladders")
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",") if r]
    fixed_rates = [float(r) for r in args.fixed_rates.split(",") if r]
    worker_rates = [float(r) for r in args.worker_rates.split(",") if r]
    out = Path(tempfile.mkdtemp(prefix="loadkit-bench-capacity-"))
    body = bare_body()
    rows: list[Measured] = []
    with nginx_endpoint() as (port, pid):
        _NGINX[:] = [psutil.Process(pid)]
        rows.append(run_wrk(port, args.seconds, body))
        print(f"  wrk: {rows[-1].rate:.0f}/s", flush=True)
        rows.append(run_bare_locust(port, args.seconds + 3))
        print(f"  bare Locust: {rows[-1].rate:.0f}/s, {rows[-1].cpu_cores:.2f} cores", flush=True)
        rows.append(run_loadkit_closed(port, args.seconds + 3, out))
        print(
            f"  loadkit closed: {rows[-1].rate:.0f}/s, {rows[-1].cpu_cores:.2f} cores", flush=True
        )
        auto = ladder(port, rates, args.seconds, 0, 0, out)
        best_auto = max((m for m in auto if m.sustained), key=lambda m: m.rate, default=None)
        # Bare Locust at the open model's highest sustained rate: the two at a rate both
        # sustain (issue 31), beside the saturated figure above.
        paced = (
            run_bare_locust(port, args.seconds + 3, best_auto.offered or best_auto.rate)
            if best_auto is not None
            else None
        )
        one = ladder(port, fixed_rates, args.seconds, 0, args.users, out)
        two = ladder(port, worker_rates, args.seconds, 2, args.users, out)
    rows += auto + ([paced] if paced is not None else []) + one + two
    headers = ["generator", "processes", "offered/s", "achieved/s", "CPU (cores)", "req per CPU-s"]
    print()
    print(table(headers + ["nginx CPU", "sustained"], [_fmt(m) for m in rows]))
    bare = rows[1]
    closed = rows[2]
    best_one = max((m for m in one if m.sustained), key=lambda m: m.rate, default=None)
    best_two = max((m for m in two if m.sustained), key=lambda m: m.rate, default=None)
    print()
    print(f"bare Locust saturated: {bare.rate:.0f}/s at {bare.cpu_cores:.2f} cores")
    print(f"loadkit closed / bare Locust, per core: {closed.per_core / bare.per_core:.0%}")
    for label, best in (("auto users", best_auto), (f"{args.users} users", best_one)):
        if best is not None:
            print(
                f"loadkit open, highest sustained (1 process, {label}): {best.rate:.0f}/s, "
                f"{best.per_core:.0f} req per CPU-s = {best.per_core / bare.per_core:.0%} "
                "of bare Locust's"
            )
    if best_auto is not None and paced is not None:
        print(
            f"bare Locust paced to {paced.offered:.0f}/s: achieved {paced.rate:.0f}/s, "
            f"{paced.per_core:.0f} req per CPU-s; loadkit open at the same rate = "
            f"{best_auto.per_core / paced.per_core:.0%} of it"
        )
    if best_one is not None and best_two is not None:
        print(
            f"loadkit open, highest sustained (--workers 2, {args.users} users): "
            f"{best_two.rate:.0f}/s = {best_two.rate / best_one.rate:.2f}x one process"
        )
    print(f"run directories: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
