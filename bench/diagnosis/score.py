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
- findings on clean runs (the goal: none above "weak");
- each fault's measured effect, its P99 lift: the median corrected P99 of the
  windows a fault window touches (or the window after it, where the requests it
  held complete) over the median P99 of the windows no fault touches (after the
  analyzer's warm-up). A run whose fault raised no spike (lift < 1.5, or no
  episode of the attributed percentile on the fault's windows) is "no spike",
  not a miss; per cause, a detection curve (AC@1 by lift bin) and the weakest
  lift from which on the cause is named first in >= 90 % of runs;
- issue 26's goals: AC@1 >= 0.9 per cause over the runs with lift >= 1.5; no
  control with a finding above weak; no unexplained_* finding first in a run
  with a specific fault;
- two faults at different periods: each cause's own episodes (of the episodes
  its finding explains, the share on its own fault windows).
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

from loadkit.analysis import causes
from loadkit.analysis import model as m
from loadkit.analysis.model import Analysis
from loadkit.analysis.periodicity import run_period
from loadkit.analysis.pipeline import DEFAULT_WARMUP_S, analyze_run
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
    "data-movement": m.CAUSE_DATA_MOVEMENT,
    # issue 42: a shared fleet
    "neighbour-model": "model_contention",
    "power-cap": m.CAUSE_GPU_POWER,
    "slow-path": "unexplained_client_network_slowdown",
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
# A fault raised a spike when its P99 lift is at least this (and an episode is on it).
SPIKE_LIFT = 1.5
# Windows after a fault window that still count as its effect (requests it held complete).
EFFECT_AFTER_NS = 1_000_000_000
# The detection curve's lift bins (lower bound inclusive); lifts under 1 go in the first.
LIFT_BINS: tuple[tuple[float, float], ...] = (
    (0.0, 1.5),
    (1.5, 2.0),
    (2.0, 3.0),
    (3.0, 5.0),
    (5.0, math.inf),
)
# The weakest detectable effect: the smallest lift L such that the cause is first in
# >= DETECT_SHARE of the runs with lift >= L, and at least DETECT_MIN_RUNS such runs.
DETECT_SHARE = 0.9
DETECT_MIN_RUNS = 3
UNEXPLAINED_PREFIX = "unexplained_"


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
    # Per injected episodic cause: its P99 lift (None: run-long or not measurable), the
    # attributed percentile's episodes on its windows, and, of the episodes its finding
    # explains, how many lie on its own windows (two-fault runs: each its own episodes).
    effects: dict[str, float | None] = field(default_factory=dict)
    episodes_on_cause: dict[str, int] = field(default_factory=dict)
    finding_episodes: dict[str, int] = field(default_factory=dict)
    finding_episodes_own: dict[str, int] = field(default_factory=dict)
    ranges: str = "narrow"
    model: str = "ranker"
    load_level: str | None = None
    rate: float | None = None

    @property
    def top(self) -> str:
        return self.findings[0][0] if self.findings else "none"

    def hit(self, cause: str, k: int) -> bool:
        rank = self.ranks.get(cause)
        return rank is not None and rank <= k + len(self.true_causes) - 1

    def spike(self, cause: str) -> bool | None:
        """Did the fault raise a spike (lift >= 1.5 and an episode on it)? None: not measurable."""
        lift = self.effects.get(cause)
        if lift is None:
            return None
        return lift >= SPIKE_LIFT and self.episodes_on_cause.get(cause, 0) > 0

    def own_share(self, cause: str) -> float | None:
        """Of the episodes the cause's finding explains, the share on its own fault windows."""
        n = self.finding_episodes.get(cause, 0)
        return self.finding_episodes_own.get(cause, 0) / n if n else None


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


def _series(values: Sequence[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def _touched(t_ns: np.ndarray, window_ns: float, intervals: Sequence[Interval]) -> np.ndarray:
    """Windows a fault window overlaps, or that start within 1 s after it ends."""
    hit = np.zeros(len(t_ns), dtype=bool)
    for i in intervals:
        hit |= (t_ns < i.end_ns + EFFECT_AFTER_NS) & (t_ns + window_ns > i.start_ns)
    return hit


def fault_effects(analysis: Analysis, episodic: Sequence[Interval]) -> dict[str, float | None]:
    """P99 lift per cause: median corrected P99 of its windows / that of the windows no fault touches.

    With two faults, a cause's windows are those no other fault touches: in the windows
    both touch, the lift is the stronger one's (seed 49, seen: 0.24 s stalls, half of
    them inside a quota's windows at 401x, read 340x). A cause with no window of its own
    has no measured effect (None).
    """
    w = analysis.windows
    t = np.array(w.t_ns, dtype=np.int64)
    p99 = _series(w.corrected.p99_ms)
    if not len(t):
        return {}
    window_ns = analysis.window_s * 1e9
    settled = np.array(w.t_s, dtype=float) >= DEFAULT_WARMUP_S
    rest = ~_touched(t, window_ns, episodic) & settled & np.isfinite(p99)
    base = float(np.median(p99[rest])) if rest.sum() >= 3 else None
    out: dict[str, float | None] = {}
    for cause in sorted({i.cause for i in episodic}):
        mine = _touched(t, window_ns, [i for i in episodic if i.cause == cause])
        mine &= ~_touched(t, window_ns, [i for i in episodic if i.cause != cause])
        mine &= np.isfinite(p99)
        out[cause] = float(np.median(p99[mine])) / base if base and mine.any() else None
    return out


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
    effects = {c: lift for c, lift in fault_effects(analysis, episodic).items() if c in true_causes}
    on_cause = {
        c: sum(
            1
            for e in episodes
            if any(
                _overlaps(e.start_ns, e.end_ns, t.start_ns, t.end_ns)
                for t in episodic
                if t.cause == c
            )
        )
        for c in effects
    }
    by_id = {e.episode_id: e for e in analysis.episodes}
    explained: dict[str, int] = {}
    own: dict[str, int] = {}
    for f in analysis.findings:
        if f.cause not in effects:
            continue
        mine = [by_id[i] for i in f.episodes if i in by_id]
        explained[f.cause] = len(mine)
        own[f.cause] = sum(
            1
            for e in mine
            if any(
                _overlaps(e.start_ns, e.end_ns, t.start_ns, t.end_ns)
                for t in episodic
                if t.cause == f.cause
            )
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
        effects=effects,
        episodes_on_cause=on_cause,
        finding_episodes=explained,
        finding_episodes_own=own,
        ranges=str(plan.get("ranges", "narrow")),
        model=str(plan.get("model", "ranker")),
        load_level=plan.get("load_level"),
        rate=plan.get("rate"),
    )


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def _bin_label(lo: float, hi: float) -> str:
    if lo == 0.0:
        return f"< {hi:g}"
    return f">= {lo:g}" if math.isinf(hi) else f"{lo:g}-{hi:g}"


def weakest_detected(points: Sequence[tuple[float, bool]]) -> tuple[float, int] | None:
    """The smallest lift L with the cause first in >= 90 % of the (>= 3) runs at lift >= L."""
    for lift in sorted({p for p, _ in points}):
        above = [hit for p, hit in points if p >= lift]
        if len(above) >= DETECT_MIN_RUNS and sum(above) >= DETECT_SHARE * len(above):
            return lift, len(above)
    return None


def detection(scores: Sequence[RunScore]) -> dict[str, Any]:
    """Per episodic cause: runs by lift bin (spike or not, named first), and the weakest lift detected."""
    out: dict[str, Any] = {}
    for cause in sorted({c for s in scores for c in s.effects}):
        runs = [s for s in scores if cause in s.effects]
        measured = [s for s in runs if s.effects[cause] is not None]
        bins = []
        for lo, hi in LIFT_BINS:
            inside = [s for s in measured if lo <= _f(s.effects[cause]) < hi]
            spiked = [s for s in inside if s.spike(cause)]
            bins.append(
                {
                    "bin": _bin_label(lo, hi),
                    "runs": len(inside),
                    "no_spike": len(inside) - len(spiked),
                    "spike_runs": len(spiked),
                    "first": sum(s.hit(cause, 1) for s in spiked),
                    "first_all": sum(s.hit(cause, 1) for s in inside),
                }
            )
        weakest = weakest_detected([(_f(s.effects[cause]), s.hit(cause, 1)) for s in measured])
        out[cause] = {
            "runs": len(runs),
            "not_measurable": len(runs) - len(measured),
            "no_spike": sum(1 for s in measured if not s.spike(cause)),
            "bins": bins,
            "weakest_lift": weakest[0] if weakest else None,
            "weakest_runs": weakest[1] if weakest else 0,
        }
    return out


def _f(value: float | None) -> float:
    assert value is not None
    return float(value)


def _counted_for_goal(score: RunScore, cause: str) -> bool:
    """Episodic faults: counted when they raised P99 >= 1.5x; run-long ones (no in-run
    baseline to measure an effect against) always."""
    if cause in score.run_level_causes:
        return True
    lift = score.effects.get(cause)
    return lift is not None and lift >= SPIKE_LIFT


def goals(scores: Sequence[RunScore]) -> dict[str, Any]:
    """Issue 26's "Done when", on these runs."""
    per_cause: dict[str, Any] = {}
    for cause in sorted({c for s in scores for c in s.true_causes}):
        runs = [s for s in scores if cause in s.true_causes]
        counted = [s for s in runs if _counted_for_goal(s, cause)]
        first = sum(s.hit(cause, 1) for s in counted)
        ac1 = _ratio(first, len(counted))
        per_cause[cause] = {
            "runs": len(counted),
            "first": first,
            "ac1": ac1,
            "no_episode": sum(1 for s in counted if cause in s.effects and not s.spike(cause)),
            "run_long": all(cause in s.run_level_causes for s in runs),
            "met": ac1 is not None and ac1 >= 0.9,
        }
    controls = [s for s in scores if s.case in CONTROL_CASES]
    above_weak = [
        s.run_id
        for s in controls
        if any(CONFIDENCE_RANK[c] > CONFIDENCE_RANK["weak"] for _, c in s.findings)
    ]
    specific = [
        s for s in scores if any(not c.startswith(UNEXPLAINED_PREFIX) for c in s.true_causes)
    ]
    unexplained_first = [
        s.run_id
        for s in specific
        if s.top.startswith(UNEXPLAINED_PREFIX) and s.top not in s.true_causes
    ]
    return {
        "per_cause": per_cause,
        "controls": len(controls),
        "controls_above_weak": above_weak,
        "specific_runs": len(specific),
        "unexplained_first": unexplained_first,
        "met": bool(per_cause)
        and all(r["met"] for r in per_cause.values() if r["runs"])
        and not above_weak
        and not unexplained_first,
    }


def overlaps(scores: Sequence[RunScore]) -> list[dict[str, Any]]:
    """Two-fault runs: each cause's rank, and whether its finding explains its own episodes."""
    out = []
    for s in scores:
        if len(s.true_causes) < 2:
            continue
        causes_ = {
            c: {
                "rank": s.ranks.get(c),
                "explained": s.finding_episodes.get(c, 0),
                "own": s.finding_episodes_own.get(c, 0),
                "lift": s.effects.get(c),
            }
            for c in s.true_causes
        }
        ok = all(
            r["rank"] is not None
            and r["rank"] <= 2
            and (s.own_share(c) is None or _f(s.own_share(c)) >= 0.5)
            for c, r in causes_.items()
        )
        out.append({"run_id": s.run_id, "causes": causes_, "both_top2_own_episodes": ok})
    return out


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
        "detection": detection(scores),
        "goals": goals(scores),
        "overlaps": overlaps(scores),
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
    lines += [""] + _effect_lines(summary) + [""] + _goal_lines(summary) + [""]
    lines += _overlap_lines(summary)
    lines += [
        "",
        "| run | model, load | findings (analyzer order) | P99 lift | episodes (matched) | truth windows (recalled) | period injected / found | load1 before / after | host CPU (median) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in scores:
        found = ", ".join(f"{c} ({conf})" for c, conf in s.findings) or "none"
        period = (
            f"{s.true_period_s:.2f} / {s.detected_period_s:.2f}"
            if s.true_period_s and s.detected_period_s
            else f"{_num(s.true_period_s) if s.true_period_s else '-'} / "
            f"{_num(s.detected_period_s) if s.detected_period_s else '-'}"
        )
        lifts = ", ".join(
            f"{_num(v, 'x')}{'' if s.spike(c) is not False else ' (no spike)'}"
            for c, v in s.effects.items()
        )
        load = f"{s.model}, {s.load_level or '-'} {_num(s.rate, '/s')}"
        lines.append(
            f"| {s.run_id} | {load} | {found} | {lifts or '-'} | {s.episodes} ({s.episodes_matched}) | "
            f"{s.truth_windows} ({s.windows_recalled}) | {period} | "
            f"{_num(s.load1_before)} / {_num(s.load1_after)} | {_num(s.host_cpu_median_pct, '%')} |"
        )
    return "\n".join(lines) + "\n"


def _effect_lines(summary: dict[str, Any]) -> list[str]:
    det = summary["detection"]
    if not det:
        return []
    labels = [b["bin"] for b in next(iter(det.values()))["bins"]]
    lines = [
        "Detection by fault effect (P99 lift = median P99 of the windows a fault touches / "
        "median P99 of the windows none touches). Each cell: named first / runs with a spike "
        "(an episode on the fault); `+n ns`: n more runs whose fault made no episode "
        "(no spike, not a miss).",
        "",
        "| cause | runs | no spike | "
        + " | ".join(f"lift {b}" for b in labels)
        + " | weakest lift named first in >= 90 % |",
        "|---|---|---|" + "---|" * len(labels) + "---|",
    ]
    for cause, r in det.items():
        cells = []
        for b in r["bins"]:
            cell = f"{b['first']}/{b['spike_runs']}" if b["spike_runs"] else "-"
            if b["no_spike"]:
                cell += f" +{b['no_spike']} ns"
            cells.append(cell)
        weakest = (
            f"{r['weakest_lift']:.2f}x ({r['weakest_runs']} runs at or above)"
            if r["weakest_lift"] is not None
            else "not reached"
        )
        lines.append(
            f"| {cause} | {r['runs']} | {r['no_spike']} | " + " | ".join(cells) + f" | {weakest} |"
        )
    return lines


def _goal_lines(summary: dict[str, Any]) -> list[str]:
    g = summary["goals"]
    lines = [
        "Goals (issue 26): "
        + ("**met**" if g["met"] else "**not met**")
        + ". AC@1 >= 0.9 per cause over the runs whose fault raised P99 >= 1.5x "
        "(run-long faults: every run; a run counted here whose fault made no episode is a miss):",
        "",
        "| cause | runs counted | named first | AC@1 | of them without an episode on the fault | met |",
        "|---|---|---|---|---|---|",
    ]
    for cause, r in g["per_cause"].items():
        lines.append(
            f"| {cause}{' (run-long)' if r['run_long'] else ''} | {r['runs']} | {r['first']} | "
            f"{_fmt(r['ac1'])} | {r['no_episode']} | {'yes' if r['met'] else 'no'} |"
        )
    above = g["controls_above_weak"]
    unexplained = g["unexplained_first"]
    lines += [
        "",
        f"- Controls with a finding above weak: {len(above)} of {g['controls']}"
        + (f" ({', '.join(above)})" if above else "")
        + " (goal: 0).",
        f"- An unexplained_* finding first in a run with a specific fault: {len(unexplained)} "
        f"of {g['specific_runs']}"
        + (f" ({', '.join(unexplained)})" if unexplained else "")
        + " (goal: 0).",
    ]
    return lines


def _overlap_lines(summary: dict[str, Any]) -> list[str]:
    rows = summary["overlaps"]
    if not rows:
        return []
    lines = [
        "Two faults in one run: each cause's rank, and of the episodes its finding explains, "
        "those on its own fault windows (goal: both in the top two, each mostly its own).",
        "",
        "| run | cause | rank | own episodes / explained | P99 lift | both top two, own episodes |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        for cause, r in row["causes"].items():
            lines.append(
                f"| {row['run_id']} | {cause} | {r['rank'] or '-'} | {r['own']}/{r['explained']} | "
                f"{_num(r['lift'], 'x')} | {'yes' if row['both_top2_own_episodes'] else 'no'} |"
            )
    return lines


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
