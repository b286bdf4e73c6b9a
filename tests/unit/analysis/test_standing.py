"""Standing conditions: checked on every run, spikes or not, each with evidence and an action."""

from __future__ import annotations

import numpy as np

from loadkit.testing.synthetic import FaultWindow, RunSpec


def _found(a, cause):
    return next((f for f in a.findings if f.cause == cause), None)


def test_a_batching_window_dominating_latency_at_low_load(analyze_spec):
    a = analyze_spec(RunSpec(duration_s=60, rate_rps=40, max_queue_delay_us=20_000), "window")
    f = _found(a, "batching_window")
    assert f is not None and f.confidence in ("strong", "moderate"), a.findings
    assert f.episodes == () and "max_queue_delay" in f.summary and f.action
    # ... and never beside it a spike cause
    assert all(not g.episodes for g in a.findings)


def test_no_batching_window_finding_at_the_default_delay(analyze_spec):
    a = analyze_spec(RunSpec(duration_s=60, rate_rps=200), "default-window")
    assert _found(a, "batching_window") is None


def test_batches_pinned_at_max_batch_size(analyze_spec):
    spec = RunSpec(
        duration_s=60,
        rate_rps=720,
        max_batch_size=4,
        compute_us_per_batch=3000,
        compute_us_per_item=600,
    )
    a = analyze_spec(spec, "pinned")
    f = _found(a, "batches_pinned")
    assert f is not None and f.confidence in ("strong", "moderate"), a.findings
    assert f.episodes == () and "max_batch_size" in f.summary
    assert "instances" in f.action
    # ... and at ~720 of ~740 req/s, where even the calmest windows queue, it says so
    assert "The queue never drained" in f.summary, f.summary
    # ... not at a load the server serves in small batches
    light = analyze_spec(RunSpec(duration_s=60, rate_rps=150, max_batch_size=4), "light")
    assert _found(light, "batches_pinned") is None


def test_batches_pinned_only_in_the_peaks_of_a_fault_is_a_weak_lead(analyze_spec):
    # GIVEN a quota that halves the server's speed for 6 s of every 10 s at 450 req/s:
    # batches pin and requests queue in 60 % of the windows, and the queue drains between
    q = tuple(FaultWindow(t, t + 6.0, 1.0) for t in range(10, 80, 10))
    spec = RunSpec(duration_s=90, rate_rps=450, max_batch_size=4, cgroup_quotas=q)
    a = analyze_spec(spec, "pinned-in-peaks")
    f = _found(a, "batches_pinned")
    # THEN the pinned batches are a weak lead (what fills the queue is the spikes' cause)
    assert f is not None and f.confidence == "weak", a.findings
    assert "drained between peaks" in f.summary, f.summary
    assert a.findings[0].cause == "cgroup_throttling", a.findings


def test_batches_pinned_says_whether_the_queue_ever_drained():
    from loadkit.analysis.causes import batches_pinned
    from loadkit.analysis.model import Evidence

    def said(calmest_queue_ms: float, offered_mean: float) -> str:
        e = [
            Evidence("max_batch_size", 2.0, "requests"),
            Evidence("batch_size_mean", 1.9, "requests"),
            Evidence("queue_time", 700.0, "ms/request"),
            Evidence("compute_per_batch", 6.8, "ms"),
            Evidence("offered", 150.0, "req/s"),
            Evidence("queue_time_calmest", calmest_queue_ms, "ms/request"),
            *batches_pinned._utilisation(
                np.full(10, offered_mean), np.full(10, 219.0), np.ones(10, dtype=bool)
            ),
        ]
        return batches_pinned.summary(e, "", 0.7)

    # GIVEN a queue that waits 2.1 s even in the calmest windows (round 4's bursts-s15)
    s = said(2100.0, 200.0)
    # THEN it never drained, whatever the estimated capacity says
    assert "never drained: even the calmest tenth of windows waited 2100.0 ms" in s, s
    # GIVEN a queue that drained between bursts (1.6 ms), at 105 % of an estimated
    # capacity of 219 req/s (session 6's tuning run: the run kept up at 229 req/s)
    s = said(1.6, 229.0)
    # THEN full in its peaks: the extrapolated capacity does not overrule the queue
    assert "never drained" not in s and "drained between peaks" in s and "105%" in s, s
    # ... and it never claims more than it measured (spikes may stand out above the queue)
    assert "overloaded" not in said(2100.0, 200.0) + s


def test_gpu_under_20_percent_for_long_is_weak_and_says_what_to_do(analyze_spec):
    a = analyze_spec(RunSpec(duration_s=60, rate_rps=30, max_queue_delay_us=500), "idle-gpu")
    f = _found(a, "gpu_underused")
    assert f is not None and f.confidence == "weak", a.findings
    assert "the GPU is not used" in f.summary and f.action
    busy = analyze_spec(RunSpec(duration_s=60, rate_rps=600), "busy-gpu")
    assert _found(busy, "gpu_underused") is None


def test_no_connection_reuse_is_a_standing_condition(analyze_spec):
    spec = RunSpec(duration_s=60, rate_rps=200, churns=(FaultWindow(0, 60, 0.95),))
    a = analyze_spec(spec, "no-reuse")
    f = _found(a, "connection_churn")
    assert f is not None and f.episodes == () and "keep-alive is off" in f.summary


def test_standing_conditions_are_checked_without_spikes_and_say_why_not(analyze_spec):
    a = analyze_spec(RunSpec(duration_s=60, rate_rps=200, sources=("host",)), "no-stats")
    checks = {c.cause: c for c in a.causes_checked}
    assert checks["batches_pinned"].status == "not_assessable"
    assert "no triton_stats" in checks["batches_pinned"].reason
    assert checks["gpu_underused"].status == "not_assessable"
