"""`loadkit oncall` when an analysis goes wrong: its deadline, SIGTERM, a full queue, a failure.

Real processes and sockets: the analysis is the real child (`python -m
loadkit.oncall.job`), Prometheus a local stand-in (tests/unit/telemetry's fake
Prometheus HTTP API) that can hang (it accepts, reads the request and never
answers: a hung Prometheus), the receiver a local HTTP server, and the SIGTERM
test runs `python -m loadkit.cli oncall` twice. Every process started here is
stopped by its PID.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from loadkit import lifeline
from loadkit.oncall.incidents import ANALYZED, DEADLINE, FAILED, INTERRUPTED, STATE_FILE
from loadkit.oncall.notify import parse_receiver, slack_body
from loadkit.oncall.worker import Bounds, ChildAnalysis
from tests.unit.telemetry.test_prometheus_import import FakePrometheus, Series, triton_series
from tests.unit.test_oncall import FakeAnalysis, oncall, payload, post, receiving_hook, wait_for

RATE = 100.0  # requests/s
REPO = Path(__file__).resolve().parents[2]


# Triton's counters for a model slowing 10x for 2 s every 20 s, in closed form (any time).
TRITON: Series = triton_series(rate=RATE, spike_every=20)


class StandInPrometheus(FakePrometheus):
    """The fake Prometheus API, hung while `hung` is set: it takes the request and never
    answers (until `close`)."""

    def __init__(self, series: Series, hung: bool) -> None:
        self.hung = threading.Event()
        if hung:
            self.hung.set()
        self.hung_requests = 0
        self.released = threading.Event()
        super().__init__(series)

    def answer(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        if self.hung.is_set():
            self.hung_requests += 1
            self.released.wait(60)
        return super().answer(path, params)

    def close(self) -> None:
        self.released.set()
        super().close()


def alert(group: str, **labels: str) -> bytes:
    """A firing alert of `group` that started 2 minutes ago."""
    body = payload(groupKey=group)
    starts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 120))
    body["alerts"][0]["startsAt"] = starts
    body["commonLabels"] = {"alertname": "TritonP99High", "job": "triton", "model": "ranker"}
    body["commonLabels"].update(labels)
    body["alerts"][0]["labels"] = dict(body["commonLabels"])
    return json.dumps(body).encode()


def analysis_pids(out: Path) -> list[int]:
    """The analysis children working under `out` (their command line names its job.json)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"loadkit.oncall.job" in argv and any(str(out).encode() in a for a in argv):
            pids.append(int(entry.name))
    return pids


def gone(pid: int) -> bool:
    """Neither the process nor its process group exists (a zombie counts as there)."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return not Path(f"/proc/{pid}").exists()
    return False


def incident_state(out: Path) -> dict[str, Any]:
    (state,) = out.glob(f"*/{STATE_FILE}")
    return dict(json.loads(state.read_text()))


# --- 1. the deadline --------------------------------------------------------------------
def test_an_analysis_past_its_deadline_is_killed_said_and_the_next_one_runs(
    tmp_path: Path,
) -> None:
    prometheus = StandInPrometheus(TRITON, hung=True)
    try:
        with receiving_hook() as (hook, handler):
            with oncall(
                tmp_path,
                ChildAnalysis(prometheus.url),
                [parse_receiver(hook)],
                settle_s=0.05,
                bounds=Bounds(deadline_s=4.0),
            ) as (service, url, logs):
                # GIVEN an analysis that waits on a Prometheus that never answers
                assert post(url, alert("hung")) == 200
                wait_for(lambda: prometheus.hung_requests > 0 and analysis_pids(tmp_path))
                (child,) = analysis_pids(tmp_path)
                # WHEN its deadline passes
                wait_for(lambda: service.worker.idle() and len(handler.received) == 1)
                # THEN the child and its process group are gone, the incident says why
                assert gone(child)
                (incident,) = service.store.incidents.values()
                assert incident.state == DEADLINE
                assert incident.analyses[-1]["outcome"] == DEADLINE
                assert incident.error is not None
                assert incident.error.startswith("stopped at its deadline (4 s) before it finished")
                assert "its last step: importing " in incident.error
                assert f"from Prometheus at {prometheus.url}" in incident.error
                assert any(f"analysis 1 {DEADLINE}: stopped at" in line for line in logs), logs
                # ... and the receiver is told it failed, why, and where the incident is
                (failed,) = handler.received
                assert failed["outcome"] == DEADLINE and failed["error"] == incident.error
                assert failed["incident_url"] == f"{url}/incidents/{incident.id}/incident.json"
                assert failed["report_url"] is None and failed["finding"] is None
                assert "the analysis failed, no report: stopped at its deadline" in failed["text"]
                # AND the next incident, Prometheus answering again, is analyzed (a
                # deadline a loaded test machine's analysis fits in)
                prometheus.hung.clear()
                service.worker.bounds = Bounds(deadline_s=60.0)
                assert post(url, alert("next")) == 200
                wait_for(lambda: service.worker.idle() and len(handler.received) == 2)
                analyzed = service.store.get(handler.received[1]["incident"])
                assert analyzed is not None and analyzed.state == ANALYZED, analyzed
                assert handler.received[1]["finding"]["title"] == "Unexplained compute slowdown"
                assert handler.received[1]["report_url"].endswith("/report.html")
    finally:
        prometheus.close()


# --- 2. SIGTERM while an analysis runs, and the restart ---------------------------------
def _start_oncall(out: Path, prometheus: str, hook: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return lifeline.popen(
            [
                sys.executable, "-m", "loadkit.cli", "oncall", "--prometheus", prometheus,
                "--out", str(out), "--port", "0", "--notify", hook,
                "--lookback", "60s", "--settle", "100ms",
            ],
            stdout=sink, stderr=sink, cwd=REPO,
        )  # fmt: skip


def _oncall_url(log: Path) -> str:
    def found() -> str | None:
        match = re.findall(r"receiving (http://[\d.:]+)/alertmanager", log.read_text())
        return match[-1] if match else None

    wait_for(lambda: found() is not None, timeout_s=20)
    url = found()
    assert url is not None
    return url


def test_sigterm_stops_the_analysis_and_a_restart_finishes_it(tmp_path: Path) -> None:
    prometheus = StandInPrometheus(TRITON, hung=True)
    out, log = tmp_path / "incidents", tmp_path / "oncall.log"
    started: list[subprocess.Popen[bytes]] = []
    try:
        with receiving_hook() as (hook, handler):
            # GIVEN loadkit oncall analyzing an incident (its Prometheus hung)
            started.append(_start_oncall(out, prometheus.url, hook, log))
            assert post(_oncall_url(log), alert("sigterm")) == 200
            wait_for(lambda: prometheus.hung_requests > 0 and analysis_pids(out), 20)
            (child,) = analysis_pids(out)
            # WHEN it gets SIGTERM
            started[0].send_signal(signal.SIGTERM)
            rc = started[0].wait(20)
            # THEN it exits 0, the child gone, the incident kept as interrupted on disk
            assert rc == 0, log.read_text()[-2000:]
            assert gone(child)
            state = incident_state(out)
            assert state["state"] == INTERRUPTED, state
            assert [a["outcome"] for a in state["analyses"]] == [INTERRUPTED]
            assert not handler.received  # interrupted is not failed: it is done again
            # WHEN it starts again, Prometheus answering
            prometheus.hung.clear()
            started.append(_start_oncall(out, prometheus.url, hook, log))
            # THEN the incident is analyzed and its summary sent
            wait_for(lambda: incident_state(out)["state"] == ANALYZED, 20)
            wait_for(lambda: bool(handler.received))
            state = incident_state(out)
            assert [a["outcome"] for a in state["analyses"]] == [INTERRUPTED, ANALYZED]
            assert (out / state["id"] / "report.html").exists()
            assert handler.received[0]["incident"] == state["id"]
            started[1].send_signal(signal.SIGTERM)
            assert started[1].wait(20) == 0
    finally:
        for proc in started:
            lifeline.stop(proc)
        prometheus.close()


def test_a_service_managers_sigterm_to_the_child_too_is_an_interruption(tmp_path: Path) -> None:
    """systemd (KillMode=control-group) sends SIGTERM to every process of the unit: the
    child dies of it while oncall stops, and that is no failure to page anyone about."""
    prometheus = StandInPrometheus(TRITON, hung=True)
    try:
        with receiving_hook() as (hook, handler):
            with oncall(
                tmp_path, ChildAnalysis(prometheus.url), [parse_receiver(hook)], settle_s=0.05
            ) as (service, url, _logs):
                assert post(url, alert("systemd")) == 200
                wait_for(lambda: prometheus.hung_requests > 0 and analysis_pids(tmp_path))
                (child,) = analysis_pids(tmp_path)
                service.worker.stopping.set()
                os.kill(child, signal.SIGTERM)
                wait_for(lambda: service.worker.idle())
                (incident,) = service.store.incidents.values()
                assert incident.state == INTERRUPTED, incident.error
                assert gone(child) and not handler.received
    finally:
        prometheus.close()


# --- 3. a full queue --------------------------------------------------------------------
def test_a_full_queue_answers_503_once_logged_and_takes_the_retry(tmp_path: Path) -> None:
    hold = threading.Event()
    fake = FakeAnalysis(hold)
    with oncall(tmp_path, fake, settle_s=0.05, bounds=Bounds(max_pending=1)) as (
        service,
        url,
        logs,
    ):
        # GIVEN one incident in analysis and one waiting (the bound)
        assert post(url, alert("a")) == 200
        wait_for(lambda: len(fake.jobs) == 1)
        assert post(url, alert("b")) == 200
        # WHEN a third group fires, THEN 503 (Alertmanager retries a 5xx), one log line
        assert post(url, alert("c")) == 503
        assert len([line for line in logs if "503" in line]) == 1, logs
        assert len(service.store.incidents) == 2
        # ... the queue drains, and Alertmanager's retry is taken and analyzed
        hold.set()
        wait_for(lambda: len(fake.jobs) == 2 and service.worker.idle())
        assert post(url, alert("c")) == 200
        wait_for(lambda: len(fake.jobs) == 3 and service.worker.idle())
        assert {i.state for i in service.store.incidents.values()} == {ANALYZED}


# --- 4. a failed analysis is sent too ---------------------------------------------------
def test_a_failed_analysis_tells_the_receivers_why(tmp_path: Path) -> None:
    closed = StandInPrometheus({}, hung=False)  # no Triton series: the import fails
    empty_url = closed.url
    try:
        with receiving_hook() as (hook, handler):
            for prometheus, group in ((empty_url, "empty"), ("http://127.0.0.1:9", "unreachable")):
                with oncall(
                    tmp_path / group, ChildAnalysis(prometheus), [parse_receiver(hook)],
                    settle_s=0.05, bounds=Bounds(deadline_s=30.0),
                ) as (service, url, _logs):  # fmt: skip
                    assert post(url, alert(group)) == 200
                    wait_for(lambda: service.worker.idle() and service.notifier.idle(), 20)
                    (incident,) = service.store.incidents.values()
                    assert incident.state == FAILED, incident
    finally:
        closed.close()
    empty, unreachable = handler.received
    # the import's own error, one line
    assert empty["outcome"] == FAILED and "nv_inference" in empty["error"], empty
    assert "\n" not in empty["error"]
    assert unreachable["error"].startswith(
        "TargetError: cannot reach Prometheus at http://127.0.0.1:9"
    ), unreachable
    for summary in (empty, unreachable):
        assert summary["incident_url"].endswith(f"/incidents/{summary['incident']}/incident.json")
        assert summary["report_url"] is None
        assert summary["error"] in summary["text"] and summary["incident_url"] in summary["text"]
    # ... and in Slack's format
    slack = slack_body(unreachable)
    assert "the analysis failed" in slack["blocks"][0]["text"]["text"]
    assert "*Why:* TargetError: cannot reach Prometheus" in slack["blocks"][0]["text"]["text"]
    assert slack["blocks"][1]["elements"][0]["text"].startswith(f"<{unreachable['incident_url']}|")
