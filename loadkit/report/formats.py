"""The registry of report formats: one entry per `loadkit report --format`, listed once here.

Adding a format = one new reporter module in this package (a class with
`output_file_extension` and `render_report(run, analysis, html_report) -> str`),
plus its entry in `REGISTRY`. `loadkit report` and `loadkit compare` read this
registry and nothing else (docs/architecture.md, "How to add a report format").

Entries name their reporter as "module:attribute" and import it only when a report
is written: this module stays light, so the CLI starts without matplotlib or Jinja2.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from loadkit.analysis.model import Analysis
from loadkit.rundir import Run
from loadkit.rundir.layout import REPORT_FILE

REPORT_STEM = Path(REPORT_FILE).stem  # "report": report.html, report.md, report.json


class RunReporter(Protocol):
    """What a reporter class offers the `report` command."""

    output_file_extension: str

    def render_report(self, run: Run, analysis: Analysis, html_report: Path | None) -> str:
        """The report's text; `html_report` is the run's HTML report when it exists
        (a short format links to it)."""
        ...


class CompareReporter(Protocol):
    """What a comparison reporter offers the `compare` command."""

    output_file_extension: str

    def render(self, runs: Sequence[tuple[Run, Analysis]], html_url: str | None = None) -> str:
        """The comparison's text; `html_url` is the HTML comparison's address when it
        exists (a short format links to it)."""
        ...


def _load(target: str) -> Any:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class ReportFormat:
    name: str  # `--format` value
    reporter: str  # "module:Class", a RunReporter; its extension names the default file
    # "module:function" rendering a sweep directory (`sweep.json`) in this format, if any.
    sweep: str | None = None
    sweep_to_stdout: bool = False  # a sweep in this format is printed unless -o says where
    # "module:function" rendering a tune directory (`tune.json`) in this format, if any.
    tune: str | None = None
    # "module:Class" comparing runs (`loadkit compare`) in this format, a CompareReporter.
    compare: str | None = None

    def load(self) -> RunReporter:
        reporter: RunReporter = _load(self.reporter)()
        return reporter

    def file_name(self) -> str:
        """The report's default file name in the run directory (`report.<extension>`)."""
        return f"{REPORT_STEM}.{self.load().output_file_extension}"

    def directory_renderer(self, kind: str) -> Callable[[str | Path], str] | None:
        """The renderer of a directory of runs (`sweep`, `tune`) in this format, if any."""
        target: str | None = getattr(self, kind)
        return None if target is None else _load(target)

    def compare_reporter(self) -> CompareReporter | None:
        return None if self.compare is None else _load(self.compare)()


REGISTRY: tuple[ReportFormat, ...] = (
    ReportFormat(
        "html",
        "loadkit.report.html:HtmlReporter",
        sweep="loadkit.report.sweep:render_html",
        tune="loadkit.report.tune:render_html",
        compare="loadkit.report.compare:CompareHtmlReporter",
    ),
    ReportFormat(
        "md",
        "loadkit.report.markdown:MarkdownReporter",
        sweep="loadkit.report.sweep:render_markdown",
        compare="loadkit.report.compare:CompareMarkdownReporter",
    ),
    ReportFormat(
        "json",
        "loadkit.report.jsonreport:JsonReporter",
        sweep="loadkit.report.sweep:render_json",
        sweep_to_stdout=True,
    ),
)

BY_NAME: dict[str, ReportFormat] = {f.name: f for f in REGISTRY}
FORMATS: tuple[str, ...] = tuple(f.name for f in REGISTRY)
# The formats `loadkit compare` writes.
COMPARE_FORMATS: tuple[str, ...] = tuple(f.name for f in REGISTRY if f.compare is not None)
DEFAULT = "html"


def get(name: str) -> ReportFormat:
    return BY_NAME[name]
