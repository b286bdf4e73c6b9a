"""`loadkit oncall` without Triton or Prometheus: payloads, incidents, queue, bounds, notifiers.

The analysis is a fake callable injected into the worker (the real one is a child
process: tests/integration/test_oncall.py), so these run in a second or two.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from loadkit.oncall.incidents import (
    ANALYZED,
    NS,
    Incident,
    IncidentStore,
    WindowPolicy,
    selectors_from_labels,
)
from loadkit.oncall.notify import Notifier, Receiver, RetryPolicy, parse_receiver, slack_body
from loadkit.oncall.payload import PayloadError, parse_notification, parse_time
from loadkit.oncall.server import OncallServer
from loadkit.oncall.service import OncallService
from loadkit.oncall.worker import Bounds, Job, Worker

# Alertmanager's documented webhook payload (version 4), as its docs give it, filled in.
SAMPLE = {
    "version": "4",
    "groupKey": '{}:{alertname="TritonP99High"}',
    "truncatedAlerts": 0,
    "status": "firing",
    "receiver": "loadkit-oncall",
    "groupLabels": {"alertname": "TritonP99High"},
    "commonLabels": {
        "alertname": "TritonP99High",
        "job": "triton",
        "instance": "gpu-3:8002",
        "model": "ranker",
        "severity": "page",
    },
    "commonAnnotations": {"summary": "Triton P99 > 80 ms on gpu-3:8002 (ranker)"},
    "externalURL": "http://alertmanager:9093",
    "alerts": [
        {
            "status": "firing",
            "labels": {
                "alertname": "TritonP99High",
                "job": "triton",
                "instance": "gpu-3:8002",
                "model": "ranker",
                "severity": "page",
            },
            "annotations": {"summary": "Triton P99 > 80 ms on gpu-3:8002 (ranker)"},
            "startsAt": "2026-12-04T03:00:05.123456789Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph?g0.expr=...",
            "fingerprint": "c6d4e8a1b2f3a4b5",
        }
    ],
}
STARTS_NS = 1796353205123456789  # 2026-12-04T03:00:05.123456789Z


def payload(**changes: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(SAMPLE))
    data.update(changes)
    return data


def resolved() -> dict[str, Any]:
    data = payload(status="resolved")
    data["alerts"][0]["status"] = "resolved"
    data["alerts"][0]["endsAt"] = "2026-12-04T03:20:05Z"
    return data


# --- payload --------------------------------------------------------------------------
def test_alertmanagers_v4_sample_parses() -> None:
    n = parse_notification(json.dumps(SAMPLE).encode())
    assert n.group_key == SAMPLE["groupKey"] and n.alertname == "TritonP99High"
    assert n.status == "firing" and len(n.firing()) == 1
    alert = n.alerts[0]
    assert alert.starts_at_ns == STARTS_NS
    assert alert.ends_at_ns is None  # Go's zero time: still firing
    assert parse_time("2026-12-04T04:00:05+01:00") == STARTS_NS - 123456789


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        json.dumps(payload(version="3")).encode(),
        json.dumps(payload(alerts=[])).encode(),
        json.dumps(payload(groupKey=5)).encode(),
        json.dumps(payload(status="pending")).encode(),
        json.dumps(payload(commonLabels={"a": 1})).encode(),
        json.dumps(payload(alerts=[{**SAMPLE["alerts"][0], "startsAt": "yesterday"}])).encode(),
    ],
)
def test_malformed_payloads_are_refused(body: bytes) -> None:
    with pytest.raises(PayloadError):
        parse_notification(body)


# --- the window and the selectors -----------------------------------------------------
def test_the_window_runs_from_startsat_minus_lookback_to_now_plus_settle() -> None:
    policy = WindowPolicy(lookback_s=900, settle_s=60, max_window_s=3600)
    now = STARTS_NS + 300 * NS
    assert policy.window(STARTS_NS, now, None) == (STARTS_NS - 900 * NS, now + 60 * NS)
    # extended while it keeps firing ...
    later = now + 600 * NS
    assert policy.window(STARTS_NS, later, None)[1] == later + 60 * NS
    # ... to its end once resolved, and never longer than max_window (the end kept)
    ends = STARTS_NS + 7200 * NS
    assert policy.window(STARTS_NS, later, ends) == (ends + 60 * NS - 3600 * NS, ends + 60 * NS)


def test_the_alerts_labels_narrow_the_server_selectors() -> None:
    labels = {"job": "triton", "instance": 'gpu"3', "model": "ranker", "severity": "page"}
    assert selectors_from_labels(labels) == ['{job="triton",instance="gpu\\"3"}']
    assert selectors_from_labels({"alertname": "x"}) == []


# --- the receiver, in-process with a fake analysis ------------------------------------
class FakeAnalysis:
    def __init__(self, hold: threading.Event | None = None) -> None:
        self.jobs: list[Job] = []
        self.hold = hold

    def __call__(self, job: Job, stop: threading.Event) -> dict[str, Any]:
        self.jobs.append(job)
        if self.hold is not None:
            self.hold.wait(10)
        (job.incident_dir / "report.html").write_text("<html>report</html>")
        (job.incident_dir / "analysis.json").write_text("{}")
        return {
            "verdict": "FAIL: p99 over",
            "passed": False,
            "headline": "h",
            "finding": {
                "cause": "unexplained_compute",
                "title": "Unexplained compute slowdown",
                "confidence": "strong",
                "summary": "s",
                "action": "Profile the model.",
            },
            "period_s": 6.0,
            "episodes": 5,
        }


class Receiver_(BaseHTTPRequestHandler):
    """A test receiver: fails the first `failures` posts with a 503, then takes them."""

    failures = 0
    received: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        cls = type(self)
        if cls.failures > 0:
            cls.failures -= 1
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        cls.received.append(json.loads(body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@contextmanager
def receiving_hook(failures: int = 0) -> Iterator[tuple[str, type[Receiver_]]]:
    handler = type("Handler", (Receiver_,), {"failures": failures, "received": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", handler
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def oncall(
    out: Path,
    analyze: Callable[[Job, threading.Event], dict[str, Any]],
    receivers: list[Receiver] = (),  # type: ignore[assignment]
    token: str | None = None,
    settle_s: float = 0.3,
    bounds: Bounds | None = None,
) -> Iterator[tuple[OncallService, str, list[str]]]:
    logs: list[str] = []
    store = IncidentStore(out)
    notifier = Notifier(store, list(receivers), logs.append, RetryPolicy(4, 0.05, 2.0))
    worker = Worker(store, analyze, lambda i, r: None, logs.append, bounds or Bounds())
    service = OncallService(
        store, worker, notifier, WindowPolicy(60, settle_s, 10**8), "", log=logs.append
    )
    worker.on_done = service.analyzed
    server = OncallServer(
        "127.0.0.1", 0, service, prometheus="http://prom", token=token, max_payload=4096,
        log=logs.append,
    )  # fmt: skip
    service.public_url = server.url
    service.resume()
    notifier.start()
    worker.start()
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield service, server.url, logs
    finally:
        server.shutdown()
        server.server_close()
        worker.stop(5)
        notifier.stop(5)


def post(url: str, body: bytes, token: str | None = None) -> int:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"{url}/alertmanager", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_refusals_are_4xx_with_one_log_line_each(tmp_path: Path) -> None:
    with oncall(tmp_path, FakeAnalysis(), token="s3cret") as (service, url, logs):
        good = json.dumps(SAMPLE).encode()
        assert post(url, good) == 401  # no token
        assert post(url, good, token="wrong") == 401
        assert post(url, b"{not json", token="s3cret") == 400
        assert post(url, json.dumps(payload(version="3")).encode(), token="s3cret") == 400
        assert post(url, b"x" * 5000, token="s3cret") == 413
        assert len([line for line in logs if line.startswith("refused")]) == 5, logs
        assert not service.store.incidents
        assert post(url, good, token="s3cret") == 200
        assert len(service.store.incidents) == 1


def test_fifty_duplicates_are_one_incident_and_one_analysis(tmp_path: Path) -> None:
    fake = FakeAnalysis()
    with oncall(tmp_path, fake, settle_s=1.0) as (service, url, _logs):
        body = json.dumps(SAMPLE).encode()
        for _ in range(50):
            assert post(url, body) == 200
        wait_for(lambda: service.worker.idle() and bool(fake.jobs))
        incident = next(iter(service.store.incidents.values()))
        assert len(service.store.incidents) == 1
        assert incident.notifications == 50
        assert len(fake.jobs) == 1 and incident.state == ANALYZED
        # narrowed by the alert's labels, the model apart
        assert fake.jobs[0].selectors == ('{job="triton",instance="gpu-3:8002"}',)
        assert fake.jobs[0].model == "ranker"
        assert fake.jobs[0].start_ns == STARTS_NS - 60 * NS


def test_resolved_closes_the_incident_after_one_more_analysis_of_the_episode(
    tmp_path: Path,
) -> None:
    fake = FakeAnalysis()
    with oncall(tmp_path, fake, settle_s=0.1) as (service, url, _logs):
        assert post(url, json.dumps(SAMPLE).encode()) == 200
        wait_for(lambda: len(fake.jobs) == 1 and service.worker.idle())
        assert post(url, json.dumps(resolved()).encode()) == 200
        wait_for(lambda: len(fake.jobs) == 2 and service.worker.idle())
        incident = next(iter(service.store.incidents.values()))
        assert incident.closed
        ends = parse_time("2026-12-04T03:20:05Z")
        assert ends is not None
        assert (fake.jobs[1].start_ns, fake.jobs[1].end_ns) == (
            STARTS_NS - 60 * NS,
            ends + int(0.1 * NS),
        )
        # the same group firing again is a new incident
        assert post(url, json.dumps(SAMPLE).encode()) == 200
        assert len(service.store.incidents) == 2


def test_a_restart_keeps_every_incident_and_finishes_the_pending_one(tmp_path: Path) -> None:
    fake = FakeAnalysis()
    with oncall(tmp_path, fake, settle_s=30.0) as (service, url, _logs):
        assert post(url, json.dumps(SAMPLE).encode()) == 200
        assert not fake.jobs  # due in 30 s: stopped before it
    state = json.loads(next(tmp_path.glob("*/incident.json")).read_text())
    assert state["schema_version"] == 1 and state["state"] == "pending"
    # GIVEN its window's end has passed by the restart
    state["due_ns"] = time.time_ns()
    next(tmp_path.glob("*/incident.json")).write_text(json.dumps(state))
    with oncall(tmp_path, fake) as (service, url, _logs):
        wait_for(lambda: bool(fake.jobs) and service.worker.idle())
        assert len(service.store.incidents) == 1
        assert next(iter(service.store.incidents.values())).state == ANALYZED


def test_the_disk_budget_removes_the_oldest_never_the_one_in_progress(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path)
    for n in range(4):
        incident = Incident(
            id=f"i{n}", group_key=f"g{n}", alertname="a", opened_ns=n, status="firing",
            starts_at_ns=0, last_firing_ns=0,
        )  # fmt: skip
        store.save(incident)
        (store.path(incident) / "report.html").write_bytes(b"x" * 10_000)
    # the oldest (i0) is in progress: i1 and i2 go, i0 and the newest stay
    removed = store.prune(25_000, keep={"i0"})
    assert removed == ["i1", "i2"]
    assert sorted(store.incidents) == ["i0", "i3"]
    assert not (tmp_path / "i1").exists() and (tmp_path / "i0").exists()


def test_the_index_lists_incidents_newest_first_escaped(tmp_path: Path) -> None:
    fake = FakeAnalysis()
    with oncall(tmp_path, fake, settle_s=0.05) as (service, url, _logs):
        hostile = payload(commonAnnotations={"summary": "<script>alert(1)</script>"})
        assert post(url, json.dumps(hostile).encode()) == 200
        second = payload(groupKey="other")
        assert post(url, json.dumps(second).encode()) == 200
        wait_for(lambda: len(fake.jobs) == 2 and service.worker.idle())
        with urllib.request.urlopen(f"{url}/", timeout=5) as answer:
            page = answer.read().decode()
        assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page
        assert "Unexplained compute slowdown [strong]" in page and "every 6 s" in page
        first, second_id = sorted(
            service.store.incidents, key=lambda i: service.store.incidents[i].opened_ns
        )
        assert page.index(second_id) < page.index(first) if second_id in page else True
        report = f"{url}/incidents/{first}/report.html"
        with urllib.request.urlopen(report, timeout=5) as answer:
            assert answer.read() == b"<html>report</html>"
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"{url}/incidents/..%2F..%2Fetc/passwd", timeout=5)


# --- notifiers ------------------------------------------------------------------------
def test_a_failed_post_is_retried_with_backoff_until_it_goes_out(tmp_path: Path) -> None:
    with receiving_hook(failures=2) as (hook, handler):
        with oncall(tmp_path, FakeAnalysis(), [parse_receiver(hook)], settle_s=0.05) as (
            service,
            url,
            logs,
        ):
            assert post(url, json.dumps(SAMPLE).encode()) == 200
            wait_for(lambda: bool(handler.received))
            wait_for(service.notifier.idle)
            incident = next(iter(service.store.incidents.values()))
            delivery = incident.deliveries[0]
            assert (delivery.state, delivery.attempts) == ("delivered", 3)
            failures = [line for line in logs if line.startswith("notify")]
            assert len(failures) == 2 and "HTTP 503" in failures[0], failures
            summary = handler.received[0]
            assert summary["report_url"] == f"{url}/incidents/{incident.id}/report.html"
            assert summary["finding"]["confidence"] == "strong" and summary["period_s"] == 6.0
            assert "Unexplained compute slowdown" in summary["text"]
        state = json.loads((tmp_path / incident.id / "incident.json").read_text())
        assert state["deliveries"][0]["state"] == "delivered"


def test_a_delivery_that_never_goes_out_is_kept_as_failed(tmp_path: Path) -> None:
    with receiving_hook(failures=100) as (hook, handler):
        with oncall(tmp_path, FakeAnalysis(), [parse_receiver(hook)], settle_s=0.05) as (
            service,
            url,
            logs,
        ):
            assert post(url, json.dumps(SAMPLE).encode()) == 200
            wait_for(
                lambda: any(line.endswith("(kept as failed in incident.json)") for line in logs)
            )
            wait_for(service.notifier.idle)
            delivery = next(iter(service.store.incidents.values())).deliveries[0]
            assert (delivery.state, delivery.attempts) == ("failed", 4)
            assert delivery.last_error == "HTTP 503 Service Unavailable"


def test_the_slack_format_is_an_incoming_webhooks_message() -> None:
    receiver = parse_receiver("slack+https://hooks.slack.com/services/T000/B000/XXXX")
    assert receiver.format == "slack"
    assert receiver.shown == "https://hooks.slack.com/services/..."  # the secret is not kept
    assert parse_receiver("https://example.com/hook").format == "json"
    with pytest.raises(ValueError):
        parse_receiver("teams+https://example.com/hook")
    body = slack_body(
        {
            "alert": "TritonP99High",
            "status": "firing",
            "verdict": "FAIL: p99 <1>",
            "finding": {
                "title": "GPU thermal throttling",
                "confidence": "strong",
                "action": "Cool",
            },
            "period_s": 10.0,
            "window": "a .. b",
            "report_url": "http://oncall:9478/incidents/x/report.html",
        }
    )
    assert set(body) == {"text", "blocks"}
    section, context = body["blocks"]
    assert section["type"] == "section" and section["text"]["type"] == "mrkdwn"
    assert "GPU thermal throttling* [strong]" not in section["text"]["text"]
    assert "*First:* GPU thermal throttling [strong]: Cool" in section["text"]["text"]
    assert "&lt;1&gt;" in section["text"]["text"]  # Slack's control characters escaped
    assert context["elements"][0]["text"].startswith("<http://oncall:9478/incidents/x/report.html|")
    assert "every 10 s" in body["text"]
