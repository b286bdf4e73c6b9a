"""Benchmark 7: the instrument's own error, against a KServe v2 server that answers instantly.

    .venv/bin/python bench/client_overhead.py                          # all transports, ~6 min
    .venv/bin/python bench/client_overhead.py --protocols http         # one transport, ~2 min
    .venv/bin/python bench/client_overhead.py --protocols grpc --ladder 1500,2000,3000

`bench/instant_server.py` describes the embedded `ranker` and answers every
inference with one prebuilt response; it times its own part of every request
(from the request read to the response handed to the socket) and reports it
per measurement (SIGUSR1). For each transport (HTTP binary tensors, gRPC,
JSON tensors over HTTP) and each rate (100/s, 1,000/s, then the `--ladder`
upward until a rate is not sustained: `bench/max_rate.py`'s rule), in one run:

- loadkit (`scenarios/soak.py`, auto user pool, `--seconds` per rate):
  service P50/P99/P99.9 from the merged HDR histograms of the steady part
  (2 s after load-start to load-end); **added latency** = service minus the
  server's own time at the same percentile; **scheduling lag** per request
  from the request sample (`sent_ns - t_ns`, i.e. corrected minus service
  of the same request): P50/P99/P99.9;
- perf_analyzer at the same rate against the same server (same transport:
  `-i http`, `-i grpc`, `-i http --input-tensor-format json`), every request
  of its measurement windows from `--profile-export-file`: the same
  percentiles and the same subtraction.

The server's own time is the same for both (one server), so the columns
"added" compare the two clients directly.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._support import CACHE, REPO, table, wait_for_port  # noqa: E402
from bench.max_rate import judge_run  # noqa: E402
from loadkit.analysis.percentiles import merge  # noqa: E402
from loadkit.load.orchestrator import run_scenario  # noqa: E402
from loadkit.rundir import load_run  # noqa: E402

SECOND = 1_000_000_000
PERCENTILES = (50.0, 99.0, 99.9)
PERF_ANALYZER = CACHE / "perf_analyzer"
PA_LIBS = CACHE / "lib"
CANDIDATES = 100


class InstantServer:
    """One `bench/instant_server.py` process (http or grpc) and its server-time probe."""

    def __init__(self, mode: str, workdir: Path):
        self.mode = mode
        self.stats = workdir / f"instant-{mode}.json"
        env = {**os.environ, "INSTANT_CANDIDATES": str(CANDIDATES)}
        self.proc = subprocess.Popen(
            [sys.executable, str(REPO / "bench" / "instant_server.py"), mode, "0", str(self.stats)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())
        wait_for_port(self.port)

    def server_time(self) -> dict[str, float]:
        """The server's own time since the last call (its percentiles, µs), and reset it."""
        before = self.stats.stat().st_mtime_ns if self.stats.exists() else 0
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if self.stats.exists() and self.stats.stat().st_mtime_ns != before:
                try:
                    return dict(json.loads(self.stats.read_text()))
                except ValueError:
                    pass
            time.sleep(0.02)
        raise RuntimeError(f"instant {self.mode} server wrote no statistics")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


def _pcts(values_us: np.ndarray) -> dict[str, float]:
    return {f"p{p:g}": float(np.percentile(values_us, p)) for p in PERCENTILES}


def loadkit_measure(url: str, protocol: str, rate: float, seconds: float, out: Path) -> dict:
    run_dir = run_scenario(
        REPO / "scenarios" / "soak.py",
        url,
        out_dir=out,
        params={"rate": rate, "duration_s": seconds, "protocol": protocol},
    )
    run = load_run(run_dir)
    ev = run.events
    start = int(ev[ev["name"] == "load-start"]["t_ns"].iloc[0]) + 2 * SECOND
    end = int(ev[ev["name"] == "load-end"]["t_ns"].iloc[0])
    steady = [h for h in run.latency_intervals if start <= h.start_ns and h.end_ns <= end]
    hist = merge([h.histogram for h in steady if h.kind == "service"])
    service = {f"p{p:g}": float(hist.get_value_at_percentile(p)) for p in PERCENTILES}
    sample = run.request_samples
    sample = sample[(sample["t_ns"] >= start) & (sample["t_ns"] < end)]
    reservoir = sample[sample["sampled"] == "reservoir"] if "sampled" in sample else sample
    lag = _pcts((reservoir["sent_ns"] - reservoir["t_ns"]).to_numpy() / 1e3)
    judged = judge_run(run_dir, rate)
    return {
        "service_us": service,
        "lag_us": lag,
        "sustained": judged["sustained"],
        "count": hist.get_total_count(),
    }


def perf_analyzer_measure(port: int, protocol: str, rate: float, workdir: Path) -> dict:
    if not PERF_ANALYZER.exists():
        raise SystemExit(f"{PERF_ANALYZER} is missing: run bench/fetch_perf_analyzer.sh first")
    export = workdir / f"pa-{protocol}-{rate:.0f}.json"
    argv = [str(PERF_ANALYZER), "-m", "ranker", "-u", f"127.0.0.1:{port}"]
    argv += ["-i", "grpc" if protocol == "grpc" else "http"]
    if protocol == "json":
        argv += ["--input-tensor-format", "json", "--output-tensor-format", "json"]
    argv += ["--request-rate-range", str(int(rate)), "--request-distribution", "constant"]
    argv += ["--shape", f"ITEM_IDS:{CANDIDATES}"]
    # Three 3 s windows, always accepted (Triton's own CI does this): on a shared machine
    # perf_analyzer's stability rule would otherwise retry for minutes.
    argv += ["--measurement-interval", "3000", "--max-trials", "3"]
    argv += ["--stability-percentage", "9999", "--profile-export-file", str(export)]
    env = {**os.environ, "LD_LIBRARY_PATH": str(PA_LIBS)}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not export.exists():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        raise RuntimeError(f"perf_analyzer failed ({proc.returncode}): {' | '.join(tail)}")
    requests = json.loads(export.read_text())["experiments"][0]["requests"]
    export.unlink()
    latency = np.array([r["response_timestamps"][-1] - r["timestamp"] for r in requests]) / 1e3
    span_s = (requests[-1]["timestamp"] - requests[0]["timestamp"]) / 1e9
    return {"service_us": _pcts(latency), "count": len(requests), "rate": len(requests) / span_s}


def measure_protocol(
    server: InstantServer, protocol: str, rates: list[float], ladder: list[float], seconds: float
) -> list[dict[str, Any]]:
    workdir = Path(tempfile.mkdtemp(prefix="loadkit-bench-overhead-"))
    scheme = "grpc" if protocol == "grpc" else "http"
    url = f"{scheme}://127.0.0.1:{server.port}"
    rows: list[dict[str, Any]] = []

    def one(rate: float, label: str) -> dict[str, Any]:
        server.server_time()  # reset
        lk = loadkit_measure(url, protocol, rate, seconds, workdir)
        lk["server_us"] = server.server_time()
        pa = perf_analyzer_measure(server.port, protocol, rate, workdir)
        pa["server_us"] = server.server_time()
        row = {"protocol": protocol, "rate": rate, "label": label, "loadkit": lk, "pa": pa}
        print(f"  {json.dumps(row)}", flush=True)
        return row

    for rate in rates:
        rows.append(one(rate, f"{rate:.0f}"))
    best: dict[str, Any] | None = None
    for rate in ladder:
        row = one(rate, f"{rate:.0f}")
        if not row["loadkit"]["sustained"]:
            rows.append(row | {"label": f"{rate:.0f} (not sustained)"})
            break
        best = row
    if best is not None:
        rows.append(best | {"label": f"{best['rate']:.0f} (highest sustained)"})
    return rows


def _added(client: dict, p: str) -> float:
    return (client["service_us"][p] - client["server_us"][f"{p}_us"]) / 1000


def render(rows: list[dict[str, Any]]) -> str:
    out = []
    for r in rows:
        lk, pa = r["loadkit"], r["pa"]
        srv = lk["server_us"]
        out.append(
            [
                r["protocol"],
                r["label"],
                " / ".join(f"{srv[f'p{p:g}_us'] / 1000:.3f}" for p in PERCENTILES),
                " / ".join(f"{lk['service_us'][f'p{p:g}'] / 1000:.2f}" for p in PERCENTILES),
                " / ".join(f"{_added(lk, f'p{p:g}'):.2f}" for p in PERCENTILES),
                " / ".join(f"{pa['service_us'][f'p{p:g}'] / 1000:.2f}" for p in PERCENTILES),
                " / ".join(f"{_added(pa, f'p{p:g}'):.2f}" for p in PERCENTILES),
                f"{_added(lk, 'p99') - _added(pa, 'p99'):+.2f}",
                " / ".join(f"{lk['lag_us'][f'p{p:g}'] / 1000:.2f}" for p in PERCENTILES),
            ]
        )
    return table(
        [
            "transport",
            "rate/s",
            "server's own P50 / P99 / P99.9 ms",
            "loadkit service ms",
            "loadkit added ms",
            "PA service ms",
            "PA added ms",
            "loadkit - PA added P99 ms",
            "loadkit scheduling lag P50 / P99 / P99.9 ms",
        ],
        out,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocols", default="http,grpc,json")
    parser.add_argument("--rates", default="100,1000")
    parser.add_argument("--ladder", default="2000,3000,4000", help="then up until not sustained")
    parser.add_argument("--seconds", type=float, default=8.0, help="loadkit run length per rate")
    parser.add_argument("--json-out", help="also write the raw rows here")
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",") if r]
    ladder = [float(r) for r in args.ladder.split(",") if r]
    protocols = args.protocols.split(",")
    workdir = Path(tempfile.mkdtemp(prefix="loadkit-bench-instant-"))
    print(f"load average at start: {os.getloadavg()}", flush=True)
    rows: list[dict[str, Any]] = []
    servers: dict[str, InstantServer] = {}
    try:
        for protocol in protocols:
            mode = "grpc" if protocol == "grpc" else "http"
            if mode not in servers:
                servers[mode] = InstantServer(mode, workdir)
            rows += measure_protocol(servers[mode], protocol, rates, ladder, args.seconds)
    finally:
        for server in servers.values():
            server.close()
    print(f"load average at end: {os.getloadavg()}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1))
    print()
    print(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
