"""`loadkit agent`: serve the server host's GPU and host samplers over HTTP for `run --agent`."""

from __future__ import annotations

import argparse
import sys

from loadkit import lifeline
from loadkit.commands.options import token_from_file
from loadkit.errors import UsageError
from loadkit.placement import this_hostname

HELP = "on the GPU server's host: serve its GPU, host and cgroup telemetry for `run --agent`"

DESCRIPTION = """\
Run this on the machine (or in the pod) where the inference server runs, when
that machine has no exporter loadkit can scrape. It serves, as Prometheus text
at http://BIND:PORT/metrics, what loadkit's own samplers read there, at the
moment it is scraped: the GPUs through NVML (clocks, clock-event reasons,
temperature, power and its limit, utilization, memory, violation counters)
and the host (CPU seconds per core, CPU pressure, load, memory, TCP opens);
with --server-pid, the server's process tree (CPU seconds, context switches,
run delay: time its threads waited for a CPU) and its cgroup's CFS counters
(periods, throttled periods, throttled time).

`loadkit run ... --agent http://HOST:PORT` on the load machine scrapes it: the
GPU at 10 Hz, the host every second, recorded as the server's gpu and host
series. A Prometheus can scrape the same URL (then `loadkit import
--prometheus` reads it). Nothing is written on this machine.

It binds 127.0.0.1 unless --bind says otherwise (the metrics name the server's
PID and cgroup: expose them on purpose, e.g. --bind 0.0.0.0 inside a pod); bound
to any other address it prints one warning line saying so. With --token-file,
every request must carry that token (`Authorization: Bearer ...`; the load
machine gives the same file to `run --agent-token-file`), else it answers 401.
A connection that sends nothing for 30 s is closed. It prints one line with its
URL, then serves until Ctrl-C or SIGTERM; if the server's process exits, it says
so once and keeps serving the machine's series. It starts no process.

examples:
  loadkit agent --server-pid 4242
  loadkit agent --server-pid 4242 --bind 0.0.0.0 --port 9477 --token-file /etc/loadkit/token
  loadkit agent --gpu none --port 0
"""

AGENT_GPU_CHOICES = ("auto", "nvml", "none")


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    from loadkit.telemetry.agent import DEFAULT_BIND, DEFAULT_PORT

    parser.add_argument(
        "--server-pid",
        type=int,
        metavar="PID",
        help="the inference server's PID on this machine: its process tree's CPU, context "
        "switches, run delay and its cgroup's throttling",
    )
    parser.add_argument(
        "--gpu",
        choices=AGENT_GPU_CHOICES,
        default="auto",
        help="GPU telemetry: auto (NVML when a driver is there), nvml (required), none "
        "(default: auto)",
    )
    parser.add_argument(
        "--bind",
        default=DEFAULT_BIND,
        metavar="ADDRESS",
        help=f"address to listen on (default {DEFAULT_BIND}: this machine only)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port to listen on; 0: any free one, printed (default {DEFAULT_PORT})",
    )
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        help="require this bearer token (the file's content) on every request: a scrape "
        "without it is a 401 (give the file to `run --agent-token-file`)",
    )


def run(args: argparse.Namespace) -> int:
    from loadkit.telemetry.agent import (
        AgentExposition,
        AgentServer,
        Collector,
        GpuCollector,
        HostCollector,
        InfoCollector,
    )
    from loadkit.telemetry.base import SourceUnavailable
    from loadkit.telemetry.gpu import GpuSampler, load_pynvml
    from loadkit.telemetry.host import HostSampler

    if args.server_pid is not None and args.server_pid <= 0:
        raise UsageError(f"--server-pid {args.server_pid}: not a PID")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: not a TCP port (0..65535; 0: any free one)")
    token = token_from_file(args.token_file, "--token-file")
    host = HostSampler(server_pid=args.server_pid)
    host.open()
    collectors: dict[str, Collector] = {"host": HostCollector(host)}
    gpu_said = "none"
    sampler: GpuSampler | None = None
    if args.gpu != "none":
        try:
            sampler = GpuSampler(load_pynvml(), server_pid=args.server_pid)
            sampler.open()
        except (ImportError, SourceUnavailable) as exc:
            sampler = None
            why = exc.message if isinstance(exc, SourceUnavailable) else str(exc)
            if args.gpu == "nvml":
                raise UsageError(
                    f"--gpu nvml: {why}", hint="use --gpu none on a host without a GPU"
                ) from exc
            print(f"loadkit agent: WARNING: {why}; serving no GPU", file=sys.stderr, flush=True)
        if sampler is not None:
            gpu = GpuCollector(sampler)
            collectors["gpu"] = gpu
            gpu_said = f"nvml {len(gpu.uuids)} device{'s' if len(gpu.uuids) != 1 else ''}"
    collectors["info"] = InfoCollector(
        this_hostname(), args.server_pid, "nvml" if sampler is not None else "none"
    )
    exposition = AgentExposition(collectors)
    try:
        server = AgentServer(args.bind, args.port, exposition, token=token)
    except OSError as exc:
        if sampler is not None:
            sampler.close()
        raise UsageError(
            f"cannot listen on {args.bind}:{args.port}: {exc.strerror or exc}",
            hint="another agent on that port? --port 0 takes any free one",
        ) from exc
    watched = f"server PID {args.server_pid}" if args.server_pid else "no server PID"
    if token is not None:
        watched += ", bearer token required"
    try:
        # inside the try: a Ctrl-C right after this line is read is a clean stop
        print(f"loadkit agent: serving {server.url} ({watched}, GPU: {gpu_said})", flush=True)
        with lifeline.stop_signals():
            server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        print("loadkit agent: stopped", file=sys.stderr, flush=True)
    finally:
        server.server_close()
        if sampler is not None:
            sampler.close()
    return 0
