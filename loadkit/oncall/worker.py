"""The queue of pending incidents and the one analysis at a time.

Bounded on every side:
- one analysis at a time (one worker thread, each analysis a child process);
- the queue holds incidents, not notifications: a notification for a group
  already queued updates that incident (its window) and queues nothing more,
  and at most `max_pending` incidents wait (a new group beyond that is refused
  with a 503, which Alertmanager retries);
- an incident is analyzed once its window's end is past (`due_ns`);
- each analysis has a deadline (the child's process group is killed; the
  incident says so, with the analysis' last step);
- after each analysis the incident directories are pruned to the disk budget,
  oldest first, never the one in progress or a queued one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadkit import lifeline
from loadkit.oncall.incidents import (
    ANALYZED,
    ANALYZING,
    DEADLINE,
    FAILED,
    INTERRUPTED,
    JOB_LOG,
    NS,
    PENDING,
    Incident,
    IncidentStore,
    without_credentials,
)

Log = Callable[[str], None]

# On SIGTERM, how long the analysis in progress may go on: under `docker stop`'s 10 s
# and Kubernetes' 30 s, so that the stop is ours (the incident marked interrupted, exit 0)
# and not their SIGKILL. An interrupted analysis is done again at the next start.
STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class Job:
    """One analysis: the incident's directory, its window and the series it narrows to."""

    incident_id: str
    incident_dir: Path
    start_ns: int
    end_ns: int
    selectors: tuple[str, ...]
    model: str | None
    deadline_s: float


class AnalysisFailed(Exception):
    """The analysis ended without a report; `outcome` is FAILED, DEADLINE or INTERRUPTED."""

    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


# job, a "stop now" event -> the summary (verdict, finding, period); raises AnalysisFailed.
Analyze = Callable[[Job, threading.Event], dict[str, Any]]


class ChildAnalysis:
    """The real analysis: `python -m loadkit.oncall.job` (loadkit/oncall/job.py), in a
    process group of its own, killed whole at its deadline, or when `stop` is set and
    `stop_grace_s` has passed."""

    def __init__(
        self,
        prometheus: str,
        static_selectors: tuple[str, ...] = (),
        step_s: float | None = None,
        prometheus_token_file: str | None = None,
        stop_grace_s: float = STOP_GRACE_S,
    ) -> None:
        self.prometheus = prometheus
        self.static_selectors = static_selectors
        self.step_s = step_s
        self.token_file = prometheus_token_file
        self.stop_grace_s = stop_grace_s

    def __call__(self, job: Job, stop: threading.Event) -> dict[str, Any]:
        from loadkit.oncall.job import RESULT_FILE

        spec = {
            "prometheus": self.prometheus,
            "prometheus_token_file": self.token_file,
            "incident_dir": str(job.incident_dir),
            "start_ns": job.start_ns,
            "end_ns": job.end_ns,
            "selectors": [*self.static_selectors, *job.selectors],
            "model": job.model,
            "step_s": self.step_s,
        }
        spec_file = job.incident_dir / "job.json"
        spec_file.write_text(json.dumps(spec), encoding="utf-8")
        result_file = job.incident_dir / RESULT_FILE
        result_file.unlink(missing_ok=True)
        log_path = job.incident_dir / JOB_LOG
        with log_path.open("ab") as log:
            output_from = log.tell()  # this analysis' own lines: job.log keeps every one
            proc = lifeline.popen(
                [sys.executable, "-m", "loadkit.oncall.job", str(spec_file)],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,  # its group is killed whole; a terminal's ^C is ours
            )
            outcome = self._wait(proc, job, stop)
        last = _last_line(log_path, output_from)
        if outcome == DEADLINE:
            raise AnalysisFailed(
                DEADLINE,
                f"stopped at its deadline ({job.deadline_s:g} s) before it finished"
                + (f"; its last step: {last}" if last else ""),
            )
        if outcome == INTERRUPTED or (stop.is_set() and proc.returncode < 0):
            # ours, or the service manager's SIGTERM to every process of the unit (systemd)
            raise AnalysisFailed(INTERRUPTED, "loadkit oncall stopped before the analysis finished")
        if proc.returncode != 0 or not result_file.exists():
            raise AnalysisFailed(FAILED, _failure(proc.returncode, last))
        result: dict[str, Any] = json.loads(result_file.read_text(encoding="utf-8"))
        return result

    def _wait(self, proc: subprocess.Popen[bytes], job: Job, stop: threading.Event) -> str | None:
        """None when the child exited by itself; else DEADLINE or INTERRUPTED, the child's
        group killed."""
        deadline = time.monotonic() + job.deadline_s
        stop_by: float | None = None
        while proc.poll() is None:
            now = time.monotonic()
            if stop.is_set() and stop_by is None:
                stop_by = now + self.stop_grace_s
            if now >= deadline:
                stop_group(proc)
                return DEADLINE
            if stop_by is not None and now >= stop_by:
                stop_group(proc)
                return INTERRUPTED
            time.sleep(0.1)
        return None


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 3.0) -> None:
    """SIGTERM the child's process group, SIGKILL what is left after `grace_s`: anything
    the analysis started goes with it (`lifeline.stop` reaches the child alone)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:  # the child is gone: its own children, if any, go now
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        break
    proc.wait()


def _last_line(path: Path, offset: int) -> str:
    """The child's last line after `offset`, credentials taken out of any URL in it (it is
    shown on the index and posted to the receivers)."""
    try:
        with path.open("rb") as log:
            log.seek(offset)
            text = log.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = text.strip().splitlines()
    return without_credentials(lines[-1].strip())[:500] if lines else ""


def _failure(returncode: int, last: str) -> str:
    """One line for an analysis that ended without a report: its error, or how it died."""
    if returncode < 0:
        died = f"the analysis process was killed by {signal.Signals(-returncode).name}"
        if returncode == -signal.SIGKILL:
            died += " (out of memory?)"
        return died + (f"; its last output: {last}" if last else "")
    return last or f"the analysis exited with status {returncode} and no output"


@dataclass(frozen=True)
class Bounds:
    max_pending: int = 64  # incidents waiting for an analysis (a queued group coalesces)
    deadline_s: float = 600.0  # one analysis, import included
    disk_budget_bytes: int = 2 * 1024**3  # every incident directory together


class Worker:
    """One thread: takes the queued incident that is due first, analyzes it, notifies."""

    def __init__(
        self,
        store: IncidentStore,
        analyze: Analyze,
        on_done: Callable[[Incident, dict[str, Any] | None], None],
        log: Log,
        bounds: Bounds = Bounds(),
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.store = store
        self.analyze = analyze
        self.on_done = on_done
        self.log = log
        self.bounds = bounds
        self.clock = clock
        self.pending: dict[str, None] = {}  # incident ids, in the order they were queued
        self.current: str | None = None
        self.stopping = threading.Event()
        self._wake = threading.Condition(store.lock)
        self._thread = threading.Thread(target=self._loop, name="oncall-worker", daemon=True)
        self.analyses_run = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """No new analysis; the one in progress finishes or is interrupted (ChildAnalysis's grace)."""
        with self._wake:
            self.stopping.set()
            self._wake.notify_all()
        self._thread.join(timeout_s)

    def has_room_for(self, incident_id: str) -> bool:
        with self._wake:
            return incident_id in self.pending or len(self.pending) < self.bounds.max_pending

    def enqueue(self, incident: Incident) -> None:
        """Queue (or keep queued: coalesced) the incident; the caller saved its `due_ns`."""
        with self._wake:
            self.pending.setdefault(incident.id, None)
            self._wake.notify_all()

    def busy_ids(self) -> set[str]:
        with self._wake:
            return {*self.pending, *([self.current] if self.current else [])}

    def idle(self) -> bool:
        with self._wake:
            return not self.pending and self.current is None

    def _next(self) -> Incident | None:
        """Wait for the first due incident (or a stop); the lock is held by the caller."""
        while not self.stopping.is_set():
            now = self.clock()
            due = [self.store.get(i) for i in self.pending]
            ready = [i for i in due if i is not None and i.due_ns <= now]
            for gone in [i for i in self.pending if self.store.get(i) is None]:
                del self.pending[gone]
            if ready:
                incident = min(ready, key=lambda i: i.due_ns)
                del self.pending[incident.id]
                return incident
            waits = [i.due_ns - now for i in due if i is not None]
            self._wake.wait(min([*waits, 5 * NS]) / NS if waits else 5.0)
        return None

    def _loop(self) -> None:
        while True:
            with self._wake:
                incident = self._next()
                if incident is None:
                    return
                self.current = incident.id
                job = self._start(incident)
            result: dict[str, Any] | None = None
            try:
                result = self.analyze(job, self.stopping)
                outcome, error = ANALYZED, None
            except AnalysisFailed as exc:
                outcome, error = exc.outcome, str(exc)
            except Exception as exc:  # noqa: BLE001 - a bug in one analysis must not stop the rest
                outcome, error = FAILED, f"{type(exc).__name__}: {exc}"
            with self._wake:
                self._finish(incident, job, outcome, error, result)
                self.current = None
            self.on_done(incident, result if outcome == ANALYZED else None)
            self._prune()

    def _start(self, incident: Incident) -> Job:
        final = incident.status == "resolved"
        start_ns, end_ns = incident.window_asked
        job = Job(
            incident_id=incident.id,
            incident_dir=self.store.path(incident),
            start_ns=start_ns,
            end_ns=end_ns,
            selectors=tuple(incident.selectors),
            model=incident.labels.get("model"),
            deadline_s=self.bounds.deadline_s,
        )
        incident.state = ANALYZING
        incident.analyses.append(
            {
                "n": len(incident.analyses) + 1,
                "started_ns": self.clock(),
                "window_start_ns": start_ns,
                "window_end_ns": end_ns,
                "final": final,
                "outcome": None,
            }
        )
        self.store.save(incident)
        self.log(
            f"incident {incident.id}: analysis {len(incident.analyses)} of "
            f"{(end_ns - start_ns) / NS:.0f} s"
            + (" (resolved: the whole episode)" if final else "")
        )
        return job

    def _finish(
        self,
        incident: Incident,
        job: Job,
        outcome: str,
        error: str | None,
        result: dict[str, Any] | None,
    ) -> None:
        entry = incident.analyses[-1]
        entry.update(finished_ns=self.clock(), outcome=outcome, error=error)
        self.analyses_run += 1
        if outcome == ANALYZED:
            incident.result = result
            incident.window = [job.start_ns, job.end_ns]
            incident.error = None
        else:
            incident.error = error
            self.log(f"incident {incident.id}: analysis {entry['n']} {outcome}: {error}")
        if incident.id in self.pending:
            incident.state = PENDING  # updated while it ran: analyzed again, with the new window
        else:
            incident.state = outcome
            if incident.status == "resolved" and outcome != INTERRUPTED:
                incident.final_done = True
        if outcome == INTERRUPTED:
            incident.state = INTERRUPTED
        self.store.save(incident)

    def _prune(self) -> None:
        removed = self.store.prune(self.bounds.disk_budget_bytes, self.busy_ids())
        for incident_id in removed:
            self.log(f"incident {incident_id}: removed (over the disk budget, oldest first)")
