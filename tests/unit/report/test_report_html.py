"""The HTML report: escaping of outside text, determinism, size, self-containment."""

from __future__ import annotations

import base64
import dataclasses
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from analysis_builder import HOSTILE, make_analysis, make_run
from matplotlib.figure import Figure

from loadkit.analysis import model as m
from loadkit.report import html, plots
from loadkit.rundir import Run


class _Elements(HTMLParser):
    """Collects every start tag with its attributes, and the text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(page: str) -> _Elements:
    parser = _Elements()
    parser.feed(page)
    parser.close()
    return parser


@pytest.fixture
def hostile_page(tmp_path: Path) -> str:
    """GIVEN a hostile model name, scenario label, error kind and finding text."""
    run = make_run(tmp_path / "run", hostile=HOSTILE)
    analysis = make_analysis(n=120, hostile=HOSTILE)
    return html.render(run, analysis)


def test_hostile_strings_are_escaped_everywhere(hostile_page: str):
    page = hostile_page
    # THEN the raw string never appears, its escaped form does (as text the reader sees).
    assert HOSTILE not in page
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    parsed = _parse(page)
    assert HOSTILE in "".join(parsed.text)
    # The error kind, the model name and the scenario label are each shown (escaped).
    assert '<span class="mono">&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;</span> × 5' in page
    assert "<dt>Model</dt><dd>&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;</dd>" in page
    assert "<dt>Scenario</dt><dd>&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;</dd>" in page
    # The server's own words for an error kind come from outside too.
    said = 'the server said <span class="mono">[503] &lt;/script&gt;&lt;img src=x onerror'
    assert said in page
    # No script at all, no element carries an event handler, every image is our data: URI.
    assert not [t for t, _ in parsed.tags if t == "script"]
    assert not [a for _, attrs in parsed.tags for a in attrs if a.startswith("on")]
    images = [attrs for t, attrs in parsed.tags if t == "img"]
    assert images and all(
        (a.get("src") or "").startswith("data:image/svg+xml;base64,") for a in images
    )


def test_hostile_strings_stay_out_of_the_svg_figures(hostile_page: str):
    for uri in re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', hostile_page):
        svg = base64.b64decode(uri).decode("utf-8")
        assert "<script" not in svg and "onerror" not in svg


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, m.Analysis, str]:
    """A failed 10-minute run and its page, rendered once for the tests that only read it."""
    run = make_run(tmp_path_factory.mktemp("failed") / "20251129-205000-burst")
    analysis = make_analysis(n=600)
    return run, analysis, html.render(run, analysis)


def test_page_is_self_contained_and_forbids_scripts_and_network(failed_run):
    page = failed_run[2]
    assert "default-src 'none'; img-src data:; style-src 'unsafe-inline'" in page
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page)
    assert "<script" not in page


def test_same_input_gives_identical_bytes(failed_run):
    run, analysis, page = failed_run
    assert html.render(run, analysis) == page


def test_verdict_words_and_colour_class(failed_run, tmp_path: Path):
    failed = failed_run[2]
    passed = html.render(make_run(tmp_path / "r"), make_analysis(n=60, passed=True))
    assert 'class="verdict fail"' in failed and "✗ FAIL" in failed
    assert "The run did not meet its SLO." in failed
    assert 'class="verdict pass"' in passed and "✓ PASS" in passed
    assert "No cause explained the latency spikes" in passed


def test_one_hour_run_stays_under_5_mb(tmp_path: Path):
    run = make_run(tmp_path / "hour")
    page = html.render(run, make_analysis(n=3600))
    size = len(page.encode("utf-8"))
    assert size < 5 * 1024 * 1024, f"report is {size / 1e6:.1f} MB"


@pytest.mark.filterwarnings("error")  # a warning (matplotlib, numpy, jinja2) fails the test
@pytest.mark.parametrize("windows", [0, 1])
def test_a_run_with_almost_no_data_still_reports(tmp_path: Path, windows: int):
    """A run killed at once still gets a report with its verdict (no crash, no warnings)."""
    analysis = make_analysis(n=windows)
    page = html.render(make_run(tmp_path / "r"), analysis)
    assert '<div class="badge" id="verdict-badge">✗ FAIL</div>' in page
    assert "The run did not meet its SLO." in page
    assert analysis.verdict.summary in page
    assert "P99 ≤ 50.0 ms: observed 78.5 ms (fail)" in page


def _drawn_figures(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """Every matplotlib figure the reporter renders, in order (the data it really drew)."""
    figures: list[Figure] = []
    render = plots._render

    def keep(fig: Figure, alt: str) -> plots.Image:
        figures.append(fig)
        return render(fig, alt)

    monkeypatch.setattr(plots, "_render", keep)
    return figures


def test_missing_latency_values_leave_gaps_not_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # GIVEN 30 windows whose latency percentiles are missing in windows 10-14
    # (nothing completed there), and a distribution without its P99
    analysis = make_analysis(n=30)
    missing = range(10, 15)
    corrected = analysis.windows.corrected
    holed = {
        f"{name}_ms": tuple(
            None if i in missing else v for i, v in enumerate(corrected.percentile(name))
        )
        for name in ("p50", "p95", "p99", "p999")
    }
    analysis = dataclasses.replace(
        analysis,
        windows=dataclasses.replace(
            analysis.windows, corrected=dataclasses.replace(corrected, **holed)
        ),
        nines=m.NinesDistribution(
            percentiles=(50.0, 99.0, 100.0),
            corrected_ms=(6.0, None, 90.0),
            service_ms=(5.0, None, 80.0),
        ),
    )
    figures = _drawn_figures(monkeypatch)
    # WHEN the report is rendered (no error)
    page = html.render(make_run(tmp_path / "r"), analysis)
    assert 'id="verdict-badge"' in page
    # THEN each latency line is NaN (a gap) exactly in the missing windows
    timeline = next(f for f in figures if f.axes[0].get_title("left").startswith("Latency"))
    lines = {str(line.get_label()): line for line in timeline.axes[0].get_lines()}
    for name, label in (("p50", "P50"), ("p95", "P95"), ("p99", "P99"), ("p999", "P99.9")):
        y = np.asarray(lines[label].get_ydata(), dtype=float)
        assert [i for i in range(30) if np.isnan(y[i])] == list(missing), label
        expected = [v for i, v in enumerate(holed[f"{name}_ms"]) if i not in missing]
        assert list(np.delete(y, list(missing))) == expected, label
    # and the distribution has no point at the missing P99 (P50 and the max only)
    nines = next(f for f in figures if f.axes[0].get_title("left").startswith("Latency distr"))
    corrected_line = next(
        line for line in nines.axes[0].get_lines() if str(line.get_label()).startswith("corrected")
    )
    assert list(corrected_line.get_ydata()) == [6.0, 90.0]
