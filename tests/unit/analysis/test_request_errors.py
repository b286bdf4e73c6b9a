"""Error episodes (loadkit/analysis/causes/request_errors.py) on synthetic runs with known failures."""

from __future__ import annotations

import io

import numpy as np
import pytest

from loadkit.analysis import causes
from loadkit.analysis.causes import request_errors as re_
from loadkit.analysis.causes.base import ErrorCounts
from loadkit.commands.analyze import print_summary
from loadkit.testing.synthetic import ErrorWindow, RunSpec


def _ev(finding, name):
    return next(e.value for e in finding.evidence if e.name == name)


def _finding(analysis, cause):
    return next((f for f in analysis.findings if f.cause == cause), None)


def test_error_kinds_fall_in_one_class_each():
    assert re_.error_class("refused") == re_.CAUSE_UNREACHABLE
    assert re_.error_class("reset") == re_.CAUSE_UNREACHABLE
    assert re_.error_class("grpc_UNAVAILABLE") == re_.CAUSE_UNREACHABLE
    assert re_.error_class("queue_full") == re_.CAUSE_REJECTING
    assert re_.error_class("http_503") == re_.CAUSE_REJECTING
    assert re_.error_class("timeout") == re_.CAUSE_TIMEOUTS
    assert re_.error_class("http_500") == re_.CAUSE_SERVER_ERRORS
    assert re_.error_class("http_400") == re_.CAUSE_CLIENT_ERRORS
    assert re_.error_class("other") == re_.CAUSE_CLIENT_ERRORS
    assert re_.error_class("cancelled") is None


def test_a_target_killed_mid_run_is_an_outage_named_first_with_its_start(analyze_spec):
    # GIVEN a target that stops answering at 12 s of a 40 s run and never comes back
    spec = RunSpec(duration_s=40, rate_rps=150, error_windows=(ErrorWindow(12, 45, "refused"),))
    a = analyze_spec(spec, "killed")
    # THEN the first finding is the outage, from 12 s, not back by the end
    top = a.findings[0]
    assert top.cause == re_.CAUSE_UNREACHABLE and top.confidence == "strong"
    assert _ev(top, "start_s") == 12.0
    assert _ev(top, "end_s") == 40.0
    assert _ev(top, "came_back") == 0.0
    assert _ev(top, "kind:refused") == _ev(top, "errors") > 0.9 * 28 * 150
    assert "stopped answering at 12 s and did not come back" in top.summary
    # ... the headline says so instead of "no cause found for latency spikes"
    assert a.headline.startswith("FAIL. The target stopped answering at 12 s")
    # ... and so does the first line of `loadkit analyze`'s summary
    out = io.StringIO()
    print_summary(a, out)
    first = out.getvalue().splitlines()[0]
    assert first.startswith("TARGET UNREACHABLE: The target stopped answering at 12 s")
    assert "1 error episode, 70% of the run" in out.getvalue()


def test_a_target_that_came_back_names_the_end_of_its_outage(analyze_spec):
    spec = RunSpec(duration_s=40, rate_rps=150, error_windows=(ErrorWindow(15, 21, "reset"),))
    top = analyze_spec(spec, "flap").findings[0]
    assert top.cause == re_.CAUSE_UNREACHABLE
    assert (_ev(top, "start_s"), _ev(top, "end_s")) == (15.0, 21.0)
    assert _ev(top, "came_back") == 1.0 and _ev(top, "back_s") == 21.0
    assert "from 15 to 21 s; it came back at 21 s" in top.summary


def test_queue_full_rejections_name_the_queue_limit_from_the_model_config(analyze_spec):
    spec = RunSpec(
        duration_s=40,
        rate_rps=150,
        max_queue_size=32,
        error_windows=(ErrorWindow(20, 25, "queue_full"),),
    )
    a = analyze_spec(spec, "queue-full")
    top = a.findings[0]
    assert top.cause == re_.CAUSE_REJECTING
    assert _ev(top, "max_queue_size") == 32.0
    assert (_ev(top, "start_s"), _ev(top, "end_s")) == (20.0, 25.0)
    assert "max_queue_size, is 32" in top.summary
    assert _finding(a, re_.CAUSE_UNREACHABLE) is None
    assert causes.outage_line(a.findings) is None


def test_timeouts_say_the_timeout(analyze_spec):
    spec = RunSpec(
        duration_s=40, rate_rps=150, timeout_s=2.0, error_windows=(ErrorWindow(10, 14, "timeout"),)
    )
    f = _finding(analyze_spec(spec, "timeouts"), re_.CAUSE_TIMEOUTS)
    assert f is not None and _ev(f, "timeout_s") == 2.0
    # the requests sent at 10-14 s fail 2 s later
    assert (_ev(f, "start_s"), _ev(f, "end_s")) == (12.0, 16.0)
    assert "timed out after 2.0 s" in f.summary


def test_client_errors_are_their_own_finding(analyze_spec):
    spec = RunSpec(duration_s=40, rate_rps=150, error_windows=(ErrorWindow(30, 33, "http_400"),))
    a = analyze_spec(spec, "client")
    f = _finding(a, re_.CAUSE_CLIENT_ERRORS)
    assert f is not None and _ev(f, "kind:http_400") > 0
    assert _finding(a, re_.CAUSE_UNREACHABLE) is None


def test_a_steady_trickle_of_errors_is_a_baseline_not_an_episode(analyze_spec):
    # 1 % of requests fail all run long (http_503): no episode, no error finding
    a = analyze_spec(RunSpec(duration_s=40, rate_rps=150, error_rate=0.01), "trickle")
    assert not [f for f in a.findings if causes.is_error(f.cause)]
    checks = {c.cause: c.status for c in a.causes_checked}
    assert checks[re_.CAUSE_REJECTING] == "not_found"


def test_a_run_that_never_reached_its_target_is_one_episode():
    n = 20
    completed = np.full(n, 50.0)
    counts = ErrorCounts(0, 1.0, completed, completed, {"refused": completed})
    f = re_.finding_of(re_.CAUSE_UNREACHABLE, counts)
    assert f is not None
    assert (_ev(f, "start_s"), _ev(f, "end_s")) == (0.0, 20.0)
    assert f.coincidence == pytest.approx(1.0)  # its share of the run


def test_episodes_merge_across_short_gaps_and_need_enough_errors():
    n = 30
    completed = np.full(n, 100.0)
    refused = np.zeros(n)
    refused[5:8] = 100  # 5-8 s
    refused[10:12] = 100  # 2 s later: the same outage
    refused[25] = 3  # 3 errors in one second: too few for an episode
    counts = ErrorCounts(0, 1.0, completed, refused.copy(), {"refused": refused})
    episodes, base = re_.find_episodes(
        re_.CAUSE_UNREACHABLE, counts.kinds, counts.completed, counts.errors
    )
    assert base == 0.0
    assert [(e.first, e.last, e.back) for e in episodes] == [(5, 11, 12)]


def test_the_outage_is_timed_by_the_wall_clock_seconds_the_counters_cover():
    import pandas as pd

    # GIVEN a run that started 0.6 s into a wall-clock second, and counters per whole second
    second = 1_000_000_000
    start = 1_764_449_000 * second + 600_000_000
    rows = [
        {
            "t_ns": 1_764_449_000 * second + s * second,
            "ok": 0 if s >= 10 else 50,
            "errors": 50 if s >= 10 else 0,
            "error_kinds": {"refused": 50} if s >= 10 else {},
        }
        for s in range(20)
    ]
    counts = causes.error_counts(pd.DataFrame(rows), start, start + 19 * second)
    assert counts is not None and counts.offset_s == pytest.approx(-0.6)
    f = re_.finding_of(re_.CAUSE_UNREACHABLE, counts)
    # THEN the outage starts where its first failing second starts: 9.4 s after the run did
    assert f is not None and _ev(f, "start_s") == pytest.approx(9.4)


def test_loadkit_run_exits_3_past_the_unreachable_share(capsys):
    from loadkit.commands.run import _unreachable_status

    n = 100
    completed = np.full(n, 50.0)
    refused = np.zeros(n)
    refused[60:] = 50  # unreachable for the last 40 s of 100
    counts = ErrorCounts(0, 1.0, completed, refused.copy(), {"refused": refused})
    outage = causes.outage(counts)
    assert outage is not None and outage.cause == re_.CAUSE_UNREACHABLE
    assert outage.coincidence == pytest.approx(0.4)  # its share of the run
    assert _unreachable_status(outage, 10.0) == 3
    assert capsys.readouterr().err == (
        "ERROR: the target was unreachable for 40% of the run "
        "(more than --max-unreachable 10 %); exit status 3\n"
    )
    assert _unreachable_status(outage, 50.0) == 0
    assert _unreachable_status(None, 0.0) == 0


def test_max_unreachable_must_be_a_percentage(capsys):
    from loadkit.cli import main

    assert main(["run", "soak", "--target", "http://127.0.0.1:1", "--max-unreachable", "150"]) == 2
    assert "--max-unreachable must be a percentage (0..100), got 150" in capsys.readouterr().err
