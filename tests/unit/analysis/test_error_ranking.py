"""Errors ranked by their evidence (issue 42, item 3): confidence from the share that failed,
order among the latency findings by that confidence, and a stall's timeouts as its consequence."""

from __future__ import annotations

import io
from dataclasses import replace

import numpy as np

from loadkit.analysis import attribution
from loadkit.analysis.causes import BY_ID
from loadkit.analysis.causes import request_errors as re_
from loadkit.analysis.causes.base import ErrorCounts, Signals
from loadkit.commands.analyze import print_summary
from loadkit.testing.synthetic import ErrorWindow, FaultWindow, RunSpec, demo_spec
from tests.unit.analysis.test_attribution import _finding


def _causes(analysis):
    return [(f.cause, f.confidence) for f in analysis.findings]


def _thermal_only() -> RunSpec:
    """The demo's thermal sawtooth (1.8x every ~15 s) without its burst: a strong finding."""
    return replace(demo_spec(1), bursts=())


def test_a_handful_of_client_errors_ranks_below_a_strong_thermal_finding(analyze_spec):
    # GIVEN a strong thermal sawtooth, and about 30 requests refused as malformed in 0.1 s
    spec = replace(_thermal_only(), error_windows=(ErrorWindow(70.0, 70.1, "http_400"),))
    a = analyze_spec(spec, "thermal-and-a-few-400s")
    causes = [f.cause for f in a.findings]
    # THEN both are found: the thermal finding strong and first, the errors weak after it
    assert causes[0] == "gpu_clock_thermal", _causes(a)
    assert a.findings[0].confidence == "strong", _causes(a)
    (errors,) = [f for f in a.findings if f.cause == re_.CAUSE_CLIENT_ERRORS]
    assert errors.confidence == "weak", errors
    assert causes.index(re_.CAUSE_CLIENT_ERRORS) > causes.index("gpu_clock_thermal")
    assert a.headline.startswith("FAIL. GPU thermal throttling (strong)") or a.headline.startswith(
        "PASS. GPU thermal throttling (strong)"
    ), a.headline


def test_an_error_episode_where_every_request_failed_is_strong_and_first(analyze_spec):
    # GIVEN the same sawtooth and the server answering 500 to every request for 4 s
    spec = replace(_thermal_only(), error_windows=(ErrorWindow(50.0, 54.0, "http_500"),))
    a = analyze_spec(spec, "thermal-and-500s")
    # THEN the failed requests earn strong (all failed in the episode, none outside) and,
    # at the same level, come before the slow ones
    top = a.findings[0]
    assert top.cause == re_.CAUSE_SERVER_ERRORS, _causes(a)
    assert top.confidence == "strong" and top.p_value < 1e-6, top
    assert top.lift is None or top.lift >= 100, top  # at most a stray error outside
    assert a.findings[1].cause == "gpu_clock_thermal", _causes(a)


def test_error_classes_are_ordered_by_the_share_of_requests_they_failed(analyze_spec):
    # GIVEN 500s for 1 s and 400s for 5 s (the registry lists server errors first)
    windows = (ErrorWindow(20.0, 21.0, "http_500"), ErrorWindow(50.0, 55.0, "http_400"))
    a = analyze_spec(RunSpec(duration_s=80, rate_rps=150, error_windows=windows), "two-classes")
    errors = [f.cause for f in a.findings if f.cause.endswith("_errors")]
    # THEN the class that failed more of the run's requests comes first
    assert errors == [re_.CAUSE_CLIENT_ERRORS, re_.CAUSE_SERVER_ERRORS], _causes(a)


def _stall_spec(timeout_s: float) -> RunSpec:
    # The server stopped for 2.5 s every 15 s; the client gives up after `timeout_s`.
    # Only a stall rated at least moderate makes consequences (issue 51, item 6).
    stalls = tuple(FaultWindow(t, t + 2.5) for t in (12.0, 27.0, 42.0, 57.0, 72.0))
    return RunSpec(duration_s=90, rate_rps=150, stalls=stalls, timeout_s=timeout_s)


def test_timeouts_in_a_stall_are_reported_as_its_consequence(analyze_spec):
    # GIVEN stalls of 2.5 s and a client timeout of 2 s: the requests caught in the first
    # half second of each stall time out
    a = analyze_spec(_stall_spec(2.0), "stall-timeouts")
    causes = [f.cause for f in a.findings]
    assert re_.CAUSE_TIMEOUTS in causes, (_causes(a), a.causes_checked)
    timeouts = a.findings[causes.index(re_.CAUSE_TIMEOUTS)]
    # THEN the stall is named first and the timeouts right after it, as its consequence
    assert causes[:2] == ["process_stall", re_.CAUSE_TIMEOUTS], _causes(a)
    assert timeouts.consequence_of == "process_stall", timeouts
    assert "A consequence of process stall (process_stall)" in timeouts.summary
    # ... in the headline as well
    assert a.headline.startswith("FAIL. Process stall ("), a.headline
    assert "requests failed (requests timed out) as its consequence" in a.headline, a.headline
    # ... and in `loadkit analyze`'s evidence line
    out = io.StringIO()
    print_summary(a, out)
    assert "a consequence of process_stall" in out.getvalue()


def test_timeouts_away_from_any_stall_are_nobody_s_consequence(analyze_spec):
    # GIVEN the same stalls under a 10 s timeout, and requests sent at 24-26 s timing out
    # at 34-36 s, between two stalls (27-29.5 s and 42-44.5 s)
    spec = replace(_stall_spec(10.0), error_windows=(ErrorWindow(24.0, 26.0, "timeout"),))
    a = analyze_spec(spec, "stall-and-other-timeouts")
    (timeouts,) = [f for f in a.findings if f.cause == re_.CAUSE_TIMEOUTS]
    assert "process_stall" in [f.cause for f in a.findings], _causes(a)
    assert timeouts.consequence_of is None, timeouts.summary
    assert "consequence" not in timeouts.summary and "consequence" not in a.headline


def test_timeouts_in_a_throttled_clock_s_windows_are_its_consequence(analyze_spec):
    # GIVEN the thermal sawtooth (no stall at all) and requests timing out in three of its
    # slow windows: any cause that slows requests past the timeout makes timeouts
    # (a client timeout of 1 s: those sent 0.5-1.5 s into a window fail 1 s later, in it)
    spec = replace(_thermal_only(), timeout_s=1.0)
    windows = tuple(
        ErrorWindow(w.start_s + 0.5, w.start_s + 1.5, "timeout") for w in spec.clock_drops[1:4]
    )
    a = analyze_spec(replace(spec, error_windows=windows), "thermal-timeouts")
    (timeouts,) = [f for f in a.findings if f.cause == re_.CAUSE_TIMEOUTS]
    # THEN the timeouts are the throttled clock's consequence, listed right after it
    assert timeouts.consequence_of == "gpu_clock_thermal", (_causes(a), timeouts.summary)
    causes = [f.cause for f in a.findings]
    assert causes.index(re_.CAUSE_TIMEOUTS) == causes.index("gpu_clock_thermal") + 1, _causes(a)


def test_an_error_cause_is_no_other_error_s_cause():
    # errors are what causes make: an error class never lists another as its consequence
    assert all(c.consequences == () for c in re_.CAUSES)
    assert "process_stall" in {c.id for c in BY_ID.values() if re_.CAUSE_TIMEOUTS in c.consequences}


def test_the_confidence_of_errors_comes_from_the_share_that_failed():
    n = 60
    completed = np.full(n, 100.0)
    few = np.zeros(n)
    few[30] = 6  # 6 of 100 in one second: a fact, weak
    half = np.zeros(n)
    half[20:30] = 60  # 60 % of 10 s
    every = np.zeros(n)
    every[20:30] = 100  # every request of 10 s

    def level(failed: np.ndarray) -> str:
        counts = ErrorCounts(0, 1.0, completed, failed.copy(), {"http_500": failed})
        f = re_.finding_of(re_.CAUSE_SERVER_ERRORS, counts)
        assert f is not None
        return f.confidence

    assert (level(few), level(half), level(every)) == ("weak", "moderate", "strong")


def test_rank_findings_puts_a_consequence_right_after_its_cause():
    stall = _finding("process_stall", "weak", ("e1", "e2"))
    thermal = _finding("gpu_clock_thermal", "strong", ("e3", "e4", "e5"))
    timeouts = replace(_finding(re_.CAUSE_TIMEOUTS, "strong", ()), consequence_of="process_stall")
    ranked = attribution.rank_findings([timeouts, stall, thermal])
    assert [f.cause for f in ranked] == ["gpu_clock_thermal", "process_stall", re_.CAUSE_TIMEOUTS]


# --- which cause's windows hold the failures (attribution.consequences) ---------------

N = 100  # 1 s windows


def _linked(failed: np.ndarray, causes: list[tuple[str, str, int, np.ndarray]]) -> str | None:
    """The cause the timeouts are linked to, given (cause, confidence, episodes, holds) each."""
    starts = np.arange(N, dtype=np.int64) * 1_000_000_000
    ones = np.ones(N)
    counts = ErrorCounts(0, 1.0, 100 * ones, failed, {"timeout": failed})
    sig = Signals(1.0, starts, 5 * ones, 4 * ones, 100 * ones, 100 * ones, 100 * ones, ones, {},
                  None, 8, 2.0, np.zeros(N, bool), error_counts=counts)  # fmt: skip
    findings = [
        _finding(c, level, tuple(f"p99#{i}" for i in range(k))) for c, level, k, _ in causes
    ]
    timeouts = _finding(re_.CAUSE_TIMEOUTS, "weak", ())
    holds = {c: h for c, _, _, h in causes}
    (out,) = attribution.consequences([timeouts], findings, holds, sig, np.ones(N, bool))
    return out.consequence_of


def _spells(*at: int) -> np.ndarray:
    """A signature holding for 2 windows from each of `at`."""
    holds = np.zeros(N)
    for t in at:
        holds[t : t + 2] = 1.0
    return holds


def test_errors_spread_evenly_are_no_consequence_of_a_cause_covering_most_of_the_run():
    # GIVEN 3 timeouts every second and a moderate cause whose windows (with the one before
    # and after) cover 60 % of the run: 60 % of the failures fall in them, as chance has it
    failed = np.full(N, 3.0)
    holds = ((np.arange(N) % 10) < 4).astype(float)
    # THEN they are not its consequence (overlap alone, >= 50 %, linked them before)
    assert _linked(failed, [("process_stall", "moderate", 3, holds)]) is None


def test_errors_concentrated_in_a_moderate_cause_s_windows_are_its_consequence():
    # GIVEN timeouts only in the 5 spells of a moderate cause (20 % of the run)
    failed = _spells(10, 30, 50, 70, 90) * 5
    holds = _spells(10, 30, 50, 70, 90)
    # THEN they are its consequence
    assert _linked(failed, [("process_stall", "moderate", 3, holds)]) == "process_stall"


def test_of_two_causes_the_one_holding_more_of_the_failures_is_named():
    # GIVEN timeouts in 5 spells; the thermal clock (listed first, more episodes) holds 3 of
    # them, the stall all 5; each alone would be linked
    failed = _spells(10, 30, 50, 70, 90) * 5
    thermal = ("gpu_clock_thermal", "moderate", 4, _spells(10, 30, 50))
    stall = ("process_stall", "moderate", 3, _spells(10, 30, 50, 70, 90))
    assert _linked(failed, [thermal]) == "gpu_clock_thermal"
    # THEN the stall, with the better overlap, is named
    assert _linked(failed, [thermal, stall]) == "process_stall"


def test_a_weak_cause_makes_no_consequences():
    # GIVEN the same concentrated timeouts, and their cause only a weak lead
    failed = _spells(10, 30, 50, 70, 90) * 5
    holds = _spells(10, 30, 50, 70, 90)
    # THEN they are linked to nothing: a weak lead is not yet a cause
    assert _linked(failed, [("process_stall", "weak", 3, holds)]) is None
