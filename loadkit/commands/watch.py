"""`loadkit watch`: telemetry only, for investigating a live incident."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from loadkit import lifeline
from loadkit.commands import options
from loadkit.errors import UsageError
from loadkit.recording import Recording
from loadkit.telemetry.gpu import GPU_CHOICES
from loadkit.telemetry.sources import RATE_FLAGS

HELP = "record telemetry (GPU, host, Triton stats/metrics) from a live service"

DESCRIPTION = """\
Record telemetry from a running service for --duration, without load: GPU
(NVML, or a simulated GPU), host CPU / cgroup throttling / PSI / TCP churn,
Triton's statistics extension (per-interval queue and compute time and the
batch-size distribution) and its Prometheus /metrics. Optionally send a
low-rate probe (--probe-rate) so the run has a latency series too. Writes a
run directory (kind "watch") that `loadkit analyze` and `loadkit report` read.

Run it on the server's host to get GPU and host telemetry for the server
(give --server-pid for its CPU and context switches). Whether the server runs
here is decided from --server-pid, --server-host or the address of --triton
(else --metrics); `--gpu auto` reads no GPU here for a server elsewhere.

examples:
  loadkit watch --duration 5m --triton http://127.0.0.1:8000
  loadkit watch --duration 120 --triton http://10.0.0.5:8000 --gpu none --probe-rate 2
  loadkit watch --duration 60 --metrics http://127.0.0.1:8080/metrics --gpu nvml
"""


def parse_duration(text: str) -> float:
    """`90`, `90s`, `5m`, `1h` -> seconds."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    raw = text.strip().lower()
    scale = units.get(raw[-1:], None)
    number = raw[:-1] if scale else raw
    try:
        seconds = float(number) * (scale or 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90, 90s, 5m)") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"duration must be positive: {text!r}")
    return seconds


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=parse_duration, required=True, help="e.g. 90, 5m, 1h")
    parser.add_argument(
        "--triton", metavar="URL", help="Triton HTTP URL, e.g. http://127.0.0.1:8000"
    )
    parser.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="NAME",
        help="model(s) for the statistics (default: all loaded models); the probe uses the first",
    )
    parser.add_argument(
        "--metrics",
        metavar="URL",
        help="Prometheus metrics URL (default with --triton: its host, port 8002, /metrics)",
    )
    parser.add_argument(
        "--metrics-pattern",
        action="append",
        dest="metrics_patterns",
        metavar="GLOB",
        help="metric names to keep (default nv_* for Triton; give '*' for another server)",
    )
    parser.add_argument(
        "--gpu", choices=GPU_CHOICES, default="auto", help="GPU telemetry source (default auto)"
    )
    parser.add_argument(
        "--sim-gpu-state",
        type=Path,
        metavar="FILE",
        help="with --gpu sim: read an already running simulated GPU (default: start one)",
    )
    parser.add_argument(
        "--cooling-fault-period",
        type=float,
        metavar="S",
        help="with --gpu sim (started here): a cooling fault every S seconds",
    )
    parser.add_argument("--cooling-fault-duration", type=float, default=5.0, metavar="S")
    parser.add_argument("--server-pid", type=int, metavar="PID", help="the server's process ID")
    options.add_server_host(parser)
    parser.add_argument(
        "--probe-rate", type=float, metavar="R", help="send R probe requests per second"
    )
    for source in RATE_FLAGS:
        parser.add_argument(
            f"--{source.name}-rate",
            type=float,
            metavar="HZ",
            help=f"{source.label} sampling rate ({source.default_rate_hz:g})",
        )
    parser.add_argument("--out", type=Path, default=Path("reports"), help="parent directory")
    parser.add_argument("--run-id", help="run directory name (default: <time>-watch)")


def _default_metrics_url(triton_url: str) -> str:
    parts = urlsplit(triton_url if "://" in triton_url else "http://" + triton_url)
    return f"http://{parts.hostname}:8002/metrics"


def run(args: argparse.Namespace) -> int:
    from loadkit.endpoint import HTTP_SCHEMES, parse_endpoint
    from loadkit.placement import locate_target
    from loadkit.telemetry import SIM_GPU_STATE_FILE
    from loadkit.telemetry.probe import Prober

    if args.triton:
        parse_endpoint(args.triton, "--triton", HTTP_SCHEMES, "http")
    if args.metrics:
        parse_endpoint(args.metrics, "--metrics", HTTP_SCHEMES, "http")
    if not args.triton and not args.metrics and args.probe_rate:
        raise UsageError("--probe-rate needs --triton", hint="give the server's HTTP URL")
    if args.probe_rate is not None and args.probe_rate <= 0:
        raise UsageError(f"--probe-rate must be positive, got {args.probe_rate}")
    location = locate_target(
        args.triton or args.metrics, server_pid=args.server_pid, server_host=args.server_host
    )
    metrics_url = args.metrics or (_default_metrics_url(args.triton) if args.triton else None)
    rates = {
        s.name: getattr(args, f"{s.name}_rate")
        for s in RATE_FLAGS
        if getattr(args, f"{s.name}_rate") is not None
    }
    target = (
        {
            "url": args.triton,
            "protocol": "http",
            "model": (args.models or [None])[0],
            "embedded": False,
        }
        if args.triton
        else None
    )
    recording = Recording.create(
        out_dir=args.out,
        run_id=args.run_id,
        kind="watch",
        scenario={"name": "watch", "path": None, "params": {"duration_s": args.duration}},
        target=target,
        target_location=location,
    )
    if args.triton:
        recording.set_environment(server=_server(args.triton, args.models))
    print(f"watching for {args.duration:g}s; run directory {recording.path}", file=sys.stderr)
    prober: Any = None
    # SIGINT and SIGTERM end the watch early (`aborted`); what was recorded is kept.
    with lifeline.stop_signals(), recording:
        try:
            sim_state = args.sim_gpu_state
            if args.gpu == "sim" and sim_state is None:
                sim_state = recording.path / SIM_GPU_STATE_FILE
                recording.start_simulated_gpu(
                    sim_state,
                    args.triton,
                    model=(args.models or ["ranker"])[0],
                    cooling_fault_period_s=args.cooling_fault_period,
                    cooling_fault_duration_s=args.cooling_fault_duration,
                    note="GPU telemetry is simulated (driven by the watched server's compute "
                    "time); the watched server is not slowed by it",
                )
            recording.start_samplers(
                wait_s=15.0,
                note_simulated=True,
                gpu=args.gpu,
                triton_url=args.triton,
                triton_models=args.models,
                server_pid=args.server_pid,
                rates=rates,
                metrics_url=metrics_url,
                metrics_patterns=args.metrics_patterns,
                sim_gpu_state=sim_state,
            )
            if args.probe_rate:
                model = (args.models or [None])[0] or _first_model(args.triton)
                prober = Prober(recording.path, args.triton, model, args.probe_rate).start()
            deadline = time.monotonic() + args.duration
            while (left := deadline - time.monotonic()) > 0:
                time.sleep(min(1.0, left))
        finally:
            if prober is not None:
                prober.stop()
    print(f"recorded {recording.path}", file=sys.stderr)
    print(f"next: loadkit analyze {recording.path}", file=sys.stderr)
    return 0


def _server(url: str, models: list[str] | None) -> dict[str, Any]:
    """The server's metadata and model configs, or what could not be recorded and why."""
    from loadkit.errors import LoadkitError
    from loadkit.kserve.metadata import describe_server
    from loadkit.load import protocols

    try:
        with protocols.get("http").open_client(url) as client:
            return describe_server(client, models)
    except LoadkitError as exc:  # an incident recording goes on without it
        return {"not_recorded": [f"server metadata: {exc.message}"]}


def _first_model(triton_url: str) -> str:
    from loadkit.telemetry.http import HttpGetError, KeepAliveGetter

    http = KeepAliveGetter(triton_url)
    try:
        index = http.get_json("/v2/models/stats")
    except HttpGetError as exc:
        raise UsageError(
            f"cannot list models at {triton_url}: {exc}", hint="give --model NAME"
        ) from exc
    finally:
        http.close()
    names = [m.get("name") for m in index.get("model_stats") or [] if m.get("name")]
    if not names:
        raise UsageError(f"no models loaded at {triton_url}", hint="give --model NAME")
    return str(names[0])
