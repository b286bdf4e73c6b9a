"""The loadkit side of one Locust process: recorder, dispatcher, events, shape class.

Importing `loadkit.load.users` (every scenario does) attaches this runtime to
Locust's events. Per process it:

- finds the run directory (`LOADKIT_RUN_DIR`, set by `loadkit run`); when a
  scenario runs under plain `locust -f`, the master (or local) process
  creates one under `reports/` at test start and tells its workers;
- owns one `LatencyRecorder` (processes with users: local or worker) and,
  for open-model scenarios, one `OpenModelDispatcher`;
- writes shape phases to `events.jsonl` (only worker 0 / local, so each
  phase is logged once);
- stops gracefully: users finish their request in flight (Locust's
  `stop_timeout` is raised to the request timeout), queued arrivals are
  counted as dropped, and the recorder writes everything it holds.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import gevent
from locust import LoadTestShape, events
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from loadkit.environment import run_environment
from loadkit.load import webui
from loadkit.load.dispatch import OpenModelDispatcher
from loadkit.load.recorder import INTERVAL_NS, LatencyRecorder
from loadkit.load.scenario import (
    ENV_PROCESS,
    ENV_REQUEST_PLAN,
    ENV_RUN_DIR,
    ENV_SEED,
    ENV_WORKER_COUNT,
    ENV_WORKER_INDEX,
    ResolvedScenario,
    Scenario,
    current_scenario,
    manifest_scenario,
)
from loadkit.load.shapes import Phase
from loadkit.load.sources import RequestPlan
from loadkit.rundir import RunWriter, append_event

log = logging.getLogger(__name__)

_RUN_MESSAGE = "loadkit-run"
_MASTER_GRACE_S = 1.5  # workers start their clocks a little after the master's shape
_TICK_OFFSET_S = 0.02  # write an interval this long after it ends


class LoadRuntime:
    """Per-process state; one per Locust environment."""

    def __init__(self, environment: Environment):
        self.environment = environment
        self.scenario: Scenario = current_scenario()
        self.resolved: ResolvedScenario = self.scenario.resolve_from_environment()
        self.seed = int(os.environ.get(ENV_SEED) or 0)
        runner = environment.runner
        self.role = (
            "master"
            if isinstance(runner, MasterRunner)
            else "worker"
            if isinstance(runner, WorkerRunner)
            else "local"
        )
        env_dir = os.environ.get(ENV_RUN_DIR)
        self.run_dir: Path | None = Path(env_dir) if env_dir else None
        self.standalone = env_dir is None
        self.owned_run: RunWriter | None = None
        self.last_run_dir: Path | None = None  # kept after a stop, for the web UI's tab
        self._worker_index_env = os.environ.get(ENV_WORKER_INDEX)
        self._worker_count_env = os.environ.get(ENV_WORKER_COUNT)
        self.worker_count_from_master: int | None = None
        self.recorder: LatencyRecorder | None = None
        self.dispatcher: OpenModelDispatcher | None = None
        self._ticker: gevent.Greenlet | None = None
        self._start_timer: gevent.Greenlet | None = None
        self.users_registered = 0
        self.shape_done = False
        self._plan: RequestPlan | None = None
        # Graceful stop: a user finishes its request in flight before it stops.
        timeout = float(self.resolved.params["timeout_s"]) + 1.0
        if self.role != "worker":
            environment.stop_timeout = max(environment.stop_timeout or 0.0, timeout)
        atexit.register(self.close)

    # --- identity -------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return self.scenario.model == "open"

    def worker_split(self) -> tuple[int, int]:
        if self.role != "worker":
            return 0, 1
        if self._worker_index_env is not None and self._worker_count_env is not None:
            return int(self._worker_index_env), int(self._worker_count_env)
        runner = self.environment.runner
        index = max(0, int(getattr(runner, "worker_index", 0)))
        count = self.worker_count_from_master or 1
        return index, max(count, index + 1)

    def process_name(self) -> str:
        explicit = os.environ.get(ENV_PROCESS)
        if explicit:
            return explicit
        if self.role == "worker":
            return f"worker-{self.worker_split()[0]}-{os.getpid()}"
        return "local"

    def request_plan(self, host: str, protocol: str) -> RequestPlan:
        """What every request carries: the pre-flight's plan, or read from the server.

        `loadkit run` resolves it once (`LOADKIT_REQUEST_PLAN`); under plain
        `locust -f` the first user reads the model's metadata itself.
        """
        if self._plan is None:
            raw = os.environ.get(ENV_REQUEST_PLAN)
            if raw:
                self._plan = RequestPlan.from_json(json.loads(raw))
            else:
                from loadkit.kserve.metadata import open_client
                from loadkit.load.preflight import plan_for

                if protocol == "grpc":
                    from loadkit.load.transports import init_grpc_gevent

                    init_grpc_gevent()
                with open_client(host, protocol) as client:
                    self._plan, _ = plan_for(client, protocol, self.resolved.params)
        return self._plan

    # --- run directory --------------------------------------------------
    def _create_standalone_run(self) -> None:
        options = self.environment.parsed_options
        locustfile = str(getattr(options, "locustfile", "") or "")
        host = self.environment.host or ""
        params = self.resolved.params
        runner = self.environment.runner
        workers = runner.worker_count if isinstance(runner, MasterRunner) else 0
        self.owned_run = RunWriter.create(
            out_dir="reports",
            kind="load",
            scenario=manifest_scenario(
                self.resolved.describe(), path=locustfile, seed=self.seed, workers=workers
            ),
            target={
                "url": host,
                "protocol": params["protocol"],
                "model": params["model"],
                "embedded": False,
            },
            slo=self.scenario.slo,
            environment=run_environment(),
            command_line=list(sys.argv),
        )
        self.owned_run.add_note("recorded by `locust -f` without `loadkit run`")
        self.owned_run.update(abort_on=[], abort=None)  # no run guard without `loadkit run`
        self.run_dir = self.owned_run.path

    def on_test_start(self) -> None:
        self.shape_done = False
        if self.role in ("local", "master") and self.standalone:
            self._create_standalone_run()
        if self.role == "master":
            runner = self.environment.runner
            assert isinstance(runner, MasterRunner)
            runner.send_message(
                _RUN_MESSAGE, {"run_dir": str(self.run_dir), "worker_count": runner.worker_count}
            )

    def on_run_message(self, environment: Environment, msg: Any, **_kw: Any) -> None:
        data = msg.data or {}
        if self.standalone and data.get("run_dir"):
            self.run_dir = Path(data["run_dir"])
        if data.get("worker_count"):
            self.worker_count_from_master = int(data["worker_count"])

    # --- recorder and dispatcher ---------------------------------------
    def get_recorder(self) -> LatencyRecorder:
        if self.recorder is None or self.recorder.closed:
            if self.run_dir is None:
                self._create_standalone_run()
            assert self.run_dir is not None
            self.recorder = LatencyRecorder(self.run_dir, self.process_name(), seed=self.seed)
            self._ticker = gevent.spawn(self._tick_loop, self.recorder)
        return self.recorder

    def _tick_loop(self, recorder: LatencyRecorder) -> None:
        while not recorder.closed:
            now = time.time_ns()
            next_boundary = (now // INTERVAL_NS + 1) * INTERVAL_NS
            gevent.sleep((next_boundary - now) / 1e9 + _TICK_OFFSET_S)
            if not recorder.closed:
                recorder.tick(pause=gevent.sleep)  # sleep(0): let ready responses be read

    def register_user(self) -> int:
        """A user started; returns its stream number (for its payload generator)."""
        self.users_registered += 1
        recorder = self.get_recorder()
        if self.is_open:
            if self.dispatcher is None or self.dispatcher.finished:
                self.dispatcher = self._new_dispatcher(recorder)
            target = getattr(self.environment.runner, "target_user_count", 0) or 0
            if not self.dispatcher.started:
                if target and self.users_registered >= target:
                    self.dispatcher.start()
                elif self._start_timer is None:
                    # Fall back: start anyway shortly after the first user.
                    self._start_timer = gevent.spawn_later(1.0, self.dispatcher.start)
        index, _ = self.worker_split()
        return index * 100_000 + self.users_registered

    def _new_dispatcher(self, recorder: LatencyRecorder) -> OpenModelDispatcher:
        index, count = self.worker_split()
        params = self.resolved.params
        return OpenModelDispatcher(
            self.resolved.shape,
            recorder,
            request_name=self.scenario.request_name,
            spacing=str(params["spacing"]),
            seed=self.seed,
            worker_index=index,
            worker_count=count,
            max_start_delay_s=float(params["max_start_delay_s"]),
            on_phase=self._write_phase if index == 0 else None,
        )

    def _write_phase(self, phase: Phase, t_ns: int) -> None:
        if self.run_dir is not None:
            append_event(self.run_dir, "phase", phase.name, t_ns=t_ns, **phase.attrs)

    def arrivals_finished(self) -> bool:
        return self.dispatcher is not None and self.dispatcher.finished

    def in_flight(self) -> int:
        return self.recorder.in_flight if self.recorder is not None else 0

    # --- lifecycle ------------------------------------------------------
    def on_test_stopping(self) -> None:
        if self._start_timer is not None:
            self._start_timer.kill(block=False)
            self._start_timer = None
        if self.dispatcher is not None:
            self.dispatcher.stop()

    def on_test_stop(self) -> None:
        self.close()

    def close(self) -> None:
        """Write everything recorded; finalize a run this process created."""
        if self.dispatcher is not None and not self.dispatcher.finished:
            self.dispatcher.stop()
        if self.recorder is not None and not self.recorder.closed:
            self.recorder.close()
        if self.owned_run is not None:
            self.last_run_dir = self.owned_run.path
            self.owned_run.finalize("complete" if self.shape_done else "aborted")
            self.owned_run = None
            self.run_dir = None if self.standalone else self.run_dir
        self.dispatcher = None
        self.users_registered = 0


_RUNTIMES: dict[int, LoadRuntime] = {}


def get_runtime(environment: Environment) -> LoadRuntime:
    runtime = _RUNTIMES.get(id(environment))
    if runtime is None:
        runtime = LoadRuntime(environment)
        _RUNTIMES[id(environment)] = runtime
    return runtime


@events.init.add_listener
def _on_init(environment: Environment, **_kw: Any) -> None:
    runtime = get_runtime(environment)
    if isinstance(environment.runner, WorkerRunner):
        environment.runner.register_message(_RUN_MESSAGE, runtime.on_run_message)
    elif environment.web_ui is not None:  # `locust -f` with its web UI: a loadkit tab
        webui.attach(
            environment.web_ui,
            webui.WebUiStats(
                lambda: runtime.run_dir or runtime.last_run_dir, runtime.resolved.duration_s
            ),
        )


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_kw: Any) -> None:
    get_runtime(environment).on_test_start()


@events.test_stopping.add_listener
def _on_test_stopping(environment: Environment, **_kw: Any) -> None:
    get_runtime(environment).on_test_stopping()


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_kw: Any) -> None:
    get_runtime(environment).on_test_stop()


@events.quitting.add_listener
def _on_quitting(environment: Environment, **_kw: Any) -> None:
    runtime = get_runtime(environment)
    if runtime.recorder is not None and not runtime.recorder.closed:
        runtime.recorder.flush()


def make_shape_class(scenario: Scenario) -> type[LoadTestShape]:
    """A Locust shape that keeps the user pool up for the scenario's duration."""

    class LoadkitShape(LoadTestShape):
        __doc__ = f"loadkit scenario {scenario.name}: a fixed pool of users for the run."

        def tick(self) -> tuple[int, float] | None:
            runtime = get_runtime(self.runner.environment) if self.runner else None
            if runtime is None:
                return None
            resolved = runtime.resolved
            users = resolved.users
            spawn_rate = float(max(100, users))  # the pool is up within about a second
            t = self.get_run_time()
            if t < resolved.duration_s:
                return users, spawn_rate
            grace = float(resolved.params["timeout_s"]) + 1.0
            if runtime.role == "local" and runtime.is_open and t < resolved.duration_s + grace:
                # Let the dispatcher (which started a little after us) hand out its last arrivals.
                if not runtime.arrivals_finished() or runtime.in_flight() > 0:
                    return users, spawn_rate
            if runtime.role == "master" and t < resolved.duration_s + _MASTER_GRACE_S:
                return users, spawn_rate
            runtime.shape_done = True
            return None

    LoadkitShape.__name__ = f"LoadkitShape_{scenario.name}"
    return LoadkitShape
