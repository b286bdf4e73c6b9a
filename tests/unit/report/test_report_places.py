"""The report says which machine each timeline comes from, from the analysis' words."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from analysis_builder import make_analysis, make_run

from loadkit.analysis.model import SeriesPlace, TargetPlace
from loadkit.report import html
from loadkit.report.context import build_context
from loadkit.report.markdown import MarkdownReporter

HOSTILE_HOST = "</dd><script>alert(1)</script>"


def _remote(tmp_path: Path, host: str = "gpu-box"):
    run = make_run(tmp_path / "run")
    analysis = make_analysis(n=120)
    placed = dataclasses.replace(
        analysis.run,
        target_location=TargetPlace(False, "address of another host", host, "198.18.0.2"),
        sources=(SeriesPlace("gpu", "client", "loadgen-1", True, file="telemetry/gpu.jsonl"),),
    )
    return run, dataclasses.replace(analysis, run=placed)


def test_metadata_and_timeline_caption_name_each_series_machine(tmp_path: Path) -> None:
    run, analysis = _remote(tmp_path)
    ctx = build_context(run, analysis)
    meta = {row["label"]: row["value"] for row in ctx["metadata"]}
    assert meta["Target location"] == (
        "not on loadkit's machine (address of another host 198.18.0.2)"
    )
    assert meta["Telemetry sources"].startswith(
        "gpu every 0.1 s, sampled on client: loadgen-1, loadkit's machine"
    )
    assert ctx["places"] == [
        "target: not on loadkit's machine (address of another host 198.18.0.2)",
        "telemetry: gpu (client: loadgen-1, loadkit's machine)",
    ]
    page = html.render(run, analysis)
    assert "Where each timeline was sampled: target: not on loadkit&#39;s machine" in page
    markdown = MarkdownReporter().render(run, analysis)
    assert "telemetry: gpu (client: loadgen-1, loadkit's machine)" in markdown


def test_an_analysis_without_places_reads_them_from_the_manifest(tmp_path: Path) -> None:
    run, analysis = make_run(tmp_path / "run"), make_analysis(n=120)
    assert analysis.run.sources == ()
    meta = {row["label"]: row["value"] for row in build_context(run, analysis)["metadata"]}
    # the builder's manifest: a simulated GPU, no place recorded -> the server's, inferred
    assert "sampled on server; inferred" in meta["Telemetry sources"]
    assert meta["Target location"] == "location not recorded"


def test_a_hostile_host_name_is_escaped(tmp_path: Path) -> None:
    run, analysis = _remote(tmp_path, host=HOSTILE_HOST)
    analysis = dataclasses.replace(
        analysis,
        run=dataclasses.replace(
            analysis.run,
            sources=(SeriesPlace("gpu", "server", HOSTILE_HOST, False, file="f"),),
        ),
    )
    page = html.render(run, analysis)
    assert HOSTILE_HOST not in page
    assert "&lt;/dd&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page
