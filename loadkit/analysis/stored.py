"""A run's analysis as stored beside it (analysis.json), or a fresh one when there is none."""

from __future__ import annotations

import sys

from loadkit.analysis.model import Analysis
from loadkit.rundir import Run
from loadkit.rundir.layout import ANALYSIS_FILE


def load_or_analyze(run: Run, reanalyze: bool = False) -> Analysis:
    """The run's analysis.json, or a fresh analysis written to it when missing."""
    path = run.path / ANALYSIS_FILE
    if path.exists() and not reanalyze:
        return Analysis.load(path)
    from loadkit.analysis import analyze_run  # lazy: reading one needs no pipeline

    print(f"analyzing {run.path} (no {ANALYSIS_FILE} yet) ...", file=sys.stderr)
    analysis: Analysis = analyze_run(run)  # type: ignore[operator]
    try:
        analysis.save(path)
    except OSError as exc:
        # A read-only copy of a run can still be reported on.
        print(f"WARNING: could not write {path} ({exc}); continuing", file=sys.stderr)
    return analysis
