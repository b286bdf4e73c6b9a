"""The run guard: `--abort-on CONDITION` stops the load when the target breaks its SLO.

A condition is `METRIC>VALUE for DURATION`, e.g. `p99>80ms for 10s` or
`errors>5% for 5s`, or `slo` (the scenario's SLO thresholds, each for 10 s;
`slo for 5s` changes the duration). It holds when every one of the last
DURATION complete 1 s intervals, merged over all Locust processes, breaks
the threshold; an interval without evidence (nothing completed, nothing
waiting) never breaks it.

- Latency (`p50`, `p90`, `p95`, `p99`, `p99.9`, `max`): coordinated-omission
  corrected, over the requests that completed in the interval *and* those
  still in flight at its end, counted at their age so far (the recorder's
  `pending` histogram). A stalled target that completes nothing is therefore
  late, not silent.
- `errors`: failed requests and dropped arrivals, in percent of completed
  requests plus dropped arrivals (the SLO verdict's definition).

Parsing happens before anything starts, so a bad condition is one line
(`UsageError`, exit 2).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loadkit import percentile_names
from loadkit.errors import UsageError
from loadkit.load.live import SECOND_NS, IntervalView, LiveRunReader, merge

DEFAULT_SLO_FOR_S = 10
MAX_FOR_S = 3600
_CONDITION = re.compile(
    r"^\s*(?P<metric>[a-z0-9.]+)\s*(?P<op>>=|>)\s*(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>us|ms|s|%)?"
    r"\s*(?:for\s+(?P<for>\d+(?:\.\d+)?)\s*(?P<for_unit>s|m)?)?\s*$"
)
_SLO = re.compile(r"^\s*slo\s*(?:for\s+(?P<for>\d+(?:\.\d+)?)\s*(?P<for_unit>s|m)?)?\s*$")
_HINT = 'e.g. --abort-on "p99>80ms for 10s", --abort-on "errors>5% for 5s" or --abort-on slo'


@dataclass(frozen=True)
class AbortCondition:
    """One parsed `--abort-on` condition."""

    text: str  # normalized, e.g. "p99>80ms for 10s"
    metric: str  # a percentile key ("p99", "p999"), "max" or "errors"
    threshold: float  # seconds for latency, percent for errors
    for_s: int  # whole seconds (1 s intervals)
    inclusive: bool = False  # ">=" instead of ">"

    @property
    def unit(self) -> str:
        return "%" if self.metric == "errors" else "s"

    def value(self, interval: IntervalView) -> float | None:
        """The metric in one interval; None when the interval holds no evidence."""
        if self.metric == "errors":
            denom = interval.completed + interval.dropped
            return 100.0 * (interval.errors + interval.dropped) / denom if denom else None
        hist = merge([interval.hists[k] for k in ("corrected", "pending") if k in interval.hists])
        if hist is None or hist.get_total_count() == 0:
            return None
        if self.metric == "max":
            return float(hist.get_max_value()) / 1e6
        return float(hist.get_value_at_percentile(percentile_names.percentile(self.metric))) / 1e6

    def breaks(self, value: float | None) -> bool:
        if value is None:
            return False
        return value >= self.threshold if self.inclusive else value > self.threshold

    def format_value(self, value: float | None) -> str:
        if value is None:
            return "-"
        return f"{value:.3g}%" if self.metric == "errors" else f"{value * 1000:.4g}ms"


@dataclass(frozen=True)
class Breach:
    """A condition that held: from `since_ns` to `t_ns` (end of the last interval)."""

    condition: AbortCondition
    since_ns: int
    t_ns: int
    values: tuple[float, ...]  # the metric in each interval of the span

    def message(self) -> str:
        worst = self.condition.format_value(max(self.values))
        last = self.condition.format_value(self.values[-1])
        return (
            f"{self.condition.text} held for {len(self.values)} s "
            f"(last interval {last}, worst {worst})"
        )

    def to_manifest(self, detected_ns: int) -> dict[str, Any]:
        return {
            "by": "condition",
            "condition": self.condition.text,
            "metric": self.condition.metric,
            "threshold": self.condition.threshold,
            "unit": self.condition.unit,
            "for_s": self.condition.for_s,
            "since_ns": self.since_ns,
            "t_ns": self.t_ns,
            "detected_ns": detected_ns,
            "values": list(self.values),
            "message": self.message(),
        }


def _duration_s(text: str | None, unit: str | None, given: str) -> int:
    if text is None:
        return 1
    seconds = float(text) * (60.0 if unit == "m" else 1.0)
    if seconds < 1 or seconds != int(seconds) or seconds > MAX_FOR_S:
        raise UsageError(
            f"--abort-on {given!r}: the duration must be a whole number of seconds, 1..{MAX_FOR_S}",
            hint="conditions are checked on 1 s intervals, e.g. 'for 10s'",
        )
    return int(seconds)


def parse_condition(text: str) -> AbortCondition:
    """`p99>80ms for 10s` -> AbortCondition (not `slo`: see `expand_conditions`)."""
    m = _CONDITION.match(text.lower())
    if not m:
        raise UsageError(f"cannot read --abort-on {text!r}", hint=_HINT)
    metric, unit = m.group("metric"), m.group("unit")
    value = float(m.group("value"))
    for_s = _duration_s(m.group("for"), m.group("for_unit"), text)
    op = m.group("op")
    if metric == "errors":
        if unit not in (None, "%"):
            raise UsageError(f"--abort-on {text!r}: errors are a percentage", hint="errors>5%")
        threshold, shown = value, f"{value:g}%"
    elif percentile_names.key(metric) or metric == "max":
        if unit in (None, "%"):
            raise UsageError(f"--abort-on {text!r}: latency needs a time unit", hint="p99>80ms")
        threshold = value * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]
        shown = f"{value:g}{unit}"
        metric = percentile_names.key(metric) or metric
    else:
        known = f"{percentile_names.ACCEPTED}, max, errors"
        raise UsageError(f"--abort-on {text!r}: unknown metric {metric!r}", hint=f"one of {known}")
    spoken = percentile_names.spoken(metric) if percentile_names.key(metric) else metric
    normalized = f"{spoken}{op}{shown} for {for_s}s"
    return AbortCondition(normalized, metric, threshold, for_s, inclusive=op == ">=")


def slo_conditions(slo: Mapping[str, Any] | None, for_s: int, given: str) -> list[AbortCondition]:
    """The scenario's SLO (`{p99_ms: 50, errors_pct: 1}`) as conditions held for `for_s`."""
    out: list[AbortCondition] = []
    for key, value in (slo or {}).items():
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        if key == "errors_pct":
            out.append(parse_condition(f"errors>{value:g}% for {for_s}s"))
        elif key.endswith("_ms") and percentile_names.key(key.removesuffix("_ms")):
            out.append(parse_condition(f"{key.removesuffix('_ms')}>{value:g}ms for {for_s}s"))
    if not out:
        raise UsageError(
            f"--abort-on {given!r}: the scenario declares no SLO",
            hint="give the thresholds instead, e.g. --abort-on 'p99>50ms for 10s'",
        )
    return out


def expand_conditions(
    texts: Iterable[str], slo: Mapping[str, Any] | None = None
) -> list[AbortCondition]:
    """Parse every `--abort-on`; `slo` expands to the scenario's SLO thresholds."""
    out: list[AbortCondition] = []
    for text in texts:
        m = _SLO.match(text.lower())
        if m:
            for_s = _duration_s(m.group("for"), m.group("for_unit"), text)
            out.extend(slo_conditions(slo, for_s if m.group("for") else DEFAULT_SLO_FOR_S, text))
        else:
            out.append(parse_condition(text))
    return out


def check_syntax(texts: Iterable[str]) -> None:
    """Fail on a malformed condition before the scenario is even described."""
    for text in texts:
        if not _SLO.match(text.lower()):
            parse_condition(text)


class RunGuard:
    """Evaluates the conditions on each newly complete interval; the first breach wins."""

    def __init__(self, conditions: Sequence[AbortCondition]):
        self.conditions = tuple(conditions)
        self._checked_up_to: int | None = None
        self.longest_s = max((c.for_s for c in self.conditions), default=0)

    def check(self, reader: LiveRunReader) -> Breach | None:
        """Call after `reader.poll()`; returns a breach once per newly complete interval."""
        last = reader.last_complete_interval()
        if not self.conditions or last is None or last == self._checked_up_to:
            return None
        self._checked_up_to = last
        for condition in self.conditions:
            views = reader.complete_intervals(condition.for_s)
            if len(views) < condition.for_s:
                continue
            if views[-1].t_ns - views[0].t_ns != (condition.for_s - 1) * SECOND_NS:
                continue  # a second is missing: not a sustained breach
            values = [condition.value(v) for v in views]
            if all(condition.breaks(v) for v in values):
                end = views[-1].t_ns + (views[-1].length_ns or SECOND_NS)
                return Breach(
                    condition, views[0].t_ns, end, tuple(v for v in values if v is not None)
                )
        return None
