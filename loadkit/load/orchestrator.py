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
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from loadkit import lifeline
from loadkit.environment import run_environment
from loadkit.errors import LoadkitError, TargetError, UsageError
from loadkit.load.catalog import resolve_scenario
from loadkit.load.describe import describe_scenario
from loadkit.load.guard import (
    AbortCondition,
    Breach,
    RunGuard,
    check_syntax,
    expand_conditions,
)
from loadkit.load.live import LiveRunReader, LiveSnapshot
from loadkit.load.metrics_endpoint import MetricsEndpoint
from loadkit.load.progress import ProgressPrinter
from loadkit.load.scenario import (
    ENV_DURATION,
    ENV_PARAMS,
    ENV_PROCESS,
    ENV_REQUEST_PLAN,
    ENV_RUN_DIR,
    ENV_SEED,
    ENV_WORKER_COUNT,
    ENV_WORKER_INDEX,
    manifest_scenario,
)
from loadkit.rundir import RunWriter

LOGS_DIR = "logs"
_POLL_S = 0.1  # the guard sees a complete interval within this of its being written
_START_GRACE_S = 30.0  # Locust import + worker connection + user spawn
_KILL_GRACE_S = 3.0


@dataclass
class TelemetryOptions:
    """What the samplers should watch; `gpu="none"` and no URLs still samples the host."""

    enabled: bool = True
    gpu: str = "auto"  # auto | nvml | sim | none
    triton_url: str | None = None  # statistics API base URL (http://host:port)
    metrics_url: str | None = None  # Prometheus /metrics URL
    server_pid: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # passed through to SamplerSet.start


def check_reachable(target_url: str, timeout_s: float = 3.0) -> None:
    """Fail before recording anything when nothing listens at the target."""
    from urllib.parse import urlsplit

    parts = urlsplit(target_url if "://" in target_url else f"grpc://{target_url}")
    host = parts.hostname
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise UsageError(f"bad --target {target_url!r}: {exc}") from exc
    if not host:
        raise UsageError(
            f"bad --target {target_url!r}",
            hint="use http://host:port for HTTP/JSON or host:port for gRPC",
        )
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


def _merge_manifest(writer: RunWriter, extra: Mapping[str, Any]) -> None:
    """Merge `extra` into the manifest: dicts one level deep, lists extended."""
    changes: dict[str, Any] = {}
    for key, value in extra.items():
        current = writer.manifest.get(key)
        if isinstance(current, dict) and isinstance(value, Mapping):
            changes[key] = {**current, **value}
        elif isinstance(current, list) and isinstance(value, list):
            changes[key] = current + value
        else:
            changes[key] = value
    writer.update(**changes)


# --------------------------------------------------------------------- telemetry hook
class _Telemetry:
    """Optional samplers from `loadkit.telemetry.supervisor`; absent module = no samplers."""

    def __init__(self, options: TelemetryOptions | None):
        self.options = options
        self.samplers: Any = None

    def start(self, writer: RunWriter) -> None:
        if self.options is None or not self.options.enabled:
            return
        from loadkit.telemetry.supervisor import SamplerSet

        o = self.options
        self.samplers = SamplerSet.start(
            writer.path,
            gpu=o.gpu,
            triton_url=o.triton_url,
            metrics_url=o.metrics_url,
            server_pid=o.server_pid,
            **o.extra,
        )
        info: dict[str, Any] = getattr(self.samplers, "manifest_info", dict)()
        if info:
            env = dict(writer.manifest.get("environment") or {})
            if "gpu" in info:
                env["gpu"] = info["gpu"]
            writer.update(environment=env, sources=info.get("sources", []))

    def stop(self, writer: RunWriter) -> None:
        if self.samplers is None:
            return
        self.samplers.stop()
        info: dict[str, Any] = getattr(self.samplers, "manifest_info", dict)()
        if info.get("sources"):
            writer.update(sources=info["sources"])
        self.samplers = None


# --------------------------------------------------------------------- Locust processes
@dataclass
class LocustProcesses:
    """The Locust child processes of one run (local, or master + workers)."""

    procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)

    @classmethod
    def launch(
        cls,
        scenario_path: Path,
        target_url: str,
        run_dir: Path,
        *,
        workers: int,
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
        if workers <= 0:
            self._spawn("local", base + headless, run_dir, {**env, ENV_PROCESS: "local"})
            return self
        port = _free_port()
        master_args = [
            "--master",
            "--expect-workers",
            str(workers),
            "--expect-workers-max-wait",
            str(int(_START_GRACE_S)),
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(port),
        ]
        self._spawn("master", base + headless + master_args, run_dir, env)
        for i in range(workers):
            worker_env = {**env, ENV_WORKER_INDEX: str(i), ENV_WORKER_COUNT: str(workers)}
            worker_args = ["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
            self._spawn(f"worker-{i}", base + worker_args, run_dir, worker_env)
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
            env={**os.environ, **env},
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

    def wait_all(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        for _, proc in self.procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                return False
        return True

    def stop(self, grace_s: float, on_wait: Callable[[], None] | None = None) -> None:
        """SIGINT (graceful Locust shutdown), then SIGKILL after `grace_s`.

        SIGINT, not SIGTERM: a headless Locust running a shape class waits for
        the shape in a way that only KeyboardInterrupt leaves gracefully (its
        SIGTERM handler is installed after that wait, so SIGTERM kills it).
        """
        self.signal_all(signal.SIGINT)
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

    def close_logs(self) -> None:
        for log in self.logs:
            log.close()

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
    procs.signal_all(signal.SIGINT)  # first: the load stops now, the bookkeeping can wait
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
    procs.stop(timeout_s + 2)


def run_scenario(
    scenario_path: str | os.PathLike[str],
    target_url: str,
    *,
    duration_s: float | None = None,
    workers: int = 0,
    seed: int = 0,
    out_dir: str | os.PathLike[str] = "reports",
    params: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    on_progress: Callable[[LiveSnapshot], None] | None = None,
    show_progress: bool = False,
    progress_every_s: float = 5.0,
    abort_on: Sequence[str | AbortCondition] = (),
    serve_metrics: tuple[str, int] | None = None,
    extra_manifest: Mapping[str, Any] | None = None,
    before_start: Callable[[RunWriter], None] | None = None,
    telemetry: TelemetryOptions | None = None,
    command_line: list[str] | None = None,
) -> Path:
    """Run one scenario against `target_url`; return the run directory.

    The manifest ends `complete`, or `aborted` when interrupted (Ctrl-C /
    KeyboardInterrupt), when an `abort_on` condition held (the manifest's
    `abort` names it; this function then returns normally, data kept) or when
    Locust failed (then a LoadkitError is raised after finalizing).
    """
    scenario_path = resolve_scenario(scenario_path)
    if workers < 0:
        raise UsageError(f"--workers must be >= 0, got {workers}")
    overrides = {k: v for k, v in (params or {}).items()}
    check_syntax(a for a in abort_on if isinstance(a, str))
    check_reachable(target_url)
    # Describe the scenario and run the pre-flight (metadata, one request) in one child.
    info = describe_scenario(
        scenario_path, overrides, duration_s, preflight_target=target_url, seed=seed
    )
    conditions = [a for a in abort_on if isinstance(a, AbortCondition)]
    conditions += expand_conditions([a for a in abort_on if isinstance(a, str)], info.get("slo"))
    resolved_params: dict[str, Any] = info["params"]
    preflight: dict[str, Any] = info["preflight"]
    plan: dict[str, Any] = preflight["plan"]
    environment = run_environment()
    environment["server"] = preflight["server"]
    endpoint = MetricsEndpoint(*serve_metrics) if serve_metrics is not None else None
    try:
        writer = RunWriter.create(
            out_dir=out_dir,
            run_id=run_id,
            kind="load",
            scenario=manifest_scenario(info, path=str(scenario_path), seed=seed, workers=workers),
            target={
                "url": target_url,
                "protocol": resolved_params.get("protocol"),
                "model": plan["model"],
                "embedded": False,
                "requests": _requests_manifest(plan, preflight.get("latency_ms")),
            },
            slo=info.get("slo"),
            environment=environment,
            command_line=command_line,
        )
    except BaseException:
        if endpoint is not None:
            endpoint.close()
        raise
    writer.update(abort_on=[c.text for c in conditions], abort=None)
    if endpoint is not None:
        writer.update(metrics_endpoint=endpoint.url)
        endpoint.publish(
            LiveRunReader(writer.path).snapshot(0.0, float(info["duration_s"])),
            run_id=writer.manifest["run_id"],
            scenario=info["name"],
            target=target_url,
        )
        print(f"Serving live metrics at {endpoint.url}", file=sys.stderr)
    if extra_manifest:
        _merge_manifest(writer, extra_manifest)
    run_dir = writer.path
    telemetry_hook = _Telemetry(telemetry)
    procs: LocustProcesses | None = None
    status = "complete"
    failure: str | None = None
    printer = ProgressPrinter(plain_every_s=progress_every_s) if show_progress else None
    guard = RunGuard(conditions)
    reader = LiveRunReader(run_dir, keep_s=guard.longest_s + 15)
    breach: Breach | None = None
    total_s = float(info["duration_s"])
    started = time.monotonic()
    live = bool(guard.conditions) or endpoint is not None

    def refresh(final: bool = False) -> None:
        """One snapshot for the endpoint, the callback and the progress line alike."""
        if on_progress is None and printer is None and endpoint is None:
            return
        snapshot = reader.snapshot(time.monotonic() - started, total_s)
        if endpoint is not None:
            endpoint.publish(snapshot)
        if on_progress is not None:
            on_progress(snapshot)
        if printer is not None:
            printer.show(snapshot, force=final)

    # SIGINT and SIGTERM raise KeyboardInterrupt while the run is in progress.
    stop_signals = lifeline.stop_signals()
    stop_signals.__enter__()
    try:
        if before_start is not None:
            before_start(writer)
        telemetry_hook.start(writer)
        env = {
            ENV_RUN_DIR: str(run_dir.resolve()),
            ENV_PARAMS: json.dumps(overrides),
            ENV_SEED: str(seed),
            ENV_REQUEST_PLAN: json.dumps(plan),
            "PYTHONUNBUFFERED": "1",
        }
        if duration_s is not None:
            env[ENV_DURATION] = str(duration_s)
        procs = LocustProcesses.launch(scenario_path, target_url, run_dir, workers=workers, env=env)
        started = time.monotonic()
        # The run is bounded: duration + start-up + graceful stop.
        deadline = started + total_s + _START_GRACE_S + float(resolved_params["timeout_s"]) + 30
        last_report = 0.0
        last_seen: int | None = None
        while procs.main.poll() is None:
            now = time.monotonic()
            if live:
                reader.poll()
                breach = guard.check(reader)
                if breach is not None:
                    break
            newest = reader.last_complete_interval()
            if now - last_report >= 1.0 or newest != last_seen:
                refresh()
                last_report, last_seen = now, newest
            if now > deadline:
                failure = f"Locust did not finish within {deadline - started:.0f} s; stopped it"
                break
            time.sleep(_POLL_S)
        if breach is not None:
            status = "aborted"
            _stop_on_breach(writer, procs, breach, printer, float(resolved_params["timeout_s"]))
        else:
            if failure is None:
                failure = procs.failure(run_dir)
            # The master exits first; its workers follow after their graceful stop.
            if not procs.wait_all(float(resolved_params["timeout_s"]) + 5):
                procs.stop(_KILL_GRACE_S)
    except KeyboardInterrupt:
        status = "aborted"
        if printer is not None:
            printer.finish()
        print(
            "Stopping: requests in flight may finish (Ctrl-C again to kill); data is kept.",
            file=sys.stderr,
        )
        if procs is not None:
            procs.stop(float(resolved_params["timeout_s"]) + 2)
        writer.event("note", "interrupted", message="run stopped by SIGINT (Ctrl-C)")
        if writer.manifest.get("abort") is None:
            writer.update(abort={"by": "interrupt", "t_ns": time.time_ns()})
    finally:
        if procs is not None and procs.running():
            procs.stop(_KILL_GRACE_S)
        if procs is not None:
            procs.close_logs()
        try:
            telemetry_hook.stop(writer)
        finally:
            if failure is not None:
                status = "aborted"
                writer.add_note(failure)
                writer.event("error", "locust", source="locust", message=failure)
            refresh(final=True)
            if printer is not None:
                printer.finish()
            writer.finalize(status)
            stop_signals.__exit__(None, None, None)
            if endpoint is not None:
                endpoint.close()
    if failure is not None:
        raise LoadkitError(failure, hint=f"see {run_dir / LOGS_DIR}/ for the Locust logs")
    return run_dir
