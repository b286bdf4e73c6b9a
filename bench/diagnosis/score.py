"""Score the analyzer against the ground truth of generated diagnosis runs.

For each run: read the plan (`scenario.params.diagnosis`) and the ground truth
(`fault` events; `burst-start`/`burst-end` phases for bursts), run
`loadkit.analysis.pipeline.analyze_run`, and compare:

- episode precision / recall (±2 s): a detected spike episode (of the
  percentile the analyzer attributed, P99 first) is a true positive when it
  overlaps a ground-truth window widened by 2 s on each side; a ground-truth
  window is recalled when some episode overlaps it so. Only for episodic
  faults: a run-long fault (batching window, churn) has no windows to match;
- period error: |detected - injected| / injected for runs with one periodic fault;
- AC@1 / AC@3 per cause: is the injected cause the analyzer's first (top 3)
  finding? In a run with n injected faults, each counts as found at k when it
  is among the first k + n - 1 findings (the other injected faults do not
  count against it);
- a confusion matrix of injected case against the first finding;
- findings on clean runs (the goal: none above "weak").
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from loadkit.analysis import causes
from loadkit.analysis import model as m
from loadkit.analysis.model import Analysis
from loadkit.analysis.periodicity import run_period
from loadkit.analysis.pipeline import analyze_run
from loadkit.rundir import Run, load_run

TOLERANCE_NS = 2_000_000_000
CONFIDENCE_RANK = {"strong": 3, "moderate": 2, "weak": 1}

# Plan fault key -> analyzer cause (the benchmark's own case names).
CASE_CAUSES = {
    "stall": m.CAUSE_PROCESS_STALL,
    "cpu-burn": m.CAUSE_CPU_SATURATION,
    "cgroup-quota": m.CAUSE_CGROUP_THROTTLING,
    "thermal": m.CAUSE_GPU_THERMAL,
    "batching-window": m.CAUSE_BATCHING_WINDOW,
    "bursts": m.CAUSE_ARRIVAL_BURST,
    "churn": m.CAUSE_CONNECTION_CHURN,
    "model-slowdown": "unexplained_compute_slowdown",
}
# Plan fault keys of controls: a fault that must not be blamed (no cause to find).
CONTROL_FAULTS = {"busy-host", "cgroup-quota-loose"}
# Cases scored as clean controls: no finding above weak.
CONTROL_CASES = ("clean", "clean-busy", "cgroup-quota-loose")
# Ground-truth event name (kind "fault") -> analyzer cause, from the cause registry
# (each cause lists the fault events that inject it; the simulated GPU's
# `thermal-throttle` (the effect) is the window, not `cooling-fault` (its trigger)).
EVENT_CAUSES = {name: c.id for c in causes.REGISTRY for name in c.fault_events}
# Causes scored without episode windows: the registry's standing conditions, and
# any cause whose ground truth is run-long (a `fault` event with scope "run").
STANDING_CAUSES = {c.id for c in causes.REGISTRY if c.kind == causes.STANDING}


@dataclass(frozen=True)
class Interval:
    cause: str
    start_ns: int
    end_ns: int
    run_long: bool = False  # the fault lasts the whole run (scope "run")


@dataclass
class RunScore:
    """The comparison for one run."""

    run_id: str
    case: str
    seed: int
    true_causes: list[str]
    findings: list[tuple[str, str]]  # (cause, confidence) in the analyzer's order
    ranks: dict[str, int | None]  # true cause -> 1-based rank among findings, None: absent
    truth_windows: int
    episodes: int
    episodes_matched: int
    windows_recalled: int
    true_period_s: float | None
    detected_period_s: float | None
    period_error: float | None
    headline: str
    notes: list[str] = field(default_factory=list)
    run_level_causes: list[str] = field(default_factory=list)  # truth without episode windows
    # The machine's load around the run (1-min load average before/after) and the
    # median host CPU during it: on a shared host other users' work shows here.
    load1_before: float | None = None
    load1_after: float | None = None
    host_cpu_median_pct: float | None = None

    @property
    def top(self) -> str:
        return self.findings[0][0] if self.findings else "none"

    def hit(self, cause: str, k: int) -> bool:
        rank = self.ranks.get(cause)
        return rank is not None and rank <= k + len(self.true_causes) - 1


def ground_truth(run: Run) -> list[Interval]:
    """Fault windows from the events log (start/end pairs), and burst phases."""
    events = run.events
    out: list[Interval] = []
    if events.empty:
        return out
    end_default = int(run.end_ns or events["t_ns"].max())
    open_: dict[tuple[str, Any], int] = {}
    run_long: set[str] = set()
    for row in events.sort_values("t_ns").to_dict("records"):
        kind, name, t = row.get("kind"), row.get("name"), int(row["t_ns"])
        if kind == "fault" and name in EVENT_CAUSES:
            key = (name, row.get("window"))
            if row.get("scope") == "run":
                run_long.add(str(name))
            if row.get("action") == "start":
                open_[key] = t
            elif row.get("action") == "end":
                key = key if key in open_ else next((k for k in open_ if k[0] == name), key)
                if key in open_:
                    out.append(
                        Interval(EVENT_CAUSES[str(name)], open_.pop(key), t, name in run_long)
                    )
        elif kind == "phase" and name in ("burst-start", "burst-end"):
            key = ("burst", None)
            if name == "burst-start":
                open_[key] = t
            elif key in open_:
                out.append(Interval(m.CAUSE_ARRIVAL_BURST, open_.pop(key), t))
    for (name, _), start in open_.items():
        cause = m.CAUSE_ARRIVAL_BURST if name == "burst" else EVENT_CAUSES[str(name)]
        out.append(Interval(cause, start, end_default, name in run_long))
    return sorted(out, key=lambda i: i.start_ns)


def _primary_episodes(analysis: Analysis) -> list[m.SpikeEpisode]:
    return list(analysis.primary_episodes())


def _overlaps(a0: int, a1: int, b0: int, b1: int) -> bool:
    return a0 <= b1 + TOLERANCE_NS and a1 >= b0 - TOLERANCE_NS


def true_period(plan: dict[str, Any]) -> float | None:
    """The injected period when the run has exactly one periodic fault."""
    periods = []
    for name, params in plan.get("faults", {}).items():
        if name in CONTROL_FAULTS:
            continue
        if name == "bursts":
            periods.append(params.get("burst_period_s"))
        elif isinstance(params.get("schedule"), dict):
            periods.append(params["schedule"].get("period_s"))
    periods = [p for p in periods if p]
    return float(periods[0]) if len(periods) == 1 else None


def score_run(path: Path, *, save_analysis: bool = True) -> RunScore:
    run = load_run(path)
    params = (run.manifest.get("scenario") or {}).get("params") or {}
    plan = params.get("diagnosis") or {}
    analysis = analyze_run(run)
    if save_analysis:
        analysis.save(Path(path) / "analysis.json")
    truth = ground_truth(run)
    true_causes = [CASE_CAUSES[f] for f in plan.get("faults", {}) if f not in CONTROL_FAULTS]
    episodic = [t for t in truth if not t.run_long and t.cause not in STANDING_CAUSES]
    run_level = sorted({t.cause for t in truth if t not in episodic})
    episodes = _primary_episodes(analysis)
    matched = sum(
        1
        for e in episodes
        if any(_overlaps(e.start_ns, e.end_ns, t.start_ns, t.end_ns) for t in episodic)
    )
    recalled = sum(
        1
        for t in episodic
        if any(_overlaps(e.start_ns, e.end_ns, t.start_ns, t.end_ns) for e in episodes)
    )
    findings = [(f.cause, f.confidence) for f in analysis.findings]
    order = [c for c, _ in findings]
    ranks = {c: (order.index(c) + 1 if c in order else None) for c in true_causes}
    injected = true_period(plan)
    primary = episodes[0].percentile if episodes else "p99"
    # The analyzer's period of the run (the headline's): the attributed
    # percentile's, else the most significant other percentile's.
    per = run_period(analysis.periodicity, primary)
    detected = per.period_s if per is not None else None
    error = abs(detected - injected) / injected if detected and injected else None
    load = plan.get("host_load") or {}
    cpu = [v for v in (analysis.telemetry.cpu_mean_pct or ()) if v is not None]
    return RunScore(
        run_id=run.run_id,
        case=str(plan.get("case", "unknown")),
        seed=int(plan.get("seed", -1)),
        true_causes=true_causes,
        findings=findings,
        ranks=ranks,
        truth_windows=len(episodic),
        episodes=len(episodes),
        episodes_matched=matched,
        windows_recalled=recalled,
        true_period_s=injected,
        detected_period_s=detected,
        period_error=error,
        headline=analysis.headline,
        notes=list(analysis.notes),
        run_level_causes=run_level,
        load1_before=(load.get("before") or {}).get("load1"),
        load1_after=(load.get("after") or {}).get("load1"),
        host_cpu_median_pct=float(median(cpu)) if cpu else None,
    )


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def summarize(scores: Sequence[RunScore]) -> dict[str, Any]:
    """Per-cause AC@1/AC@3, episode P/R, period errors, confusion matrix, clean-run findings."""
    per_cause: dict[str, dict[str, Any]] = {}
    for cause in sorted({c for s in scores for c in s.true_causes}):
        runs = [s for s in scores if cause in s.true_causes]
        eps = [s for s in runs if cause not in s.run_level_causes]
        periods = [s.period_error for s in runs if s.true_period_s is not None]
        per_cause[cause] = {
            "runs": len(runs),
            "ac1": _ratio(sum(s.hit(cause, 1) for s in runs), len(runs)),
            "ac3": _ratio(sum(s.hit(cause, 3) for s in runs), len(runs)),
            "episode_precision": _ratio(
                sum(s.episodes_matched for s in eps), sum(s.episodes for s in eps)
            ),
            "episode_recall": _ratio(
                sum(s.windows_recalled for s in eps), sum(s.truth_windows for s in eps)
            ),
            "run_long": bool(runs) and not eps,
            "period_runs": len(periods),
            "period_detected": sum(1 for p in periods if p is not None),
            "period_error_max": max((p for p in periods if p is not None), default=None),
            "period_within_5pct": sum(1 for p in periods if p is not None and p <= 0.05),
        }
    confusion: dict[str, Counter[str]] = defaultdict(Counter)
    for s in scores:
        confusion[s.case][s.top] += 1
    clean = [s for s in scores if s.case in CONTROL_CASES]
    worst = [max((CONFIDENCE_RANK[c] for _, c in s.findings), default=0) for s in clean]
    return {
        "runs": len(scores),
        "per_cause": per_cause,
        "confusion": {case: dict(cols) for case, cols in sorted(confusion.items())},
        "clean": {
            "runs": len(clean),
            "with_findings": sum(1 for s in clean if s.findings),
            "above_weak": sum(1 for w in worst if w > CONFIDENCE_RANK["weak"]),
            "findings": [s.findings for s in clean],
            "episodes": [s.episodes for s in clean],
        },
    }


def _fmt(value: float | None, pct: bool = True) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:.0f}%" if pct else f"{value:.3f}"


def _num(value: float | None, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:.1f}{unit}"


def markdown(summary: dict[str, Any], scores: Sequence[RunScore], title: str) -> str:
    """The results table, the confusion matrix and one line per run."""
    lines = [f"### {title}", ""]
    lines += [
        "| cause | runs | AC@1 | AC@3 | episode precision | episode recall | period found | period error ≤ 5% | max period error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for cause, r in summary["per_cause"].items():
        run_level = r.get("run_long", False)
        lines.append(
            f"| {cause} | {r['runs']} | {_fmt(r['ac1'])} | {_fmt(r['ac3'])} | "
            f"{'run-long' if run_level else _fmt(r['episode_precision'])} | "
            f"{'run-long' if run_level else _fmt(r['episode_recall'])} | "
            f"{r['period_detected']}/{r['period_runs']} | {r['period_within_5pct']}/{r['period_runs']} | "
            f"{_fmt(r['period_error_max'])} |"
        )
    clean = summary["clean"]
    lines += [
        "",
        f"Clean and control runs ({', '.join(CONTROL_CASES)}): {clean['runs']}; "
        f"with any finding: {clean['with_findings']}; "
        f"with a finding above weak: {clean['above_weak']}.",
        "",
    ]
    columns = sorted({c for row in summary["confusion"].values() for c in row})
    lines += ["| injected \\ first finding | " + " | ".join(columns) + " |"]
    lines += ["|---|" + "---|" * len(columns)]
    for case, row in summary["confusion"].items():
        lines.append(f"| {case} | " + " | ".join(str(row.get(c, "")) for c in columns) + " |")
    lines += [
        "",
        "| run | findings (analyzer order) | episodes (matched) | truth windows (recalled) | period injected / found | load1 before / after | host CPU (median) |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in scores:
        found = ", ".join(f"{c} ({conf})" for c, conf in s.findings) or "none"
        period = (
            f"{s.true_period_s:.2f} / {s.detected_period_s:.2f}"
            if s.true_period_s and s.detected_period_s
            else f"{_num(s.true_period_s) if s.true_period_s else '-'} / "
            f"{_num(s.detected_period_s) if s.detected_period_s else '-'}"
        )
        lines.append(
            f"| {s.run_id} | {found} | {s.episodes} ({s.episodes_matched}) | "
            f"{s.truth_windows} ({s.windows_recalled}) | {period} | "
            f"{_num(s.load1_before)} / {_num(s.load1_after)} | {_num(s.host_cpu_median_pct, '%')} |"
        )
    return "\n".join(lines) + "\n"


def score_runs(paths: Iterable[Path]) -> list[RunScore]:
    return [score_run(p) for p in paths]


def write_scores(scores: Sequence[RunScore], out: Path, title: str) -> dict[str, Any]:
    summary = summarize(scores)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scores.json").write_text(
        json.dumps({"summary": summary, "runs": [asdict(s) for s in scores]}, indent=1)
    )
    (out / "results.md").write_text(markdown(summary, scores, title))
    return summary
