"""A window of Prometheus pulled through the exporter families into run-directory rows.

`pull_window` asks Prometheus for every family's metrics over [start, end] at
`step`, and returns rows per series (gpu, host, triton_stats,
production_latency) plus what a reader must know: which series came from which
query, which model/instance was kept when a selector matched several, gaps,
counter resets. Latency comes from the first source that has data: Triton's
summaries, else the application histogram named, else the mean from Triton's
duration/count counters (a mean, never called a percentile).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from loadkit.errors import UsageError
from loadkit.telemetry.prometheus.client import NS, PrometheusClient, chunks_for
from loadkit.telemetry.prometheus.families import (
    AGENT_GPU,
    AGENT_HOST,
    CADVISOR,
    DCGM,
    NODE,
    PROCESS,
    SERIES_GPU,
    SERIES_HOST,
    SERIES_LATENCY,
    SERIES_TRITON,
    TRITON,
    TRITON_GPU,
    TRITON_MEAN,
    TRITON_SUMMARY,
    ExporterFamily,
    MetricMap,
    PromSeries,
    Row,
    application_histogram,
    rows_from_series,
)

# Latency sources, in the order they are tried.
LATENCY_SUMMARY = "triton-summary"
LATENCY_HISTOGRAM = "app-histogram"
LATENCY_MEAN = "triton-mean"
# Triton's summaries (prometheus-cpp defaults): quantiles over the last 60 s, in 5 age buckets.
SUMMARY_MAX_AGE_S = 60.0
# The step when the scrape interval cannot be read (no `up` samples before the window's end).
DEFAULT_STEP_S = 5.0
# Steps per series held in memory: 6 h at 1 s. A longer window at its scrape interval is
# coarsened to stay within it (24 h at a 1 s scrape: a 4 s step); Prometheus's own limit
# of 11,000 points per query is met by asking in chunks (client.MAX_POINTS).
MAX_STEPS = 21_600


def choose_step(asked_s: float | None, scrape_s: float | None, span_s: float) -> tuple[float, str]:
    """The window's step and why: what was asked, else the finest the data allows.

    A 4 s slowdown every 12 s is one or two steps of a fixed 5 s grid, and its onsets
    jitter by a step (issue 54): the scrape interval is the finest step that holds a
    new sample, and a period of a few steps is resolvable only there.
    """
    if asked_s is not None:
        return asked_s, "--step"
    if scrape_s is None:
        step, why = DEFAULT_STEP_S, "the scrape interval unknown: no `up` samples"
    else:
        step, why = float(max(1, round(scrape_s))), "the scrape interval"
    if span_s / step > MAX_STEPS:
        step = float(math.ceil(span_s / MAX_STEPS))
        why += f", coarsened to stay within {MAX_STEPS:,} steps"
    return step, why


@dataclass
class PulledWindow:
    rows: dict[str, list[Row]] = field(default_factory=dict)
    sources: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    latency_source: str | None = None
    model: str | None = None
    rate_window: str = ""
    scrape_interval_s: float | None = None
    step_s: float = DEFAULT_STEP_S
    step_reason: str = ""  # "the scrape interval", "--step", ...
    chunks: int = 1  # range queries per series (Prometheus's point limit)
    # The machine each series was sampled on, where its exporter's labels say it
    # (node-exporter's `instance`, without the port).
    hosts: dict[str, str] = field(default_factory=dict)


# The families a plain --selector (the serving process's, e.g. {job="triton"}) applies to.
SERVER_FAMILIES = (
    "triton",
    "triton-summary",
    "triton-mean",
    "triton-gpu",
    "app-histogram",
    "process",
)


@dataclass(frozen=True)
class Selectors:
    """Label matchers (without braces): `server` for the serving process's families,
    `by_family` for one family, instead (node-exporter and cAdvisor have their own jobs)."""

    server: str = ""
    by_family: dict[str, str] = field(default_factory=dict)

    def for_family(self, family: str) -> str:
        """The family's own selector if given, else the server's (for its families)."""
        if family in self.by_family:
            return self.by_family[family]
        return self.server if family in SERVER_FAMILIES else ""


def parse_selector(text: str) -> str:
    """'{job="triton"}' or 'job="triton"' -> 'job="triton"' (checked by Prometheus itself)."""
    text = text.strip()
    if text.startswith("{"):
        if not text.endswith("}"):
            raise UsageError(f"not a label selector: {text!r}", hint='e.g. {job="triton"}')
        text = text[1:-1]
    return text.strip().strip(",")


def _fetch(
    client: PrometheusClient,
    family: ExporterFamily,
    matchers: str,
    window: tuple[int, int, float],
    rate: str,
) -> tuple[list[tuple[MetricMap, Sequence[PromSeries]]], list[str], list[str]]:
    start, end, step = window
    fetched: list[tuple[MetricMap, Sequence[PromSeries]]] = []
    found: list[str] = []
    empty: list[str] = []
    for metric_map in family.metrics:
        if not metric_map.window:
            continue
        query = metric_map.promql(matchers, rate)
        series = client.query_range(query, start, end, step)
        (found if series else empty).append(query)
        fetched.append((metric_map, series))
    return fetched, found, empty


def _label(key: tuple[str | None, ...], family: ExporterFamily) -> str:
    parts = [f'{k}="{v}"' for k, v in zip(family.key_labels, key, strict=True) if v]
    return "{" + ",".join(parts) + "}"


def _count_gaps(rows: list[Row], step_ns: int) -> int:
    """Steps without a sample (target down, stale, not scraped), for the worst field,
    between the field's first and last sample."""
    present: dict[str, list[int]] = {}
    for row in rows:
        for name, value in row.items():
            if name != "t_ns" and value is not None:
                present.setdefault(name, []).append(row["t_ns"])
    worst = 0
    for times in present.values():
        expected = (times[-1] - times[0]) // step_ns + 1
        worst = max(worst, int(expected) - len(set(times)))
    return worst


def _count_resets(rows: list[Row], fields: Sequence[str]) -> int:
    resets = 0
    for name in fields:
        last = None
        for row in rows:
            value = row.get(name)
            if isinstance(value, int | float):
                if last is not None and value < last:
                    resets += 1
                last = value
    return resets


def detect_scrape_interval(client: PrometheusClient, matchers: str, end_ns: int) -> float | None:
    """Seconds between scrapes of the matched targets: the median spacing of `up`'s raw
    samples in the minute before the window's end."""
    sel = f"{{{matchers}}}" if matchers else ""
    spacings: list[float] = []
    for series in client.query_raw(f"up{sel}[1m]", end_ns):
        times = [t for t, _ in series.points]
        spacings.extend((b - a) / NS for a, b in zip(times, times[1:], strict=False))
    return float(statistics.median(spacings)) if spacings else None


def rate_window_for(step_s: float, scrape_s: float | None) -> str:
    """Grafana's `$__rate_interval`: max(step + scrape, 4 x scrape), in whole seconds."""
    scrape = scrape_s or 15.0
    return f"{max(step_s + scrape, 4 * scrape, 2.0):.0f}s"


@dataclass(frozen=True)
class _Pull:
    """What every step of a pull asks Prometheus with."""

    client: PrometheusClient
    selectors: Selectors
    window: tuple[int, int, float]  # start_ns, end_ns, step_s
    rate: str  # the rate window of counters
    step_ns: int

    def fetch(
        self, family: ExporterFamily
    ) -> tuple[list[tuple[MetricMap, Sequence[PromSeries]]], list[str], list[str]]:
        return _fetch(
            self.client, family, self.selectors.for_family(family.name), self.window, self.rate
        )


def pull_window(
    client: PrometheusClient,
    *,
    start_ns: int,
    end_ns: int,
    step_s: float | None,
    selectors: Selectors,
    model: str | None = None,
    latency_histogram: str | None = None,
) -> PulledWindow:
    """The window's rows, in four steps: traffic (required), latency (the first source with
    data), then GPU and host (optional, each said when absent). `step_s` None: the finest
    step the scrape interval allows (`choose_step`)."""
    out = PulledWindow()
    out.scrape_interval_s = detect_scrape_interval(client, selectors.for_family("triton"), end_ns)
    step_s, out.step_reason = choose_step(step_s, out.scrape_interval_s, (end_ns - start_ns) / NS)
    out.step_s = step_s
    out.chunks = chunks_for(start_ns, end_ns, step_s)
    out.rate_window = rate_window_for(step_s, out.scrape_interval_s)
    pull = _Pull(
        client, selectors, (start_ns, end_ns, step_s), out.rate_window, int(round(step_s * NS))
    )
    chosen = _pull_traffic(pull, out, model)
    _pull_latency(pull, out, chosen, latency_histogram)
    _pull_gpu(pull, out)
    _pull_host(pull, out)
    return out


def pull_server_series(
    client: PrometheusClient,
    *,
    start_ns: int,
    end_ns: int,
    step_s: float,
    selectors: Selectors,
) -> PulledWindow:
    """A load test's window of the server's GPU and host series only (`loadkit import
    --prometheus URL --run DIR`): the latency and traffic are the run's own."""
    out = PulledWindow()
    out.scrape_interval_s = detect_scrape_interval(client, selectors.for_family("node"), end_ns)
    out.rate_window = rate_window_for(step_s, out.scrape_interval_s)
    pull = _Pull(
        client, selectors, (start_ns, end_ns, step_s), out.rate_window, int(round(step_s * NS))
    )
    _pull_gpu(pull, out)
    _pull_host(pull, out)
    return out


def _pull_traffic(pull: _Pull, out: PulledWindow, model: str | None) -> tuple[str | None, ...]:
    """Triton's counters of the chosen model's server (`--model`, else the busiest model);
    the chosen model's key. Without them there is nothing to analyze."""
    fetched, found, empty = pull.fetch(TRITON)
    triton_rows = rows_from_series(TRITON, fetched)
    if not triton_rows:
        raise UsageError(
            f"Prometheus has no {empty[0]} between the window's start and end",
            hint="check --selector, --window/--end, and that Prometheus scrapes Triton's /metrics",
        )
    models = sorted(
        triton_rows,
        key=lambda k: -max((r.get("success_count") or 0) for r in triton_rows[k]),
    )
    chosen = next((k for k in models if model is None or k[0] == model), None)
    if chosen is None:
        names = ", ".join(sorted({str(k[0]) for k in models}))
        raise UsageError(
            f"model {model!r} is not in Prometheus's Triton metrics", hint=f"models: {names}"
        )
    out.model = chosen[0]
    if len(models) > 1:
        others = ", ".join(_label(k, TRITON) for k in models if k != chosen)
        why = "--model" if model else "the busiest"
        out.notes.append(
            f"several Triton models or instances matched; analyzed {_label(chosen, TRITON)} "
            f"({why}); also present: {others} (choose with --model, narrow with --selector)"
        )
    # One server: the chosen instance's models (several instances' counters and quantiles
    # must not be mixed: a sum of two P99s is no P99).
    instance = chosen[2]
    rows: list[Row] = []
    for key in models:
        if key[2] != instance:
            continue
        for row in triton_rows[key]:
            rows.append(
                {**row, "model": key[0], "version": key[1], "instance": key[2],
                 "imported_from": "prometheus"}
            )  # fmt: skip
    rows.sort(key=lambda r: (r["t_ns"], r["model"] or ""))
    out.rows[SERIES_TRITON] = rows
    chosen_rows = triton_rows[chosen]
    counters = [m.field for m in TRITON.metrics if m.kind == "counter"]
    resets = _count_resets(chosen_rows, counters)
    gaps = _count_gaps(chosen_rows, pull.step_ns)
    out.sources.append(_source(TRITON, found, resets, gaps, pull.rate))
    return chosen


def _pull_latency(
    pull: _Pull, out: PulledWindow, chosen: tuple[str | None, ...], latency_histogram: str | None
) -> None:
    """The chosen model's latency from the first source with data, and what it is."""
    rate, step_ns = pull.rate, pull.step_ns
    candidates: list[tuple[str, ExporterFamily]] = [(LATENCY_SUMMARY, TRITON_SUMMARY)]
    native: ExporterFamily | None = None
    if latency_histogram:
        candidates.append((LATENCY_HISTOGRAM, application_histogram(latency_histogram)))
        native = application_histogram(latency_histogram, native=True)
        candidates.append((LATENCY_HISTOGRAM, native))
    candidates.append((LATENCY_MEAN, TRITON_MEAN))
    tried: list[str] = []
    for source, family in candidates:
        fam_sel = pull.selectors.for_family(family.name)
        fetched, found, empty = pull.fetch(family)
        by_key = rows_from_series(family, fetched)
        key = chosen if family.key_labels else ()  # the analyzed model's, never another's
        lat_rows = [
            r
            for r in by_key.get(key, [])
            if any(isinstance(v, float | int) for k, v in r.items() if k.endswith("_ms"))
        ]
        if not lat_rows:
            tried.append(empty[0] if empty else family.metrics[0].promql(fam_sel, rate))
            if source == LATENCY_HISTOGRAM and family is native:  # neither classic nor native
                raise UsageError(
                    f"Prometheus has no data for the latency histogram: {tried[-2]} "
                    f"(classic) or {tried[-1]} (native)",
                    hint="give the histogram's base name (without _bucket), or leave out --latency-histogram",
                )
            continue
        for row in lat_rows:
            row.update(
                interval_ns=step_ns, model=out.model, source=source, imported_from="prometheus"
            )
        out.rows[SERIES_LATENCY] = lat_rows
        out.latency_source = source
        out.sources.append(_source(family, found, 0, _count_gaps(lat_rows, step_ns), rate))
        break
    if out.latency_source is None:
        raise UsageError(
            "Prometheus has no latency for the window: " + "; ".join(tried),
            hint="start Triton with --metrics-config summary_latencies=true, or give --latency-histogram NAME",
        )
    if out.latency_source != LATENCY_SUMMARY and tried:
        out.notes.append(f"no Triton latency summaries ({tried[0]} returned nothing)")
    if out.latency_source == LATENCY_MEAN:
        out.notes.append(
            "latency is the MEAN per request from Triton's duration/count counters "
            f"(rate over {rate}): no percentile is known for this window"
        )
    elif out.latency_source == LATENCY_SUMMARY:
        out.notes.append(
            f"latency percentiles are Triton's summary quantiles, each over the last "
            f"{SUMMARY_MAX_AGE_S:.0f} s (rotating in 12 s steps): a short spike shows as a plateau "
            "of up to a minute, and a period under about two minutes cannot be resolved in them; "
            "the mean per step (duration/count counters) is exact at the step"
        )
        mean_fetched, mean_found, _ = _fetch(
            pull.client, TRITON_MEAN, pull.selectors.for_family(TRITON.name), pull.window, rate
        )
        means = rows_from_series(TRITON_MEAN, mean_fetched).get(chosen, [])
        by_t = {r["t_ns"]: r.get("mean_ms") for r in means}
        for row in out.rows[SERIES_LATENCY]:
            row["mean_ms"] = by_t.get(row["t_ns"])
        out.sources[-1]["queries"] = out.sources[-1]["queries"] + mean_found


def _pull_gpu(pull: _Pull, out: PulledWindow) -> None:
    """GPU rows from DCGM, else Triton's nv_gpu_* (optional: said when absent)."""
    gpu_rows: list[Row] = []
    for family in (DCGM, AGENT_GPU, TRITON_GPU):
        fetched, found, empty = pull.fetch(family)
        by_key = rows_from_series(family, fetched)
        if not by_key:
            if family is AGENT_GPU:  # seldom there; not worth a note when it is not
                continue
            out.notes.append(
                f"no {family.name} GPU metrics in Prometheus ({family.metrics[0].metric})"
            )
            continue
        for index, key in enumerate(sorted(by_key, key=lambda k: tuple(v or "" for v in k))):
            gpu = str(key[1]) if family.key_labels[1:] == ("gpu",) else str(index)
            for row in by_key[key]:
                row.update(gpu=int(gpu) if str(gpu).isdigit() else index, host=key[0],
                           imported_from=f"prometheus:{family.name}")  # fmt: skip
                gpu_rows.append(row)
        out.sources.append(_source(family, found, 0, 0, pull.rate))
        if len(by_key) > 1:
            out.notes.append(
                f"{len(by_key)} GPUs matched ({family.name}): all kept; the analysis reads the "
                "lowest clock and the hottest GPU per window (narrow with --selector gpu=...)"
            )
        break  # DCGM first: Triton's nv_gpu_* has no clocks or reasons
    if gpu_rows:
        out.rows[SERIES_GPU] = sorted(gpu_rows, key=lambda r: (r["t_ns"], r["gpu"]))


def _pull_host(pull: _Pull, out: PulledWindow) -> None:
    """Host rows merged from node-exporter, cAdvisor and the serving process (each optional)."""
    host: dict[int, Row] = {}
    for family in (AGENT_HOST, NODE, CADVISOR, PROCESS):
        if family is PROCESS and not pull.selectors.for_family(family.name):
            # Every exporter has process_* metrics of its own: without a selector the
            # serving process's cannot be told from Prometheus's or node-exporter's.
            out.notes.append(
                "no process CPU: give --selector '{job=...}' (the serving process) "
                "or --selector process='{...}' to read its process_* metrics"
            )
            continue
        fetched, found, empty = pull.fetch(family)
        by_key = rows_from_series(family, fetched)
        if not by_key:
            if family is AGENT_HOST:  # seldom there; not worth a note when it is not
                continue
            out.notes.append(f"no {family.name} metrics in Prometheus ({family.metrics[0].metric})")
            continue
        keys = sorted(by_key, key=lambda k: tuple(v or "" for v in k))
        kept = keys[0]
        if len(keys) > 1:
            out.notes.append(
                f"{len(keys)} {family.name} targets matched; analyzed {_label(kept, family)}, "
                f"not {', '.join(_label(k, family) for k in keys[1:4])}"
                f"{' ...' if len(keys) > 4 else ''} (narrow with --selector {family.name}=...)"
            )
        if family is NODE and kept[0]:
            machine = urlsplit(f"//{kept[0]}").hostname
            if machine:
                out.hosts.setdefault(SERIES_HOST, machine)
        family_counters = [m.field for m in family.metrics if m.kind == "counter"]
        resets = _count_resets(by_key[kept], family_counters)
        for row in by_key[kept]:
            merged = host.setdefault(
                row["t_ns"], {"t_ns": row["t_ns"], "imported_from": "prometheus"}
            )
            for name, value in row.items():
                if name != "t_ns" and merged.get(name) is None:
                    merged[name] = value
        out.sources.append(
            _source(family, found, resets, _count_gaps(by_key[kept], pull.step_ns), pull.rate)
        )
    if host:
        out.rows[SERIES_HOST] = [host[t] for t in sorted(host)]


def _source(
    family: ExporterFamily, queries: list[str], resets: int, gaps: int, rate: str
) -> dict[str, Any]:
    return {
        "family": family.name,
        "series": family.series,
        "doc": family.doc,
        "queries": list(queries),
        "counter_resets": resets,
        "missing_steps": gaps,
        "rate_window": rate,
    }
