"""Benchmark: the 24-hour soak. A bounded run directory, analysis that stays fast and small.

    .venv/bin/python bench/soak.py                          # synthetic 24 h at 2,000 req/s
    .venv/bin/python bench/soak.py --hours 1                # a quicker look
    .venv/bin/python bench/soak.py --real 3600 --rate 1000  # + a real 1 h soak (embedded Triton)
    .venv/bin/python bench/soak.py --skip-synthetic --real 300 --rate 300

Synthetic: writes the run directory `loadkit run` would leave after `--hours`
at `--rate` requests/s, in the version 2 layout (hourly segments of
`requests/` and `telemetry/`, closed ones gzip-compressed, the request
sample's reservoir shrinking as the recorder's `reservoir_size`), built fast
as `bench/analysis_scale.py` builds its runs (histograms from a pool, a 20 s
thermal throttle every 5 minutes). The server's RSS grows 30 MiB an hour, so
the soak has a drift to find. Then times `loadkit analyze RUN` and `loadkit
report RUN` as child processes (wall time, peak RSS from `wait4`) and reports
the run directory's size, analysis.json's and report.html's.

Real (`--real SECONDS`): `scenarios/soak.py` at `--rate` against the embedded
Triton, one Locust process; every 10 s it samples the run directory's size
and the generator's (Locust process) RSS and CPU time, and the completed
requests from `load/`. Reports the run directory's growth per hour and the
Theil-Sen slopes (99 % interval) of the generator's RSS and CPU per request:
a leak in the load generator would look like a leak in the server.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._support import (  # noqa: E402
    finish_scale_run,
    start_scale_run,
    table,
    write_latency_load_samples,
    write_telemetry,
)
from bench.analysis_scale import measure  # noqa: E402
from loadkit.analysis.drift import robust_trend  # noqa: E402
from loadkit.load.generator.recorder import reservoir_size  # noqa: E402
from loadkit.rundir.layout import LOAD_DIR, REQUESTS_DIR, TELEMETRY_DIR  # noqa: E402
from loadkit.rundir.segments import segment_name  # noqa: E402

HOUR_S = 3600
MIB = 2**20
RSS_GROWTH_PER_H = 30 * MIB


class SegmentedSeries:
    """A series written as a recorder would leave it: a gzip segment per hour, the last hour plain."""

    def __init__(self, folder: Path, stem: str, last_hour: int):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.stem, self.last_hour = folder, stem, last_hour
        self.hour = -1
        self.file: IO[str] | None = None

    def at(self, t_s: float) -> IO[str]:
        hour = int(t_s // HOUR_S)
        if hour != self.hour:
            self.close()
            self.hour = hour
            if hour >= self.last_hour:
                self.file = open(self.folder / f"{self.stem}.jsonl", "w", encoding="utf-8")  # noqa: SIM115
            else:
                path = self.folder / segment_name(self.stem, hour + 1, compressed=True)
                self.file = gzip.open(path, "wt", encoding="utf-8", compresslevel=6)  # noqa: SIM115
        assert self.file is not None
        return self.file

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def write_soak_run(out_dir: Path, duration_s: int, rate: int = 2000, seed: int = 1) -> Path:
    """A version 2 run directory of `duration_s` seconds at `rate` requests/s; its path."""
    rng = np.random.default_rng(seed)
    writer = start_scale_run(
        out_dir,
        f"soak-{duration_s}s-{rate}rps",
        duration_s,
        rate,
        {"hostname": "bench", "cores_logical": 8, "memory_bytes": 64 * 2**30},
        "bench/soak.py",
    )
    path = writer.path
    last_hour = (duration_s - 1) // HOUR_S
    reqs = SegmentedSeries(path / REQUESTS_DIR, "local", last_hour)
    write_latency_load_samples(path, duration_s, rate, rng, reqs.at, reservoir_size)
    reqs.close()
    folder = path / TELEMETRY_DIR
    series = [SegmentedSeries(folder, name, last_hour) for name in ("gpu", "host", "triton_stats")]
    write_telemetry(
        *(s.at for s in series),
        duration_s,
        rate,
        rng,
        gpu_mem_noise_bytes=20 * MIB,
        server_rss=lambda t: 3 * 2**30 + RSS_GROWTH_PER_H * t / HOUR_S + rng.normal(0, 16 * MIB),
    )
    for s in series:
        s.close()
    return finish_scale_run(writer, duration_s, False, "synthetic run written by bench/soak.py")


def _size_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / MIB


def synthetic(hours: float, rate: int, keep: bool, reuse: Path | None = None) -> list[list[object]]:
    """Build (or, with `reuse`, take a kept) synthetic run; time its analysis and report."""
    loadkit = str(Path(sys.executable).with_name("loadkit"))
    out = reuse.parent if reuse else Path(tempfile.mkdtemp(prefix="loadkit-bench-soak-"))
    keep = keep or reuse is not None
    duration = int(hours * HOUR_S)
    try:
        t0 = time.perf_counter()
        run = reuse if reuse else write_soak_run(out, duration, rate)
        built = time.perf_counter() - t0
        disk = _size_mib(run)
        a_wall, a_rss, a_rc = measure([loadkit, "analyze", str(run)])
        r_wall, r_rss, r_rc = measure([loadkit, "report", str(run)])
        analysis_mib = report_mib = float("nan")
        drifts: list[str] = []
        if (run / "analysis.json").exists():
            analysis_mib = (run / "analysis.json").stat().st_size / MIB
            soak = json.loads((run / "analysis.json").read_text()).get("soak") or {}
            drifts = [f["drift"] for f in soak.get("findings", [])]
        if (run / "report.html").exists():
            report_mib = (run / "report.html").stat().st_size / MIB
        print(
            f"  {hours:g} h: built {disk:.0f} MiB in {built:.0f} s; analyze {a_wall:.1f} s "
            f"{a_rss:.0f} MiB (rc {a_rc}); report {r_wall:.1f} s {r_rss:.0f} MiB (rc {r_rc}); "
            f"analysis.json {analysis_mib:.1f} MiB, report.html {report_mib:.2f} MiB; "
            f"drift findings {drifts}",
            flush=True,
        )
        return [
            [
                f"{hours:g} h",
                f"{duration * rate / 1e6:.1f} M",
                f"{disk:.0f}",
                f"{a_wall:.1f}",
                f"{a_rss:.0f}",
                f"{r_wall:.1f}",
                f"{r_rss:.0f}",
                f"{analysis_mib:.1f}",
                f"{report_mib:.2f}",
                ", ".join(drifts) or "none",
            ]
        ]
    finally:
        if keep:
            print(f"run directory kept under {out}")
        else:
            shutil.rmtree(out, ignore_errors=True)


def _completed(run_dir: Path) -> int:
    total = 0
    for path in (run_dir / LOAD_DIR).glob("*.jsonl"):
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                total += int(row.get("ok") or 0) + int(row.get("errors") or 0)
    return total


def _cmdline(process: Any) -> list[str]:
    """A child's command line; [] once it has exited (a zombie at the run's end)."""
    import psutil

    try:
        return list(process.cmdline() or [])
    except psutil.Error:
        return []


def real(
    seconds: float,
    rate: float,
    every_s: float = 10.0,
    samples_csv: Path | None = None,
    keep: bool = False,
) -> None:
    """A real soak against the embedded Triton; slopes of the generator's RSS and CPU.

    Every sample also records the host's 1-minute load average, so a figure taken
    on a shared host says how contended it was; `samples_csv` keeps the samples.
    """
    import psutil

    from loadkit.load.orchestrator import TelemetryOptions, run_scenario
    from loadkit.target.server import EmbeddedTriton

    repo = Path(__file__).resolve().parents[1]
    out = Path(tempfile.mkdtemp(prefix="loadkit-bench-soak-real-"))
    # t, dir MiB, generator rss, generator cpu s, completed, load1, server rss
    samples: list[tuple[float, float, float, float, int, float, float]] = []
    stop = threading.Event()
    me = psutil.Process()

    def watch() -> None:
        t0 = time.monotonic()
        while not stop.wait(every_s):
            runs = [p for p in out.iterdir() if (p / "manifest.json").exists()]
            gens = [
                c
                for c in me.children(recursive=True)
                if any("locust" in part for part in _cmdline(c)[:4])
            ]
            if not runs or not gens:
                continue
            try:
                rss = sum(g.memory_info().rss for g in gens)
                cpu = sum(sum(g.cpu_times()[:2]) for g in gens)
                server_rss = psutil.Process(server_pid).memory_info().rss if server_pid else 0
            except psutil.Error:
                continue
            sample = (
                time.monotonic() - t0,
                _size_mib(runs[0]),
                rss,
                cpu,
                _completed(runs[0]),
                os.getloadavg()[0],
                server_rss,
            )
            samples.append(sample)
            if samples_csv is not None:
                with open(samples_csv, "a", encoding="ascii") as f:
                    f.write(
                        ",".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in sample)
                    )
                    f.write("\n")

    server_pid = 0
    if samples_csv is not None:
        samples_csv.write_text(
            "t_s,run_dir_mib,gen_rss_bytes,gen_cpu_s,completed,load1,server_rss_bytes\n"
        )
    try:
        with EmbeddedTriton(log_path=out / "triton.log") as triton:
            server_pid = triton.pid
            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            run_dir = run_scenario(
                repo / "scenarios" / "soak.py",
                triton.http_url,
                out_dir=out,
                params={"rate": rate, "duration_s": seconds},
                telemetry=TelemetryOptions(
                    gpu="none", triton_url=triton.http_url, server_pid=triton.pid
                ),
            )
            stop.set()
            watcher.join()
        if len(samples) < 10:
            print(f"only {len(samples)} samples: run longer (--real >= {every_s * 10:.0f})")
            return
        arr = np.array(samples, dtype=float)
        t = arr[:, 0]
        growth = robust_trend("run_dir_mib", "MiB", t, arr[:, 1])
        rss = robust_trend("generator_rss_mib", "MiB", t, arr[:, 2] / MIB)
        d_cpu, d_done = np.diff(arr[:, 3]), np.diff(arr[:, 4])
        with np.errstate(divide="ignore", invalid="ignore"):
            per_req_us = np.where(d_done > 0, 1e6 * d_cpu / d_done, np.nan)
        cpu = robust_trend("generator_cpu_us_per_request", "us", t[1:], per_req_us)
        server = robust_trend("server_rss_mib", "MiB", t, arr[:, 6] / MIB)
        span = t[-1] - t[0]
        print(
            f"real soak: {seconds:.0f} s at {rate:g}/s offered, "
            f"{(arr[-1, 4] - arr[0, 4]) / span:.0f}/s completed; {len(samples)} samples every "
            f"{every_s:g} s; run directory {_size_mib(run_dir):.1f} MiB; host load average "
            f"median {np.median(arr[:, 5]):.1f} (max {arr[:, 5].max():.1f}) on {os.cpu_count()} cores"
        )
        rows = []
        for trend, start in (
            (growth, None),
            (rss, float(np.median(arr[:6, 2])) / MIB),
            (cpu, float(np.nanmedian(per_req_us[:6]))),
            (server, float(np.median(arr[:6, 6])) / MIB),
        ):
            if trend is None:
                continue
            rows.append(
                [
                    trend.metric,
                    f"{trend.slope_per_hour:+.3g} {trend.unit}/h",
                    f"{trend.slope_low_per_hour:+.3g} .. {trend.slope_high_per_hour:+.3g}",
                    "n/a" if start is None else f"{start:.3g} {trend.unit}",
                    "yes" if trend.significant else "no",
                ]
            )
        print(table(["metric", "slope", "99 % interval", "at start", "significant"], rows))
    finally:
        if keep:
            print(f"run directory kept under {out}")
        else:
            shutil.rmtree(out, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0, help="synthetic run length")
    parser.add_argument("--rate", type=int, default=2000, help="requests/s")
    parser.add_argument("--keep", action="store_true", help="keep the synthetic run directory")
    parser.add_argument(
        "--reuse",
        type=Path,
        help="analyze this kept synthetic run (of --hours) instead of building",
    )
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument("--real", type=float, default=0.0, help="seconds of a real soak (0: none)")
    parser.add_argument("--samples", type=Path, help="write the real soak's samples to this CSV")
    args = parser.parse_args(argv)
    if not args.skip_synthetic:
        rows = synthetic(args.hours, args.rate, args.keep, args.reuse)
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
                    "analysis.json MiB",
                    "report.html MiB",
                    "drift findings",
                ],
                rows,
            )
        )
    if args.real:
        real(args.real, float(args.rate), samples_csv=args.samples, keep=args.keep)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
