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

from bench._support import table  # noqa: E402
from loadkit.rundir import RunWriter, new_histogram  # noqa: E402
from loadkit.rundir.layout import LATENCY_DIR, LOAD_DIR, REQUESTS_DIR  # noqa: E402
from loadkit.rundir.writer import append_event, write_manifest  # noqa: E402

NS = 1_000_000_000
START_NS = 1_764_449_000 * NS
EPISODE_PERIOD_S = 300
EPISODE_LENGTH_S = 20
SAMPLE_SIZE = 200
SLOWEST = 5
BINS_US = np.geomspace(500, 5_000_000, 600).round().astype(int)


def _histogram(rng: np.random.Generator, n: int, median_us: float, sigma: float) -> object:
    """A latency histogram of `n` values from a lognormal, recorded per bin with counts."""
    edges = np.log(BINS_US)
    p = np.exp(-0.5 * ((edges - np.log(median_us)) / sigma) ** 2)
    counts = rng.multinomial(n, p / p.sum())
    hist = new_histogram()
    for value, count in zip(BINS_US[counts > 0], counts[counts > 0], strict=True):
        hist.record_value(int(value), int(count))
    return hist


def _hist_pool(
    rng: np.random.Generator, rate: int, spike: bool, size: int
) -> list[tuple[str, str]]:
    """(corrected line tail, service line tail) pairs: `max_ms,payload` per kind."""
    scale = 3.0 if spike else 1.0
    pool = []
    for _ in range(size):
        pair = []
        for extra in (1.08, 1.0):  # corrected is the service time plus a little send lag
            hist = _histogram(rng, rate, 8000 * scale * extra, 0.35 if not spike else 0.5)
            max_ms = hist.get_max_value() / 1000.0
            pair.append(f"{max_ms:.3f},{hist.encode().decode('ascii')}")
        pool.append((pair[0], pair[1]))
    return pool


def _throttled(s: float) -> bool:
    return s % EPISODE_PERIOD_S >= EPISODE_PERIOD_S - EPISODE_LENGTH_S


def write_scale_run(out_dir: Path, duration_s: int, rate: int = 2000, seed: int = 1) -> Path:
    """Write a run directory of `duration_s` seconds at `rate` requests/s; return its path."""
    rng = np.random.default_rng(seed)
    writer = RunWriter.create(
        out_dir=out_dir,
        run_id=f"scale-{duration_s}s-{rate}rps",
        kind="load",
        scenario={"name": "soak", "path": None, "params": {"rate": float(rate)}, "model": "open"},
        target={"url": "http://127.0.0.1:8000", "protocol": "http", "model": "ranker"},
        slo={"p99_ms": 50.0, "errors_pct": 1.0},
        environment={
            "host": {"hostname": "bench", "cores_logical": 8},
            "gpu": {"kind": "simulated", "devices": [{"index": 0, "name": "Simulated GPU"}]},
            "server": {"name": "triton", "version": "2.51.0", "extensions": [], "models": {}},
        },
        command_line=["bench/analysis_scale.py"],
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
    (path / LATENCY_DIR).mkdir(exist_ok=True)
    (path / LOAD_DIR).mkdir(exist_ok=True)
    (path / REQUESTS_DIR).mkdir(exist_ok=True)
    base_s = START_NS / NS
    with (
        open(path / LATENCY_DIR / "local.hlog", "w", encoding="ascii") as hlog,
        open(path / LOAD_DIR / "local.jsonl", "w", encoding="utf-8") as load,
        open(path / REQUESTS_DIR / "local.jsonl", "w", encoding="utf-8") as reqs,
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
            n = SAMPLE_SIZE + SLOWEST
            intended = t_ns + np.sort(rng.integers(0, NS, n))
            sent = intended + rng.integers(20_000, 400_000, n)
            service_ns = rng.lognormal(np.log(8e6 * (3 if spike else 1)), 0.35, n).astype(np.int64)
            done = sent + service_ns
            reqs.write(
                "".join(
                    f'{{"t_ns": {i}, "sent_ns": {a}, "done_ns": {d}, "name": "infer", '
                    f'"ok": true, "error_kind": null, "connection_new": false, '
                    f'"sampled": "{"slowest" if k >= SAMPLE_SIZE else "reservoir"}"}}\n'
                    for k, (i, a, d) in enumerate(
                        zip(intended.tolist(), sent.tolist(), done.tolist(), strict=True)
                    )
                )
            )
    _write_telemetry(writer, duration_s, rate, rng)
    end_ns = START_NS + duration_s * NS
    append_event(path, "phase", "load-end", t_ns=end_ns)
    append_event(path, "phase", "run-end", t_ns=end_ns, status="complete")
    writer.manifest.update(status="complete", start_ns=START_NS, end_ns=end_ns)
    writer.manifest["sources"] = [
        {"name": "gpu", "file": "telemetry/gpu.jsonl", "interval_s": 0.1, "simulated": True},
        {"name": "host", "file": "telemetry/host.jsonl", "interval_s": 0.2, "simulated": True},
        {"name": "triton_stats", "file": "telemetry/triton_stats.jsonl", "interval_s": 1.0},
    ]
    for source in writer.manifest["sources"]:
        source.setdefault("simulated", False)
        source["warning"] = None
    writer.manifest["notes"].append("synthetic run written by bench/analysis_scale.py")
    write_manifest(path, writer.manifest)
    return path


def _write_telemetry(
    writer: RunWriter, duration_s: int, rate: int, rng: np.random.Generator
) -> None:
    gpu = writer.series("gpu")
    energy = 0.0
    for k in range(duration_s * 10):
        t = k / 10
        hot = _throttled(t)
        clock = 990 if hot else 1980
        power = 250.0 + rng.normal(0, 4)
        energy += power * 100
        reasons = 0x60 if hot else 0
        gpu.write(
            {
                "t_ns": START_NS + k * NS // 10,
                "gpu": 0,
                "util_gpu_pct": round(float(rng.uniform(55, 70)), 1),
                "util_mem_pct": round(float(rng.uniform(20, 30)), 1),
                "mem_used_bytes": 20 * 2**30,
                "mem_total_bytes": 80 * 2**30,
                "sm_clock_mhz": clock,
                "sm_clock_max_mhz": 1980,
                "mem_clock_mhz": 2619,
                "mem_clock_max_mhz": 2619,
                "temp_c": round(91.0 if hot else 70.0 + float(rng.normal(0, 0.3)), 1),
                "temp_slowdown_c": 90,
                "temp_shutdown_c": 95,
                "power_w": round(power, 1),
                "power_limit_w": 350.0,
                "energy_mj": int(energy),
                "clocks_event_reasons": reasons,
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
        )
    gpu.close()
    host = writer.series("host")
    periods = 0
    for k in range(duration_s * 5):
        cores = np.clip(rng.normal(35.0, 8.0, 8), 0, 100).round(1)
        periods += 2
        host.write(
            {
                "t_ns": START_NS + k * NS // 5,
                "cpu_pct": round(float(cores.mean()), 1),
                "cpu_per_core_pct": cores.tolist(),
                "cores": 8,
                "load1": round(float(cores.sum() / 100), 2),
                "psi_cpu_some_avg10": 0.5,
                "server_cpu_pct": round(float(cores.mean() * 1.5), 1),
                "server_rss_bytes": 3 * 2**30,
                "cgroup_nr_periods": periods,
                "cgroup_nr_throttled": 0,
                "cgroup_throttled_ns": 0,
                "tcp_new_connections": 0,
                "mem_used_bytes": 40 * 2**30,
            }
        )
    host.close()
    stats = writer.series("triton_stats")
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
        row = {"t_ns": START_NS + s * NS, "interval_ns": NS, "model": "ranker", "version": "1"}
        row.update(cum)
        row["inference_count"] = cum["success_count"]
        row.update({f"{k}_delta": v for k, v in delta.items()})
        row["inference_count_delta"] = rate
        row["batch_sizes"] = {"8": execs}
        stats.write(row)
    stats.close()


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
