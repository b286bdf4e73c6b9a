"""A short periodic stall is matched to the episodes it caused (issue 51): the recorder's
whole-second intervals on the analysis grid, a gap in the window its requests complete in,
a gap threshold relative to the run, and the generator's lag after it its consequence."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from loadkit.analysis.align import make_grid
from loadkit.analysis.attribution import rank_findings
from loadkit.analysis.causes import process_stall
from loadkit.analysis.causes.unexplained import CAUSE_GENERATOR
from loadkit.analysis.gaps import CompletionGaps
from loadkit.testing.synthetic import DEFAULT_START_NS, FaultWindow, RunSpec
from tests.unit.analysis.test_attribution import _finding
from tests.unit.analysis.test_causes import _signals

S = 1_000_000_000


def _every(period: float, length: float, duration: float, seed: int) -> tuple[FaultWindow, ...]:
    """Stalls of `length` every `period` s (+-0.3 s), from 8-9 s to the run's end."""
    rng = np.random.default_rng(seed)
    t, out = 8.0 + rng.uniform(0, 1), []
    while t + length < duration - 3:
        out.append(FaultWindow(t, t + length))
        t += period + rng.uniform(-0.3, 0.3)
    return tuple(out)


@pytest.mark.parametrize(
    ("length", "period", "into"),
    # into: how far into a wall-clock second the run starts (the recorder's intervals do not)
    [(0.15, 3.0, 0.4), (0.2, 4.0, 0.02), (0.2, 4.0, 0.7), (0.3, 5.0, 0.55)],
)
def test_a_short_periodic_stall_on_a_shared_host_is_named_first(analyze_spec, length, period, into):
    # GIVEN a server stopped for 0.15-0.3 s every 3-5 s, on a host it shares with the
    # load generator, which its drain holds back for 60 % of the stop, in a run that
    # starts a fraction into a second
    spec = RunSpec(
        duration_s=90, rate_rps=200, stalls=_every(period, length, 90, 7), drain_send_lag=0.6
    )
    a = analyze_spec(
        spec, f"short-stall-{length}-{into}", start_ns=DEFAULT_START_NS + int(into * S)
    )
    causes = [(f.cause, f.confidence, len(f.episodes), f.episodes_total) for f in a.findings]
    # THEN the stall is first, at least moderate, over nearly every episode
    top = a.findings[0]
    assert top.cause == "process_stall", causes
    assert top.confidence in ("strong", "moderate"), causes
    assert len(top.episodes) >= 0.9 * top.episodes_total, causes
    # ... and the generator's lag, where named, is after it and its consequence
    for f in a.findings[1:]:
        if f.cause == CAUSE_GENERATOR:
            assert f.consequence_of == "process_stall", causes


def test_a_gap_is_in_the_window_its_requests_complete_in():
    # GIVEN a gap from 3.95 s to 4.07 s, and one within window 6
    grid = make_grid(0, 10 * S, 1.0)
    gaps = CompletionGaps(
        np.array([[3_950_000_000, 4_070_000_000], [6_100_000_000, 6_400_000_000]]), "test"
    )
    longest = gaps.longest_per_window(grid)
    # THEN the first is in window 4, where its requests complete (window 3 completed its
    # requests before it), and the second in its own window
    assert longest[3] == 0 and longest[4] == pytest.approx(0.12)
    assert longest[6] == pytest.approx(0.3) and longest[5] == longest[7] == 0


def test_a_stopped_generator_is_late_by_nearly_the_gap_and_a_held_one_by_less():
    # GIVEN 0.2 s gaps in windows 3 and 7 at 150 arrivals/s; the scheduler late by
    # 0.195 s in window 3 (stopped through the gap) and 0.12 s in window 7 (held as
    # the server drained)
    sig = _signals()
    sig.gaps = CompletionGaps(
        np.array([[3_200_000_000, 3_400_000_000], [7_500_000_000, 7_700_000_000]]), "test"
    )
    lag = np.full(sig.n, 3.0)
    lag[3], lag[7] = 195.0, 120.0
    sig.dispatch_lag_ms = lag
    s = process_stall.signature(sig, np.ones(sig.n, dtype=bool))
    assert s.holds is not None
    # THEN the first is the generator's stop, the second the server's
    assert s.holds[3] == 0 and s.holds[7] == 1


def test_the_generators_lag_over_a_stalls_episodes_is_its_consequence():
    # GIVEN a stall in 4 episodes and the generator's lag in 3 of them, rated higher
    stall = _finding("process_stall", "moderate", ("p99#1", "p99#2", "p99#3", "p99#4"))
    lag = _finding(CAUSE_GENERATOR, "strong", ("p99#1", "p99#2", "p99#3"))
    other = _finding("gpu_clock_thermal", "moderate", ("p99#5",))
    ordered = rank_findings([lag, other, stall])
    # THEN the lag follows the stall, no higher than it, marked as what it did
    assert [f.cause for f in ordered][:2] == ["process_stall", CAUSE_GENERATOR]
    assert ordered[1].consequence_of == "process_stall"
    assert ordered[1].confidence == "moderate"
    # ... and a lag mostly elsewhere is no consequence of it
    apart = replace(lag, episodes=("p99#5", "p99#6", "p99#1"))
    assert all(f.consequence_of is None for f in rank_findings([apart, stall]))
