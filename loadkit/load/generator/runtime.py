"""The loadkit side of one Locust process: recorder, dispatcher, events, shape class.

Importing `loadkit.load.generator.users` (every scenario does, through
`loadkit.load`) attaches this runtime to Locust's events. Per process it:

- finds the run directory (`LOADKIT_RUN_DIR`, set by `loadkit run`); when a
  scenario runs under plain `locust -f`, the master (or local) process
  creates one under `reports/` at test start;
- owns one `LatencyRecorder` (processes with users: local or worker) and,
  for open-model scenarios, one `OpenModelDispatcher`;
- distributed: the master sends each worker the run's parameters, seed and
  request plan at test start (a worker needs nothing but the master's address:
  `-f -` fetches the scenario file); workers ship their records to the master,
  which writes them (`channel.py`); the master notes lost workers (Locust's own
  heartbeat marks them missing) and waits for every live worker's last record;
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
import signal
import sys
import time
from pathlib import Path
from typing import Any

import gevent
import locust.runners
from locust import LoadTestShape, events
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import STATE_MISSING, MasterRunner, WorkerRunner

from loadkit.load.generator import channel, locust_stats, webui
from loadkit.load.generator.dispatch import OpenModelDispatcher
from loadkit.load.generator.machine import WorkerMachine, worker_series
from loadkit.load.generator.recorder import INTERVAL_NS, FileSink, LatencyRecorder
from loadkit.load.handoff import (
    ENV_DURATION,
    ENV_PARAMS,
    ENV_PROCESS,
    ENV_REQUEST_PLAN,
    ENV_RUN_DIR,
    ENV_SEED,
    ENV_WORKER_COUNT,
    ENV_WORKER_INDEX,
)
from loadkit.load.scenario import (
    ResolvedScenario,
    Scenario,
    current_scenario,
    install_shape_class,
    manifest_scenario,
)
from loadkit.load.shapes import Phase
from loadkit.load.sources import BlockEncoder, RequestPlan, RequestSource, build_source
from loadkit.placement import locate_target
from loadkit.recording import Recording
from loadkit.rundir import append_event

log = logging.getLogger(__name__)

_RUN_MESSAGE = "loadkit-run"
_MASTER_GRACE_S = 1.5  # workers start their clocks a little after the master's shape
_TICK_OFFSET_S = 0.02  # write an interval this long after it ends
# A worker that hears no heartbeat reply from its master for this long quits (stops its
# load): Locust's own check, with its 60 s default tightened so a dead master's workers
# stop within 5 s (the check runs once a second).
MASTER_HEARTBEAT_TIMEOUT_S = 3
_CLOCK_BURST = 5  # pings at connect; the one with the smallest round trip wins
_CLOCK_EVERY_S = 10.0  # then one ping this often, recorded (not applied: see align_clock)
_WATCH_S = 1.0  # how often the master looks at Locust's worker states


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
        self.owned_run: Recording | None = None
        self.last_run_dir: Path | None = None  # kept after a stop, for the web UI's tab
        self._worker_index_env = os.environ.get(ENV_WORKER_INDEX)
        self._worker_count_env = os.environ.get(ENV_WORKER_COUNT)
        self.worker_count_from_master: int | None = None
        self.recorder: LatencyRecorder | None = None
        self.locust_feed: locust_stats.LocustStatsFeed | None = None  # Locust's stats, in aggregate
        self.sink: channel.ChannelSink | None = None  # a worker's records go to the master
        self.clock = channel.ClockProbe()
        self.collector: channel.RecordCollector | None = None  # the master's writer
        self._known_workers: dict[str, str] = {}  # Locust client id -> process name
        self.lost_workers: dict[str, dict[str, Any]] = {}  # process name -> loss
        self._watcher: gevent.Greenlet | None = None
        self._run_worker_count: int | None = None  # workers counted at the start (master)
        self.dispatcher: OpenModelDispatcher | None = None
        self._ticker: gevent.Greenlet | None = None
        self._start_timer: gevent.Greenlet | None = None
        self.users_registered = 0
        self.shape_done = False
        self._plan: RequestPlan | None = None
        self._sources: dict[type, RequestSource] = {}  # per user class (`request_source`)
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
        """(this worker's index, how many workers) for the every-N-th-arrival split.

        The index is the one Locust's master gives each worker on connect: the
        master names the worker's files by it too (`worker-<index>`).
        """
        if self.role != "worker":
            return 0, 1
        if self._worker_index_env is not None and self._worker_count_env is not None:
            return int(self._worker_index_env), int(self._worker_count_env)
        runner = self.environment.runner
        index = max(0, int(getattr(runner, "worker_index", 0)))
        count = self.worker_count_from_master or 1
        return index, count

    def process_name(self) -> str:
        explicit = os.environ.get(ENV_PROCESS)
        if explicit:
            return explicit
        if self.role == "worker":
            return f"worker-{self.worker_split()[0]}"
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
                from loadkit.load import protocols
                from loadkit.load.preflight import plan_for

                entry = protocols.get(protocol)
                entry.prepare_process()
                with entry.open_client(host) as client:
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
        self.owned_run = Recording.create(
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
            # as `loadkit run` decides it, from the address alone (no --server-pid here)
            target_location=locate_target(host or None),
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
            assert self.run_dir is not None
            if self.collector is None:
                self.collector = channel.RecordCollector(self.run_dir)
            self._known_workers = {}
            self._run_worker_count = runner.worker_count
            runner.send_message(_RUN_MESSAGE, self._run_config(runner.worker_count))
            if self._watcher is None:
                self._watcher = gevent.spawn(self._watch_workers)

    def on_worker_connect(self, client_id: str, **_kw: Any) -> None:
        """A worker connecting mid-run (before Locust spawns its users) gets the run's config."""
        runner = self.environment.runner
        if isinstance(runner, MasterRunner) and self._run_worker_count is not None:
            config = self._run_config(self._run_worker_count)
            runner.send_message(_RUN_MESSAGE, config, client_id=client_id)

    def _run_config(self, worker_count: int) -> dict[str, Any]:
        """What a worker needs to run its share: it has no environment of ours, no files."""
        config: dict[str, Any] = {
            "worker_count": worker_count,
            "params": json.loads(os.environ.get(ENV_PARAMS) or "{}"),
            "duration_s": os.environ.get(ENV_DURATION) or None,
            "seed": self.seed,
            "plan": json.loads(os.environ.get(ENV_REQUEST_PLAN) or "null"),
        }
        plan = config["plan"]
        if plan and plan.get("input_data"):  # the data file travels with the plan
            config["input_data"] = Path(plan["input_data"]).read_bytes()
        return config

    def on_run_message(self, environment: Environment, msg: Any, **_kw: Any) -> None:
        """A worker: the master's parameters, seed and plan for the run about to start."""
        data = msg.data or {}
        if data.get("worker_count"):
            self.worker_count_from_master = int(data["worker_count"])
        self.seed = int(data.get("seed") or 0)
        duration = data.get("duration_s")
        self.resolved = self.scenario.resolve(
            data.get("params") or {}, float(duration) if duration else None
        )
        plan = data.get("plan")
        if plan:
            if data.get("input_data") is not None:
                import tempfile

                path = (
                    Path(tempfile.mkdtemp(prefix="loadkit-input-")) / Path(plan["input_data"]).name
                )
                path.write_bytes(data["input_data"])
                plan = {**plan, "input_data": str(path)}
            self._plan = RequestPlan.from_json(plan)

    # --- distributed: worker side ----------------------------------------
    def _send_to_master(self, msg_type: str, data: dict[str, Any]) -> None:
        self.environment.runner.send_message(msg_type, data)  # type: ignore[union-attr]

    def on_ack(self, environment: Environment, msg: Any, **_kw: Any) -> None:
        if self.sink is not None:
            self.sink.on_ack(msg.data)

    def _clock_loop(self) -> None:
        """NTP-style pings: a burst at connect, then one every `_CLOCK_EVERY_S`."""
        for _ in range(_CLOCK_BURST):
            self._send_to_master(channel.CLOCK_PING, {"t1": time.time_ns()})
            gevent.sleep(0.05)
        while True:
            gevent.sleep(_CLOCK_EVERY_S)
            self._send_to_master(channel.CLOCK_PING, {"t1": time.time_ns()})

    def on_clock_pong(self, environment: Environment, msg: Any, **_kw: Any) -> None:
        t4 = time.time_ns()
        d = msg.data
        self.clock.add(channel.ClockEstimate.from_exchange(d["t1"], d["t2"], d["t3"], t4))
        if self.sink is not None:
            self.sink.clock = self._clock_report()

    def _clock_report(self) -> dict[str, Any] | None:
        report = self.clock.report()
        if report is not None and self.recorder is not None:
            report["applied_ms"] = round(self.recorder.clock_offset_ns / 1e6, 3)
        return report

    def on_finish(self, environment: Environment, msg: Any, **_kw: Any) -> None:
        gevent.spawn(self._finish)

    def _finish(self) -> None:
        """The master's shape ended: hand out the last arrivals, then stop and send the rest."""
        grace = float(self.resolved.params["timeout_s"]) + 1.0
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if (not self.is_open or self.dispatcher is None or self.arrivals_finished()) and (
                self.in_flight() == 0
            ):
                break
            gevent.sleep(0.05)
        self.environment.runner.stop()  # type: ignore[union-attr]  # fires test_stop: close()
        self.close()

    def _resend_loop(self, sink: channel.ChannelSink) -> None:
        while not sink.drained:
            gevent.sleep(1.0)
            sink.resend()

    # --- distributed: master side ----------------------------------------
    def on_records(self, environment: Environment, msg: Any, **_kw: Any) -> None:
        if self.collector is None:
            if self.run_dir is None:
                return  # no run yet: the worker resends
            self.collector = channel.RecordCollector(self.run_dir)
        seq = self.collector.receive(msg.data)
        environment.runner.send_message(channel.ACK, {"seq": seq}, client_id=msg.node_id)  # type: ignore[union-attr]

    def on_clock_ping(self, environment: Environment, msg: Any, **_kw: Any) -> None:
        t2 = time.time_ns()
        data = {"t1": msg.data["t1"], "t2": t2, "t3": time.time_ns()}
        environment.runner.send_message(channel.CLOCK_PONG, data, client_id=msg.node_id)  # type: ignore[union-attr]

    def _worker_name(self, client_id: str) -> str:
        runner = self.environment.runner
        assert isinstance(runner, MasterRunner)
        return f"worker-{runner.get_worker_index(client_id)}"

    def _watch_workers(self) -> None:
        """Note a worker Locust's heartbeat marks missing, or one gone without its last record."""
        runner = self.environment.runner
        assert isinstance(runner, MasterRunner)
        while True:
            current = {c.id: c for c in runner.clients.all}
            for client_id, client in current.items():
                self._known_workers.setdefault(client_id, self._worker_name(client_id))
                if client.state == STATE_MISSING:
                    self._lose(client_id, "missed Locust's heartbeats")
            for client_id in list(self._known_workers):
                if client_id not in current:
                    self._lose(client_id, "left without sending its last records")
            gevent.sleep(_WATCH_S)

    def _lose(self, client_id: str, why: str) -> None:
        name = self._known_workers[client_id]
        if name in self.lost_workers:
            return
        if self.collector is not None and self.collector.complete(name):
            return  # it finished and left: not a loss
        worker = self.collector.workers.get(name) if self.collector else None
        loss = {
            "worker": name,
            "client_id": client_id,
            "why": why,
            "detected_ns": time.time_ns(),
            "last_interval_end_ns": worker.last_end_ns if worker else None,
            "offered_per_s": round(self.collector.offered_per_s(name), 3)
            if self.collector
            else 0.0,
        }
        self.lost_workers[name] = loss
        log.warning("loadkit: lost %s (%s); the run goes on without it", name, why)
        if self.run_dir is not None:
            append_event(self.run_dir, "distributed", "worker-lost", **loss)

    def _wait_for_workers(self) -> None:
        """Ask every worker to finish; wait for the last record of each that is still alive."""
        runner = self.environment.runner
        assert isinstance(runner, MasterRunner)
        runner.send_message(channel.FINISH, {})
        grace = float(self.resolved.params["timeout_s"]) + 1.0
        deadline = time.monotonic() + 2 * grace + 5.0
        while time.monotonic() < deadline:
            pending = [
                name
                for client_id, name in self._known_workers.items()
                if name not in self.lost_workers
                and not (self.collector is not None and self.collector.complete(name))
            ]
            if not pending:
                return
            gevent.sleep(0.05)
        for client_id, name in self._known_workers.items():
            if name not in self.lost_workers and not (
                self.collector is not None and self.collector.complete(name)
            ):
                self._lose(client_id, "sent no last records before the end")

    def _write_workers(self) -> None:
        """One `distributed` event: each worker's clock, buffer losses and whether it was lost."""
        if self.run_dir is None or self.collector is None:
            return
        workers = []
        for client_id, name in sorted(self._known_workers.items(), key=lambda kv: kv[1]):
            got = self.collector.workers.get(name)
            workers.append(
                {
                    "worker": name,
                    "client_id": client_id,
                    "host": client_id.rsplit("_", 1)[0],
                    "machine_series": next(
                        (
                            worker_series(host)
                            for host, (process, _) in self.collector.machines.items()
                            if process == name
                        ),
                        None,
                    ),
                    "clock": got.clock if got else None,
                    "records": len(got.seen) if got else 0,
                    "evicted_records": got.evicted if got else 0,
                    "resent_records": got.resent if got else 0,
                    "lost": self.lost_workers.get(name),
                }
            )
        append_event(
            self.run_dir,
            "distributed",
            "workers",
            workers=workers,
            clock_warn_ms=channel.CLOCK_WARN_MS,
        )

    # --- recorder and dispatcher ---------------------------------------
    def get_recorder(self) -> LatencyRecorder:
        if self.recorder is None or self.recorder.closed:
            if self.run_dir is None and self.role != "worker":
                self._create_standalone_run()
            if self.role == "worker":
                self.recorder = self._worker_recorder()
            else:
                assert self.run_dir is not None
                self.recorder = LatencyRecorder(self.run_dir, self.process_name(), seed=self.seed)
            self._ticker = gevent.spawn(self._tick_loop, self.recorder)
            if self.locust_feed is None:
                self.locust_feed = locust_stats.LocustStatsFeed(self.environment)
            gevent.spawn(self._keep_locust_stats, self.recorder)
        return self.recorder

    def _worker_recorder(self) -> LatencyRecorder:
        """A recorder whose records go to the master, in the master's clock."""
        machine = WorkerMachine()
        self.sink = channel.ChannelSink(
            self.process_name(),
            self._send_to_master,
            machine=lambda: machine.sample(time.time_ns() + recorder.clock_offset_ns),
        )
        recorder = LatencyRecorder("", self.process_name(), seed=self.seed, sink=self.sink)
        if self.clock.best is not None:
            recorder.align_clock(self.clock.best.offset_ns)
        self.sink.clock = None
        gevent.spawn(self._resend_loop, self.sink)
        self.recorder = recorder
        self.sink.clock = self._clock_report()
        return recorder

    def _tick_loop(self, recorder: LatencyRecorder) -> None:
        while not recorder.closed:
            now = time.time_ns()
            next_boundary = (now // INTERVAL_NS + 1) * INTERVAL_NS
            gevent.sleep((next_boundary - now) / 1e9 + _TICK_OFFSET_S)
            if not recorder.closed:
                recorder.tick(pause=gevent.sleep)  # sleep(0): let ready responses be read

    def _keep_locust_stats(self, recorder: LatencyRecorder) -> None:
        """Feed Locust's statistics every FLUSH_EVERY_S; trim them every TRIM_EVERY_S."""
        next_trim = time.monotonic() + locust_stats.TRIM_EVERY_S
        while not recorder.closed:
            gevent.sleep(min(locust_stats.FLUSH_EVERY_S, locust_stats.TRIM_EVERY_S))
            if recorder.closed:
                break
            self.flush_locust_stats()
            stats = getattr(self.environment, "stats", None)
            if stats is not None and time.monotonic() >= next_trim:
                locust_stats.trim(stats, time.time())
                next_trim = time.monotonic() + locust_stats.TRIM_EVERY_S

    def flush_locust_stats(self) -> None:
        """Requests collected for Locust's statistics go into them now."""
        if self.locust_feed is not None:
            self.locust_feed.flush()

    def register_user(self) -> None:
        """A user started: the open model's dispatcher starts once the pool is up."""
        if self.is_open and self.role == "worker":
            index, count = self.worker_split()
            if self.worker_count_from_master is not None and index >= count:
                # Joined after the start (a restarted worker): the arrivals are split
                # among the workers counted then; a share of its own would be extra load.
                log.warning("loadkit: worker %d joined after the start; it sends no load", index)
                raise StopUser()
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

    def request_source(
        self, user_class: type, plan: RequestPlan, encode: BlockEncoder
    ) -> RequestSource:
        """The requests this process's users of `user_class` send: one source they share.

        Not one per user: a source draws and encodes a block of requests at a time, so
        a pool of 1,500 users that each drew its own block on its first request paid
        ~1 ms of CPU per newly busy user, and at the start of a run, when every user
        is new, that surge alone kept 2,500-3,000/s from being sustained (issue 31).
        Shared, the values depend on the seed and the worker, not on the pool's size.
        """
        source = self._sources.get(user_class)
        if source is None:
            index, _ = self.worker_split()
            source = self._sources[user_class] = build_source(plan, self.seed, index, encode)
        return source

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
        recorder = self.recorder
        if recorder is not None and not recorder.closed:  # to the run directory or the master
            t_ns += recorder.clock_offset_ns
            recorder.sink.event("phase", phase.name, t_ns=t_ns, **phase.attrs)
        elif self.run_dir is not None:
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
        if self.role == "master":
            self._wait_for_workers()
        if self.dispatcher is not None:
            self.dispatcher.stop()

    def on_test_stop(self) -> None:
        self.flush_locust_stats()  # before Locust's final report, table and CSV rows
        self.close()

    def close(self) -> None:
        """Write everything recorded; finalize a run this process created."""
        self.flush_locust_stats()
        if self.dispatcher is not None and not self.dispatcher.finished:
            self.dispatcher.stop()
        if self.recorder is not None and not self.recorder.closed:
            self.recorder.close(wait=_yield_to_the_ticker)  # it may be paused mid-write
        if self.collector is not None:
            if self._watcher is not None:
                self._watcher.kill(block=False)
                self._watcher = None
            self._write_workers()
            self.collector.close()
            self.collector = None
        if self.owned_run is not None:
            self.last_run_dir = self.owned_run.path
            self.owned_run.finish("complete" if self.shape_done else "aborted")
            self.owned_run = None
            self.run_dir = None if self.standalone else self.run_dir
        self.dispatcher = None
        self.users_registered = 0
        self._sources = {}  # the next run draws from the seed's start again


_RUNTIMES: dict[int, LoadRuntime] = {}


def get_runtime(environment: Environment) -> LoadRuntime:
    runtime = _RUNTIMES.get(id(environment))
    if runtime is None:
        runtime = LoadRuntime(environment)
        _RUNTIMES[id(environment)] = runtime
    return runtime


def _interrupt_main_greenlet() -> None:
    """SIGINT (`loadkit run` stopping us) as KeyboardInterrupt in the main greenlet only.

    Python's own handler raises it in whichever greenlet runs when the signal is
    handled: on a busy host often a user's, which then dies with its request in
    flight (unrecorded) instead of finishing it in Locust's graceful stop.
    """
    gevent.get_hub().parent.throw(KeyboardInterrupt)


@events.init.add_listener
def _on_init(environment: Environment, **_kw: Any) -> None:
    runtime = get_runtime(environment)
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        locust.runners.MASTER_HEARTBEAT_TIMEOUT = MASTER_HEARTBEAT_TIMEOUT_S
        runner.register_message(_RUN_MESSAGE, runtime.on_run_message)
        runner.register_message(channel.ACK, runtime.on_ack)
        runner.register_message(channel.CLOCK_PONG, runtime.on_clock_pong)
        runner.register_message(channel.FINISH, runtime.on_finish)
        gevent.spawn(runtime._clock_loop)
    elif isinstance(runner, MasterRunner):
        runner.register_message(channel.RECORDS, runtime.on_records)
        runner.register_message(channel.CLOCK_PING, runtime.on_clock_ping)
        environment.events.worker_connect.add_listener(runtime.on_worker_connect)
    if not isinstance(runner, WorkerRunner) and os.environ.get(ENV_RUN_DIR):
        gevent.signal_handler(signal.SIGINT, _interrupt_main_greenlet)
        FileSink.exit_on_write_error = True  # a full disk stops the load (one line, status 74)
    if not isinstance(runner, WorkerRunner) and environment.web_ui is not None:  # its web UI
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


def _yield_to_the_ticker() -> None:
    gevent.sleep(0.001)


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
            end_s = resolved.shape.end_s()  # a steered shape may end before its duration
            if t < end_s:
                return users, spawn_rate
            grace = float(resolved.params["timeout_s"]) + 1.0
            if runtime.role == "local" and runtime.is_open and t < end_s + grace:
                # Let the dispatcher (which started a little after us) hand out its last arrivals.
                if not runtime.arrivals_finished() or runtime.in_flight() > 0:
                    return users, spawn_rate
            if runtime.role == "master" and t < end_s + _MASTER_GRACE_S:
                return users, spawn_rate
            runtime.shape_done = True
            return None

    LoadkitShape.__name__ = f"LoadkitShape_{scenario.name}"
    return LoadkitShape


install_shape_class(make_shape_class)  # `Scenario.locust_shape()` builds it
