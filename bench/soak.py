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

from bench._support import table  # noqa: E402
from bench.analysis_scale import (  # noqa: E402
    EPISODE_LENGTH_S,
    EPISODE_PERIOD_S,
    NS,
    SLOWEST,
    START_NS,
    _hist_pool,
    _throttled,
    measure,
)
from loadkit.analysis.drift import robust_trend  # noqa: E402
from loadkit.load.recorder import reservoir_size  # noqa: E402
from loadkit.rundir import RunWriter  # noqa: E402
from loadkit.rundir.layout import LATENCY_DIR, LOAD_DIR, REQUESTS_DIR, TELEMETRY_DIR  # noqa: E402
from loadkit.rundir.segments import segment_name  # noqa: E402
from loadkit.rundir.writer import append_event, dumps_row, write_manifest  # noqa: E402

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
    writer = RunWriter.create(
        out_dir=out_dir,
        run_id=f"soak-{duration_s}s-{rate}rps",
        kind="load",
        scenario={"name": "soak", "path": None, "params": {"rate": float(rate)}, "model": "open"},
        target={"url": "http://127.0.0.1:8000", "protocol": "http", "model": "ranker"},
        slo={"p99_ms": 50.0, "errors_pct": 1.0},
        environment={
            "host": {"hostname": "bench", "cores_logical": 8, "memory_bytes": 64 * 2**30},
            "gpu": {"kind": "simulated", "devices": [{"index": 0, "name": "Simulated GPU"}]},
            "server": {"name": "triton", "version": "2.51.0", "extensions": [], "models": {}},
        },
        command_line=["bench/soak.py"],
    )
    path = writer.path
    (path / "events.jsonl").unlink()  # RunWriter stamps "now"; this run lives at START_NS
    append_event(path, "phase", "run-start", t_ns=START_NS)
    append_event(path, "phase", "load-start", t_ns=START_NS, rate=float(rate))
    for s0 in range(EPISODE_PERIOD_S - EPISODE_LENGTH_S, duration_s, EPISODE_PERIOD_S):
        t0, t1 = START_NS + s0 * NS, START_NS + (s0 + EPISODE_LENGTH_S) * NS
        append_event(path, "fault", "thermal-throttle", t_ns=t0, action="start", simulated=True)
        append_event(path, "fault", "thermal-throttle", t_ns=t1, action="end", simulated=True)
    normal = _hist_pool(rng, rate, spike=False, size=48)
    spiky = _hist_pool(rng, rate, spike=True, size=16)
    last_hour = (duration_s - 1) // HOUR_S
    (path / LATENCY_DIR).mkdir(exist_ok=True)
    (path / LOAD_DIR).mkdir(exist_ok=True)
    reqs = SegmentedSeries(path / REQUESTS_DIR, "local", last_hour)
    base_s = START_NS / NS
    with (
        open(path / LATENCY_DIR / "local.hlog", "w", encoding="ascii") as hlog,
        open(path / LOAD_DIR / "local.jsonl", "w", encoding="utf-8") as load,
    ):
        hlog.write("#[loadkit interval log v1: values in microseconds]\n")
        hlog.write(f"#[StartTime: {base_s:.3f} (seconds since epoch)]\n")
        hlog.write(f"#[BaseTime: {base_s:.3f} (seconds since epoch)]\n")
        hlog.write(
            '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n'
        )
        for s in range(duration_s):
            spike = _throttled(s)
            corrected, service = (spiky if spike else normal)[int(rng.integers(0, 16))]
            hlog.write(f"Tag=corrected:infer,{s:.3f},1.000,{corrected}\n")
            hlog.write(f"Tag=service:infer,{s:.3f},1.000,{service}\n")
            t_ns = START_NS + s * NS
            load.write(
                f'{{"t_ns": {t_ns}, "interval_ns": {NS}, "process": "local", "name": "infer", '
                f'"offered": {rate}, "started": {rate}, "ok": {rate}, "errors": 0, '
                f'"dropped": 0, "in_flight": {rate // 100}, "out_of_range": 0, '
                f'"error_kinds": {{}}, "dispatch_lag_max_ms": {rng.uniform(0.5, 3):.3f}}}\n'
            )
            kept = reservoir_size(s)
            n = kept + SLOWEST
            intended = t_ns + np.sort(rng.integers(0, NS, n))
            sent = intended + rng.integers(20_000, 400_000, n)
            service_ns = rng.lognormal(np.log(8e6 * (3 if spike else 1)), 0.35, n).astype(np.int64)
            done = sent + service_ns
            reqs.at(s).write(
                "".join(
                    f'{{"t_ns": {i}, "sent_ns": {a}, "done_ns": {d}, "name": "infer", '
                    f'"ok": true, "error_kind": null, "connection_new": false, '
                    f'"sampled": "{"slowest" if k >= kept else "reservoir"}"}}\n'
                    for k, (i, a, d) in enumerate(
                        zip(intended.tolist(), sent.tolist(), done.tolist(), strict=True)
                    )
                )
            )
    reqs.close()
    _write_telemetry(path, duration_s, rate, rng, last_hour)
    end_ns = START_NS + duration_s * NS
    append_event(path, "phase", "load-end", t_ns=end_ns)
    append_event(path, "phase", "run-end", t_ns=end_ns, status="complete")
    writer.manifest.update(status="complete", start_ns=START_NS, end_ns=end_ns)
    writer.manifest["sources"] = [
        {"name": "gpu", "file": "telemetry/gpu.jsonl", "interval_s": 0.1, "simulated": True},
        {"name": "host", "file": "telemetry/host.jsonl", "interval_s": 0.2, "simulated": False},
        {"name": "triton_stats", "file": "telemetry/triton_stats.jsonl", "interval_s": 1.0},
    ]
    for source in writer.manifest["sources"]:
        source.setdefault("simulated", False)
        source["warning"] = None
    writer.manifest["notes"].append("synthetic run written by bench/soak.py")
    write_manifest(path, writer.manifest)
    return path


def _write_telemetry(
    path: Path, duration_s: int, rate: int, rng: np.random.Generator, last_hour: int
) -> None:
    folder = path / TELEMETRY_DIR
    gpu = SegmentedSeries(folder, "gpu", last_hour)
    energy = 0.0
    for k in range(duration_s * 10):
        t = k / 10
        hot = _throttled(t)
        power = 250.0 + rng.normal(0, 4)
        energy += power * 100
        row = {
            "t_ns": START_NS + k * NS // 10,
            "gpu": 0,
            "util_gpu_pct": round(float(rng.uniform(55, 70)), 1),
            "util_mem_pct": round(float(rng.uniform(20, 30)), 1),
            "mem_used_bytes": 20 * 2**30 + int(rng.normal(0, 20 * MIB)),
            "mem_total_bytes": 80 * 2**30,
            "sm_clock_mhz": 990 if hot else 1980,
            "sm_clock_max_mhz": 1980,
            "mem_clock_mhz": 2619,
            "mem_clock_max_mhz": 2619,
            "temp_c": round(91.0 if hot else 70.0 + float(rng.normal(0, 0.3)), 1),
            "temp_slowdown_c": 90,
            "temp_shutdown_c": 95,
            "power_w": round(power, 1),
            "power_limit_w": 350.0,
            "energy_mj": int(energy),
            "clocks_event_reasons": 0x60 if hot else 0,
            "reason_gpu_idle": False,
            "reason_sw_power_cap": False,
            "reason_hw_slowdown": False,
            "reason_sw_thermal": hot,
            "reason_hw_thermal": hot,
            "reason_hw_power_brake": False,
            "pcie_tx_kbps": None,
            "pcie_rx_kbps": None,
            "proc_mem_bytes": None,
            "simulated": True,
        }
        gpu.at(t).write(dumps_row(row) + "\n")
    gpu.close()
    host = SegmentedSeries(folder, "host", last_hour)
    periods = 0
    for k in range(duration_s * 5):
        t = k / 5
        cores = np.clip(rng.normal(35.0, 8.0, 8), 0, 100).round(1)
        periods += 2
        rss = 3 * 2**30 + RSS_GROWTH_PER_H * t / HOUR_S + rng.normal(0, 16 * MIB)
        row = {
            "t_ns": START_NS + k * NS // 5,
            "cpu_pct": round(float(cores.mean()), 1),
            "cpu_per_core_pct": cores.tolist(),
            "cores": 8,
            "load1": round(float(cores.sum() / 100), 2),
            "psi_cpu_some_avg10": 0.5,
            "server_cpu_pct": round(float(cores.mean() * 1.5), 1),
            "server_rss_bytes": int(rss),
            "cgroup_nr_periods": periods,
            "cgroup_nr_throttled": 0,
            "cgroup_throttled_ns": 0,
            "tcp_new_connections": 0,
            "mem_used_bytes": 40 * 2**30,
        }
        host.at(t).write(dumps_row(row) + "\n")
    host.close()
    stats = SegmentedSeries(folder, "triton_stats", last_hour)
    cum = {"success_count": 0, "execution_count": 0, "queue_ns": 0, "compute_infer_ns": 0}
    for s in range(duration_s):
        execs = rate // 8
        delta = {
            "success_count": rate,
            "execution_count": execs,
            "queue_ns": int(rate * 2e6),
            "compute_infer_ns": int(execs * (8e6 if _throttled(s) else 4e6)),
        }
        for key, value in delta.items():
            cum[key] += value
        row2: dict[str, Any] = {
            "t_ns": START_NS + s * NS,
            "interval_ns": NS,
            "model": "ranker",
            "version": "1",
        }
        row2.update(cum)
        row2["inference_count"] = cum["success_count"]
        row2.update({f"{k}_delta": v for k, v in delta.items()})
        row2["inference_count_delta"] = rate
        row2["batch_sizes"] = {"8": execs}
        stats.at(s).write(dumps_row(row2) + "\n")
    stats.close()


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
                if any("locust" in part for part in (c.cmdline() or [])[:4])
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
