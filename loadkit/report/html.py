"""The self-contained HTML report: verdict, numbers, timelines, findings, metadata.

One file with inline CSS and inline SVG figures (as `data:` images), no
scripts and no network (a Content-Security-Policy forbids both), so it opens
from an email or a ticket and prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadkit.analysis.model import Analysis
from loadkit.report.context import build_context
from loadkit.report.plots import Image, draw
from loadkit.report.templating import environment
from loadkit.rundir import Run


class HtmlReporter:
    """`render(run, analysis) -> str`: a pure function of its inputs."""

    output_file_extension = "html"
    template = "report.html.j2"

    def render(self, run: Run, analysis: Analysis) -> str:
        return render_context(build_context(run, analysis), self.template)

    def render_report(self, run: Run, analysis: Analysis, html_report: Path | None) -> str:
        return self.render(run, analysis)  # it is the HTML report: nothing to link to


def draw_figures(context: dict[str, Any]) -> dict[str, Image | None]:
    """Draw the figure specs of a context (None where a figure has no data)."""
    return {
        name: (draw(spec) if spec is not None else None)
        for name, spec in context["figures"].items()
    }


def render_context(context: dict[str, Any], template: str = "report.html.j2") -> str:
    images = draw_figures(context)
    findings = [
        {**f, "image": draw(f["figure"]) if f.get("figure") is not None else None}
        for f in context["findings"]
    ]
    page = environment().get_template(template)
    return page.render({**context, "findings": findings, "images": images})


def render(run: Run, analysis: Analysis) -> str:
    return HtmlReporter().render(run, analysis)
