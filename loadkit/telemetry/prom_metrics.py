"""Any Prometheus text endpoint (Triton `/metrics`, MLServer, a custom service).

Parsed with `prometheus_client`'s text parser, never by hand. Families are
selected by name patterns (shell globs). Counter-like samples (counters and
the `_count`/`_sum`/`_bucket` parts of histograms and summaries) also get a
per-interval `delta`; a value that goes down is a restart, and the delta is
the value since the restart (`reset: true`).
"""

from __future__ import annotations

import fnmatch

from prometheus_client.parser import text_string_to_metric_families

from loadkit.rundir.schema import MetricRow
from loadkit.telemetry.base import (
    Sampler,
    SamplerOptions,
    SamplerSpec,
    SourcePlan,
    SourceUnavailable,
    TelemetrySource,
    WarnOnce,
    the_server,
)
from loadkit.telemetry.http import HttpGetError, KeepAliveGetter

DEFAULT_METRICS_INTERVAL_S = 1.0
TRITON_PATTERNS = ("nv_*",)
GENERIC_PATTERNS = ("*",)
EXCLUDED_PATTERNS = ("python_gc_*", "python_info", "process_*")
COUNTER_SUFFIXES = ("_total", "_count", "_sum", "_bucket", "_created")


def parse_metrics(
    text: str, patterns: tuple[str, ...] | list[str]
) -> list[tuple[str, dict[str, str], float, bool]]:
    """(sample name, labels, value, is_counter) for families matching `patterns`."""
    # prometheus_client renames counter samples to OpenMetrics style (appends
    # `_total`); keep the names the endpoint exposes (`nv_inference_count`).
    declared_counters = {
        parts[2]
        for line in text.splitlines()
        if line.startswith("# TYPE ")
        and len(parts := line.split()) >= 4
        and parts[3] == "counter"
        and not parts[2].endswith("_total")
    }
    out = []
    for family in text_string_to_metric_families(text):
        names = {family.name, *(s.name for s in family.samples)}
        if any(fnmatch.fnmatchcase(family.name, ex) for ex in EXCLUDED_PATTERNS):
            continue
        if not any(fnmatch.fnmatchcase(n, p) for n in names for p in patterns):
            continue
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            counter = family.type == "counter" or (
                family.type in ("histogram", "summary", "gaugehistogram")
                and s.name.endswith(COUNTER_SUFFIXES)
            )
            name = s.name
            if family.type == "counter" and family.name in declared_counters:
                name = name.removesuffix("_total")
            out.append((name, dict(s.labels), float(s.value), counter))
    return out


class PrometheusSampler:
    """Scrapes one endpoint; one row per selected sample per scrape."""

    def __init__(
        self,
        url: str,
        *,
        patterns: tuple[str, ...] | list[str] = TRITON_PATTERNS,
        source: str = "metrics",
    ) -> None:
        self.url = url
        self.patterns = tuple(patterns)
        self.source = source
        self._http = KeepAliveGetter(url, timeout_s=2.0)
        self._prev: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._warn = WarnOnce()
        self._down = False

    def _scrape(self) -> str:
        return self._http.get("").decode("utf-8", errors="replace")

    def open(self) -> None:
        try:
            self._scrape()
        except HttpGetError as exc:
            raise SourceUnavailable(
                f"metrics endpoint {self.url} not readable ({exc})",
                hint="give the full metrics URL, e.g. http://127.0.0.1:8002/metrics",
            ) from exc

    def sample(self, t_ns: int) -> list[MetricRow]:
        try:
            text = self._scrape()
        except HttpGetError as exc:
            if not self._down:
                self._warn.warn(f"down:{exc}", f"metrics endpoint unreachable ({exc}); retrying")
            self._down = True
            return []
        self._down = False
        try:
            samples = parse_metrics(text, self.patterns)
        except ValueError as exc:
            self._warn.warn("parse", f"metrics from {self.url} did not parse ({exc})")
            return []
        rows: list[MetricRow] = []
        for name, labels, value, counter in samples:
            row: MetricRow = {"t_ns": t_ns, "name": name, "labels": labels, "value": value}
            if counter:
                key = (name, tuple(sorted(labels.items())))
                prev = self._prev.get(key)
                self._prev[key] = value
                if prev is None:
                    row["delta"] = None
                elif value < prev:
                    row["delta"], row["reset"] = value, True
                else:
                    row["delta"] = value - prev
            rows.append(row)
        return rows

    def close(self) -> None:
        self._http.close()

    def drain_warnings(self) -> list[str]:
        return self._warn.drain()


def _metrics_sampler(spec: SamplerSpec) -> Sampler:
    return PrometheusSampler(
        spec.options["url"], patterns=spec.options["patterns"], source=spec.source
    )


def plan_metrics(options: SamplerOptions, interval_s: float) -> SourcePlan:
    """Sampled when the run names a Prometheus /metrics URL."""
    if not options.metrics_url:
        return SourcePlan(None)
    patterns = list(options.metrics_patterns or TRITON_PATTERNS)
    opts = {"url": options.metrics_url, "patterns": patterns}
    return SourcePlan(
        SamplerSpec("metrics", "metrics", interval_s, opts),
        place=the_server(options, options.metrics_url),
    )


SOURCE = TelemetrySource(
    name="metrics",
    label="Prometheus metrics",
    default_interval_s=DEFAULT_METRICS_INTERVAL_S,
    row_type=MetricRow,
    samplers={"metrics": _metrics_sampler},
    plan=plan_metrics,
)
