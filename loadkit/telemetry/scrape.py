"""The server's own exporters, scraped during the run: `loadkit run --scrape node=URL`.

A load test usually runs on another machine than the server, so this machine's
GPU and host are not the server's. The server's exporters are: dcgm-exporter,
node-exporter, cAdvisor, a process's `process_*` metrics, Triton's `nv_gpu_*`.
Each `--scrape FAMILY=URL` names one of them by its exporter family
(loadkit/telemetry/prometheus/families.py); the scrape GETs its text exposition
every second, parses it with prometheus_client's parser through the family's
entries (`rows_from_scrapes`) and writes the series the family fills (`gpu`,
`host`) with place `server` and the exporter's host. Rate fields (CPU % from CPU
seconds) are the counters' increase between two successive scrapes, as
Prometheus's `rate` gives them in `loadkit import --prometheus`; counters the
analysis rates itself (PSI, CFS periods) are written raw, as the import does.

One sampler per series: the exporters that fill it are scraped in one tick and
merged into one row (`host`: node-exporter's machine and cAdvisor's container,
first value wins in the order given; `gpu`: one exporter, a row per GPU). A
scraped series holds the series' name, so the analysis reads the server's;
a sampler of this machine that would write the same series writes
`<series>-local` instead (the supervisor's rule, docs/telemetry.md).

An exporter that cannot be read at the start is one warning line (the series is
missing when none of its exporters answers); one that stops answering mid-run
is one warning, and the run goes on while it is retried every tick. A scrape
reads at most `MAX_RESPONSE_BYTES` and gives up on an answer not complete within
most of one interval (`scrape_deadline_s`); either is one warning per exporter
(`loadkit.telemetry.http.read_limited`). The manifest records each scraped
series' URLs, credentials stripped (`sources[].scraped_from`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from loadkit.endpoint import HTTP_SCHEMES, parse_endpoint, without_credentials
from loadkit.errors import UsageError
from loadkit.telemetry.base import (
    Row,
    Sampler,
    SamplerOptions,
    SamplerSpec,
    SourcePlan,
    SourceUnavailable,
    TelemetrySource,
    WarnOnce,
    the_server,
)
from loadkit.telemetry.gpu import DEFAULT_GPU_INTERVAL_S
from loadkit.telemetry.http import (
    MAX_RESPONSE_BYTES,
    HttpGetError,
    KeepAliveGetter,
    ResponseLimitError,
    bearer_header,
    read_bearer_token,
)
from loadkit.telemetry.prometheus.families import (
    AGENT_GPU,
    AGENT_HOST,
    AGENT_INFO,
    FAMILIES,
    SERIES_GPU,
    SERIES_HOST,
    TRITON_GPU,
    ExporterFamily,
    Key,
    Scrape,
    parse_exposition,
    rows_from_scrapes,
    sorted_keys,
)

DEFAULT_SCRAPE_INTERVAL_S = 1.0
# A scrape's whole answer must come within most of its interval (it must not hold the
# next tick), and never take longer than this, whatever the interval.
SCRAPE_DEADLINE_MAX_S = 2.0
# ... nor be given less than this (a page of a few MiB over a slow link, at 10 Hz).
SCRAPE_DEADLINE_MIN_S = 0.5
# The series a scrape may fill: the server machine's (Triton's own counters come from
# its statistics API and --triton-metrics).
SCRAPE_SERIES = (SERIES_GPU, SERIES_HOST)
SCRAPE_FAMILIES: dict[str, ExporterFamily] = {
    name: f for name, f in FAMILIES.items() if f.series in SCRAPE_SERIES
}
# The agent's families are `--agent URL`'s, each at its own `collect[]`, never `--scrape`'s.
AGENT_FAMILIES = (AGENT_GPU.name, AGENT_HOST.name)
# What `--scrape FAMILY=URL` takes.
SCRAPE_FLAG_FAMILIES = tuple(name for name in SCRAPE_FAMILIES if name not in AGENT_FAMILIES)
# The option `SamplerSet.start(scrape=...)` / `TelemetryOptions.extra` carries them in.
SCRAPE_OPTION = "scrape"
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"([^"]*)"\s*(?:,|$)')


@dataclass(frozen=True)
class ScrapeTarget:
    """One exporter to scrape: its family, its URL and label values its samples must carry."""

    family: str
    url: str
    match: Mapping[str, str] = field(default_factory=dict)
    # Added by loadkit, not asked for (Triton's nv_gpu_* on --triton-metrics).
    implicit: bool = False
    # The file of the bearer token it asks for (`--agent-token-file`); the token itself
    # is read where it is sent, never carried in a sampler's options.
    token_file: str | None = None

    @property
    def series(self) -> str:
        return SCRAPE_FAMILIES[self.family].series

    def describe(self) -> str:
        labels = ",".join(f'{k}="{v}"' for k, v in self.match.items())
        return f"{self.family} {without_credentials(self.url)}" + (
            f"{{{labels}}}" if labels else ""
        )

    def to_option(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "url": self.url,
            "match": dict(self.match),
            "implicit": self.implicit,
            "token_file": self.token_file,
        }

    @classmethod
    def from_option(cls, raw: Mapping[str, Any]) -> ScrapeTarget:
        return cls(
            raw["family"],
            raw["url"],
            dict(raw.get("match") or {}),
            raw.get("implicit", False),
            raw.get("token_file"),
        )

    def headers(self) -> dict[str, str]:
        """The headers every GET sends: its bearer token, read from its file now (ValueError
        saying why when that file cannot be read)."""
        return bearer_header(read_bearer_token(self.token_file) if self.token_file else None)


def _families_hint() -> str:
    return (
        "families: "
        + ", ".join(f"{name} ({SCRAPE_FAMILIES[name].series})" for name in SCRAPE_FLAG_FAMILIES)
        + "; e.g. --scrape node=http://gpu-host:9100/metrics"
    )


def parse_scrape(text: str) -> ScrapeTarget:
    """`FAMILY=URL[{label="value",...}]` (`--scrape`); UsageError listing the families.

    A URL without a path scrapes `/metrics`; the optional matchers keep only samples
    that carry those label values (cAdvisor: `{container="triton"}`).
    """
    name, sep, rest = text.partition("=")
    name = name.strip()
    if name in AGENT_FAMILIES:
        raise UsageError(
            f"--scrape {name}: a loadkit agent is read with --agent URL",
            hint="e.g. --agent http://gpu-host:9477 (its GPU at 10 Hz and its host)",
        )
    if not sep or name not in SCRAPE_FAMILIES:
        what = f"unknown exporter family {name!r}" if sep else f"not FAMILY=URL: {text!r}"
        raise UsageError(f"--scrape {what}", hint=_families_hint())
    url, match = rest.strip(), {}
    if url.endswith("}") and "{" in url:
        url, _, labels = url[:-1].partition("{")
        match = _matchers(labels, text)
    endpoint = parse_endpoint(url, f"--scrape {name}", HTTP_SCHEMES, "http")
    if "://" not in url:
        url = f"http://{url}"
    if not endpoint.path.strip("/"):
        url = url.rstrip("/") + "/metrics"
    return ScrapeTarget(name, url, match)


def _matchers(text: str, whole: str) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        found = _MATCHER.match(text, pos)
        if found is None:
            raise UsageError(
                f'--scrape {whole!r}: labels must be name="value", comma-separated',
                hint='e.g. --scrape cadvisor=http://node:8080/metrics{container="triton"}',
            )
        out[found.group(1)] = found.group(2)
        pos = found.end()
    return out


def parse_agent(url: str, token_file: str | None = None) -> list[ScrapeTarget]:
    """`--agent URL`: the agent's GPU and host collectors, each its own scrape target
    (`?collect[]=`), so the GPU can be read at 10 Hz and the host every second;
    `token_file`: its bearer token's file (`--agent-token-file`)."""
    endpoint = parse_endpoint(url, "--agent", HTTP_SCHEMES, "http")
    if "?" in url or "{" in url:
        raise UsageError(
            f"--agent {url!r}: the agent's URL only (its host and port)",
            hint="e.g. --agent http://gpu-host:9477 (what `loadkit agent` printed)",
        )
    base = url.strip() if "://" in url else f"http://{url.strip()}"
    if not endpoint.path.strip("/"):
        base = base.rstrip("/") + "/metrics"
    return [
        ScrapeTarget(family, f"{base}?collect[]={collector}", token_file=token_file)
        for family, collector in ((AGENT_GPU.name, "gpu"), (AGENT_HOST.name, "host"))
    ]


def parse_scrapes(
    items: Sequence[str], agents: Sequence[str] = (), agent_token_file: str | None = None
) -> list[ScrapeTarget]:
    """Every `--scrape` and `--agent` of a command line: each family once, one GPU exporter.

    The agent's targets come first: where an exporter fills the same host field, the
    agent's value is kept (it reads the server's process and cgroup the way the run's
    analysis expects); node-exporter or cAdvisor fill what it lacks.
    """
    if len(agents) > 1:
        raise UsageError(
            "--agent given twice: one server host per run",
            hint="each agent serves its own host; run one load test per server",
        )
    if agent_token_file is not None:
        if not agents:
            raise UsageError(
                "--agent-token-file without --agent", hint="e.g. --agent http://gpu-host:9477"
            )
        try:
            read_bearer_token(agent_token_file)  # now, not when the run has started
        except ValueError as exc:
            raise UsageError(f"--agent-token-file {exc}", hint=_TOKEN_HINT) from None
    targets = [t for url in agents for t in parse_agent(url, agent_token_file)]
    targets += [parse_scrape(item) for item in items]
    seen: set[str] = set()
    for target in targets:
        if target.family in seen:
            raise UsageError(f"--scrape {target.family} given twice", hint=_families_hint())
        seen.add(target.family)
    gpus = [t.family for t in targets if t.series == SERIES_GPU]
    if len(gpus) > 1 and AGENT_GPU.name in gpus:
        other = next(g for g in gpus if g != AGENT_GPU.name)
        raise UsageError(
            f"--agent and --scrape {other}: one GPU exporter per run, and the agent serves "
            "the server's GPUs",
            hint=f"drop --scrape {other} (the agent reads NVML at 10 Hz, with the clock-event "
            "reasons), or drop --agent and add --scrape node=... for the host",
        )
    if len(gpus) > 1:
        raise UsageError(
            f"--scrape {' and '.join(gpus)}: one GPU exporter per run",
            hint="dcgm-exporter has clocks and throttle reasons, Triton's nv_gpu_* has not",
        )
    return targets


_TOKEN_HINT = "the file the agent's --token-file reads: the token, on one line"


# --- the sampler -----------------------------------------------------------------------
def scrape_deadline_s(interval_s: float) -> float:
    """The most one scrape's whole answer may take: most of one interval, within bounds."""
    return max(SCRAPE_DEADLINE_MIN_S, min(SCRAPE_DEADLINE_MAX_S, 0.8 * interval_s))


class _Exporter:
    """One exporter's connection, its last scrape (for rates) and whether it answered."""

    def __init__(self, target: ScrapeTarget, timeout_s: float, max_bytes: int) -> None:
        self.target = target
        self.family = SCRAPE_FAMILIES[target.family]
        # KeepAliveGetter keeps a URL's path; the query (the agent's `collect[]`) goes per GET.
        base, _, query = target.url.partition("?")
        self.http = KeepAliveGetter(base, timeout_s=timeout_s, max_bytes=max_bytes)
        self.query = f"?{query}" if query else ""
        self.previous: Scrape | None = None

    def rows(self, t_ns: int) -> dict[Key, Row]:
        """This scrape's rows by key; raises HttpGetError or ValueError (not the format)."""
        text = self.http.get(self.query).decode("utf-8", errors="replace")
        samples = parse_exposition(text)
        if self.target.match:
            samples = [
                s for s in samples if all(s[1].get(k) == v for k, v in self.target.match.items())
            ]
        rows, self.previous = rows_from_scrapes(self.family, samples, t_ns, self.previous)
        return rows


class ScrapeSampler:
    """Scrapes the exporters of one series every tick; rows for `telemetry/<series>.jsonl`."""

    def __init__(
        self,
        series: str,
        targets: Sequence[ScrapeTarget],
        interval_s: float,
        *,
        deadline_s: float | None = None,
        max_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.source = series
        self.series = series
        # A scrape must not hold the next tick.
        self.deadline_s = scrape_deadline_s(interval_s) if deadline_s is None else deadline_s
        self.exporters = [_Exporter(t, self.deadline_s, max_bytes) for t in targets]
        self._warn = WarnOnce()

    def open(self) -> None:
        """One scrape of each: unavailable when none answers with its family's metrics."""
        failed: list[str] = []
        for exporter in self.exporters:
            try:
                exporter.http.headers.update(exporter.target.headers())
            except ValueError as exc:
                raise SourceUnavailable(f"--agent-token-file {exc}", hint=_TOKEN_HINT) from None
            why = self._first_scrape(exporter)
            if why is not None:
                failed.append(why)
        if len(failed) == len(self.exporters):
            hint = None
            if not any(e.target.implicit or _is_agent(e.target) for e in self.exporters):
                hint = f"check the URL with curl; {_families_hint()}"
            raise SourceUnavailable("; ".join(failed), hint=hint)
        for why in failed:
            self._warn.warn(f"open:{why}", f"{why}; retrying every tick")

    def _first_scrape(self, exporter: _Exporter) -> str | None:
        target = exporter.target
        try:
            # Also the baseline of the first tick's rates.
            rows = exporter.rows(time.time_ns())
        except ResponseLimitError as exc:
            self._warn.said(_limit_key(exporter, exc))  # said now: later ticks say it no more
            return f"{target.describe()}: {exc}"
        except HttpGetError as exc:
            agent = without_credentials(target.url.partition("?")[0])
            if _is_agent(target) and exc.kind == "http_401":
                why = (
                    "the token in --agent-token-file is not the one its --token-file holds"
                    if target.token_file
                    else "it asks for a bearer token: give --agent-token-file FILE, the file "
                    "its --token-file reads"
                )
                return f"loadkit agent {agent} refused the scrape (HTTP 401): {why}"
            if _is_agent(target):
                return (
                    f"loadkit agent {agent} not answering ({exc}): no "
                    "server GPU or host series from it (is `loadkit agent` running there, "
                    "bound with --bind to an address this machine reaches?)"
                )
            return f"{target.describe()} not readable ({exc})"
        except ValueError as exc:
            return f"{target.describe()} is not Prometheus text ({exc})"
        if not rows:
            metric = exporter.family.metrics[0].metric
            if target.implicit and exporter.family is TRITON_GPU:
                return (
                    f"Triton's {target.url} has no nv_gpu_* metrics (no GPU, or "
                    "--allow-gpu-metrics=false): no server GPU telemetry"
                )
            return f"{target.describe()} has none of the {target.family} metrics ({metric}, ...)"
        return None

    def sample(self, t_ns: int) -> list[Row]:
        merged: dict[Key, Row] = {}
        keys_of: dict[str, list[Key]] = {}
        for exporter in self.exporters:
            target = exporter.target
            try:
                rows = exporter.rows(t_ns)
            except ResponseLimitError as exc:
                self._warn_limit(exporter, exc)
                exporter.previous = None
                continue
            except HttpGetError as exc:
                self._warn.warn(
                    f"down:{target.family}",
                    f"{target.describe()} not answering ({exc}); retrying every tick, "
                    "its rows are missing until it answers",
                )
                exporter.previous = None
                continue
            except ValueError as exc:
                self._warn.warn(
                    f"parse:{target.family}", f"{target.describe()}: not Prometheus text ({exc})"
                )
                continue
            keys_of[target.family] = sorted_keys(rows)
            for key, row in self._rows_of(exporter, rows).items():
                into = merged.setdefault(key, {"t_ns": t_ns})
                for name, value in row.items():
                    if into.get(name) is None:
                        into[name] = value
                into["scraped_from"] = ",".join(
                    f for f in (into.get("scraped_from"), target.family) if f
                )
        return [merged[key] for key in sorted(merged, key=str)]

    def _warn_limit(self, exporter: _Exporter, exc: ResponseLimitError) -> None:
        """One warning per exporter and limit: its rows are missing while it stays over it."""
        self._warn.warn(
            _limit_key(exporter, exc),
            f"{exporter.target.describe()}: {exc}; its rows are missing while it stays so, "
            "retried every tick",
        )

    def _rows_of(self, exporter: _Exporter, rows: dict[Key, Row]) -> dict[Key, Row]:
        """The rows to write, by the series' own key: every GPU; one machine or container."""
        keys = sorted_keys(rows)
        if self.series == SERIES_GPU:
            out: dict[Key, Row] = {}
            for index, key in enumerate(keys):
                row = rows[key]
                gpu = key[1] if exporter.family.key_labels[1:] == ("gpu",) else None
                row["gpu"] = int(gpu) if gpu is not None and str(gpu).isdigit() else index
                if exporter.family.key_labels[0] == "Hostname":
                    row["host"] = key[0]
                if exporter.family is TRITON_GPU:
                    row["uuid"] = key[1]
                out[(str(row["gpu"]),)] = row
            return out
        if not keys:
            return {}
        if len(keys) > 1:
            family, target = exporter.family, exporter.target
            shown = ", ".join(_label(k, family) for k in keys[1:4])
            self._warn.warn(
                f"keys:{target.family}",
                f"{target.describe()}: {len(keys)} {family.series} series "
                f"({', '.join(family.key_labels)}); recorded {_label(keys[0], family)}, "
                f"not {shown}{' ...' if len(keys) > 4 else ''} "
                f'(narrow with --scrape {target.family}=URL{{label="value"}})',
            )
        return {(): rows[keys[0]]}

    def close(self) -> None:
        for exporter in self.exporters:
            exporter.http.close()

    def drain_warnings(self) -> list[str]:
        return self._warn.drain()


def _limit_key(exporter: _Exporter, exc: ResponseLimitError) -> str:
    return f"limit:{exc.kind}:{exporter.target.family}"


def _label(key: Key, family: ExporterFamily) -> str:
    parts = [f'{k}="{v}"' for k, v in zip(family.key_labels, key, strict=True) if v]
    return "{" + ",".join(parts) + "}"


def _scrape_sampler(spec: SamplerSpec) -> Sampler:
    targets = [ScrapeTarget.from_option(t) for t in spec.options["targets"]]
    return ScrapeSampler(spec.source, targets, spec.interval_s)


# --- the plan --------------------------------------------------------------------------
def scrape_targets(options: SamplerOptions) -> list[ScrapeTarget]:
    """The exporters of this run: `--scrape`'s, and Triton's `nv_gpu_*` on `--triton-metrics`
    for a target on another machine that has no GPU exporter of its own (`--gpu auto`)."""
    given = options.extra.get(SCRAPE_OPTION) or ()
    targets = [t if isinstance(t, ScrapeTarget) else ScrapeTarget.from_option(t) for t in given]
    remote = options.target is not None and options.target.local is False
    if (
        options.metrics_url
        and options.gpu == "auto"
        and remote
        and not any(t.series == SERIES_GPU for t in targets)
    ):
        targets.append(ScrapeTarget(TRITON_GPU.name, options.metrics_url, implicit=True))
    return targets


@dataclass(frozen=True)
class AgentInfo:
    """What `loadkit agent` says of itself (`loadkit_agent_info`): its machine, whether it
    watches a server PID, whether it serves a GPU."""

    host: str | None
    server_pid: int | None
    gpu: str | None


def read_agent_info(target: ScrapeTarget, timeout_s: float = 2.0) -> AgentInfo | None:
    """One GET of the agent's `info` collector: its `AgentInfo`; None if it does not say."""
    try:
        http = KeepAliveGetter(
            target.url.partition("?")[0], timeout_s=timeout_s, headers=target.headers()
        )
    except ValueError:  # its token file: said when its sampler opens
        return None
    try:
        samples = parse_exposition(http.get("?collect[]=info").decode("utf-8", errors="replace"))
    except (HttpGetError, ValueError):
        return None
    finally:
        http.close()
    for name, labels, _value in samples:
        if name == AGENT_INFO:
            pid = labels.get("server_pid", "")
            return AgentInfo(
                labels.get("host") or None, int(pid) if pid.isdigit() else None, labels.get("gpu")
            )
    return None


def _is_agent(target: ScrapeTarget) -> bool:
    return target.family in AGENT_FAMILIES


def plan_scrapes(options: SamplerOptions, interval_s: float) -> tuple[SourcePlan, ...]:
    """One sampler per series the run's exporters fill, the server's, named after its series.

    An agent (`--agent`) is asked who it is first: its machine's name is the series'
    host, an agent without a GPU fills no gpu series (Triton's nv_gpu_* may, as for any
    remote target), and its GPU is scraped at the GPU's own rate (10 Hz). An agent that
    does not answer is one warning, from its host series' sampler, as any exporter's.
    """
    targets = scrape_targets(options)
    agent_target = next((t for t in targets if _is_agent(t)), None)
    agent = read_agent_info(agent_target) if agent_target is not None else None
    if agent_target is not None and (agent is None or agent.gpu == "none"):
        # No GPU there, or no answer: its host sampler says so, once, when it opens.
        targets = [t for t in targets if t.family != AGENT_GPU.name]
        targets = scrape_targets(replace(options, extra={SCRAPE_OPTION: targets}))
    plans = []
    for series in SCRAPE_SERIES:
        mine = [t for t in targets if t.series == series]
        if not mine:
            continue
        place = the_server(options, mine[0].url.partition("?")[0])
        from_agent = any(_is_agent(t) for t in mine)
        if from_agent and agent is not None and agent.host:
            place = replace(place, host=agent.host)
        place = replace(place, scraped_from={t.family: without_credentials(t.url) for t in mine})
        every = DEFAULT_GPU_INTERVAL_S if from_agent and series == SERIES_GPU else interval_s
        spec = SamplerSpec(series, "scrape", every, {"targets": [t.to_option() for t in mine]})
        plans.append(SourcePlan(spec, place=place, holds_series=True))
    return tuple(plans)


SOURCE = TelemetrySource(
    name="scrape",
    label="server exporters",
    default_interval_s=DEFAULT_SCRAPE_INTERVAL_S,
    row_type=dict,
    samplers={"scrape": _scrape_sampler},
    plan=plan_scrapes,
)
