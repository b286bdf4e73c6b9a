"""The diagnosis benchmark in one command: generate fault runs, analyze them, score.

    .venv/bin/python -m bench.diagnosis.run --seeds 2-3 --out reports/diagnosis

generates every case (see `bench.diagnosis.generate.CASES`; with
`--ranges wide`, issue 26's weak-to-strong draws and `WIDE_CASES`) for each
seed into `<out>/runs/`, analyzes each run (`analysis.json` beside it), scores it
against its ground truth and writes `<out>/scores.json` and
`<out>/results.md`. `--score-only` re-scores runs already generated (after
an analyzer change: no need to generate again). Tune the analyzer on
seeds already looked at and report on a seed never looked at
(docs/diagnosis-benchmark.md lists which seeds are spent).

Each run takes the load's `--duration` plus about 15 s on 2 cores (Triton,
Locust, samplers and the fault share them), so one seed of all 13 cases
takes about 16 minutes at 60 s and 29 at 120 s (15 wide cases: about 19 at 60 s).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench.diagnosis.generate import (
    DEFAULT_DURATION_S,
    NARROW,
    RANGES,
    cases_for,
    generate_run,
    plan_case,
)
from bench.diagnosis.score import score_run, write_scores


def parse_seeds(text: str) -> list[int]:
    """ "1-3,7" -> [1, 2, 3, 7]."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-", 1)
            seeds.extend(range(int(lo), int(hi) + 1))
        elif part:
            seeds.append(int(part))
    return seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.diagnosis.run", description=__doc__)
    parser.add_argument("--seeds", default="2-3", help="seeds, e.g. 1 or 2-3 or 1,4 (default 2-3)")
    parser.add_argument(
        "--ranges",
        choices=RANGES,
        default=NARROW,
        help="narrow: the draws of seeds 1-16's stored runs; wide: issue 26's (weak to strong "
        "faults, three loads, two models, two more cases)",
    )
    parser.add_argument("--cases", default="", help="comma-separated cases (default: all)")
    parser.add_argument("--out", type=Path, default=Path("reports/diagnosis"))
    parser.add_argument("--duration", type=float, default=DEFAULT_DURATION_S, help="load seconds")
    parser.add_argument("--score-only", action="store_true", help="score runs already in OUT/runs")
    parser.add_argument(
        "--no-wait-quiet",
        action="store_true",
        help="do not wait (up to 1 min) for a mostly idle host before each run",
    )
    args = parser.parse_args(argv)
    seeds = parse_seeds(args.seeds)
    known = cases_for(args.ranges)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()] or list(known)
    unknown = sorted(set(cases) - set(known))
    if unknown:
        parser.error(
            f"unknown case(s) {', '.join(unknown)} for --ranges {args.ranges}; "
            f"cases: {', '.join(known)}"
        )
    runs_dir = args.out / "runs"
    started = time.monotonic()
    paths: list[Path] = []
    skipped: list[str] = []
    for seed in seeds:
        for case in cases:
            plan = plan_case(case, seed, args.duration, args.ranges)
            if args.score_only:
                path = runs_dir / plan.run_id
                if (path / "manifest.json").exists():
                    paths.append(path)
                continue
            result = generate_run(
                plan,
                runs_dir,
                log=lambda s: print(s, flush=True),
                wait_quiet=not args.no_wait_quiet,
            )
            if result.path is None:
                skipped.append(f"{plan.run_id}: {result.skipped}")
            else:
                paths.append(result.path)
    scores = []
    for path in paths:
        score = score_run(path)
        scores.append(score)
        top = ", ".join(f"{c} ({conf})" for c, conf in score.findings[:3]) or "no finding"
        print(f"{score.run_id}: {top}", flush=True)
    title = (
        f"Seeds {args.seeds}, {args.ranges} ranges "
        f"({len(scores)} runs, {args.duration:.0f} s of load each)"
    )
    summary = write_scores(scores, args.out, title)
    if skipped:
        with open(args.out / "results.md", "a", encoding="utf-8") as fh:
            fh.write("\nSkipped:\n" + "".join(f"- {s}\n" for s in skipped))
    print((args.out / "results.md").read_text())
    print(
        f"{len(scores)} runs scored in {time.monotonic() - started:.0f} s; "
        f"clean runs with a finding above weak: {summary['clean']['above_weak']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
