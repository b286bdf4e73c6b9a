"""Benchmark 4: analysis scale: `loadkit analyze` + `loadkit report` on long, busy runs.

    .venv/bin/python bench/analysis_scale.py                       # 10 min and 1 h, ~3 min
    .venv/bin/python bench/analysis_scale.py --durations 600,3600,21600   # adds 6 h

For each duration, writes a run directory as `loadkit run` would after that
long at `--rate` requests/s (2,000 by default: 7.2 M requests an hour), then
times `loadkit analyze RUN` and `loadkit report RUN` as subprocesses: wall
time and peak RSS (the kernel's `ru_maxrss` of the child, from `wait4`).

The run (`write_scale_run`) is built fast, not simulated request by
request (`loadkit.testing.synthetic` simulates every request in Python,
which is minutes and gigabytes at this size): every second gets its two
HDR histograms (corrected and service) picked from a pool of histograms
recorded with binned lognormal latencies (`record_value(v, count)`), a load
counter row, a request sample of 200 rows (the recorder's reservoir size)
plus the 5 slowest, GPU telemetry at 10 Hz, host at 5 Hz and Triton
statistics at 1 Hz. Every 5 minutes a 20 s GPU thermal throttle (clock
halved, thermal reason bits, ground-truth fault events) triples latency,
so the analysis has episodes, a period and a cause to find.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._support import (  # noqa: E402
    finish_scale_run,
    start_scale_run,
    table,
    write_latency_load_samples,
    write_telemetry,
)
from loadkit.rundir.layout import REQUESTS_DIR, TELEMETRY_DIR  # noqa: E402

SAMPLE_SIZE = 200


def write_scale_run(out_dir: Path, duration_s: int, rate: int = 2000, seed: int = 1) -> Path:
    """Write a run directory of `duration_s` seconds at `rate` requests/s; return its path."""
    rng = np.random.default_rng(seed)
    writer = start_scale_run(
        out_dir,
        f"scale-{duration_s}s-{rate}rps",
        duration_s,
        rate,
        {"hostname": "bench", "cores_logical": 8},
        "bench/analysis_scale.py",
    )
    path = writer.path
    (path / REQUESTS_DIR).mkdir(exist_ok=True)
    (path / TELEMETRY_DIR).mkdir(exist_ok=True)
    with open(path / REQUESTS_DIR / "local.jsonl", "w", encoding="utf-8") as reqs:
        write_latency_load_samples(
            path, duration_s, rate, rng, lambda _t: reqs, lambda _s: SAMPLE_SIZE
        )
    files = {
        name: open(path / TELEMETRY_DIR / f"{name}.jsonl", "w", encoding="utf-8")  # noqa: SIM115
        for name in ("gpu", "host", "triton_stats")
    }
    try:
        write_telemetry(
            lambda _t: files["gpu"],
            lambda _t: files["host"],
            lambda _t: files["triton_stats"],
            duration_s,
            rate,
            rng,
        )
    finally:
        for f in files.values():
            f.close()
    return finish_scale_run(
        writer, duration_s, True, "synthetic run written by bench/analysis_scale.py"
    )


def measure(argv: list[str]) -> tuple[float, float, int]:
    """(wall s, peak RSS MiB, exit status) of one command, as a child process."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0 and proc.stderr is not None:
        print(proc.stderr.read().decode(errors="replace")[-2000:], file=sys.stderr)
    return wall, usage.ru_maxrss / 1024, proc.returncode


def _size_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--durations", default="600,3600", help="seconds, comma-separated")
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--keep", action="store_true", help="keep the run directories")
    args = parser.parse_args(argv)
    loadkit = str(Path(sys.executable).with_name("loadkit"))
    out = Path(tempfile.mkdtemp(prefix="loadkit-bench-scale-"))
    rows: list[list[object]] = []
    try:
        for duration in (int(d) for d in args.durations.split(",")):
            t0 = time.perf_counter()
            run = write_scale_run(out, duration, args.rate)
            written = time.perf_counter() - t0
            a_wall, a_rss, a_rc = measure([loadkit, "analyze", str(run)])
            r_wall, r_rss, r_rc = measure([loadkit, "report", str(run)])
            summary = {}
            if (run / "analysis.json").exists():
                analysis = json.loads((run / "analysis.json").read_text())
                summary = {"findings": [f.get("cause") for f in analysis.get("findings", [])]}
            print(
                f"  {duration} s: wrote {_size_mib(run):.0f} MiB in {written:.0f} s; "
                f"analyze {a_wall:.1f} s {a_rss:.0f} MiB (rc {a_rc}); "
                f"report {r_wall:.1f} s {r_rss:.0f} MiB (rc {r_rc}); {summary}",
                flush=True,
            )
            rows.append(
                [
                    f"{duration / 3600:g} h" if duration >= 3600 else f"{duration / 60:g} min",
                    f"{duration * args.rate / 1e6:.1f} M",
                    f"{_size_mib(run):.0f}",
                    f"{a_wall:.1f}",
                    f"{a_rss:.0f}",
                    f"{r_wall:.1f}",
                    f"{r_rss:.0f}",
                    f"{a_wall + r_wall:.1f}",
                ]
            )
            if not args.keep:
                shutil.rmtree(run)
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    print()
    print(
        table(
            [
                "run length",
                "requests",
                "run dir MiB",
                "analyze s",
                "analyze peak RSS MiB",
                "report s",
                "report peak RSS MiB",
                "analyze + report s",
            ],
            rows,
        )
    )
    if args.keep:
        print(f"run directories kept under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
