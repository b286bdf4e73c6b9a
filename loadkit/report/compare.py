"""Comparison of runs of the same scenario under different configurations (A/B).

Side by side: the configuration that differs, the headline numbers with their
differences (and, where the analysis provides it, whether a difference exceeds
run-to-run noise), overlaid distributions and timelines, and the findings that
appeared or disappeared. Run A is the baseline every other run is compared to.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from loadkit import __version__
from loadkit.analysis.compare import compare_analyses
from loadkit.analysis.model import Analysis
from loadkit.report import formatting as fmt
from loadkit.report.context import slo_threshold
from loadkit.report.markdown import md_escape
from loadkit.report.plots import Distribution, NinesPlot, OverlayPlot, draw
from loadkit.report.templating import environment
from loadkit.rundir import Run

RunPair = tuple[Run, Analysis]

# (key, label, how to read it from an Analysis, formatter, lower is better)
METRICS: tuple[
    tuple[str, str, Callable[[Analysis], float | None], Callable[[Any], str], bool], ...
] = (
    ("p50_ms", "P50 (corrected)", lambda a: a.overall.corrected.p50_ms, fmt.ms, True),
    ("p95_ms", "P95 (corrected)", lambda a: a.overall.corrected.p95_ms, fmt.ms, True),
    ("p99_ms", "P99 (corrected)", lambda a: a.overall.corrected.p99_ms, fmt.ms, True),
    ("p999_ms", "P99.9 (corrected)", lambda a: a.overall.corrected.p999_ms, fmt.ms, True),
    ("service_p99_ms", "P99 (service time)", lambda a: a.overall.service.p99_ms, fmt.ms, True),
    ("offered_rps", "Offered rate", lambda a: a.overall.offered_rps, fmt.rate, False),
    ("throughput_rps", "Achieved rate", lambda a: a.overall.throughput_rps, fmt.rate, False),
    ("error_pct", "Errors", lambda a: a.overall.error_pct, fmt.pct, True),
    ("dropped_pct", "Dropped", lambda a: a.overall.dropped_pct, fmt.pct, True),
)
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        for key in sorted(value, key=str):
            _flatten(f"{prefix}.{key}" if prefix else str(key), value[key], out)
    else:
        out[prefix] = (
            value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
        )


def _configuration(run: Run) -> dict[str, str]:
    """The knobs of a run that a comparison is about: scenario, target, SLO, model config."""
    m = run.manifest
    flat: dict[str, str] = {}
    _flatten("scenario.params", (m.get("scenario") or {}).get("params") or {}, flat)
    target = {k: v for k, v in (m.get("target") or {}).items() if k != "url"}
    _flatten("target", target, flat)
    _flatten("slo", m.get("slo") or {}, flat)
    environment = run.info.environment
    _flatten("model_config", environment.server.models, flat)
    flat["gpu.kind"] = environment.gpu.kind or "n/a"
    return flat


def _delta_cell(
    base: float | None,
    other: float | None,
    noise: Any,
    formatter: Callable[[Any], str],
    lower_better: bool,
) -> dict[str, Any]:
    if noise is not None:
        delta, delta_pct = noise.delta, noise.delta_pct
        exceeds = noise.exceeds_noise
        noise_text = formatter(noise.noise) if noise.noise is not None else "n/a"
    else:
        # The plain difference of two numbers the analysis reported (no estimate of noise).
        delta = None
        delta_pct = None
        if base is not None and other is not None:
            if not (fmt.is_missing(base) or fmt.is_missing(other)):
                delta = float(other) - float(base)
                delta_pct = 100.0 * delta / float(base) if base else None
        exceeds = None
        noise_text = "n/a"
    if delta is None:
        text = "n/a"
    elif delta == 0:
        text = "no change"
    else:
        sign = "+" if delta > 0 else "−"
        magnitude = formatter(abs(delta))
        text = f"{sign}{magnitude}"
        if delta_pct is not None:
            digits = 1 if abs(delta_pct) < 10 else 0
            text += f" ({delta_pct:+.{digits}f} %)".replace("-", "−")
    direction = None
    if exceeds and delta:
        direction = "better" if (delta < 0) == lower_better else "worse"
    return {
        "value": formatter(other),
        "delta": delta,
        "delta_text": text,
        "exceeds_noise": exceeds,
        "noise_text": noise_text,
        "direction": direction,
    }


def build_compare_context(runs: Sequence[RunPair]) -> dict[str, Any]:
    """Everything the comparison shows, as plain values and figure specs."""
    if len(runs) < 2:
        raise ValueError("a comparison needs at least two runs")
    base_run, base = runs[0]
    labels = [f"{LETTERS[i % 26]}: {a.run.run_id}" for i, (_, a) in enumerate(runs)]
    comparisons = [compare_analyses(base, a) for _, a in runs[1:]]

    rows = []
    for key, label, read, formatter, lower_better in METRICS:
        cells = []
        for j, (_, other) in enumerate(runs[1:]):
            noise = next((d for d in comparisons[j].metrics if d.name == key), None)
            cells.append(_delta_cell(read(base), read(other), noise, formatter, lower_better))
        rows.append(
            {"key": key, "label": label, "baseline": formatter(read(base)), "others": cells}
        )

    configs = [_configuration(r) for r, _ in runs]
    keys = sorted(set().union(*configs))
    config_rows = [
        {"key": k, "values": [c.get(k, "—") for c in configs]}
        for k in keys
        if len({c.get(k, "—") for c in configs}) > 1
    ]

    base_causes = {f.cause: f.title for f in base.findings}
    finding_changes = []
    for label, (_, other) in zip(labels[1:], runs[1:], strict=True):
        other_causes = {f.cause: f.title for f in other.findings}
        finding_changes.append(
            {
                "label": label,
                "appeared": [other_causes[c] for c in other_causes if c not in base_causes],
                "disappeared": [base_causes[c] for c in base_causes if c not in other_causes],
                "persisted": [other_causes[c] for c in other_causes if c in base_causes],
            }
        )

    return {
        "title": f"Comparison of {len(runs)} runs",
        "labels": labels,
        "runs": [
            {
                "label": label,
                "run_id": a.run.run_id,
                "scenario": a.run.scenario or "n/a",
                "model": a.run.model or "n/a",
                "started": fmt.utc(a.run.start_ns),
                "duration": fmt.seconds(a.run.duration_s),
                "passed": a.verdict.passed,
                "verdict": "PASS" if a.verdict.passed else "FAIL",
                "verdict_sentence": a.verdict.summary,
                "headline": a.headline,
                "simulated": a.run.simulated,
            }
            for label, (_, a) in zip(labels, runs, strict=True)
        ],
        "metrics": rows,
        "summaries": [c.summary for c in comparisons],
        "config_rows": config_rows,
        "finding_changes": finding_changes,
        "figures": {
            "nines": NinesPlot(
                distributions=[
                    Distribution(label, a.nines.percentiles, a.nines.corrected_ms)
                    for label, (_, a) in zip(labels, runs, strict=True)
                ],
                slo_p99_ms=slo_threshold(base, "p99"),
                title="Latency distribution, corrected (runs overlaid)",
            ),
            "p99": OverlayPlot(
                series={
                    label: (a.windows.t_s, a.windows.corrected.p99_ms)
                    for label, (_, a) in zip(labels, runs, strict=True)
                },
                ylabel="P99 (ms)",
                title="P99 per window (corrected)",
                slo=slo_threshold(base, "p99"),
            ),
            "rate": OverlayPlot(
                series={
                    label: (a.windows.t_s, a.windows.throughput_rps)
                    for label, (_, a) in zip(labels, runs, strict=True)
                },
                ylabel="requests/s",
                title="Achieved rate per window",
            ),
        },
        "report_version": __version__,
        "base_run_path": str(base_run.path),
    }


class CompareHtmlReporter:
    output_file_extension = "html"

    def render(self, runs: Sequence[RunPair], html_url: str | None = None) -> str:
        ctx = build_compare_context(runs)  # the HTML comparison itself: no link
        images = {name: draw(spec) for name, spec in ctx["figures"].items()}
        return environment().get_template("compare.html.j2").render({**ctx, "images": images})


class CompareMarkdownReporter:
    output_file_extension = "md"

    def render(self, runs: Sequence[RunPair], html_url: str | None = None) -> str:
        return render_markdown_context(build_compare_context(runs), html_url)


def render_markdown_context(ctx: dict[str, Any], html_url: str | None = None) -> str:
    from loadkit.report.markdown import _table, md_url

    lines = [f"## {md_escape(ctx['title'])}", ""]
    lines += _table(
        ["run", "verdict", "headline"],
        [[r["label"], r["verdict"], r["headline"]] for r in ctx["runs"]],
    )
    lines.append("")
    if ctx["config_rows"]:
        lines.append("### Configuration differences")
        lines.append("")
        lines += _table(
            ["setting", *ctx["labels"]], [[c["key"], *c["values"]] for c in ctx["config_rows"]]
        )
        lines.append("")
    lines.append("### Numbers")
    lines.append("")
    header = ["metric", ctx["labels"][0]]
    for label in ctx["labels"][1:]:
        header += [label, "difference", "beyond noise"]
    body = []
    for row in ctx["metrics"]:
        cells = [row["label"], row["baseline"]]
        for cell in row["others"]:
            beyond = {True: "yes", False: "no", None: "n/a"}[cell["exceeds_noise"]]
            cells += [cell["value"], cell["delta_text"], beyond]
        body.append(cells)
    lines += _table(header, body)
    lines.append("")
    lines.append("### Findings")
    lines.append("")
    for change in ctx["finding_changes"]:
        parts = []
        for key, word in (
            ("appeared", "appeared"),
            ("disappeared", "disappeared"),
            ("persisted", "still present"),
        ):
            if change[key]:
                parts.append(f"{word}: " + ", ".join(md_escape(t) for t in change[key]))
        lines.append(
            f"- {md_escape(change['label'])}: " + ("; ".join(parts) or "no findings in either run")
        )
    lines.append("")
    if html_url:
        lines.append(f"[Full comparison (HTML)]({md_url(html_url)})")
        lines.append("")
    return "\n".join(lines) + "\n"


def render_html(runs: Sequence[RunPair]) -> str:
    return CompareHtmlReporter().render(runs)


def render_markdown(runs: Sequence[RunPair], html_url: str | None = None) -> str:
    return CompareMarkdownReporter().render(runs, html_url)
