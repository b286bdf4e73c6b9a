"""The few lines `loadkit run` prints at the end: totals and whole-run percentiles.

Percentiles come from merging the run's HDR interval histograms (never from
averaging per-interval percentiles). The full analysis is `loadkit analyze`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadkit import percentile_names
from loadkit.rundir import load_run, new_histogram
from loadkit.rundir.generator_check import schedule_shortfall

SUMMARY_PERCENTILES = ("p50", "p99", "p999")


def _spoken(name: str) -> str:
    return percentile_names.spoken(name) if percentile_names.key(name) else name


@dataclass(frozen=True)
class RunSummary:
    run_dir: Path
    status: str
    offered: int
    ok: int
    errors: int
    dropped: int
    seconds: int  # intervals with load rows
    corrected_ms: dict[str, float] = field(default_factory=dict)  # p50, p99, p999, max
    service_ms: dict[str, float] = field(default_factory=dict)
    error_kinds: dict[str, int] = field(default_factory=dict)
    error_messages: dict[str, list[str]] = field(default_factory=dict)  # the server's words
    abort: dict[str, Any] | None = None  # the manifest's `abort` (an --abort-on condition, Ctrl-C)
    lost_workers: list[dict[str, Any]] = field(default_factory=list)  # manifest.distributed.lost
    generator: str | None = None  # the generator fell behind its schedule: what and what to do

    @property
    def achieved_per_s(self) -> float:
        return (self.ok + self.errors) / self.seconds if self.seconds else 0.0

    def text(self) -> str:
        def fmt(p: dict[str, float]) -> str:
            if not p:
                return "-"
            return "  ".join(f"{_spoken(k)} {v:.1f}" for k, v in p.items()) + " ms"

        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.error_kinds.items())) or "none"
        said = [
            f"  {kind:<9} the server said: {message}"
            for kind, messages in sorted(self.error_messages.items())
            for message in messages
        ]
        return "\n".join(
            [
                f"run {self.run_dir} ({self.status})",
                f"  requests  {self.ok} ok, {self.errors} errors ({kinds}), "
                f"{self.dropped} dropped of {self.offered} offered",
                f"  rate      {self.achieved_per_s:.1f}/s achieved over {self.seconds} s",
                f"  corrected {fmt(self.corrected_ms)}",
                f"  service   {fmt(self.service_ms)}",
                *said,
                *(
                    f"  lost      {w.get('worker')}: {float(w.get('offered_per_s') or 0):g}/s"
                    f" unsent for the last {float(w.get('unsent_s') or 0):.0f} s"
                    f" (~{w.get('unsent_estimate', 0)} requests; {w.get('why')})"
                    for w in self.lost_workers
                ),
                *([f"  generator {self.generator}"] if self.generator else []),
                *(
                    [f"  aborted   {self.abort['message']}"]
                    if self.abort and self.abort.get("message")
                    else []
                ),
                f"next: loadkit analyze {self.run_dir}",
            ]
        )


def summarize_run(run_dir: str | Path) -> RunSummary:
    run = load_run(run_dir)
    load = run.load_intervals
    totals = {k: 0 for k in ("offered", "ok", "errors", "dropped")}
    kinds: dict[str, int] = {}
    seconds = 0
    if len(load):
        for key in totals:
            if key in load.columns:
                totals[key] = int(load[key].fillna(0).sum())
        seconds = int(load["t_ns"].nunique())
        if "error_kinds" in load.columns:
            for value in load["error_kinds"]:
                for kind, count in (value or {}).items():
                    kinds[kind] = kinds.get(kind, 0) + int(count)
    merged = {"corrected": new_histogram(), "service": new_histogram()}
    for interval in run.iter_latency_intervals():  # one decoded histogram at a time
        if interval.kind in merged:
            merged[interval.kind].add(interval.histogram)

    def percentiles(kind: str) -> dict[str, float]:
        h = merged[kind]
        if h.get_total_count() == 0:
            return {}
        out = {
            name: h.get_value_at_percentile(percentile_names.percentile(name)) / 1000.0
            for name in SUMMARY_PERCENTILES
        }
        out["max"] = h.get_max_value() / 1000.0
        return out

    shortfall = schedule_shortfall(load)
    return RunSummary(
        run_dir=Path(run_dir),
        generator=shortfall.line() if shortfall is not None else None,
        status=run.status,
        seconds=seconds,
        corrected_ms=percentiles("corrected"),
        service_ms=percentiles("service"),
        error_kinds=kinds,
        error_messages=run.error_messages(),
        abort=run.info.abort,
        lost_workers=list((run.info.distributed or {}).get("lost") or []),
        **totals,
    )
