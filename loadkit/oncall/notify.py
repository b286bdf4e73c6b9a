"""Where a summary is posted: receivers, their formats (a registry), retries with backoff.

A failed analysis (its deadline, Prometheus unreachable, the import) is posted
too: that it failed, the error in one line, and the incident's URL.

`--notify URL` posts the summary as JSON (`json`); `--notify FORMAT+URL` names
another format, e.g. `slack+https://hooks.slack.com/services/...` (a Slack
incoming webhook's `text` and `blocks`; Mattermost and Rocket.Chat take the same).
A format is one function `summary -> JSON body` in `FORMATS`.

Each delivery is tried `attempts` times with exponential backoff (1 s, 2 s, 4 s,
... by default); every failed attempt is one log line, and the delivery's state
(`pending`, `delivered`, `failed`, attempts, last error) is kept in the
incident's state file: a delivery that never went out shows in the index and
is tried again after a restart.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from loadkit.oncall.incidents import Delivery, Incident, IncidentStore

Log = Callable[[str], None]
Summary = Mapping[str, Any]


def _failed(summary: Summary) -> bool:
    """A failed analysis' summary (deadline, Prometheus, the import): no verdict, the error."""
    return summary.get("outcome", "analyzed") != "analyzed"


def summary_text(summary: Summary) -> str:
    """One paragraph: alert, verdict, first finding with confidence and action, period, URL;
    or, for a failed analysis, that it failed, why, and the incident's URL."""
    if _failed(summary):
        parts = [
            f"{summary['alert']} ({summary['status']}): the analysis failed, no report: "
            f"{str(summary['error']).rstrip('.')}.",
            f"Window: {summary['window']}.",
            f"Incident: {summary['incident_url']}",
        ]
        if summary.get("report_url"):
            parts.append(f"(the previous report: {summary['report_url']})")
        return " ".join(parts)
    parts = [f"{summary['alert']} ({summary['status']}): {summary['verdict']}"]
    finding = summary.get("finding")
    if finding:
        parts.append(
            f"First: {finding['title']} [{finding['confidence']}]. {finding['action']}".rstrip()
        )
    else:
        parts.append("No cause found.")
    if summary.get("period_s"):
        parts.append(f"Period: every {summary['period_s']:.3g} s.")
    parts.append(f"Window: {summary['window']}.")
    parts.append(f"Report: {summary['report_url']}")
    return " ".join(parts)


def json_body(summary: Summary) -> dict[str, Any]:
    """The generic webhook: the summary's fields, plus `text` (the one paragraph)."""
    return {**summary, "text": summary_text(summary)}


def _slack_escape(text: str) -> str:
    """Slack's mrkdwn control characters (https://api.slack.com/reference/surfaces/formatting)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(summary: Summary) -> dict[str, Any]:
    """A Slack incoming webhook's message: `text` (the notification's fallback) and blocks."""
    if _failed(summary):
        url = summary["incident_url"]
        lines = [
            f"*{_slack_escape(summary['alert'])}* ({summary['status']}): the analysis failed, "
            "no report",
            f"*Why:* {_slack_escape(str(summary['error']))}",
            f"*Window:* {_slack_escape(summary['window'])}",
        ]
        return {
            "text": _slack_escape(summary_text(summary)),
            "blocks": [
                {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)}},
                {
                    "type": "context",
                    "elements": [
                        {"type": "mrkdwn", "text": f"<{url}|the incident> (loadkit oncall)"}
                    ],
                },
            ],
        }
    finding = summary.get("finding")
    lines = [
        f"*{_slack_escape(summary['alert'])}* ({summary['status']}): "
        f"{_slack_escape(summary['verdict'])}"
    ]
    if finding:
        lines.append(
            f"*First:* {_slack_escape(finding['title'])} [{finding['confidence']}]: "
            f"{_slack_escape(finding['action'])}"
        )
    else:
        lines.append("No cause found.")
    if summary.get("period_s"):
        lines.append(f"*Period:* every {summary['period_s']:.3g} s")
    lines.append(f"*Window:* {_slack_escape(summary['window'])}")
    url = summary["report_url"]
    return {
        "text": _slack_escape(summary_text(summary)),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)}},
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"<{url}|the report> (loadkit oncall)"}],
            },
        ],
    }


FORMATS: dict[str, Callable[[Summary], dict[str, Any]]] = {"json": json_body, "slack": slack_body}
DEFAULT_FORMAT = "json"


@dataclass(frozen=True)
class Receiver:
    format: str
    url: str

    @property
    def shown(self) -> str:
        """The URL as logged and kept: no user-info, no query, and a Slack hook's secret
        path cut to its first part."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        netloc = host if parts.port is None else f"{host}:{parts.port}"
        path = parts.path
        if self.format == "slack":
            path = "/".join(path.split("/")[:2]) + "/..."
        return urlunsplit((parts.scheme, netloc, path, "", ""))


def parse_receiver(spec: str) -> Receiver:
    """'https://...' (json) or 'FORMAT+https://...'; ValueError says what is wrong."""
    fmt, plus, rest = spec.partition("+")
    if plus and fmt in FORMATS and "://" in rest:
        url = rest
    elif "://" in spec.split("+", 1)[0] or not plus:
        fmt, url = DEFAULT_FORMAT, spec
    else:
        raise ValueError(f"unknown format {fmt!r} in {spec!r} (formats: {', '.join(FORMATS)})")
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    return Receiver(fmt, url)


def post(receiver: Receiver, summary: Summary, timeout_s: float = 10.0) -> None:
    """One attempt; raises OSError (urllib's errors among them) on anything but a 2xx."""
    body = json.dumps(FORMATS[receiver.format](summary)).encode()
    request = urllib.request.Request(
        receiver.url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "loadkit-oncall"},
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as answer:
        answer.read(65536)


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    first_backoff_s: float = 1.0  # then doubled each time: 1, 2, 4, 8 s
    timeout_s: float = 10.0


class Notifier:
    """Posts deliveries on its own thread (an analysis never waits on a slow receiver)."""

    def __init__(
        self,
        store: IncidentStore,
        receivers: list[Receiver],
        log: Log,
        policy: RetryPolicy = RetryPolicy(),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
        self.receivers = receivers
        self.log = log
        self.policy = policy
        self.sleep = sleep
        self._queue: queue.Queue[tuple[str, int] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="oncall-notify", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout_s)

    def announce(self, incident: Incident, summary: Summary) -> None:
        """One delivery per receiver, recorded as pending, then queued."""
        with self.store.lock:
            for receiver in self.receivers:
                incident.deliveries.append(
                    Delivery(
                        receiver=receiver.shown,
                        format=receiver.format,
                        analysis=int(summary["analysis"]),
                        summary=dict(summary),
                        updated_ns=time.time_ns(),
                    )
                )
                self._queue.put((incident.id, len(incident.deliveries) - 1))
            self.store.save(incident)

    def resume(self, incident: Incident) -> None:
        """After a restart: the deliveries still pending go out again."""
        for index, delivery in enumerate(incident.deliveries):
            if delivery.state == "pending":
                self._queue.put((incident.id, index))

    def idle(self) -> bool:
        return self._queue.unfinished_tasks == 0

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._deliver(*item)
            finally:
                self._queue.task_done()

    def _receiver(self, delivery: Delivery) -> Receiver | None:
        return next(
            (
                r
                for r in self.receivers
                if r.shown == delivery.receiver and r.format == delivery.format
            ),
            None,
        )

    def _deliver(self, incident_id: str, index: int) -> None:
        incident = self.store.get(incident_id)
        if incident is None or index >= len(incident.deliveries):
            return  # pruned meanwhile
        delivery = incident.deliveries[index]
        receiver = self._receiver(delivery)
        if receiver is None:
            self._update(incident, delivery, "failed", "no such receiver any more (--notify)")
            self.log(
                f"notify {delivery.receiver}: incident {incident_id}: receiver no longer configured"
            )
            return
        backoff = self.policy.first_backoff_s
        while delivery.attempts < self.policy.attempts:
            delivery.attempts += 1
            try:
                post(receiver, delivery.summary, self.policy.timeout_s)
            except (OSError, ValueError) as exc:
                error = _describe(exc)
                last = delivery.attempts >= self.policy.attempts
                self._update(incident, delivery, "failed" if last else "pending", error)
                self.log(
                    f"notify {receiver.shown}: incident {incident_id}: attempt "
                    f"{delivery.attempts}/{self.policy.attempts} failed: {error}"
                    + (
                        "; giving up (kept as failed in incident.json)"
                        if last
                        else f"; retry in {backoff:g} s"
                    )
                )
                if last:
                    return
                self.sleep(backoff)
                backoff *= 2
                continue
            self._update(incident, delivery, "delivered", None)
            return
        self._update(incident, delivery, "failed", delivery.last_error)

    def _update(
        self, incident: Incident, delivery: Delivery, state: str, error: str | None
    ) -> None:
        with self.store.lock:
            delivery.state = state
            delivery.last_error = error
            delivery.updated_ns = time.time_ns()
            if self.store.get(incident.id) is incident:
                self.store.save(incident)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return f"{exc.reason}"
    return f"{type(exc).__name__}: {exc}"
