"""`loadkit analyze RUN`: latency forensics on a run directory, written to RUN/analysis.json."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TextIO

from loadkit import percentile_names
from loadkit.analysis import causes
from loadkit.analysis.model import (
    Alert,
    Analysis,
    BurstRecovery,
    CauseCheck,
    Finding,
    OverallStats,
    Periodicity,
)
from loadkit.analysis.pipeline import analyze_run
from loadkit.analysis.places import placement_lines
from loadkit.analysis.slo import DEFAULT_SLO, parse_slo
from loadkit.errors import EXIT_OK, SloFailed, UsageError
from loadkit.rundir import load_run
from loadkit.rundir.layout import ANALYSIS_FILE

HELP = "explain a run: SLO verdict, P99 spike episodes, their period and their causes"
DESCRIPTION = f"""\
Analyze a run directory and write {ANALYSIS_FILE} next to it.

Prints the SLO verdict and the top findings, each with one line of evidence.
Thresholds come from --slo, else the scenario's (manifest "slo"), else the
defaults (P99 <= {DEFAULT_SLO["p99_ms"]:g} ms, errors <= {DEFAULT_SLO["errors_pct"]:g} %).

exit codes: 0 analyzed (whatever the verdict), 1 SLO failed with --fail-on-slo,
2 bad --slo or {ANALYSIS_FILE} cannot be written (a full disk, an unwritable
directory: the previous one is kept), 4 unreadable run directory.

The summary groups its notes (the causes that could not be assessed, and why;
the data that was missing) into a few lines; --verbose lists each of them.

examples:
  loadkit analyze reports/20251129-204400-burst --slo p99=50ms,errors=0.1% --fail-on-slo
  loadkit analyze reports/20251129-204400-burst --verbose
"""

MAX_FINDINGS = 5  # with --verbose
FIRST_SCREEN_FINDINGS = 3  # without: every finding is in analysis.json and the report
# The first screen's notes: at most this many lines, each about this wide; every note
# and every cause that could not be assessed stays in analysis.json, the report and
# `--verbose`. A production window made 27 note lines, the demo 5 (issue 55).
NOTE_LINES = 2
NOTE_WIDTH = 160


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN", help="run directory (reports/<run_id>)")
    parser.add_argument(
        "--slo",
        metavar="SPEC",
        help="thresholds, e.g. p99=50ms,p95=30ms,errors=0.1%% (overrides the scenario's)",
    )
    parser.add_argument(
        "--fail-on-slo",
        action="store_true",
        help="exit with code 1 when the run fails its SLO (for CI launch gates)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print analysis.json to stdout instead of the summary"
    )
    parser.add_argument("--no-write", action="store_true", help=f"do not write RUN/{ANALYSIS_FILE}")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="list every note and every cause that could not be assessed, with its reason "
        "(the summary groups them into a few lines)",
    )


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} ms"


def _evidence_line(finding: Finding) -> str:
    if causes.is_error(finding.cause):
        values = {e.name: e.value for e in finding.evidence}
        n = int(values.get("episodes") or 0)
        line = f"{n} error episode{'s' if n != 1 else ''}, {finding.coincidence:.0%} of the run"
        failed, outside = values.get("failed_pct"), values.get("failed_outside_pct")
        if failed is not None and outside is not None:
            line += f", {failed:.0f}% of their requests failed vs {outside:.1f}% outside them"
        if finding.p_value is not None:
            line += f", p={finding.p_value:.2g}"
        if finding.consequence_of is not None:
            line += f", a consequence of {finding.consequence_of}"
        return line
    stats = (
        [f"{len(finding.episodes)}/{finding.episodes_total} episodes"] if finding.episodes else []
    )
    if finding.lift is not None:
        stats.append(f"lift {finding.lift:.1f}")
    elif finding.episodes:
        stats.append("never in baseline")
    if finding.p_value is not None:
        stats.append(f"p={finding.p_value:.2g}")
    if finding.cliffs_delta is not None:
        stats.append(f"Cliff's d={finding.cliffs_delta:.2f}")
    if finding.lag_s is not None:
        stats.append(f"lag {finding.lag_s:+.0f} s")
    if not finding.episodes:
        stats.append(f"standing condition in {finding.coincidence:.0%} of windows")
    return ", ".join(stats)


def _period_phrase(a: Analysis) -> str:
    """ ", periodic every 10.0 s (...)" for P99, or why not in a few words, on one line.

    Every rejected candidate period is in analysis.json and the report's periodicity
    table; the summary names the closest one only, and the period another percentile
    shows where P99's own spikes are too few to confirm one.
    """
    period = a.periodicity_for("p99")
    if period is None:
        return ""
    if period.periodic and period.period_s:
        return (
            f", periodic every {period.period_s:.1f} s (jitter {period.jitter_s or 0:.1f} s, "
            f"{period.cycles or 0:.0f} cycles, p={period.p_value or 0:.1g})"
        )
    other = next(
        (
            p
            for name in ("p999", "p95", "p50")
            if (p := a.periodicity_for(name)) is not None and p.periodic and p.period_s
        ),
        None,
    )
    if other is not None and other.period_s:
        return (
            f"; the {other.percentile.upper()} spikes repeat every {other.period_s:.1f} s "
            f"(P99's own: {period.reason})"
        )
    return f", not periodic ({period.reason})"


def _latency_line(o: OverallStats) -> str:
    """The whole run's percentiles; a production window's per step, with their source."""
    c = o.corrected
    if o.step_latency is None:
        return (
            f"latency (corrected): p50 {_ms(c.p50_ms)}  p95 {_ms(c.p95_ms)}  "
            f"p99 {_ms(c.p99_ms)}  p99.9 {_ms(c.p999_ms)}  max {_ms(c.max_ms)}"
        )
    s = o.step_latency
    names = [n for n in ("p50", "p95", "p99", "p999", "mean") if s.worst_ms.get(n) is not None]
    values = "  ".join(
        f"{n if n == 'mean' else percentile_names.spoken(n)} "
        f"{_ms(s.median_ms.get(n))} / {_ms(s.worst_ms.get(n))}"
        for n in names
    )
    return (
        f"latency ({s.source}; per {s.step_s:g} s step, median / worst): "
        f"{values or 'no values in the window'}"
    )


def _short_reason(reason: str) -> str:
    """ "not assessable: no gpu data" -> "no gpu data"; the words before any aside."""
    text = (
        reason.split(": ", 1)[-1]
        if reason.startswith(("not assessable", "not assessed"))
        else reason
    )
    for aside in (" (", ", which", ", too few", ": "):
        text = text.split(aside, 1)[0]
    return text


def _unassessable_line(checks: list[CauseCheck], percentiles: list[Periodicity]) -> str:
    """ "not assessable here: 4 causes for no gpu data, arrival_burst (no load counters), ..." """
    groups: dict[str, list[str]] = {}
    for c in checks:
        groups.setdefault(_short_reason(c.reason), []).append(c.cause)
    parts = [
        f"{len(names)} causes for {reason}" if len(names) > 1 else f"{names[0]} ({reason})"
        for reason, names in sorted(groups.items(), key=lambda kv: -len(kv[1]))
    ]
    parts += [f"{p.percentile} spike episodes ({_short_reason(p.reason)})" for p in percentiles]
    line = "not assessable here: "
    for i, part in enumerate(parts):
        if i and len(line) + len(part) > NOTE_WIDTH:
            line += f"{len(parts) - i} more, "  # causes or percentiles: --verbose names them
            break
        line += part + ", "
    return line.removesuffix(", ")


def _is_data_account(note: str) -> bool:
    """A note that says which data is absent or where a series came from: read after the rest
    (the not-assessable line already says what the absence costs), and left to --verbose
    where it is longer than a line."""
    return note.startswith(("no ", "series ", "not recorded from"))


def _note_lines(a: Analysis, verbose: bool) -> list[str]:
    """The notes under the findings: every one with --verbose, else packed into NOTE_LINES
    (the first of them the causes and percentiles that could not be assessed)."""
    unassessable = [c for c in a.causes_checked if c.status == "not_assessable"]
    if verbose:
        return [f"{c.cause}: {c.reason}" for c in unassessable] + list(a.notes)
    unassessed = [
        p for p in a.periodicity if p.reason.startswith("not assessed") and not p.periodic
    ]
    said = {f"{p.percentile} spike episodes {p.reason}" for p in unassessed}
    lines = [_unassessable_line(unassessable, unassessed)] if unassessable or unassessed else []
    packed: list[str] = []
    hidden = 0
    for note in sorted((n for n in a.notes if n not in said), key=_is_data_account):
        if _is_data_account(note) and len(note) > NOTE_WIDTH:
            hidden += 1
        elif not packed or len("; ".join([*packed, note])) <= NOTE_WIDTH:
            packed.append(note)
        elif len(lines) + 2 <= NOTE_LINES:
            lines.append("; ".join(packed))
            packed = [note]
        else:
            hidden += 1
    if packed and len(lines) < NOTE_LINES:
        lines.append("; ".join(packed))
    else:
        hidden += len(packed)
    # Where the rest is, as a command that works when pasted (this run's own path).
    verbose_command = f"`loadkit analyze {shlex.quote(a.run.path)} --verbose`"
    if hidden:
        more = f"{hidden} more note{'s' if hidden != 1 else ''}: {verbose_command}"
        lines = [*lines[:-1], f"{lines[-1]}; {more}"] if lines else [more]
    elif unassessable or unassessed:
        lines[-1] += f"; {verbose_command} gives each reason"
    return lines


def _alerts_to_print(alerts: tuple[Alert, ...]) -> list[Alert]:
    """Every alert, less a warning whose worst value a critical alert already says."""
    critical = {(a.unit, a.value) for a in alerts if a.severity == "critical"}
    return [a for a in alerts if a.severity == "critical" or (a.unit, a.value) not in critical]


def print_summary(analysis: Analysis, out: TextIO, *, verbose: bool = False) -> None:
    """A compact human summary: verdict, headline numbers, top findings with evidence."""
    a = analysis
    o = a.overall
    w = out.write
    outage = causes.outage_line(a.findings)
    if outage:  # the most important thing that can happen in a load test: said first
        w(f"{outage}\n")
    w(
        f"{a.run.run_id}  ({a.run.status}, {o.duration_s:.0f} s, {a.window_s:g} s windows"
        f"{', simulated GPU' if a.run.gpu_kind == 'simulated' else ''})\n"
    )
    w(f"verdict: {a.verdict.summary}  [thresholds: {a.verdict.source}]\n")
    for line in placement_lines(a.run):  # which machine each timeline comes from
        w(f"{line}\n")
    w(_latency_line(o) + "\n")
    rate = f"{o.throughput_rps:.0f} req/s" if o.throughput_rps is not None else "n/a"
    err = f"{o.error_pct:.2f}%" if o.error_pct is not None else "n/a"
    w(f"throughput: {rate}  requests: {o.completed}  errors: {err}  dropped: {o.dropped}\n")
    for kind, messages in sorted(o.error_messages.items()):
        for message in messages:
            w(f"  {kind}: the server said: {message}\n")
    w(f"\n{a.headline}\n")
    p99_eps = a.episodes_for("p99")
    if p99_eps:
        w(f"P99 spike episodes: {len(p99_eps)}{_period_phrase(a)}\n")
    if a.findings:
        # The first finding with its evidence and action; the others a line each (the
        # first screen: a weak second finding took it to 19 lines), in full with --verbose.
        shown = a.findings[: MAX_FINDINGS if verbose else FIRST_SCREEN_FINDINGS]
        for i, f in enumerate(shown, start=1):
            full = i == 1 or verbose
            made_by = f", a consequence of {f.consequence_of}" if f.consequence_of else ""
            w(f" {i}. [{f.confidence}] {f.title}{'' if full else made_by}: {f.summary}\n")
            if full:
                w(f"    evidence: {_evidence_line(f)}\n")
                w(f"    action: {f.action}\n")
    for r in a.recoveries:
        w(_recovery_line(r, a.run.start_ns or 0) + "\n")
    if a.knee is not None:
        w(f"saturation knee: {a.knee.reason}\n")
    if a.capacity is not None:
        w(f"capacity: {a.capacity.answer}\n")
        w(f"  limited by {a.capacity.limited_by}: {a.capacity.limited_by_evidence}\n")
    if a.soak is not None:
        w(f"soak: {a.soak.summary}\n")
        for drift in a.soak.findings:
            w(f"drift [{drift.severity}]: {drift.summary}\n")
    for alert in _alerts_to_print(a.alerts) if not verbose else a.alerts:
        w(f"alert [{alert.severity}]: {alert.message}\n")
    for line in _note_lines(a, verbose):
        w(f"note: {line}\n")


def _recovery_line(r: BurstRecovery, start_ns: int) -> str:
    rec = (
        f"recovered {r.recovery_s:.0f} s after it ended"
        if r.recovered and r.recovery_s is not None
        else "did not recover"
    )
    line = (
        f"burst at {(r.burst_start_ns - start_ns) / 1e9:.0f} s: P99 peak {_ms(r.peak_p99_ms)} "
        f"(pre-burst {_ms(r.pre_burst_p99_ms)}), {rec}"
    )
    if r.batch_size_mean_before is not None and r.batch_size_mean_during is not None:
        line += f"; batch size {r.batch_size_mean_before:.1f} -> {r.batch_size_mean_during:.1f}"
    if r.queue_ms_before is not None and r.queue_ms_during is not None:
        line += f", queue {r.queue_ms_before:.1f} -> {r.queue_ms_during:.1f} ms"
    return line


def save_analysis(analysis: Analysis, path: Path) -> None:
    """analysis.json whole or not at all; a full disk or an unwritable directory is one line."""
    try:
        analysis.save(path)
    except OSError as exc:
        raise UsageError(
            f"cannot write {path} ({exc.strerror or exc}); the previous one, if any, is kept",
            hint="free some space or make the run directory writable; --no-write prints the "
            "analysis without writing it",
        ) from None


def run(args: argparse.Namespace) -> int:
    slo = parse_slo(args.slo) if args.slo else None
    run_dir = load_run(args.run_dir)
    analysis = analyze_run(run_dir, slo=slo)
    if not args.no_write:
        save_analysis(analysis, run_dir.path / ANALYSIS_FILE)
    if args.json:
        sys.stdout.write(analysis.to_json() + "\n")
    else:
        print_summary(analysis, sys.stdout, verbose=args.verbose)
        if not args.no_write:
            print(f"\nwrote {run_dir.path / ANALYSIS_FILE}")
    if args.fail_on_slo and not analysis.verdict.passed:
        raise SloFailed(
            f"run failed its SLO: {analysis.verdict.summary}",
            hint="exit code 1 (--fail-on-slo); see the findings above or analysis.json",
        )
    return EXIT_OK
