"""Start and stop a real `tritonserver` (from the nvidia-pytriton wheel) on 127.0.0.1.

`EmbeddedTriton` owns exactly one server process group: it starts the binary in
a new session (so the Python backend stubs it forks share its process group),
waits until the server and the `ranker` model are ready, and on `stop()` (or at
interpreter exit) sends SIGTERM to that PID, then SIGKILL to that process group.
It never looks processes up by name. If we die instead (SIGKILL included), the
kernel kills the server (PR_SET_PDEATHSIG) and a watcher kills its group, stubs
included (`loadkit.lifeline`).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any, ClassVar

import psutil

from loadkit import lifeline
from loadkit.errors import TargetError, UsageError
from loadkit.target import diagnose
from loadkit.target.config import MODEL_NAME, ModelSettings, write_repository
from loadkit.target.ports import HOST, choose_ports
from loadkit.target.runtime import find_runtime, make_backend_dir, server_environment

MODEL_CONTROL_MODES = ("none", "explicit")

_POLL_S = 0.05
# After the server exits, how long its Python backend stubs get to clean up and exit.
STUB_EXIT_S = 2.0
# No proxy for loopback calls, whatever the environment says.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get_json(url: str, timeout: float = 2.0) -> Any:
    with _OPENER.open(url, timeout=timeout) as response:
        return json.loads(response.read().decode("utf-8"))


def _is_ok(url: str) -> bool:
    try:
        with _OPENER.open(url, timeout=1.0) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group `pgid`.

    Zombies are ignored: once killed, an orphaned stub is the init process's to
    reap, and a container whose PID 1 never reaps would otherwise look "alive".
    """
    members = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


class EmbeddedTriton:
    """A real Triton server serving the `ranker` model, for demos and tests.

    Use as a context manager (`with EmbeddedTriton() as t: ... t.http_url`), or
    call `start()` and `stop()`. Ports of 0 are replaced by free ephemeral ports.
    """

    # Leaving the context manager waits for the server to be gone, unless this is off:
    # then it stops in a non-daemon thread (the interpreter still waits for it at exit)
    # and the caller goes on. Triton takes about 2.4 s to unload the ranker and exit; the
    # test suite turns this off, where 56 s of pass 1 went to servers stopping.
    exit_waits: ClassVar[bool] = True

    model_name = MODEL_NAME

    def __init__(
        self,
        *,
        max_queue_delay_us: int = 2000,
        max_batch_size: int = 32,
        instances: int = 1,
        http_port: int = 0,
        grpc_port: int = 0,
        metrics_port: int = 0,
        model_params: Mapping[str, Any] | None = None,
        sim_gpu_state: str | os.PathLike[str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout_s: float = 60.0,
        exit_timeout_s: int = 5,
        stop_timeout_s: float = 8.0,
        metrics_interval_ms: int = 1000,
        extra_models: tuple[str, ...] = (),
        metrics_config: tuple[str, ...] = (),
        payload_input: bool = False,
        extra_models_queue_delay_us: int | None = None,
        extra_models_params: Mapping[str, object] | None = None,
        model_control: str = "none",
        host: str = HOST,
    ) -> None:
        # The address every listener binds: 127.0.0.1 unless told otherwise (an address
        # inside a network namespace, for a test of a server on another machine).
        self.host = host
        self.settings = ModelSettings(
            max_batch_size=max_batch_size,
            max_queue_delay_us=max_queue_delay_us,
            instances=instances,
            params={str(k): str(v) for k, v in (model_params or {}).items()},
            # Absolute: the model opens it from the stub's working directory, not ours.
            sim_gpu_state=os.path.abspath(sim_gpu_state) if sim_gpu_state else None,
            payload_input=payload_input,
            extra_models_queue_delay_us=extra_models_queue_delay_us,
            extra_models_params={str(k): str(v) for k, v in (extra_models_params or {}).items()},
        )
        self.settings.validate()
        self._requested_ports = {"http": http_port, "grpc": grpc_port, "metrics": metrics_port}
        self._ports: dict[str, int] = {}
        self._user_log_path = Path(log_path) if log_path else None
        self._log_path: Path | None = None
        self._log_file: IO[bytes] | None = None
        self._workdir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._guard: lifeline.GroupGuard | None = None
        self._stopping: threading.Thread | None = None
        self.startup_timeout_s = startup_timeout_s
        # Triton waits up to this long on SIGTERM for in-flight requests and for its
        # models to unload, checking once a second, and exits at the first check that
        # finds them done (about 2 s for the ranker on a quiet host). Exiting earlier
        # leaves a model unloading: at 1 s, on a host busy with other tests, a Python
        # backend stub was killed before it removed its shared memory (session 21).
        self.exit_timeout_s = exit_timeout_s
        # ... and we wait this long after SIGTERM before SIGKILL.
        self.stop_timeout_s = max(stop_timeout_s, exit_timeout_s + 2.0)
        self.metrics_interval_ms = metrics_interval_ms
        self.extra_models = tuple(extra_models)
        # `--metrics-config` settings, e.g. "summary_latencies=true": Triton then
        # exposes latency quantiles (nv_inference_request_summary_us) a Prometheus
        # server can scrape (docs/oncall.md).
        self.metrics_config = tuple(metrics_config)
        if model_control not in MODEL_CONTROL_MODES:
            raise UsageError(
                f"model control mode {model_control!r} is not one of "
                + ", ".join(MODEL_CONTROL_MODES)
            )
        # explicit: the repository API may load a model with another config (`loadkit sweep`)
        self.model_control = model_control

    @property
    def model_names(self) -> tuple[str, ...]:
        """Every model this server serves: `ranker` and the extra ones."""
        return (self.model_name, *self.extra_models)

    # ----------------------------------------------------------------- addresses
    def _port(self, service: str) -> int:
        if service not in self._ports:
            raise RuntimeError("EmbeddedTriton is not started")
        return self._ports[service]

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self._port('http')}"

    @property
    def grpc_url(self) -> str:
        """host:port, the form tritonclient.grpc expects."""
        return f"{self.host}:{self._port('grpc')}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self._port('metrics')}/metrics"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("EmbeddedTriton is not started")
        return self._proc.pid

    @property
    def log_path(self) -> Path:
        """Where the server's stdout/stderr go (kept after stop when the caller chose it)."""
        if self._log_path is None:
            raise RuntimeError("EmbeddedTriton is not started")
        return self._log_path

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # ----------------------------------------------------------------- lifecycle
    def __enter__(self) -> EmbeddedTriton:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.exit_waits:
            self.stop()
        else:
            self.stop_in_background()

    def start(self) -> EmbeddedTriton:
        """Start the server and wait until `ranker` is ready; raise TargetError if not."""
        if self._stopping is not None:  # a restart: the previous server must be gone first
            self._stopping.join()
            self._stopping = None
        if self._proc is not None:
            raise RuntimeError("EmbeddedTriton is already started")
        runtime = find_runtime()
        self._workdir = Path(tempfile.mkdtemp(prefix="loadkit-triton-"))
        ok = False
        try:
            repository = write_repository(
                self._workdir / "model_repository", self.settings, self.extra_models
            )
            backends = make_backend_dir(runtime, self._workdir / "backends")
            env = server_environment(runtime)
            ephemeral = any(port == 0 for port in self._requested_ports.values())
            for attempt in range(3):
                self._ports = choose_ports(self._requested_ports, self.host)
                self._launch(runtime.binary, repository, backends, env)
                try:
                    self._wait_ready()
                    break
                except TargetError:
                    text = self._read_log()
                    # Someone took a port between our check and Triton's bind: try new ones.
                    if ephemeral and attempt < 2 and diagnose.port_conflict(text):
                        self._kill()
                        continue
                    raise
            ok = True
            atexit.register(self.stop)
            return self
        finally:
            if not ok:
                self._kill()
                self._cleanup(keep_log=True)

    def _launch(self, binary: Path, repository: Path, backends: Path, env: dict[str, str]) -> None:
        assert self._workdir is not None
        if self._log_file is not None:
            self._log_file.close()
        if self._user_log_path is not None:
            self._user_log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_path = self._user_log_path
        elif self._log_path is None:
            fd, name = tempfile.mkstemp(prefix="loadkit-tritonserver-", suffix=".log")
            os.close(fd)
            self._log_path = Path(name)
        self._log_file = open(self._log_path, "wb")  # closed in _cleanup()
        cmd = [
            str(binary),
            f"--model-repository={repository}",
            f"--backend-directory={backends}",
            f"--model-control-mode={self.model_control}",
            *(
                [f"--load-model={name}" for name in self.model_names]
                if self.model_control == "explicit"
                else []
            ),
            "--strict-readiness=true",
            "--exit-on-error=true",
            "--disable-auto-complete-config",  # our config is complete; saves a stub launch
            f"--http-address={self.host}",
            f"--http-port={self._ports['http']}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self._ports['grpc']}",
            "--allow-metrics=true",
            f"--metrics-address={self.host}",
            f"--metrics-port={self._ports['metrics']}",
            f"--metrics-interval-ms={self.metrics_interval_ms}",
            "--allow-gpu-metrics=false",  # no GPU here; the simulated GPU reports its own
            "--allow-cpu-metrics=true",
            "--pinned-memory-pool-byte-size=0",  # no CUDA: skip the pinned pool warning
            f"--exit-timeout-secs={self.exit_timeout_s}",
            *(f"--metrics-config={setting}" for setting in self.metrics_config),
        ]
        try:
            self._proc = lifeline.popen(
                cmd,
                death_signal=signal.SIGKILL,
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self._workdir,
                start_new_session=True,  # own process group: stubs die with it
            )
        except OSError as exc:
            raise TargetError(
                f"cannot execute {binary}: {exc.strerror}",
                hint="the nvidia-pytriton wheel supports Linux x86_64/aarch64 with glibc >= 2.35",
            ) from None
        self._guard = lifeline.GroupGuard(self._proc.pid)

    def _read_log(self) -> str:
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(encoding="utf-8", errors="replace")

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        server_ready = f"{self.http_url}/v2/health/ready"
        models_ready = [f"{self.http_url}/v2/models/{name}/ready" for name in self.model_names]
        while True:
            returncode = self._proc.poll()
            if returncode is not None:
                raise diagnose.startup_error(
                    self._read_log(), self.model_name, returncode, str(self._log_path)
                )
            if _is_ok(server_ready) and all(_is_ok(url) for url in models_ready):
                return
            if time.monotonic() > deadline:
                text = self._read_log()
                error = diagnose.startup_error(text, self.model_name, None, str(self._log_path))
                if diagnose.port_conflict(text) or diagnose.model_failure(text, self.model_name):
                    raise error
                raise TargetError(
                    f"Triton was not ready after {self.startup_timeout_s:.0f} s; last log lines:\n"
                    + diagnose.log_tail(text, 8),
                    hint=f"full server log: {self._log_path}",
                )
            time.sleep(_POLL_S)

    def stop(self) -> None:
        """SIGTERM the server, SIGKILL its process group if it lingers; idempotent."""
        stopping = self._stopping
        if stopping is not None and stopping is not threading.current_thread():
            stopping.join()  # stopped, or stopping, in the background: wait for that one
            return
        atexit.unregister(self.stop)
        self._kill()
        self._cleanup(keep_log=self._user_log_path is not None)

    def stop_in_background(self) -> threading.Thread:
        """stop() in a thread, so that work that no longer needs the server (analyzing the
        run) overlaps its shutdown; stop() or the interpreter's exit waits for it."""
        if self._stopping is None:
            self._stopping = threading.Thread(target=self.stop, name="stopping tritonserver")
            self._stopping.start()
        return self._stopping

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        pgid = proc.pid  # start_new_session: the server leads its own group
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                pass
        # The Python backend's stubs finish their own clean-up (their shared-memory
        # regions in /dev/shm) a moment after the server: a SIGKILL at once left one
        # 1 MB region behind per stop. Whatever is left after that (the server if it
        # hung, a stub that did not finish) goes now.
        deadline = time.monotonic() + STUB_EXIT_S
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        deadline = time.monotonic() + 5.0
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        guard, self._guard = self._guard, None
        if guard is not None:
            guard.release()

    def _cleanup(self, keep_log: bool) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if not keep_log and self._log_path is not None and self._user_log_path is None:
            self._log_path.unlink(missing_ok=True)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    # ----------------------------------------------------------------- metadata
    def describe(self) -> dict[str, Any]:
        """Server metadata and model config, as the run manifest's `environment.server`."""
        try:
            meta = _get_json(f"{self.http_url}/v2")
            configs = {
                name: _get_json(f"{self.http_url}/v2/models/{name}/config")
                for name in self.model_names
            }
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise TargetError(f"cannot read metadata from {self.http_url}: {exc}") from None
        return {
            "name": meta.get("name"),
            "version": meta.get("version"),
            "extensions": meta.get("extensions", []),
            "models": configs,
        }
