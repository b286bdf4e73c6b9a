"""What the Locust master costs per worker: CPU-seconds per second, with 1, 2, 4 workers.

    .venv/bin/python -m bench.master_cost                       # about 2 minutes
    .venv/bin/python -m bench.master_cost --workers 1,2 --seconds 10 --rate-per-worker 300

Target: nginx on 127.0.0.1 answering 200 `{}` (bench/_support.py). Each run
is `scenarios/soak.py` (JSON user) with N local workers; every worker ships
its per-interval records to the master (the path remote workers take too),
and the master writes them into the run directory. CPU of the master process
alone (psutil, `--master` on its command line) and of the workers, over the
steady window (nginx's own counter decides it, as bench/generator_capacity).

"Per worker" = master CPU-s per second / N: how many workers one master core
carries is 1 / that. The master's work per worker is one message per second
(histograms already encoded, at most a few hundred request-sample rows), so
it depends on the request names and the sample size, hardly on the rate.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import psutil

from bench._support import REPO, children_matching, load_window, nginx_endpoint, nginx_meter, table
from bench.generator_capacity import JSON_PARAMS
from loadkit.load.orchestrator import run_scenario


def _locust_master() -> list[psutil.Process]:
    """The Locust master: `--master` as a whole argument (workers have `--master-host`)."""
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "--master" in child.cmdline():
                out.append(child)
        except psutil.Error:
            continue
    return out


def measure(port: int, workers: int, rate: float, seconds: float, out: Path) -> list[object]:
    meter = nginx_meter(port, master=_locust_master, workers=children_matching("--worker"))
    with meter:
        run_scenario(
            REPO / "scenarios" / "soak.py",
            f"http://127.0.0.1:{port}",
            out_dir=out,
            workers=workers,
            params={**JSON_PARAMS, "rate": rate, "duration_s": seconds},
        )
    t0, t1, span = load_window(meter)
    master = meter.between("master", t0, t1) / span
    worker_cpu = meter.between("workers", t0, t1) / span
    achieved = meter.between("requests", t0, t1) / span
    return [
        workers,
        f"{rate:.0f}",
        f"{achieved:.0f}",
        f"{master:.3f}",
        f"{master / workers * 1000:.1f}",
        f"{worker_cpu:.2f}",
        f"{1 / (master / workers):.0f}" if master > 0 else "-",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rate-per-worker", type=float, default=300.0)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="loadkit-bench-master-"))
    rows = []
    with nginx_endpoint() as (port, _pid):
        for n in (int(x) for x in args.workers.split(",")):
            rows.append(measure(port, n, args.rate_per_worker * n, args.seconds, out))
            print(rows[-1], flush=True)
    headers = [
        "workers",
        "offered/s",
        "achieved/s",
        "master CPU-s/s",
        "master ms CPU per worker per s",
        "workers CPU-s/s",
        "workers per master core",
    ]
    print(table(headers, rows))


if __name__ == "__main__":
    main()
