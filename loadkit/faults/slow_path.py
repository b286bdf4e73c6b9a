"""A slow network path: a TCP proxy in front of the server that delays requests in each window.

A load balancer with a full queue, a sidecar under GC, a congested link: the
requests take longer to reach the server while the server itself is as fast as
ever. The proxy is its own process (`python -m loadkit.faults.slow_path`),
listening on 127.0.0.1 at an ephemeral port (`SlowPath.url` once started), and
forwards every connection to the upstream; while its state file says
`{"delay_ms": d}`, each chunk from the client (a request, on a kept-alive
connection) is held d ms before it is forwarded. Responses pass straight
through. Load sent to `SlowPath.url` sees the delay as client + network time;
the server's own statistics see nothing.

    with SlowPath("127.0.0.1", 8000, schedule, delay_ms=20, state_dir=tmp) as proxy:
        run the load against proxy.url
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from loadkit import lifeline
from loadkit.faults.schedule import Clock, FaultSchedule, FaultUnavailable, ScheduledFault

STATE_POLL_S = 0.02
START_TIMEOUT_S = 10.0
CHUNK = 65536


def write_delay(path: Path, delay_ms: float) -> None:
    """Atomically (rename): the proxy reads the old or the new delay, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"delay_ms": delay_ms}))
    os.replace(tmp, path)


class SlowPath(ScheduledFault):
    """A proxy to `host:port` that holds each request `delay_ms` during each window."""

    name = "slow-path"

    def __init__(
        self,
        host: str,
        port: int,
        schedule: FaultSchedule,
        *,
        delay_ms: float,
        state_dir: str | os.PathLike[str],
        run_dir: str | Path | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(schedule, run_dir=run_dir, clock=clock)
        if delay_ms <= 0:
            raise FaultUnavailable(f"slow path delay must be > 0 ms, got {delay_ms}")
        self.upstream = (host, int(port))
        self.delay_ms = float(delay_ms)
        self.state_path = Path(state_dir) / "slow_path.json"
        self.process: subprocess.Popen[str] | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("the slow path's proxy is not listening yet (call listen())")
        return f"http://127.0.0.1:{self.port}"

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "delay_ms": self.delay_ms, "upstream": list(self.upstream)}

    def listen(self) -> str:
        """Start the proxy (no delay yet) and return its URL; `start()` then runs the schedule."""
        if self.process is not None:
            return self.url
        if not self.state_path.parent.is_dir():
            raise FaultUnavailable(f"no directory for the slow path's state {self.state_path}")
        write_delay(self.state_path, 0.0)
        argv = [
            sys.executable,
            "-c",  # not -m: the package imports this module first (runpy warns)
            "import sys; from loadkit.faults.slow_path import main; sys.exit(main())",
            "--upstream",
            f"{self.upstream[0]}:{self.upstream[1]}",
            "--state",
            str(self.state_path),
        ]
        self.process = lifeline.popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # "listening <port>", or EOF if it failed
        if not line.startswith("listening "):
            self._cleanup()
            raise FaultUnavailable(f"the slow path's proxy did not start ({line.strip()!r})")
        self.port = int(line.split()[1])
        return self.url

    def _prepare(self) -> None:
        self.listen()

    def _begin(self) -> dict[str, Any]:
        write_delay(self.state_path, self.delay_ms)
        return {"delay_ms": self.delay_ms}

    def _end(self) -> None:
        write_delay(self.state_path, 0.0)

    def _cleanup(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            lifeline.stop(process)


# --- the proxy process ----------------------------------------------------------------


class _Delay:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds = 0.0

    async def poll(self) -> None:
        while True:
            try:
                self.seconds = float(json.loads(self.path.read_text())["delay_ms"]) / 1000.0
            except (OSError, ValueError, KeyError, TypeError):
                pass  # torn or missing: keep the last delay
            await asyncio.sleep(STATE_POLL_S)


async def _pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: _Delay | None
) -> None:
    try:
        while chunk := await reader.read(CHUNK):
            if delay is not None and delay.seconds > 0:
                await asyncio.sleep(delay.seconds)
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _serve(upstream: tuple[str, int], state: Path) -> None:
    delay = _Delay(state)

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*upstream)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pump(client_r, server_w, delay), _pump(server_r, client_w, None))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(f"listening {port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    poller = asyncio.create_task(delay.poll())
    async with server:
        await stop.wait()
    poller.cancel()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadkit.faults.slow_path")
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the server")
    parser.add_argument("--state", required=True, help='file {"delay_ms": d} (0: no delay)')
    args = parser.parse_args(argv)
    host, _, port = args.upstream.rpartition(":")
    asyncio.run(_serve((host, int(port)), Path(args.state)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
