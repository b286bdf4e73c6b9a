"""Latency forensics over a loaded run: pure functions that produce an `Analysis`.

The pipeline (align -> detect -> attribute -> judge: typed stages) is in
`pipeline.analyze_run`; the result model, which
is the contract with the reporters, is in `model` (docs/analysis.md).
"""

from loadkit.analysis.model import SCHEMA_VERSION, Analysis

__all__ = ["SCHEMA_VERSION", "Analysis", "analyze_run"]


def __getattr__(name: str) -> object:
    # Lazy so that `loadkit.analysis.model` can be imported without the pipeline's deps.
    if name == "analyze_run":
        from loadkit.analysis.pipeline import analyze_run

        return analyze_run
    raise AttributeError(name)
