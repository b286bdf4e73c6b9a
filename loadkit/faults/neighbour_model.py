"""Another model's traffic: requests to a second model on the same server during each window.

Models on one server share its accelerator and the backend's threads: a burst on
a second model (another team's traffic) slows the analyzed one with nothing on
the analyzed model's own load changing. The injector keeps a sender process
running (its own process, so its work never stalls the injector's thread or the
load generator's event loop) and switches its rate between 0 and `rate_rps`
through a state file, so a window starts when the file is written, not when an
interpreter has started. The sender is open-loop: `threads` connections, each
sending on its own schedule; a thread that falls behind by a second skips ahead
(bounded work, never a backlog of its own).

The request body is the caller's (KServe v2 JSON for the other model), so any
model can be the neighbour.

    fault = NeighbourModel("http://127.0.0.1:8000", "doc_ranker", body, schedule, rate_rps=60)
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from loadkit import lifeline
from loadkit.faults.schedule import Clock, FaultSchedule, FaultUnavailable, ScheduledFault

STATE_POLL_S = 0.02
SENDER_THREADS = 4
REQUEST_TIMEOUT_S = 10.0
MAX_BEHIND_S = 1.0


def write_rate(path: Path, rate_rps: float) -> None:
    """Atomically (rename): the sender reads the old or the new rate, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"rate_rps": rate_rps}))
    os.replace(tmp, path)


class NeighbourModel(ScheduledFault):
    """Send `rate_rps` requests/s of `body` to `model` on `url` during each window."""

    name = "neighbour-model"

    def __init__(
        self,
        url: str,
        model: str,
        body: dict[str, Any],
        schedule: FaultSchedule,
        *,
        rate_rps: float,
        state_dir: str | os.PathLike[str],
        threads: int = SENDER_THREADS,
        run_dir: str | Path | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(schedule, run_dir=run_dir, clock=clock)
        if rate_rps <= 0:
            raise FaultUnavailable(f"neighbour rate must be > 0 req/s, got {rate_rps}")
        self.url, self.model, self.body = url, model, body
        self.rate_rps = float(rate_rps)
        self.threads = max(1, int(threads))
        self.state_path = Path(state_dir) / "neighbour_rate.json"
        self.body_path = Path(state_dir) / "neighbour_body.json"
        self.process: subprocess.Popen[bytes] | None = None

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model": self.model, "rate_rps": self.rate_rps}

    def _prepare(self) -> None:
        if not self.state_path.parent.is_dir():
            raise FaultUnavailable(f"no directory for the neighbour's state {self.state_path}")
        write_rate(self.state_path, 0.0)
        self.body_path.write_text(json.dumps(self.body))
        argv = [
            sys.executable,
            "-c",  # not -m: the package imports this module first (runpy warns)
            "import sys; from loadkit.faults.neighbour_model import main; sys.exit(main())",
            "--url",
            self.url,
            "--model",
            self.model,
            "--body",
            str(self.body_path),
            "--state",
            str(self.state_path),
            "--threads",
            str(self.threads),
        ]
        self.process = lifeline.popen(argv, stdin=subprocess.DEVNULL)

    def _begin(self) -> dict[str, Any]:
        write_rate(self.state_path, self.rate_rps)
        return {"model": self.model, "rate_rps": self.rate_rps}

    def _end(self) -> None:
        write_rate(self.state_path, 0.0)

    def _cleanup(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            lifeline.stop(process)


# --- the sender process -------------------------------------------------------------


class _Rate:
    """The rate the state file asks for, polled by one thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.value = 0.0
        self.stop = threading.Event()

    def poll(self) -> None:
        while not self.stop.wait(STATE_POLL_S):
            try:
                self.value = float(json.loads(self.path.read_text())["rate_rps"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # torn or missing: keep the last rate


def _send_loop(url: str, path: str, body: bytes, rate: _Rate, threads: int) -> None:
    parts = urlsplit(url)
    conn: http.client.HTTPConnection | None = None
    next_at = time.monotonic()
    while not rate.stop.is_set():
        now = time.monotonic()
        per_thread = rate.value / threads
        if per_thread <= 0:
            next_at = now
            rate.stop.wait(STATE_POLL_S)
            continue
        if next_at > now:
            rate.stop.wait(next_at - now)
            continue
        next_at = max(next_at + 1.0 / per_thread, now - MAX_BEHIND_S)
        try:
            if conn is None:
                conn = http.client.HTTPConnection(
                    parts.hostname or "127.0.0.1", parts.port or 80, timeout=REQUEST_TIMEOUT_S
                )
            conn.request("POST", path, body, {"Content-Type": "application/json"})
            conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            if conn is not None:
                conn.close()
            conn = None
            rate.stop.wait(0.1)  # the server is away: no busy loop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadkit.faults.neighbour_model")
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--body", required=True, help="file with the request's JSON body")
    parser.add_argument("--state", required=True, help='file {"rate_rps": r} (0: idle)')
    parser.add_argument("--threads", type=int, default=SENDER_THREADS)
    args = parser.parse_args(argv)
    rate = _Rate(Path(args.state))
    signal.signal(signal.SIGTERM, lambda *_: rate.stop.set())
    body = Path(args.body).read_bytes()
    path = f"/v2/models/{quote(args.model, safe='')}/infer"
    workers = [
        threading.Thread(target=_send_loop, args=(args.url, path, body, rate, args.threads))
        for _ in range(max(1, args.threads))
    ]
    for w in workers:
        w.start()
    rate.poll()  # until SIGTERM (or our parent's death signal)
    for w in workers:
        w.join(REQUEST_TIMEOUT_S + 1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
