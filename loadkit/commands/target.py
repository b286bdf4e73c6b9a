"""`loadkit target`: run the embedded Triton server (the ranker model) in the foreground."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from loadkit import lifeline
from loadkit.errors import TargetError, UsageError
from loadkit.target.config import DEFAULT_MODEL_PARAMS, EXTRA_MODELS, MODEL_NAME, USER_DIM
from loadkit.target.ports import HOST
from loadkit.target.runtime import find_runtime
from loadkit.target.server import EmbeddedTriton
from loadkit.target.smoke import curl_example, run_smoke

HELP = "serve the embedded real Triton server (ranker model) on 127.0.0.1"

DESCRIPTION = f"""\
Start a real Triton Inference Server 2.51 (bundled in the nvidia-pytriton wheel;
no Docker, no GPU needed) on 127.0.0.1, serving '{MODEL_NAME}': a small
recommendation ranking model (hashed item-id embeddings + MLP in numpy) behind
Triton's dynamic batcher. It is the target `loadkit demo` and the tests use, and
a safe place to try scenarios before pointing loadkit at production.

The model:
  inputs   ITEM_IDS       INT64 [batch, N]   candidate item ids (any int64)
           USER_FEATURES  FP32  [batch, {USER_DIM}]  dense user features
  output   SCORES         FP32  [batch, N]   score per candidate, in (0, 1)
On a machine without a GPU each batch also sleeps for a simulated GPU time
(gpu_time_us_per_batch + gpu_time_us_per_item x batch size; defaults
{DEFAULT_MODEL_PARAMS["gpu_time_us_per_batch"]} + {DEFAULT_MODEL_PARAMS["gpu_time_us_per_item"]} us), which leaves the CPU free as a real GPU kernel would.

The server runs until Ctrl-C, SIGINT or SIGTERM (also when started in the
background by a script), then stops with its child processes; if this command
is SIGKILLed, the server and its backend processes die with it. Its log goes to --log (default: a file in the temp directory).

examples:
  loadkit target                       # HTTP 8000, gRPC 8001, metrics 8002
  loadkit target --http-port 0 --grpc-port 0 --metrics-port 0   # free ports
  loadkit target --max-queue-delay-us 20000   # a (too) long batching window
  loadkit target --smoke               # one HTTP + one gRPC inference, then exit
  loadkit target --model-control explicit   # `loadkit sweep` may reload the model
  loadkit target --bind 127.0.0.2 --http-port 0 --grpc-port 0 --metrics-port 0   # another address
"""

_DEFAULT_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    ports = parser.add_argument_group("address and ports (0 = pick a free port)")
    ports.add_argument(
        "--bind",
        default=HOST,
        metavar="ADDRESS",
        help=f"the address Triton listens on (default {HOST}: this machine only); e.g. an "
        "address of a network namespace, to test a server on another host",
    )
    for service, default in _DEFAULT_PORTS.items():
        ports.add_argument(
            f"--{service}-port",
            type=int,
            default=None,
            metavar="PORT",
            help=f"default {default} (with --smoke: 0)",
        )
    model = parser.add_argument_group("model and batching")
    model.add_argument(
        "--max-batch-size", type=int, default=32, metavar="N", help="largest batch (default 32)"
    )
    model.add_argument(
        "--max-queue-delay-us",
        type=int,
        default=2000,
        metavar="US",
        help="dynamic batcher's max_queue_delay_microseconds (default 2000)",
    )
    model.add_argument(
        "--instances", type=int, default=1, metavar="N", help="model instances (default 1)"
    )
    model.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="model parameter, e.g. gpu_time_us_per_batch=5000 (repeatable)",
    )
    model.add_argument(
        "--sim-gpu-state",
        metavar="FILE",
        help='JSON file {"clock_factor": f} from the simulated GPU; slows compute by 1/f',
    )
    model.add_argument(
        "--model-control",
        choices=("none", "explicit"),
        default="none",
        help="Triton's model control mode; explicit lets `loadkit sweep` load the model with "
        "other configurations through the repository API (default none)",
    )
    model.add_argument(
        "--extra-model",
        action="append",
        default=[],
        choices=EXTRA_MODELS,
        help="also serve this shipped test model (repeatable), e.g. doc_ranker",
    )
    parser.add_argument(
        "--metrics-config",
        action="append",
        default=[],
        metavar="SETTING",
        help="tritonserver --metrics-config (repeatable), e.g. summary_latencies=true",
    )
    parser.add_argument("--log", metavar="FILE", help="write the server log here")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="send one inference over HTTP and one over gRPC, print top scores, exit",
    )


def _params(pairs: list[str]) -> dict[str, str]:
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--param expects KEY=VALUE, got {pair!r}")
        params[key.strip()] = value.strip()
    return params


def _ports(args: argparse.Namespace) -> dict[str, int]:
    fallback = dict.fromkeys(_DEFAULT_PORTS, 0) if args.smoke else _DEFAULT_PORTS
    chosen = {}
    for service in _DEFAULT_PORTS:
        given = getattr(args, f"{service}_port")
        chosen[service] = fallback[service] if given is None else given
    return chosen


def run_hint(http_url: str) -> str:
    """The command line that points a load test at this server (its model is the default)."""
    return f"loadkit run burst_2x --target {http_url} --set base_rate=50 --duration 60"


def _print_banner(server: EmbeddedTriton, args: argparse.Namespace) -> None:
    info = server.describe()
    print(
        f"Triton {info['version']} is serving {', '.join(server.model_names)} on {server.host} "
        f"(embedded, CPU, pid {server.pid})"
    )
    print(f"  HTTP     {server.http_url}")
    print(f"  gRPC     {server.grpc_url}")
    print(f"  metrics  {server.metrics_url}")
    print(f"  log      {server.log_path}")
    print(
        f"  batching max_batch_size={args.max_batch_size} "
        f"max_queue_delay_us={args.max_queue_delay_us} instances={args.instances}"
    )
    print()
    print("try it:")
    print(f"  {curl_example(server.http_url)}")
    print(f"  {run_hint(server.http_url)}")


def _smoke(server: EmbeddedTriton) -> int:
    for result in run_smoke(server.http_url, server.grpc_url):
        top = ", ".join(f"item {item}: {score:.4f}" for item, score in result.top(3))
        print(f"{result.protocol:<4} ok in {result.latency_ms:6.1f} ms   top scores: {top}")
    print("smoke test passed")
    return 0


def run(args: argparse.Namespace) -> int:
    find_runtime()  # the `target` extra: one ERROR/HINT before anything starts
    log_path = args.log
    if log_path is None and not args.smoke:
        log_path = os.path.join(tempfile.gettempdir(), f"loadkit-target-{os.getpid()}.log")
    ports = _ports(args)
    server = EmbeddedTriton(
        max_queue_delay_us=args.max_queue_delay_us,
        max_batch_size=args.max_batch_size,
        instances=args.instances,
        model_params=_params(args.param),
        sim_gpu_state=Path(args.sim_gpu_state) if args.sim_gpu_state else None,
        log_path=log_path,
        extra_models=tuple(args.extra_model),
        metrics_config=tuple(args.metrics_config),
        payload_input=False,
        model_control=args.model_control,
        host=args.bind,
        http_port=ports["http"],
        grpc_port=ports["grpc"],
        metrics_port=ports["metrics"],
    )
    # SIGINT and SIGTERM (Ctrl-C, systemd, docker stop, kill -INT of a background
    # job whose shell set SIGINT to ignored) stop the server the same way.
    with lifeline.stop_signals():
        with server:
            if args.smoke:
                return _smoke(server)
            _print_banner(server, args)
            try:
                # inside the try: a Ctrl-C right after the prompt is read is a clean stop
                print("Press Ctrl-C to stop.", flush=True)
                while server.running:
                    time.sleep(0.5)
            except KeyboardInterrupt:
                print("\nstopping Triton ...", file=sys.stderr, flush=True)
                # A second Ctrl-C must not interrupt the stop and orphan the server.
                lifeline.ignore_stop_signals()
                return 0
            raise TargetError(
                "tritonserver exited unexpectedly", hint=f"see its log: {server.log_path}"
            )
