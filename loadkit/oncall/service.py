"""What a notification does: find or open the group's incident, update it, queue its analysis.

- a firing notification for a group with no open incident opens one;
- one for a group with an open incident (Alertmanager's re-notification, or a
  duplicate) updates it: the window's end moves on (the alert keeps firing) and
  the incident is queued once (coalesced);
- a resolved notification closes it: the whole episode, from the first
  startsAt to the last endsAt, is analyzed once more, and that is the last;
- `--match LABEL=VALUE` keeps the alerts that carry every such label; a
  notification with none of them is answered 200 and ignored.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from loadkit.oncall.incidents import (
    ANALYZED,
    ANALYZING,
    DEADLINE,
    FAILED,
    INTERRUPTED,
    NS,
    PENDING,
    REPORT_FILE,
    STATE_FILE,
    Incident,
    IncidentStore,
    WindowPolicy,
    incident_id,
    selectors_from_labels,
)
from loadkit.oncall.notify import Notifier
from loadkit.oncall.payload import FIRING, RESOLVED, Notification
from loadkit.oncall.worker import Worker

Log = Callable[[str], None]


@dataclass(frozen=True)
class Answer:
    status: int  # the HTTP status
    message: str


def parse_match(text: str) -> tuple[str, str]:
    """'severity=page' -> ('severity', 'page'); ValueError otherwise."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"not LABEL=VALUE: {text!r}")
    return name.strip(), value


def _iso(ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ns / NS))


class OncallService:
    def __init__(
        self,
        store: IncidentStore,
        worker: Worker,
        notifier: Notifier,
        policy: WindowPolicy,
        public_url: str,
        matches: Sequence[tuple[str, str]] = (),
        log: Log = print,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.store = store
        self.worker = worker
        self.notifier = notifier
        self.policy = policy
        self.public_url = public_url.rstrip("/")
        self.matches = tuple(matches)
        self.log = log
        self.clock = clock

    def report_url(self, incident: Incident) -> str:
        return f"{self.public_url}/incidents/{quote(incident.id)}/{REPORT_FILE}"

    def resume(self) -> None:
        """After a restart: queue again what was pending, in progress or interrupted, and send
        the deliveries that had not gone out."""
        for incident in self.store.load():
            if incident.state in (PENDING, ANALYZING, INTERRUPTED) and not incident.closed:
                incident.state = PENDING
                self.store.save(incident)
                self.worker.enqueue(incident)
            self.notifier.resume(incident)
        for problem in self.store.skipped:
            self.log(f"skipped an unreadable incident state: {problem}")

    def _matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.matches)

    def receive(self, notification: Notification) -> Answer:
        alerts = [a for a in notification.alerts if self._matches(a.labels)]
        if not alerts:
            return Answer(200, "ignored: no alert matches --match")
        now = self.clock()
        firing = [a for a in alerts if a.status == FIRING]
        with self.store.lock:
            incident = self.store.open_for_group(notification.group_key)
            if incident is None:
                opened = incident_id(notification.alertname, notification.group_key, now)
                if not self.worker.has_room_for(opened):
                    return Answer(503, "too many incidents waiting for analysis; retry later")
                incident = Incident(
                    id=opened,
                    group_key=notification.group_key,
                    alertname=notification.alertname,
                    opened_ns=now,
                    status=FIRING,
                    starts_at_ns=min(a.starts_at_ns for a in alerts),
                    last_firing_ns=now,
                )
                created = True
            else:
                created = False
            incident.notifications += 1
            incident.starts_at_ns = min(incident.starts_at_ns, *(a.starts_at_ns for a in alerts))
            incident.labels = dict(notification.common_labels)
            incident.annotations = dict(notification.common_annotations)
            incident.external_url = notification.external_url
            incident.selectors = selectors_from_labels(notification.common_labels)
            if firing:
                incident.status = FIRING
                incident.last_firing_ns = now
                incident.ends_at_ns = None
            else:
                incident.status = RESOLVED
                ends = [a.ends_at_ns for a in alerts if a.ends_at_ns is not None]
                incident.ends_at_ns = max(ends) if ends else now
            start, end = self.policy.window(
                incident.starts_at_ns, incident.last_firing_ns, incident.ends_at_ns
            )
            incident.window_asked = [start, end]
            incident.due_ns = end
            if incident.state != ANALYZING:
                incident.state = PENDING
            self.store.save(incident)
            self.worker.enqueue(incident)
        what = "opened" if created else ("resolved" if incident.status == RESOLVED else "updated")
        self.log(
            f"incident {incident.id} {what} ({notification.alertname}, {len(alerts)} alert(s), "
            f"window {_iso(start)} .. {_iso(end)}, analysis at {_iso(end)})"
        )
        return Answer(200, f"incident {incident.id} {what}")

    def incident_url(self, incident: Incident) -> str:
        return f"{self.public_url}/incidents/{quote(incident.id)}/{STATE_FILE}"

    def analyzed(self, incident: Incident, result: dict[str, Any] | None) -> None:
        """The worker's callback: the summary of a finished analysis goes to the receivers,
        and so does one of a failed analysis (deadline, Prometheus, the import), so that
        whoever is paged is not left waiting for a report that will not come. An
        interrupted one is done again at the next start: nothing is sent."""
        last = incident.analyses[-1] if incident.analyses else {}
        outcome = last.get("outcome")
        if outcome not in (ANALYZED, FAILED, DEADLINE) or not self.notifier.receivers:
            return
        failed = outcome != ANALYZED
        result = result or {}
        window = last["window_start_ns"], last["window_end_ns"]
        has_report = (self.store.path(incident) / REPORT_FILE).exists()
        summary = {
            "incident": incident.id,
            "alert": incident.alertname,
            "status": incident.status,
            "labels": incident.labels,
            "analysis": len(incident.analyses),
            "final": incident.status == RESOLVED,
            "outcome": outcome,  # analyzed, failed or deadline
            "error": last.get("error") if failed else None,
            "verdict": "the analysis failed: no report" if failed else result.get("verdict", ""),
            "headline": result.get("headline", ""),
            "finding": result.get("finding"),
            "period_s": result.get("period_s"),
            "window": f"{_iso(window[0])} .. {_iso(window[1])}",
            # a failed re-analysis leaves the previous report in place: still worth a look
            "report_url": self.report_url(incident) if has_report else None,
            "incident_url": self.incident_url(incident),
        }
        self.notifier.announce(incident, summary)
