"""`loadkit run` as a Python function: run directory, samplers, Locust processes, stop.

The orchestrator is a plain Python process: it never imports Locust or
gevent (scenario files are described in a child, see `describe.py`), so
monkey-patching never reaches it or the samplers it starts. Locust runs as
child processes in their own session, headless: one local process, or a
master plus N workers (`--workers N`), each writing its own files into the
run directory (`LOADKIT_RUN_DIR`).

Ctrl-C (SIGINT) stops the Locust processes gracefully (we forward SIGINT:
requests in flight finish, up to the request timeout), marks the run `aborted` and keeps
everything recorded; a second Ctrl-C kills them at once. An `--abort-on`
condition that holds (`guard.py`) stops them the same way, and the manifest's
`abort` says which condition held and when.

While the run goes, the orchestrator tails the run directory (`live.py`) a few
times a second: the guard checks each newly complete interval, and the
snapshot of the last 10 s feeds the progress line and the Prometheus endpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Any

from loadkit import lifeline
from loadkit.errors import LoadkitError, TargetError, UsageError
from loadkit.load.catalog import resolve_scenario
from loadkit.load.describe import describe_scenario
from loadkit.load.diskspace import DiskGuard, human, last_written, recorded_bytes, space_warning
from loadkit.load.guard import (
    AbortCondition,
    Breach,
    RunGuard,
    check_syntax,
    expand_conditions,
)
from loadkit.load.handoff import (
    ENV_DURATION,
    ENV_PARAMS,
    ENV_PROCESS,
    ENV_REQUEST_PLAN,
    ENV_RUN_DIR,
    ENV_SEED,
    EXIT_WRITE_FAILED,
)
from loadkit.load.live import LiveRunReader, LiveSnapshot
from loadkit.load.metrics_endpoint import MetricsEndpoint
from loadkit.load.progress import ProgressPrinter
from loadkit.load.scenario import manifest_scenario
from loadkit.placement import locate_target
from loadkit.recording import Recording
from loadkit.rundir import RunWriter
from loadkit.rundir.layout import TELEMETRY_DIR
from loadkit.rundir.schema import PLACE_CLIENT

LOGS_DIR = "logs"
_POLL_S = 0.1  # the guard sees a complete interval within this of its being written
_START_GRACE_S = 30.0  # Locust import + worker connection + user spawn
_KILL_GRACE_S = 3.0
SECOND = 1_000_000_000


class RunDirectoryFailure(LoadkitError):
    """The run directory could not be written during the run (a full disk, a removed folder)."""


@dataclass
class TelemetryOptions:
    """What the samplers should watch; `gpu="none"` and no URLs still samples the host."""

    enabled: bool = True
    gpu: str = "auto"  # auto | nvml | sim | none
    triton_url: str | None = None  # statistics API base URL (http://host:port)
    metrics_url: str | None = None  # Prometheus /metrics URL
    server_pid: int | None = None
    server_host: str | None = None  # --server-host local|remote (None: from the address)
    extra: dict[str, Any] = field(default_factory=dict)  # passed through to SamplerSet.start


def check_reachable(target_url: str, timeout_s: float = 3.0) -> None:
    """Fail before recording anything when the URL breaks the rule or nothing listens there."""
    from loadkit.endpoint import parse_endpoint

    endpoint = parse_endpoint(target_url, "--target")
    host, port = endpoint.host, endpoint.port
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        raise TargetError(
            f"cannot connect to the target {host}:{port} ({exc.strerror or exc})",
            hint="is the server running and reachable from here? "
            "`loadkit target` starts a local Triton to try things on",
        ) from exc


def _free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _requests_manifest(plan: Mapping[str, Any], latency_ms: float | None) -> dict[str, Any]:
    """What every request carries, for `manifest.target.requests` (no model spec copy)."""
    out = {k: v for k, v in plan.items() if k not in ("spec", "model")}
    out["preflight_ms"] = None if latency_ms is None else round(latency_ms, 3)
    return out


# --------------------------------------------------------------------- Locust processes
@dataclass
class Workers:
    """Where the Locust workers come from.

    `local` worker processes on this machine, or (`expect` > 0) workers on
    other machines that connect to the master (`loadkit worker`). Both are one
    path: every worker fetches the scenario file and the run's parameters from
    the master and ships its records back to it; only the master, on this
    machine, writes the run directory.
    """

    local: int = 0
    expect: int = 0  # remote workers to wait for (`loadkit run --master --expect-workers N`)
    bind_host: str = "127.0.0.1"
    bind_port: int = 0  # 0: a free port (local workers only)
    connect_wait_s: float = _START_GRACE_S

    @property
    def count(self) -> int:
        return self.local + self.expect

    def check(self) -> None:
        if self.local < 0 or self.expect < 0:
            raise UsageError(f"--workers must be >= 0, got {self.local}")
        if not 0 <= self.bind_port <= 65535:
            raise UsageError(f"--master-bind-port {self.bind_port}: not a TCP port (0..65535)")


def worker_argv(master_host: str, master_port: int) -> list[str]:
    """A Locust worker that gets everything from its master (`-f -`: the scenario file too)."""
    return [
        sys.executable,
        "-m",
        "locust",
        "--worker",
        "--master-host",
        master_host,
        "--master-port",
        str(master_port),
        "-f",
        "-",
        "--loglevel",
        "WARNING",
    ]


def worker_environment(tmp_dir: Path) -> dict[str, str]:
    """A worker's environment: none of the run's settings (they come from the master).

    TMPDIR is the worker's own: Locust writes the scenario file it fetched there,
    and two runs on one machine must not read each other's.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADKIT_")}
    env.update(TMPDIR=str(tmp_dir), PYTHONUNBUFFERED="1")
    return env


@dataclass
class LocustProcesses:
    """The Locust child processes of one run (local, or master + workers)."""

    procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)
    tmp_dirs: list[Path] = field(default_factory=list)
    master_port: int | None = None

    @classmethod
    def launch(
        cls,
        scenario_path: Path,
        target_url: str,
        run_dir: Path,
        *,
        workers: Workers,
        env: dict[str, str],
    ) -> LocustProcesses:
        base = [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(scenario_path),
            "--host",
            target_url,
            "--exit-code-on-error",
            "0",
            "--loglevel",
            "WARNING",
        ]
        headless = ["--headless", "--only-summary"]
        self = cls()
        (run_dir / LOGS_DIR).mkdir(exist_ok=True)
        if workers.count <= 0:
            self._spawn(
                "local", base + headless, run_dir, {**os.environ, **env, ENV_PROCESS: "local"}
            )
            return self
        port = workers.bind_port or _free_port()
        self.master_port = port
        master_args = [
            "--master",
            "--expect-workers",
            str(workers.count),
            "--expect-workers-max-wait",
            str(int(workers.connect_wait_s)),
            "--master-bind-host",
            workers.bind_host,
            "--master-bind-port",
            str(port),
        ]
        self._spawn("master", base + headless + master_args, run_dir, {**os.environ, **env})
        for i in range(workers.local):
            tmp = Path(tempfile.mkdtemp(prefix=f"loadkit-worker-{i}-"))
            self.tmp_dirs.append(tmp)
            self._spawn(
                f"worker-{i}", worker_argv("127.0.0.1", port), run_dir, worker_environment(tmp)
            )
        return self

    def _spawn(self, role: str, argv: list[str], run_dir: Path, env: dict[str, str]) -> None:
        log = open(run_dir / LOGS_DIR / f"locust-{role}.log", "ab")  # noqa: SIM115
        self.logs.append(log)
        proc = lifeline.popen(
            argv,
            death_signal=signal.SIGKILL,  # we died: stop loading the target at once
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=env.get("TMPDIR"),  # a worker runs in its own empty directory
            start_new_session=True,  # Ctrl-C reaches us only; we stop them in order
        )
        self.procs.append((role, proc))

    @property
    def main(self) -> subprocess.Popen[bytes]:
        return self.procs[0][1]

    def running(self) -> bool:
        return any(p.poll() is None for _, p in self.procs)

    def signal_all(self, sig: int) -> None:
        for _, proc in self.procs:
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, sig)
                except ProcessLookupError:
                    pass

    def signal_main(self, sig: int) -> None:
        """The master (or the one local process): it stops its workers and collects their rest."""
        if self.main.poll() is None:
            try:
                os.kill(self.main.pid, sig)
            except ProcessLookupError:
                pass

    def wait_all(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        for _, proc in self.procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                return False
        return True

    def stop(self, grace_s: float, on_wait: Callable[[], None] | None = None) -> None:
        """SIGINT to the master (graceful Locust shutdown), then SIGKILL after `grace_s`.

        SIGINT, not SIGTERM: a headless Locust running a shape class waits for
        the shape in a way that only KeyboardInterrupt leaves gracefully (its
        SIGTERM handler is installed after that wait, so SIGTERM kills it).
        Only the master: it asks its workers for their last records, waits for
        them, then tells them to quit.
        """
        self.signal_main(signal.SIGINT)
        deadline = time.monotonic() + grace_s
        try:
            while self.running() and time.monotonic() < deadline:
                if on_wait is not None:
                    on_wait()
                time.sleep(_POLL_S)
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: kill now
        self.signal_all(signal.SIGKILL)
        self.wait_all(_KILL_GRACE_S)

    def close(self) -> None:
        for log in self.logs:
            log.close()
        for tmp in self.tmp_dirs:
            shutil.rmtree(tmp, ignore_errors=True)

    def failure(self, run_dir: Path) -> str | None:
        """One line about a Locust process that failed, with the tail of its log."""
        for role, proc in self.procs:
            if proc.returncode not in (0, None, -signal.SIGINT, -signal.SIGTERM):
                path = run_dir / LOGS_DIR / f"locust-{role}.log"
                try:
                    tail = path.read_text(errors="replace").strip().splitlines()[-1:]
                except OSError:
                    tail = []
                last = tail[0] if tail else "no output"
                return f"locust {role} exited with status {proc.returncode}: {last}"
        return None


# --------------------------------------------------------------------- the run
def _stop_on_breach(
    writer: RunWriter,
    procs: LocustProcesses,
    breach: Breach,
    printer: ProgressPrinter | None,
    timeout_s: float,
) -> None:
    """An `--abort-on` condition held: record it, then stop the load as Ctrl-C does."""
    detected_ns = time.time_ns()
    procs.signal_main(signal.SIGINT)  # first: the load stops now, the bookkeeping can wait
    abort = breach.to_manifest(detected_ns)
    abort["stop_sent_ns"] = time.time_ns()
    writer.update(abort=abort)
    writer.event("abort", "abort-on", **abort)
    if printer is not None:
        printer.finish()
    print(
        f"Aborting: {breach.message()}; stopping the load (requests in flight may finish).",
        file=sys.stderr,
    )
    procs.stop(2 * timeout_s + 10)


@dataclass
class LiveOptions:
    """What watches the run while it goes: progress line, callback, guard, endpoint."""

    on_progress: Callable[[LiveSnapshot], None] | None = None
    show_progress: bool = False
    progress_every_s: float = 5.0
    abort_on: Sequence[str | AbortCondition] = ()
    serve_metrics: tuple[str, int] | None = None


@dataclass
class RunOptions:
    """Everything about one run but the scenario and the target."""

    duration_s: float | None = None
    seed: int = 0
    out_dir: str | os.PathLike[str] = "reports"
    params: Mapping[str, Any] | None = None
    run_id: str | None = None
    workers: Workers = field(default_factory=Workers)
    live: LiveOptions = field(default_factory=LiveOptions)
    telemetry: TelemetryOptions | None = None
    extra_manifest: Mapping[str, Any] | None = None
    before_start: Callable[[Recording], None] | None = None
    command_line: list[str] | None = None

    @classmethod
    def of(cls, *, workers: int | Workers = 0, **keywords: Any) -> RunOptions:
        """From flat keywords: RunOptions' fields and LiveOptions' (`workers` may be a count)."""
        live_names = {f.name for f in fields(LiveOptions)}
        live = {k: v for k, v in keywords.items() if k in live_names}
        rest = {k: v for k, v in keywords.items() if k not in live_names}
        return cls(
            workers=workers if isinstance(workers, Workers) else Workers(local=workers),
            live=LiveOptions(**live),
            **rest,
        )


def distributed_manifest(run_dir: Path) -> dict[str, Any] | None:
    """`manifest.distributed` from the master's `distributed` events (None: no workers)."""
    from loadkit.rundir.layout import EVENTS_FILE

    workers: list[dict[str, Any]] = []
    lost: dict[str, dict[str, Any]] = {}
    warn_ms: float | None = None
    try:
        lines = (run_dir / EVENTS_FILE).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get("kind") != "distributed":
            continue
        if row.get("name") == "workers":
            workers = list(row.get("workers") or [])
            warn_ms = row.get("clock_warn_ms")
        elif row.get("name") == "worker-lost":
            lost[str(row.get("worker"))] = {k: v for k, v in row.items() if k not in ("kind",)}
    if not workers and not lost:
        return None
    for worker in workers:
        if worker.get("lost") is None and worker["worker"] in lost:
            worker["lost"] = lost[worker["worker"]]
    clock_warnings = [
        w["worker"]
        for w in workers
        if warn_ms is not None
        and (w.get("clock") or {}).get("offset_ms") is not None
        and abs(float(w["clock"]["offset_ms"])) > warn_ms
    ]
    return {
        "workers": workers,
        "lost": [w["lost"] for w in workers if w.get("lost")]
        or [v for k, v in lost.items() if k not in {w["worker"] for w in workers}],
        "clock_warn_ms": warn_ms,
        "clock_warnings": clock_warnings,
    }


def _loss_notes(distributed: Mapping[str, Any], end_ns: int) -> list[str]:
    """One line per lost worker and per clock beyond the bound, for the manifest's notes."""
    notes = []
    for loss in distributed.get("lost") or []:
        since_ns = loss.get("last_interval_end_ns") or loss.get("detected_ns") or end_ns
        missing_s = max(0.0, (end_ns - int(since_ns)) / 1e9)
        rate = float(loss.get("offered_per_s") or 0.0)
        loss["unsent_s"] = round(missing_s, 3)
        loss["unsent_estimate"] = round(rate * missing_s)
        at = time.strftime("%H:%M:%S", time.gmtime(int(since_ns) / 1e9))
        notes.append(
            f"lost {loss.get('worker')} at {at} UTC ({loss.get('why')}): "
            f"{rate:g}/s of the offered rate went unsent for the last {missing_s:.0f} s "
            f"(about {loss['unsent_estimate']} requests); its data up to then is kept"
        )
    for worker in distributed.get("workers") or []:
        if worker["worker"] in (distributed.get("clock_warnings") or []):
            offset = worker["clock"]["offset_ms"]
            notes.append(
                f"{worker['worker']}'s clock is {offset:+.1f} ms from the master's "
                f"(over {distributed.get('clock_warn_ms'):g} ms): its records were shifted "
                "by it, but check NTP on that machine"
            )
    return notes


class LoadRun:
    """One `loadkit run`, as a context manager: `with LoadRun(...) as run: run.wait()`.

    Entering creates the run directory, starts the samplers and the Locust
    processes; `wait()` watches the run (guard, progress, endpoint) until
    Locust ends; leaving stops whatever still runs and finalizes the manifest
    (`aborted` on Ctrl-C, an `--abort-on` breach or a Locust failure; then a
    LoadkitError is raised after finalizing).
    """

    def __init__(
        self,
        scenario_path: str | os.PathLike[str],
        target_url: str,
        options: RunOptions | None = None,
    ):
        self.options = options or RunOptions()
        self.scenario_path = resolve_scenario(scenario_path)
        self.target_url = target_url
        self.options.workers.check()
        self.overrides = {k: v for k, v in (self.options.params or {}).items()}
        live = self.options.live
        check_syntax(a for a in live.abort_on if isinstance(a, str))
        self.status = "complete"
        self.failure: str | None = None
        self.breach: Breach | None = None
        self.procs: LocustProcesses | None = None
        self.recording: Recording | None = None
        self.writer: RunWriter | None = None
        self.disk: DiskGuard | None = None
        self.disk_failure: str | None = None  # the one line when the run directory failed
        self._stack = ExitStack()

    @property
    def run_dir(self) -> Path:
        assert self.writer is not None, "enter the LoadRun first"
        return self.writer.path

    # --- entering -------------------------------------------------------
    def __enter__(self) -> LoadRun:
        try:
            self._prepare()
            self._start()
        except BaseException as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)  # finalize what was started
            raise
        return self

    def _prepare(self) -> None:
        o = self.options
        t = o.telemetry
        # Whether the target runs here (its flags checked before anything is tried).
        location = locate_target(
            self.target_url,
            server_pid=t.server_pid if t is not None else None,
            server_host=t.server_host if t is not None else None,
        )
        check_reachable(self.target_url)
        # Describe the scenario and run the pre-flight (metadata, one request) in one child.
        info = describe_scenario(
            self.scenario_path,
            self.overrides,
            o.duration_s,
            preflight_target=self.target_url,
            seed=o.seed,
        )
        self.info = info
        live = o.live
        conditions = [a for a in live.abort_on if isinstance(a, AbortCondition)]
        conditions += expand_conditions(
            [a for a in live.abort_on if isinstance(a, str)], info.get("slo")
        )
        self.resolved_params: dict[str, Any] = info["params"]
        preflight: dict[str, Any] = info["preflight"]
        self.plan: dict[str, Any] = preflight["plan"]
        self.endpoint = MetricsEndpoint(*live.serve_metrics) if live.serve_metrics else None
        if self.endpoint is not None:
            self._stack.callback(self.endpoint.close)
        self.recording = recording = Recording.create(
            out_dir=o.out_dir,
            run_id=o.run_id,
            kind="load",
            scenario=manifest_scenario(
                info, path=str(self.scenario_path), seed=o.seed, workers=o.workers.count
            ),
            target={
                "url": self.target_url,
                "protocol": self.resolved_params.get("protocol"),
                "model": self.plan["model"],
                "embedded": False,
                "requests": _requests_manifest(self.plan, preflight.get("latency_ms")),
            },
            slo=info.get("slo"),
            server=preflight["server"],
            target_location=location,
            command_line=o.command_line,
        )
        self.writer = writer = recording.writer
        writer.update(abort_on=[c.text for c in conditions], abort=None)
        if self.endpoint is not None:
            writer.update(metrics_endpoint=self.endpoint.url)
            self.endpoint.publish(
                LiveRunReader(writer.path).snapshot(0.0, float(info["duration_s"])),
                run_id=writer.manifest["run_id"],
                scenario=info["name"],
                target=self.target_url,
            )
            print(f"Serving live metrics at {self.endpoint.url}", file=sys.stderr)
        if o.extra_manifest:
            recording.merge(o.extra_manifest)
        self.printer = (
            ProgressPrinter(plain_every_s=live.progress_every_s) if live.show_progress else None
        )
        self.guard = RunGuard(conditions)
        self.reader = LiveRunReader(writer.path, keep_s=self.guard.longest_s + 15)
        self.total_s = float(info["duration_s"])
        self.started = time.monotonic()
        self.timeout_s = float(self.resolved_params["timeout_s"])
        warning = space_warning(writer.path, self.total_s, max(1, o.workers.count))
        if warning:
            print(f"WARNING: {warning}", file=sys.stderr)
        self.disk = DiskGuard(writer.path)
        self.disk.start()

    def _start(self) -> None:
        o = self.options
        writer, recording = self.writer, self.recording
        assert writer is not None and recording is not None
        # SIGINT and SIGTERM raise KeyboardInterrupt while the run is in progress.
        self._stack.enter_context(lifeline.stop_signals())
        if o.before_start is not None:
            o.before_start(recording)
        t = o.telemetry
        if t is not None and t.enabled:
            recording.start_samplers(
                gpu=t.gpu,
                triton_url=t.triton_url,
                metrics_url=t.metrics_url,
                server_pid=t.server_pid,
                **t.extra,
            )
        env = {
            ENV_RUN_DIR: str(writer.path.resolve()),
            ENV_PARAMS: json.dumps(self.overrides),
            ENV_SEED: str(o.seed),
            ENV_REQUEST_PLAN: json.dumps(self.plan),
            "PYTHONUNBUFFERED": "1",
        }
        if o.duration_s is not None:
            env[ENV_DURATION] = str(o.duration_s)
        self.procs = LocustProcesses.launch(
            self.scenario_path, self.target_url, writer.path, workers=o.workers, env=env
        )
        if o.workers.expect:
            print(
                f"Waiting for {o.workers.expect} worker(s): on each machine run\n"
                f"  loadkit worker --master-host <this host> --master-port {self.procs.master_port}",
                file=sys.stderr,
            )
        self.started = time.monotonic()

    # --- watching -------------------------------------------------------
    def _refresh(self, final: bool = False) -> None:
        """One snapshot for the endpoint, the callback and the progress line alike."""
        live = self.options.live
        if live.on_progress is None and self.printer is None and self.endpoint is None:
            return
        snapshot = self.reader.snapshot(time.monotonic() - self.started, self.total_s)
        if self.endpoint is not None:
            self.endpoint.publish(snapshot)
        if live.on_progress is not None:
            live.on_progress(snapshot)
        if self.printer is not None:
            self.printer.show(snapshot, force=final)

    def wait(self) -> Path:
        """Watch the run until Locust ends (or a guard condition holds); the run directory."""
        procs = self.procs
        assert procs is not None and self.writer is not None
        live = bool(self.guard.conditions) or self.endpoint is not None
        # The run is bounded: duration + start-up + graceful stop (the master waits for its
        # workers' last records up to twice the request timeout).
        connect = self.options.workers.connect_wait_s if self.options.workers.count else 0.0
        deadline = self.started + self.total_s + _START_GRACE_S + connect + 2 * self.timeout_s + 40
        last_report = 0.0
        last_seen: int | None = None
        while procs.main.poll() is None:
            now = time.monotonic()
            if live:
                self.reader.poll()
                self.breach = self.guard.check(self.reader)
                if self.breach is not None:
                    break
            newest = self.reader.last_complete_interval()
            if now - last_report >= 1.0 or newest != last_seen:
                self._refresh()
                last_report, last_seen = now, newest
            if self.disk is not None and self.disk.full():
                self.disk_failure = self._disk_failure("full")
                break
            if now > deadline:
                self.failure = (
                    f"Locust did not finish within {deadline - self.started:.0f} s; stopped it"
                )
                break
            time.sleep(_POLL_S)
        if self.breach is not None:
            self.status = "aborted"
            _stop_on_breach(self.writer, procs, self.breach, self.printer, self.timeout_s)
        elif self.disk_failure is not None:
            self.status = "aborted"
            if self.printer is not None:
                self.printer.finish()
            procs.signal_main(signal.SIGINT)  # its writes fail now: it stops at once (74)
            procs.stop(_KILL_GRACE_S + 2)
        else:
            if self.failure is None and procs.main.returncode == EXIT_WRITE_FAILED:
                self.disk_failure = self._disk_failure("write")
                self.status = "aborted"
            elif self.failure is None:
                self.failure = procs.failure(self.writer.path)
            # The master exits first; its workers follow after their graceful stop.
            if not procs.wait_all(self.timeout_s + 5):
                procs.stop(_KILL_GRACE_S)
        return self.writer.path

    def _disk_failure(self, why: str) -> str:
        """One line: which file, how much was recorded, until when."""
        assert self.writer is not None
        run_dir = self.writer.path
        self.reader.poll()
        last = self.reader.last_complete_interval()
        start = self.writer.manifest.get("start_ns") or time.time_ns()
        until = (
            f"load counters until {time.strftime('%H:%M:%S', time.gmtime((last + SECOND) / 1e9))} "
            f"UTC (+{(last + SECOND - start) / 1e9:.0f} s of the {self.total_s:.0f} s run)"
            if last is not None
            else "no whole second of load counters"
        )
        file = last_written(run_dir)
        where = f" while writing {file}" if file is not None else ""
        what = (
            f"the disk holding {run_dir} is full{where}"
            if why == "full"
            else f"{run_dir} could not be written{where} (the Locust process stopped)"
        )
        return (
            f"{what}: the load stopped; {human(recorded_bytes(run_dir))} recorded, {until}; "
            "the run is marked aborted"
        )

    # --- leaving --------------------------------------------------------
    def _interrupted(self) -> None:
        assert self.writer is not None
        self.status = "aborted"
        if self.printer is not None:
            self.printer.finish()
        print(
            "Stopping: requests in flight may finish (Ctrl-C again to kill); data is kept.",
            file=sys.stderr,
        )
        if self.procs is not None:
            self.procs.stop(2 * self.timeout_s + 10)
        self.writer.event("note", "interrupted", message="run stopped by SIGINT (Ctrl-C)")
        if self.writer.manifest.get("abort") is None:
            self.writer.update(abort={"by": "interrupt", "t_ns": time.time_ns()})

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        """Finalize; a Ctrl-C ends here (the run is `aborted`, its data kept)."""
        writer = self.writer
        interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        try:
            if writer is None:
                return False
            if interrupted:
                self._interrupted()
            try:
                self._finish(writer)
            except OSError as exc:  # the last words did not fit either: say what is kept
                if self.disk_failure is None:
                    self.disk_failure = self._disk_failure("write")
                self.disk_failure += f" (the manifest could not be updated: {exc.strerror or exc})"
        finally:
            self._stack.close()
        if exc_type is None and self.disk_failure is not None:
            raise RunDirectoryFailure(
                self.disk_failure,
                hint=f"what was written is kept and can be analyzed: loadkit analyze {writer.path}; "
                "free some space or give --out a larger disk",
            )
        if exc_type is None and self.failure is not None:
            raise LoadkitError(
                self.failure, hint=f"see {writer.path / LOGS_DIR}/ for the Locust logs"
            )
        return interrupted

    def _finish(self, writer: RunWriter) -> None:
        if self.disk is not None:
            self.disk.release()  # room for the run's last words (sources, status, abort)
        if self.disk_failure is not None:
            writer.update(
                abort={"by": "disk_full", "t_ns": time.time_ns(), "message": self.disk_failure}
            )
            writer.event("error", "run-directory", source="loadkit", message=self.disk_failure)
        procs = self.procs
        if procs is not None and procs.running():
            procs.stop(_KILL_GRACE_S)
        if procs is not None:
            procs.close()
        assert self.recording is not None
        try:
            self.recording.stop_telemetry()
        finally:
            distributed = distributed_manifest(writer.path)
            if distributed is not None:
                for note in _loss_notes(distributed, time.time_ns()):
                    writer.add_note(note)
                    print(f"WARNING: {note}", file=sys.stderr)
                writer.update(distributed=distributed)
                self._worker_machines(distributed)
            if self.failure is not None:
                self.status = "aborted"
                writer.add_note(self.failure)
                writer.event("error", "locust", source="locust", message=self.failure)
            if hasattr(self, "reader"):
                self._refresh(final=True)
            if getattr(self, "printer", None) is not None:
                self.printer.finish()  # type: ignore[union-attr]
            self.recording.finish(self.status)

    def _worker_machines(self, distributed: Mapping[str, Any]) -> None:
        """Each worker machine's host series (`generator/machine.py`): the load's, `client`."""
        assert self.recording is not None
        listed: set[str] = set()
        for worker in distributed.get("workers") or []:
            series = worker.get("machine_series")
            if not series or series in listed:
                continue
            listed.add(series)
            self.recording.add_source(
                {
                    "name": series,
                    "file": f"{TELEMETRY_DIR}/{series}.jsonl",
                    "interval_s": 1.0,  # one row per record interval
                    "simulated": False,
                    "warning": None,
                    "place": PLACE_CLIENT,
                    "host": worker.get("host"),
                    "parts": {},
                    "worker": worker.get("worker"),
                }
            )


def run_scenario(scenario_path: str | os.PathLike[str], target_url: str, **keywords: Any) -> Path:
    """Run one scenario against `target_url`; return the run directory (see `LoadRun`).

    Keyword arguments for scripts and benchmarks: the fields of `RunOptions`
    and of its `LiveOptions` (`RunOptions.of`); `LoadRun` with `RunOptions` is the object.
    """
    options = RunOptions.of(**keywords)
    with LoadRun(scenario_path, target_url, options) as run:
        run.wait()
    return run.run_dir
