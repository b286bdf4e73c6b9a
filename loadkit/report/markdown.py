"""The Markdown report: verdict, numbers, findings and a link to the HTML, for a ticket or chat.

Every value from outside (model names, labels, error messages, finding text) goes
through `md_escape`: HTML special characters become entities and Markdown
punctuation is backslash-escaped, so a hostile string renders as text and
cannot break out of a table cell, a list item or a link.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from loadkit.analysis.model import Analysis
from loadkit.report.context import build_context
from loadkit.rundir import Run

_MD_PUNCTUATION = re.compile(r"([\\`*_\[\]{}|~])")
_URL_UNSAFE = re.compile(r"[\s<>()\[\]`\"']")


def md_escape(text: object) -> str:
    """Text safe to place anywhere in a Markdown line (including a table cell)."""
    value = " ".join(str(text).split())  # no newlines: a cell or list item stays one line
    value = html.escape(value, quote=False)
    return _MD_PUNCTUATION.sub(r"\\\1", value)


def md_url(url: str) -> str:
    """A link target that cannot close the link or inject markup."""
    return _URL_UNSAFE.sub(lambda m: f"%{ord(m.group(0)):02X}", url)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(md_escape(h) for h in header) + " |"]
    lines.append("|" + "|".join("---" for _ in header) + "|")
    lines += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in rows]
    return lines


class MarkdownReporter:
    """`render(run, analysis, html_url=None) -> str`: a pure function of its inputs."""

    output_file_extension = "md"

    def render(self, run: Run, analysis: Analysis, html_url: str | None = None) -> str:
        return render_context(build_context(run, analysis), html_url)

    def render_report(self, run: Run, analysis: Analysis, html_report: Path | None) -> str:
        url = html_report.resolve().as_uri() if html_report is not None else None
        return self.render(run, analysis, html_url=url)


def render_context(ctx: dict[str, Any], html_url: str | None = None) -> str:
    v = ctx["verdict"]
    lines = _header(ctx)
    met = "The run met its SLO." if v["passed"] else "The run did not meet its SLO."
    lines.append(f"**{met}** {md_escape(v['sentence'])}")
    lines.append("")
    if v["slos"]:
        lines += _table(
            ["SLO", "threshold", "observed", "result"],
            [[s["label"], s["threshold_text"], s["observed_text"], s["state"]] for s in v["slos"]],
        )
        lines.append("")
    nums = ctx["numbers"]
    lines += _table([n["label"] for n in nums], [[n["text"] for n in nums]])
    lines.append("")
    lines.append(ctx["latency_note"])
    lines.append("")
    lines += _error_kinds(ctx["error_kinds"])
    capacity = ctx.get("capacity")
    if capacity:
        lines += _capacity_section(capacity)
    if ctx["story"]:
        # One paragraph that starts with our own words: no outside text begins a line.
        lines.append("**What happened:** " + " ".join(md_escape(s) for s in ctx["story"]))
        lines.append("")
    for alert in ctx["alerts"]:
        lines.append(f"> **{md_escape(alert['severity']).upper()}** {md_escape(alert['message'])}")
        lines.append("")
    lines += _findings_section(ctx["findings"])
    soak = ctx.get("soak")
    if soak and soak["findings"]:
        lines += _soak_section(soak["findings"])
    for r in ctx["recoveries"]:
        lines.append(
            f"- Burst at {md_escape(r['at'])} ({md_escape(r['rate'])}): P99 peak "
            f"{md_escape(r['peak_p99'])}, recovery {md_escape(r['recovery'])}"
        )
    if ctx["recoveries"]:
        lines.append("")
    if html_url:
        lines.append(f"[Full HTML report]({md_url(html_url)})")
        lines.append("")
    lines.append(f"_loadkit {md_escape(ctx['report_version'])}_")
    return "\n".join(lines) + "\n"


def _header(ctx: dict[str, Any]) -> list[str]:
    """Verdict mark, title, run and where it ran: what a reader scanning a ticket sees first."""
    mark = "✅ PASS" if ctx["verdict"]["passed"] else "❌ FAIL"
    lines = [f"## {mark}: {md_escape(ctx['title'])}", ""]
    simulated = " (simulated GPU)" if ctx["simulated"] else ""
    lines.append(f"Run {md_escape(ctx['run_id'])}{simulated}")
    lines.append("")
    if ctx.get("places"):  # which machine each timeline comes from
        for line in ctx["places"]:
            lines += [md_escape(line), ""]
    if ctx.get("abort"):
        word = "ABORTED" if ctx["abort"]["by"] == "condition" else "INTERRUPTED"
        lines.append(f"**{word}** {md_escape(ctx['abort']['text'])}")
        lines.append("")
    return lines


def _error_kinds(error_kinds: list[dict[str, Any]]) -> list[str]:
    """Failed requests by kind, then the server's own words for each (all escaped: outside text)."""
    if not error_kinds:
        return []
    kinds = ", ".join(f"{md_escape(e['kind'])} × {md_escape(e['text'])}" for e in error_kinds)
    lines = [f"Errors by kind: {kinds}", ""]
    for e in error_kinds:
        for message in e["messages"]:
            lines.append(f"- {md_escape(e['kind'])}: the server said {md_escape(message)}")
    if any(e["messages"] for e in error_kinds):
        lines.append("")
    return lines


def _capacity_section(capacity: dict[str, Any]) -> list[str]:
    """A capacity run's answer, what limited it, and each probe's verdict."""
    lines = ["### Capacity", ""]
    lines.append(f"**{md_escape(capacity['answer'])}**")
    lines.append("")
    lines.append(
        f"Limited by {md_escape(capacity['limited_by'])}: {md_escape(capacity['evidence'])}"
    )
    if capacity["predicted"]:
        lines.append("")
        lines.append(
            f"Predicted from the server's statistics: {capacity['predicted']}"
            + (f" (measured differs by {capacity['gap']})" if capacity["gap"] else "")
        )
    lines.append("")
    lines.append(f"| rate | achieved | goodput | corrected {capacity['percentile']} | passed |")
    lines.append("|---|---|---|---|---|")
    for p in capacity["probes"]:
        lines.append(
            f"| {p['rate']} | {p['achieved']} | {p['goodput']} | {p['latency']} | "
            f"{'yes' if p['passed'] else 'no'} |"
        )
    lines.append("")
    return lines


def _findings_section(findings: list[dict[str, Any]]) -> list[str]:
    """Each finding as a numbered item with its evidence, statistics, episodes and action."""
    lines = ["### Findings", ""]
    if not findings:
        lines.append("No cause explained the latency spikes.")
        lines.append("")
    for i, f in enumerate(findings, start=1):
        lines.append(
            f"{i}. **{md_escape(f['title'])}** ({md_escape(f['confidence'])}): {md_escape(f['summary'])}"
        )
        evidence = "; ".join(
            f"{md_escape(e['label'])}: {md_escape(e['text'])}" for e in f["evidence"]
        )
        if evidence:
            lines.append(f"   - Evidence: {evidence}")
        stats = "; ".join(f"{md_escape(k)}: {md_escape(val)}" for k, val in f["stats"])
        lines.append(f"   - {stats}")
        ids = ", ".join(md_escape(e["id"]) for e in f["episodes_shown"])
        more = f" and {f['episodes_more']} more" if f["episodes_more"] else ""
        lines.append(f"   - Episodes: {ids or 'none'}{more}")
        lines.append(f"   - **Action:** {md_escape(f['action'])}")
    if findings:
        lines.append("")
    return lines


def _soak_section(findings: list[dict[str, Any]]) -> list[str]:
    """What drifted over a long run, each with its severity and action."""
    lines = ["### Soak drift", ""]
    for f in findings:
        lines.append(
            f"- **{md_escape(f['title'])}** ({md_escape(f['severity'])}): {md_escape(f['summary'])}"
        )
        lines.append(f"   - **Action:** {md_escape(f['action'])}")
    lines.append("")
    return lines


def render(run: Run, analysis: Analysis, html_url: str | None = None) -> str:
    return MarkdownReporter().render(run, analysis, html_url)
