"""Alertmanager's webhook payload, version 4, as dataclasses (checked, never trusted).

The format is Alertmanager's documented one
(https://prometheus.io/docs/alerting/latest/configuration/#webhook_config):
`version`, `groupKey`, `truncatedAlerts`, `status`, `receiver`, `groupLabels`,
`commonLabels`, `commonAnnotations`, `externalURL` and `alerts`, each alert with
`status`, `labels`, `annotations`, `startsAt`, `endsAt`, `generatorURL` and
`fingerprint`. Anything else is refused with a `PayloadError`, which the HTTP
side answers with a 400 and one log line.
"""

from __future__ import annotations

import json
import re
from calendar import timegm
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

VERSION = "4"
FIRING = "firing"
RESOLVED = "resolved"

# RFC 3339 as Go writes it: up to nine digits of fraction, Z or an offset.
_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))$"
)
_NS = 1_000_000_000


class PayloadError(ValueError):
    """Not an Alertmanager v4 notification; the message says what is wrong, in one line."""


def parse_time(text: str) -> int | None:
    """RFC 3339 -> Unix ns; Go's zero time ('0001-01-01T00:00:00Z': not ended) -> None."""
    match = _RFC3339.match(text)
    if match is None:
        raise PayloadError(f"not an RFC 3339 time: {text[:40]!r}")
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    if year <= 1:
        return None
    fraction = (match.group(7) or "").ljust(9, "0")
    seconds = timegm((year, month, day, hour, minute, second, 0, 0, 0))
    if match.group(9):
        offset = int(match.group(10)) * 3600 + int(match.group(11)) * 60
        seconds -= offset if match.group(9) == "+" else -offset
    return seconds * _NS + int(fraction)


def _labels(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise PayloadError(f"{where} is not an object of strings")
    return dict(value)


def _string(data: Mapping[str, Any], key: str, where: str, required: bool = True) -> str:
    value = data.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise PayloadError(f"{where}{key} is missing or not a string")
    return value


def _status(data: Mapping[str, Any], where: str) -> str:
    status = _string(data, "status", where)
    if status not in (FIRING, RESOLVED):
        raise PayloadError(f"{where}status is {status[:20]!r}, not firing or resolved")
    return status


@dataclass(frozen=True)
class Alert:
    status: str  # "firing" or "resolved"
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at_ns: int
    ends_at_ns: int | None  # None: still firing (Go's zero time)
    generator_url: str
    fingerprint: str

    @classmethod
    def from_dict(cls, data: Any, index: int) -> Alert:
        where = f"alerts[{index}]."
        if not isinstance(data, Mapping):
            raise PayloadError(f"alerts[{index}] is not an object")
        starts = parse_time(_string(data, "startsAt", where))
        if starts is None:
            raise PayloadError(f"{where}startsAt is Go's zero time")
        ends_text = _string(data, "endsAt", where, required=False)
        return cls(
            status=_status(data, where),
            labels=_labels(data.get("labels", {}), f"{where}labels"),
            annotations=_labels(data.get("annotations", {}), f"{where}annotations"),
            starts_at_ns=starts,
            ends_at_ns=parse_time(ends_text) if ends_text else None,
            generator_url=_string(data, "generatorURL", where, required=False),
            fingerprint=_string(data, "fingerprint", where, required=False),
        )


@dataclass(frozen=True)
class Notification:
    """One webhook call: a group's alerts as Alertmanager sends them."""

    version: str
    group_key: str
    truncated_alerts: int
    status: str  # the group's: "firing" while any alert fires
    receiver: str
    group_labels: dict[str, str]
    common_labels: dict[str, str]
    common_annotations: dict[str, str]
    external_url: str
    alerts: tuple[Alert, ...]

    @property
    def alertname(self) -> str:
        return (
            self.group_labels.get("alertname")
            or self.common_labels.get("alertname")
            or next((a.labels["alertname"] for a in self.alerts if "alertname" in a.labels), "")
            or "alert"
        )

    def firing(self) -> tuple[Alert, ...]:
        return tuple(a for a in self.alerts if a.status == FIRING)

    @classmethod
    def from_dict(cls, data: Any) -> Notification:
        if not isinstance(data, Mapping):
            raise PayloadError("the payload is not a JSON object")
        version = data.get("version")
        if version != VERSION:
            raise PayloadError(
                f"version is {str(version)[:20]!r}, not {VERSION!r} (Alertmanager's)"
            )
        alerts = data.get("alerts")
        if not isinstance(alerts, list) or not alerts:
            raise PayloadError("alerts is missing, empty or not a list")
        group_key = _string(data, "groupKey", "")
        if not group_key:
            raise PayloadError("groupKey is empty")
        truncated = data.get("truncatedAlerts", 0)
        if not isinstance(truncated, int) or isinstance(truncated, bool) or truncated < 0:
            raise PayloadError("truncatedAlerts is not a count")
        return cls(
            version=version,
            group_key=group_key,
            truncated_alerts=truncated,
            status=_status(data, ""),
            receiver=_string(data, "receiver", "", required=False),
            group_labels=_labels(data.get("groupLabels", {}), "groupLabels"),
            common_labels=_labels(data.get("commonLabels", {}), "commonLabels"),
            common_annotations=_labels(data.get("commonAnnotations", {}), "commonAnnotations"),
            external_url=_string(data, "externalURL", "", required=False),
            alerts=tuple(Alert.from_dict(a, i) for i, a in enumerate(alerts)),
        )


def parse_notification(body: bytes) -> Notification:
    """The request body -> a Notification, or PayloadError (not JSON, not version 4, ...)."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PayloadError(f"not JSON: {exc}") from None
    return Notification.from_dict(data)
