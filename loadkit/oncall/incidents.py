"""Incidents: one per Alertmanager group, each a directory with its state on disk.

An incident directory (`DIR/<id>/`) holds `incident.json` (this module's state,
written whole or not at all), the run directory imported from Prometheus
(`run/`), `analysis.json`, `report.html`, and the analysis child's log
(`job.log`). The state file is versioned (`STATE_VERSION`, history below); a
restarted `loadkit oncall` reads every one back, queues again what was pending
or in progress, and retries the deliveries that had not gone out.

State version history:
  1  first version (issue 54, item 2).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loadkit.rundir.atomic import write_atomic

STATE_VERSION = 1
STATE_FILE = "incident.json"
RUN_DIR = "run"
ANALYSIS_FILE = "analysis.json"
REPORT_FILE = "report.html"
JOB_LOG = "job.log"
NS = 1_000_000_000

# Where an incident's analysis stands.
PENDING = "pending"  # queued: its window's end is not past yet, or the worker is busy
ANALYZING = "analyzing"
ANALYZED = "analyzed"
FAILED = "failed"  # the import or the analysis failed (the error says why)
INTERRUPTED = "interrupted"  # loadkit oncall stopped (SIGTERM) before it finished
DEADLINE = "deadline"  # stopped at --deadline
OUTCOMES = (ANALYZED, FAILED, INTERRUPTED, DEADLINE)

# The alert labels that narrow the server's series (Triton's, its GPU metrics, its process).
SELECTOR_LABELS = ("job", "instance", "pod", "namespace")


@dataclass(frozen=True)
class WindowPolicy:
    """How an alert's window is chosen (`loadkit oncall --lookback/--settle/--max-window`)."""

    lookback_s: float = 900.0  # before startsAt: the baseline the episodes stand out from
    settle_s: float = 60.0  # after the last firing notification (or endsAt): the tail
    max_window_s: float = 6 * 3600.0  # a long episode keeps its latest part

    def window(
        self, starts_at_ns: int, last_firing_ns: int, ends_at_ns: int | None
    ) -> tuple[int, int]:
        """[startsAt - lookback, (endsAt or the last firing notification) + settle], at most
        max_window long (its end kept)."""
        end = (ends_at_ns if ends_at_ns is not None else last_firing_ns) + int(self.settle_s * NS)
        start = starts_at_ns - int(self.lookback_s * NS)
        return max(start, end - int(self.max_window_s * NS)), end


_USERINFO = re.compile(r"(://)[^/@\s]+@")


def without_credentials(text: str) -> str:
    """`http://user:pw@prometheus:9090` -> `http://prometheus:9090`, wherever in `text`: an
    analysis' error is shown on the index and posted to the receivers."""
    return _USERINFO.sub(r"\1", text)


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def selectors_from_labels(labels: Mapping[str, str]) -> list[str]:
    """The alert's labels that name the server (job, instance, pod, namespace) as matchers,
    e.g. ['{job="triton",instance="gpu-3:8002"}'] (`loadkit import --selector` syntax); the
    model is passed apart (Triton's GPU metrics have no `model` label)."""
    matchers = [f'{k}="{_quote(labels[k])}"' for k in SELECTOR_LABELS if labels.get(k)]
    return ["{" + ",".join(matchers) + "}"] if matchers else []


def incident_id(alertname: str, group_key: str, opened_ns: int) -> str:
    """`20261204-030512-TritonP99High-1a2b3c4d`: sortable, readable, safe as a path."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(opened_ns / NS))
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", alertname)[:40].strip("._") or "alert"
    digest = hashlib.sha256(f"{group_key}\0{opened_ns}".encode()).hexdigest()[:8]
    return f"{stamp}-{name}-{digest}"


@dataclass
class Delivery:
    """One summary to one receiver: its state, so that nothing is lost silently."""

    receiver: str  # the receiver's URL, without any user-info
    format: str
    analysis: int  # which analysis of the incident it tells
    state: str = "pending"  # "pending", "delivered", "failed" (every attempt failed)
    attempts: int = 0
    last_error: str | None = None
    updated_ns: int = 0
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class Incident:
    id: str
    group_key: str
    alertname: str
    opened_ns: int
    status: str  # the group's: "firing" or "resolved"
    starts_at_ns: int
    last_firing_ns: int  # the latest notification that said firing
    ends_at_ns: int | None = None  # the resolution's endsAt
    labels: dict[str, str] = field(default_factory=dict)  # the group's common labels
    annotations: dict[str, str] = field(default_factory=dict)
    external_url: str = ""
    notifications: int = 0
    state: str = PENDING
    selectors: list[str] = field(default_factory=list)  # from the labels: selectors_from_labels
    window_asked: list[int] = field(default_factory=lambda: [0, 0])  # the next analysis' window
    due_ns: int = 0  # the next analysis starts after this (its window's end)
    final_done: bool = False  # the resolved episode has been analyzed whole
    window: list[int] | None = None  # [start_ns, end_ns] of the last analysis
    analyses: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] | None = None  # the last analysis' summary (verdict, finding, ...)
    error: str | None = None
    deliveries: list[Delivery] = field(default_factory=list)
    updated_ns: int = 0

    @property
    def closed(self) -> bool:
        return self.status == "resolved" and self.final_done

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["schema_version"] = STATE_VERSION
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Incident:
        version = data.get("schema_version")
        if version != STATE_VERSION:
            raise ValueError(f"incident state version {version!r} is not {STATE_VERSION}")
        fields = dict(data)
        fields.pop("schema_version")
        fields["deliveries"] = [Delivery(**d) for d in fields.get("deliveries", [])]
        return cls(**fields)


def dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


class IncidentStore:
    """Every incident of DIR, in memory and on disk; thread-safe (one lock)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()
        self.incidents: dict[str, Incident] = {}
        self.skipped: list[str] = []  # state files that could not be read (named, kept)

    def load(self) -> list[Incident]:
        """Read every incident back (a restart); returns them oldest first."""
        with self.lock:
            for state in sorted(self.root.glob(f"*/{STATE_FILE}")):
                try:
                    incident = Incident.from_dict(json.loads(state.read_text(encoding="utf-8")))
                except (OSError, ValueError, TypeError) as exc:
                    self.skipped.append(f"{state}: {exc}")
                    continue
                self.incidents[incident.id] = incident
            return sorted(self.incidents.values(), key=lambda i: i.opened_ns)

    def path(self, incident: Incident | str) -> Path:
        return self.root / (incident if isinstance(incident, str) else incident.id)

    def save(self, incident: Incident) -> None:
        with self.lock:
            incident.updated_ns = time.time_ns()
            folder = self.path(incident)
            folder.mkdir(parents=True, exist_ok=True)
            write_atomic(folder / STATE_FILE, json.dumps(incident.to_dict(), indent=1) + "\n")
            self.incidents[incident.id] = incident

    def open_for_group(self, group_key: str) -> Incident | None:
        """The group's incident that is not closed yet (a re-notification updates it)."""
        with self.lock:
            found = [i for i in self.incidents.values() if i.group_key == group_key]
            found = [i for i in found if not i.closed]
            return max(found, key=lambda i: i.opened_ns) if found else None

    def newest_first(self) -> list[Incident]:
        with self.lock:
            return sorted(self.incidents.values(), key=lambda i: i.opened_ns, reverse=True)

    def get(self, incident_id: str) -> Incident | None:
        with self.lock:
            return self.incidents.get(incident_id)

    def prune(self, budget_bytes: int, keep: Iterable[str]) -> list[str]:
        """Remove the oldest incident directories until DIR fits the budget; never one in
        `keep` (in progress or queued). Returns the ids removed."""
        protected = set(keep)
        removed: list[str] = []
        with self.lock:
            sizes = {i.id: dir_size(self.path(i)) for i in self.incidents.values()}
            total = sum(sizes.values())
            for incident in sorted(self.incidents.values(), key=lambda i: i.opened_ns):
                if total <= budget_bytes:
                    break
                if incident.id in protected:
                    continue
                shutil.rmtree(self.path(incident), ignore_errors=True)
                del self.incidents[incident.id]
                total -= sizes[incident.id]
                removed.append(incident.id)
        return removed
