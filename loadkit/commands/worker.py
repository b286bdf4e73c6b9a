"""`loadkit worker`: a Locust worker for a `loadkit run --master` on another machine."""

from __future__ import annotations

import argparse
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loadkit.errors import EXIT_INTERRUPTED, TargetError

HELP = "send load for a `loadkit run --master` on another machine"

DESCRIPTION = """\
Connect to a master started with `loadkit run soak --target http://10.0.0.7:8000
--master --expect-workers 2` (any scenario, any target) and send this
machine's share of its load. The worker
needs only loadkit and the master's address: the scenario file, its
parameters, the seed and the request plan come from the master, and the
worker's records (latency histograms, load counters, request samples) go
back to it over Locust's own connection, so the master writes the one run
directory. Nothing is written here but a temporary copy of the scenario.

The worker stops sending within a few seconds when the master goes away
(Locust's heartbeat), and a worker that cannot reach the master within
--connect-timeout fails with one line (exit 3).

examples:
  loadkit worker --master-host 10.0.0.5
  loadkit worker --master-host loadkit-master.load.svc --master-port 5557 \\
      --connect-timeout 120
"""

DEFAULT_MASTER_PORT = 5557


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--master-host", required=True, help="the master's host name or IP")
    parser.add_argument(
        "--master-port",
        type=int,
        default=DEFAULT_MASTER_PORT,
        help=f"the master's --master-bind-port (default {DEFAULT_MASTER_PORT})",
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=60.0,
        help="seconds to keep trying to reach the master (default 60)",
    )


def wait_for_master(host: str, port: int, timeout_s: float) -> None:
    """Return once the master's port accepts a connection; one clear error after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=2.0):
                return
        except OSError as exc:
            if time.monotonic() >= deadline:
                reason = exc.strerror or str(exc) or type(exc).__name__
                raise TargetError(
                    f"cannot reach the loadkit master at {host}:{port} within "
                    f"{timeout_s:g} s ({reason})",
                    hint="start the master there first (`loadkit run ... --master "
                    "--expect-workers N`, listening on all interfaces by default) and open "
                    f"TCP port {port} from this machine",
                ) from exc
        time.sleep(0.5)


def run(args: argparse.Namespace) -> int:
    from loadkit import lifeline
    from loadkit.load.orchestrator import worker_argv, worker_environment

    if not 0 < args.master_port <= 65535:
        raise TargetError(f"--master-port {args.master_port}: not a TCP port (1..65535)")
    wait_for_master(args.master_host, args.master_port, args.connect_timeout)
    tmp = Path(tempfile.mkdtemp(prefix="loadkit-worker-"))
    print(
        f"Connected to {args.master_host}:{args.master_port}; waiting for the run", file=sys.stderr
    )
    try:
        with lifeline.stop_signals():
            proc = lifeline.popen(
                worker_argv(args.master_host, args.master_port),
                death_signal=signal.SIGKILL,  # we died: stop loading the target at once
                stdin=subprocess.DEVNULL,
                env=worker_environment(tmp),
                cwd=tmp,
                start_new_session=True,
            )
            try:
                code = proc.wait()
            except KeyboardInterrupt:
                proc.send_signal(signal.SIGINT)  # Locust's graceful stop
                try:
                    proc.wait(15.0)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                return EXIT_INTERRUPTED
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if code == 0 else 3
