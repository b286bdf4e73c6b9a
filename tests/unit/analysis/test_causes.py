"""Each cause tests what makes it that cause: sub-window stalls, symptoms without their trigger."""

from __future__ import annotations

import numpy as np
import pytest

from loadkit.analysis.align import make_grid
from loadkit.analysis.causes import REGISTRY
from loadkit.analysis.gaps import CompletionGaps, gaps_from_samples
from loadkit.testing.synthetic import FaultWindow, RunSpec, completion_gaps

W = FaultWindow
S = 1_000_000_000


def _periodic(first: float, length: float, period: float = 9.0, n: int = 7) -> tuple[W, ...]:
    return tuple(W(first + k * period, first + k * period + length) for k in range(n))


@pytest.mark.parametrize(
    ("length", "phase"),
    # each straddles a window edge: it starts `phase` s into a window and runs past its end
    [(0.2, 0.9), (0.5, 0.7), (0.9, 0.6)],
)
def test_a_stall_shorter_than_a_window_is_found_across_window_edges(analyze_spec, length, phase):
    # GIVEN SIGSTOPs of the server of 0.2-0.9 s, every 9 s, each across two windows
    spec = RunSpec(duration_s=80, rate_rps=200, stalls=_periodic(12 + phase, length))
    a = analyze_spec(spec, f"stall-{length}")
    # THEN the process stall is the first finding, from gaps of about that length
    assert a.findings, a.headline
    top = a.findings[0]
    assert top.cause == "process_stall", [(f.cause, f.confidence) for f in a.findings]
    assert top.confidence in ("strong", "moderate")
    longest = next(e.value for e in top.evidence if e.name == "stall_longest_in_episodes")
    assert longest is not None and length * 0.9 <= longest <= length + 0.1
    # ... and no other cause is named above weak beside it
    assert all(f.confidence == "weak" for f in a.findings[1:]), a.findings[1:]


def test_a_gap_shorter_than_the_threshold_is_not_a_stall():
    # GIVEN a 0.12 s gap; the threshold is max(0.2 s, 5x service time)
    grid = make_grid(0, 10 * S, 1.0)
    gaps = CompletionGaps(np.array([[3_950_000_000, 4_070_000_000]]), "test")
    # THEN it is dropped at 0.2 s, and its seconds are shared by the windows it straddles;
    # its length is in the window its requests complete in (issue 51)
    assert len(gaps.longer_than(0.2).spans_ns) == 0
    per = gaps.per_window(grid)
    assert per[3] == pytest.approx(0.05) and per[4] == pytest.approx(0.07)
    assert gaps.longest_per_window(grid)[4] == pytest.approx(0.12)


def test_gaps_from_samples_only_when_every_request_is_sampled():
    import pandas as pd

    sent = np.array([0.0, 0.1, 0.15, 0.9, 0.95]) * S
    done = np.array([0.02, 0.12, 1.6, 1.6, 1.62]) * S
    frame = pd.DataFrame({"sent_ns": sent.astype(np.int64), "done_ns": done.astype(np.int64)})
    gaps = gaps_from_samples(frame, {0: 2, 1: 3})
    # THEN the span from the last completion (0.12 s) to 1.6 s, requests in flight throughout
    assert gaps is not None and gaps.spans_ns.tolist() == [[int(0.15 * S), int(1.6 * S)]]
    # ... and none when the load counters say more completed than were sampled
    assert gaps_from_samples(frame, {0: 2, 1: 30}) is None
    # the synthetic writer agrees with the recorder's rule
    assert completion_gaps(sent / S, done / S) == [(0.15, 1.6)]


def test_slow_compute_at_flat_arrivals_is_not_an_arrival_burst(analyze_spec):
    # GIVEN compute per batch x2.5 every 9 s (no clock, CPU or cgroup signal), flat arrivals
    slow = tuple(W(12 + 9 * k, 15 + 9 * k, 2.5) for k in range(7))
    spec = RunSpec(duration_s=80, rate_rps=400, model_slowdowns=slow)
    a = analyze_spec(spec, "slow-model")
    causes = {f.cause for f in a.findings}
    # THEN no arrival burst (arrivals never rose), no stall, no clock cause
    assert "arrival_burst" not in causes, a.findings
    assert "process_stall" not in causes
    assert not causes & {"gpu_clock_thermal", "gpu_clock_power", "gpu_clock_other"}
    # ... but a specific finding: the compute grew, and nothing else moved
    top = a.findings[0]
    assert top.cause == "unexplained_compute_slowdown", [
        (f.cause, f.confidence) for f in a.findings
    ]
    assert top.confidence in ("strong", "moderate")
    assert "compute per batch x2" in top.summary and "no change in GPU clock" in top.summary
    assert top.action
    # ... and every P99 episode says the server's compute is what grew
    p99 = a.episodes_for("p99")
    assert p99 and all(e.grew == "server_compute" for e in p99), [e.grew for e in p99]


def test_arrival_burst_without_capacity_says_so_and_stays_weak(analyze_spec):
    from loadkit.testing.synthetic import Burst

    bursts = tuple(Burst(12 + 10 * k, 15 + 10 * k, 4.0) for k in range(6))
    spec = RunSpec(duration_s=80, rate_rps=300, bursts=bursts, sources=("host",), max_batch_size=4)
    a = analyze_spec(spec, "burst-no-stats")
    burst = [f for f in a.findings if f.cause == "arrival_burst"]
    # THEN without Triton statistics the capacity is unknown: said, and never above weak
    for f in burst:
        assert f.confidence == "weak"
        assert "capacity unknown" in f.summary


def test_throttling_without_latency_effect_is_not_named(analyze_spec):
    # GIVEN half of the cgroup's CFS periods throttled all run long, slowing nothing, and
    # spikes from something else: the server stopped for 1 s at 12, 32 and 52 s
    stalls = tuple(W(t, t + 1.0) for t in (12.0, 32.0, 52.0))
    spec = RunSpec(duration_s=60, rate_rps=200, cgroup_quotas=(W(0, 60, 0.0),), stalls=stalls)
    a = analyze_spec(spec, "harmless-quota")
    throttled = np.array(a.telemetry.cgroup_throttled_pct, dtype=float)
    assert np.nanmedian(throttled) >= 40.0, throttled
    # THEN the stalls explain the spikes, and the throttling, at its usual level in them,
    # holds in none of them (its signature is relative to the run's baseline)
    causes = [f.cause for f in a.findings]
    assert causes[:1] == ["process_stall"], causes
    assert "cgroup_throttling" not in causes, causes
    (check,) = [c for c in a.causes_checked if c.cause == "cgroup_throttling"]
    assert check.status == "not_found" and check.reason.startswith("signature in 0/3 "), check


def test_every_cause_is_one_registry_entry_with_what_the_report_needs():
    ids = [c.id for c in REGISTRY]
    assert len(ids) == len(set(ids))
    for cause in REGISTRY:
        assert cause.title and cause.action and callable(cause.signature)
        assert cause.kind in ("episodic", "standing", "either", "unexplained", "errors")
        assert (cause.component is not None) == (cause.kind == "unexplained")
        assert (cause.find is not None) == (cause.kind == "errors")


def test_where_the_time_goes_names_the_part_that_grew(analyze_spec):
    # GIVEN the client host saturated every 9 s (requests sent and handled late)
    sat = tuple(W(12 + 9 * k, 15 + 9 * k, 15.0) for k in range(7))
    a = analyze_spec(RunSpec(duration_s=80, rate_rps=300, cpu_saturations=sat), "client-cpu")
    # THEN the breakdown has the five parts from Triton's statistics ...
    assert a.breakdown is not None and a.breakdown.source == "triton statistics"
    names = [c.name for c in a.breakdown.components]
    assert names == [
        "generator_lag",
        "client_network",
        "server_queue",
        "server_compute",
        "server_data_movement",
    ]
    assert all(len(c.ms) == len(a.windows.t_ns) for c in a.breakdown.components)
    # ... and the episodes grew outside the server (generator or client + network)
    p99 = a.episodes_for("p99")
    assert p99 and all(e.grew in ("generator_lag", "client_network") for e in p99)


def test_a_stall_grows_the_server_side_and_without_server_statistics_says_so(analyze_spec):
    stalls = _periodic(12.4, 0.6)
    with_stats = analyze_spec(RunSpec(duration_s=80, rate_rps=200, stalls=stalls), "stall-split")
    p99 = with_stats.episodes_for("p99")
    assert p99 and all(e.grew in ("server_queue", "server_compute") for e in p99)
    # GIVEN no Triton statistics: the server side and the network are one part
    spec = RunSpec(duration_s=80, rate_rps=200, stalls=stalls, sources=("host",))
    a = analyze_spec(spec, "stall-client-only")
    assert a.breakdown is not None and a.breakdown.source == "client only"
    assert [c.name for c in a.breakdown.components] == ["generator_lag", "server_side"]
    assert all(e.grew == "server_side" for e in a.episodes_for("p99"))


def _signals(n: int = 12):
    from loadkit.analysis.causes.base import Signals

    return Signals(
        window_s=1.0,
        starts_ns=np.arange(n, dtype=np.int64) * S,
        p99_ms=np.full(n, 6.0),
        service_p50_ms=np.full(n, 4.0),
        completed=np.full(n, 150.0),
        offered_rps=np.full(n, 150.0),
        throughput_rps=np.full(n, 150.0),
        in_flight=np.ones(n),
        sources={},
        samples=None,
        max_batch_size=32,
        max_queue_delay_ms=0.5,
        burst_mask=np.zeros(n, dtype=bool),
    )


def test_a_hot_gpu_that_keeps_its_clock_is_not_thermal_throttling():
    from loadkit.analysis.causes import gpu_clock_thermal
    from loadkit.analysis.telemetry import GpuSeries

    n = 12
    sig = _signals(n)
    full = np.full(n, 1980.0)
    sig.gpu = GpuSeries(
        sm_clock_mhz=full,
        sm_clock_max_mhz=full,
        clock_ratio_busy=np.ones(n),
        temp_c=np.full(n, 92.0),  # hot all the time ...
        power_w=np.full(n, 300.0),
        power_limit_w=np.full(n, 700.0),
        util_pct=np.full(n, 60.0),
        mem_used_bytes=np.full(n, 1e9),
        mem_total_bytes=8e10,
        thermal_reason=np.ones(n),  # ... with the thermal bit set, but the clock holds
        power_reason=np.zeros(n),
        has_reasons=True,
    )
    s = gpu_clock_thermal.signature(sig, np.ones(n, dtype=bool))
    assert s.holds is not None and np.nansum(s.holds) == 0


def test_busy_cores_while_arrivals_burst_are_the_burst_not_a_noisy_neighbour():
    from loadkit.analysis.causes import cpu_saturation
    from tests.unit.analysis.test_attribution_overlaps import _host

    n = 12
    sig = _signals(n)
    host = _host(n, 0.0, None)
    host.has_per_core = True
    host.busy_core_frac = np.zeros(n)
    host.busy_core_frac[[4, 5, 7, 10]] = 1.0
    sig.host = host
    sig.offered_rps[4:6] = 600.0  # the server works through a burst: its cores are busy
    s = cpu_saturation.signature(sig, np.array([True] * 4 + [False] * 2 + [True] * 6))
    # THEN neither the burst nor the backlog it leaves (window 7) is a noisy neighbour
    assert s.holds is not None and np.nonzero(s.holds > 0)[0].tolist() == [10]


def test_a_gap_while_the_cpu_is_taken_is_cpu_starvation_not_a_stall():
    from loadkit.analysis.causes import process_stall
    from tests.unit.analysis.test_attribution_overlaps import _host

    n = 12
    sig = _signals(n)
    # GIVEN gaps of 0.6 s in windows 3 and 8; the cores are saturated only in window 8
    sig.gaps = CompletionGaps(
        np.array([[3 * S + S // 5, 3 * S + 4 * S // 5], [8 * S + S // 5, 8 * S + 4 * S // 5]]),
        "test",
    )
    host = _host(n, 0.0, None)
    host.has_per_core = True
    host.busy_core_frac = np.zeros(n)
    host.busy_core_frac[8] = 1.0
    sig.host = host
    s = process_stall.signature(sig, np.ones(n, dtype=bool))
    # THEN only the gap on an otherwise idle CPU is a stall
    assert s.holds is not None and np.nonzero(s.holds > 0)[0].tolist() == [3]
    # ... and on a host busy all run long, the CPU does not explain either gap
    host.busy_core_frac = np.ones(n)
    s = process_stall.signature(sig, np.ones(n, dtype=bool))
    assert s.holds is not None and np.nonzero(s.holds > 0)[0].tolist() == [3, 8]


def test_the_report_shows_where_the_time_went_per_episode(analyze_spec):
    from loadkit.report.context import _episode

    slow = tuple(W(12 + 9 * k, 15 + 9 * k, 2.5) for k in range(7))
    a = analyze_spec(RunSpec(duration_s=80, rate_rps=400, model_slowdowns=slow), "slow-model")
    row = _episode(a.episodes_for("p99")[0])
    assert row["grew"].startswith("server compute +")


def _preempted_host(n: int, busy: np.ndarray, preemptions: np.ndarray):
    from tests.unit.analysis.test_attribution_overlaps import _host

    host = _host(n, 0.0, None)
    host.has_per_core = True
    host.busy_core_frac = busy
    host.server_preemptions_per_cpu_s = preemptions
    return host


def test_saturated_cores_name_cpu_saturation_only_where_the_server_is_preempted():
    from loadkit.analysis.causes import cpu_saturation

    n = 12
    sig = _signals(n)
    # GIVEN a host someone else keeps busy all run; the server is preempted 4x its
    # usual rate per CPU-second only in windows 5-6 (a co-located job took its CPU)
    rate = np.full(n, 300.0)
    rate[5:7] = 1200.0
    sig.host = _preempted_host(n, np.ones(n), rate)
    s = cpu_saturation.signature(sig, np.ones(n, dtype=bool))
    # THEN busy cores alone do not hold; the starved windows do
    assert s.holds is not None and np.nonzero(s.holds > 0)[0].tolist() == [5, 6]
    assert "preempted 1200 times per CPU-second vs 300" in cpu_saturation.summary(
        s.evidence(s.holds > 0, s.holds == 0) if s.evidence else [], "2/2 spike episodes", None
    )


def test_a_gap_while_the_server_is_preempted_is_starvation_and_a_stop_is_a_stall():
    from loadkit.analysis.causes import process_stall

    n = 14
    sig = _signals(n)
    # GIVEN 0.4 s gaps in windows 3 and 10 on a host busy all run; in window 10
    # the server was preempted 4x its usual rate (starved); in window 3 it was
    # not scheduled at all (stopped: its rate per CPU-second stays as usual)
    sig.gaps = CompletionGaps(
        np.array([[3 * S + S // 2, 3 * S + 9 * S // 10], [10 * S + S // 2, 10 * S + 9 * S // 10]]),
        "test",
    )
    rate = np.full(n, 300.0)
    rate[10] = 1200.0
    sig.host = _preempted_host(n, np.ones(n), rate)
    s = process_stall.signature(sig, np.ones(n, dtype=bool))
    # THEN only the stop is a process stall
    assert s.holds is not None and np.nonzero(s.holds > 0)[0].tolist() == [3]


def test_the_servers_wait_for_a_cpu_tells_starvation_from_a_stop_before_preemptions_do():
    from loadkit.analysis.causes import cpu_saturation, process_stall

    n = 14
    sig = _signals(n)
    # GIVEN 0.4 s gaps in windows 3 and 10 on a host busy all run. In window 3 the
    # server was stopped: its threads were not runnable, so they waited for a CPU no
    # longer than usual, though the catch-up after SIGCONT preempted it 4x (the rate
    # that would mislead without the run delay). In window 10 its threads waited 8x
    # their usual time: runnable, kept off the CPU.
    sig.gaps = CompletionGaps(
        np.array([[3 * S + S // 2, 3 * S + 9 * S // 10], [10 * S + S // 2, 10 * S + 9 * S // 10]]),
        "test",
    )
    preemptions = np.full(n, 300.0)
    preemptions[3] = 1200.0
    sig.host = _preempted_host(n, np.ones(n), preemptions)
    wait = np.full(n, 150.0)
    wait[3] = 200.0
    wait[10] = 1200.0
    sig.host.server_run_delay_ms_per_s = wait
    base = np.ones(n, dtype=bool)
    # THEN the stop is a process stall and the starved gap is CPU saturation's
    s = process_stall.signature(sig, base)
    assert s.holds is not None and np.nonzero(s.holds > 0)[0].tolist() == [3]
    c = cpu_saturation.signature(sig, base)
    assert c.holds is not None and np.nonzero(c.holds > 0)[0].tolist() == [10]
    text = cpu_saturation.summary(
        c.evidence(c.holds > 0, c.holds == 0) if c.evidence else [], "1/1 spike episodes", None
    )
    assert "waited 1200 ms per second for a CPU vs 150" in text


def test_compute_slowdown_on_saturated_cores_stays_a_weak_lead():
    from loadkit.analysis.causes import unexplained
    from tests.unit.analysis.test_attribution_overlaps import _host

    n = 12
    sig = _signals(n)
    sig.triton = _triton(n)
    sig.triton.batch_compute_ms[6:8] = 8.0  # x2 at the same batch size
    host = _host(n, 0.0, None)
    host.has_per_core = True
    host.busy_core_frac = np.zeros(n)
    sig.host = host
    base = np.ones(n, dtype=bool)
    base[6:8] = False
    # GIVEN idle cores: the compute slowdown may be as strong as its statistics allow
    s = unexplained.compute_signature(sig, base)
    assert s.max_confidence is None and np.nonzero(s.holds > 0)[0].tolist() == [6, 7]
    # ... on cores saturated where it slowed, it cannot be told from CPU contention
    host.busy_core_frac[5:9] = 1.0
    s = unexplained.compute_signature(sig, base)
    assert s.max_confidence == "weak"
    assert any("cannot be told from CPU contention" in note for note in s.notes)


def _triton(n: int):
    from loadkit.analysis.telemetry import TritonSeries

    nan = np.full(n, np.nan)
    t = TritonSeries(None, nan, nan, nan, nan, nan, nan, nan, nan, None, 0)
    t.batch_compute_ms = np.full(n, 4.0)
    t.batch_size_req_weighted = np.full(n, 1.0)
    t.batch_size_mean = np.full(n, 1.0)
    t.queue_ms_per_request = np.full(n, 0.5)
    return t


def test_a_pool_that_grows_while_requests_pile_up_is_not_connection_churn():
    import pandas as pd

    from loadkit.analysis.telemetry import align_request_samples

    # GIVEN 10 ms requests, and from 5 s on a backlog: every request takes 200 ms,
    # and the client opens new connections then (its pool grows to carry it)
    sent = np.arange(0, 10, 0.01)
    service = np.where(sent >= 5.0, 0.2, 0.01)
    new = (sent >= 5.0) & (np.arange(sent.size) % 10 == 0)
    frame = pd.DataFrame(
        {
            "t_ns": ((sent + service) * S).astype(np.int64),
            "sent_ns": (sent * S).astype(np.int64),
            "done_ns": ((sent + service) * S).astype(np.int64),
            "connection_new": new,
        }
    )
    samples = align_request_samples(frame, make_grid(0, 11 * S, 1.0))
    assert samples is not None
    # THEN against the whole run a first request looks 20x slower, against the
    # requests sent at the same moment it is not slower at all
    assert samples.first_request_ms == pytest.approx(200.0)
    assert samples.first_vs_neighbours == pytest.approx(1.0)
    # ... so churn's signature does not hold
    from loadkit.analysis.causes import connection_churn

    sig = _signals(11)
    sig.samples = samples
    sig.throughput_rps = np.full(11, 100.0)
    s = connection_churn.signature(sig, np.ones(11, dtype=bool))
    assert s.holds is None or np.nansum(s.holds) == 0
    # ... while a first request 3x slower than its neighbours is a cost of the connection
    frame.loc[new, "done_ns"] = frame.loc[new, "sent_ns"] + int(0.6 * S)
    slow = align_request_samples(frame, make_grid(0, 11 * S, 1.0))
    assert slow is not None and slow.first_vs_neighbours == pytest.approx(3.0)


def test_a_tail_made_by_a_few_large_requests_is_data_movement():
    import pandas as pd

    from loadkit.analysis.causes import data_movement
    from loadkit.analysis.telemetry import align_request_samples

    # GIVEN 100 requests/s of 2 KiB taking 10 ms; in seconds 10-12 and 20-22 one request
    # in 20 carries 1 MiB and takes 60 ms: the window's mean latency barely moves
    sent = np.arange(0, 30, 0.01)
    large = (((sent >= 10) & (sent < 12)) | ((sent >= 20) & (sent < 22))) & (
        np.arange(sent.size) % 20 == 0
    )
    latency = np.where(large, 0.06, 0.01)
    frame = pd.DataFrame(
        {
            "t_ns": (sent * S).astype(np.int64),
            "sent_ns": (sent * S).astype(np.int64),
            "done_ns": ((sent + latency) * S).astype(np.int64),
            "connection_new": False,
            "request_bytes": np.where(large, 1 << 20, 2048),
        }
    )
    n = 30
    samples = align_request_samples(frame, make_grid(0, n * S, 1.0))
    assert samples is not None and samples.slow_request_bytes is not None
    # THEN the slowest requests of those windows are the large ones
    assert samples.slow_request_bytes[10] > 100 * samples.slow_request_bytes[5]
    sig = _signals(n)
    sig.samples = samples
    baseline = np.ones(n, dtype=bool)
    baseline[[10, 11, 20, 21]] = False
    s = data_movement.signature(sig, baseline)
    assert s.holds is not None
    assert list(np.flatnonzero(s.holds == 1)) == [10, 11, 20, 21]
    # ... and a window whose slow requests are ordinary ones (a stall) is not
    frame["request_bytes"] = 2048
    s = data_movement.signature(_signals_from_requests(frame, n), baseline)
    assert s.holds is not None and np.nansum(s.holds) == 0


def _signals_from_requests(frame, n):
    from loadkit.analysis.telemetry import align_request_samples

    sig = _signals(n)
    sig.samples = align_request_samples(frame, make_grid(0, n * S, 1.0))
    return sig


def test_the_baseline_falls_back_to_the_attributed_percentiles_episodes():
    import dataclasses

    from loadkit.analysis.attribution import MIN_BASELINE_WINDOWS, baseline_for
    from loadkit.analysis.model import SpikeEpisode

    def ep(pct: str, lo: int, hi: int) -> SpikeEpisode:
        return SpikeEpisode(
            f"{pct}#{lo}",
            pct,
            "corrected",
            lo * S,
            hi * S,
            lo,
            hi - lo,
            lo * S,
            9,
            3,
            6,
            6,
            3,
            5,
            hi - lo,
        )

    n = 40
    starts = np.arange(n, dtype=np.int64) * S
    p99 = [ep("p99", 10, 14)]
    # GIVEN P50 episodes nearly everywhere (a noisy host)
    noisy = p99 + [ep("p50", 0, 9), ep("p50", 16, 38)]
    base = baseline_for(n, p99, noisy, starts)
    # THEN the baseline is the windows outside the P99 episode (with its margin)
    assert base.sum() >= MIN_BASELINE_WINDOWS
    assert not base[8:16].any() and base[:8].all() and base[16:].all()
    # ... and with few other episodes, outside every percentile's episodes
    quiet = p99 + [ep("p50", 30, 33)]
    base = baseline_for(n, p99, quiet, starts)
    assert not base[28:35].any() and base[16:28].all()

    # GIVEN 2 s windows (a low-rate run) and a 1-window episode every 4-5 windows (a fault
    # every 9 s), the first and last windows without traffic
    starts2 = np.arange(n, dtype=np.int64) * 2 * S
    every = [
        dataclasses.replace(ep("p99", w, w + 1), start_ns=w * 2 * S, end_ns=(w + 1) * 2 * S)
        for w in range(3, n - 2, 5)
    ]
    loaded = np.ones(n, dtype=bool)
    loaded[[0, n - 1]] = False
    base = baseline_for(n, every, every, starts2, loaded)
    # THEN the margin is 2 s (one window) on each side, not two windows: each gap keeps
    # baseline windows, and no empty window is one
    assert base.sum() >= MIN_BASELINE_WINDOWS
    assert not base[[0, n - 1]].any() and not base[2:5].any()


def test_where_episodes_and_margins_cover_the_run_the_quietest_windows_are_the_baseline():
    import dataclasses

    from loadkit.analysis.attribution import baseline_for
    from loadkit.analysis.model import SpikeEpisode

    # GIVEN 3 s windows (a low-rate run) and a fault held for 2 of every 3 windows: its
    # episodes and their margins leave no window outside
    n = 21
    starts = np.arange(n, dtype=np.int64) * 3 * S
    p99 = np.full(n, 5.0)
    episodes = []
    for w in range(0, n, 3):
        p99[w : w + 2] = 40.0
        episodes.append(
            dataclasses.replace(
                SpikeEpisode(f"p99#{w}", "p99", "corrected", 0, 0, 0, 6, 0, 40, 5, 35, 70, 8, 9, 2),
                start_ns=w * 3 * S,
                end_ns=(w + 2) * 3 * S,
            )
        )
    # WHEN the baseline is chosen
    base = baseline_for(n, episodes, episodes, starts, np.ones(n, dtype=bool), p99)
    # THEN it is the quiet windows between the spikes, not every window
    assert base.sum() == 7 and np.all(p99[base] == 5.0)


def test_a_baseline_of_a_few_windows_gives_way_to_the_quietest_third():
    import dataclasses

    from loadkit.analysis.attribution import baseline_for
    from loadkit.analysis.model import SpikeEpisode

    # GIVEN 60 windows and a fault held for 4 of every 7 (its episodes and margins leave a
    # few windows outside: too few to have a spread)
    n = 60
    starts = np.arange(n, dtype=np.int64) * S
    p99 = np.full(n, 5.0) + (np.arange(n) % 3) * 0.1
    episodes = []
    for w in range(2, n - 4, 7):
        p99[w : w + 4] = 40.0
        episodes.append(
            dataclasses.replace(
                SpikeEpisode(f"p99#{w}", "p99", "corrected", 0, 0, 0, 4, 0, 40, 5, 35, 70, 8, 9, 2),
                start_ns=w * S,
                end_ns=(w + 4) * S,
            )
        )
    loaded = np.ones(n, dtype=bool)
    outside = baseline_for(n, episodes, episodes, starts, loaded, None)
    assert 3 <= outside.sum() < 10, outside.sum()  # (no latency: the windows outside, as before)
    # WHEN the baseline is chosen with the latency to rank windows by
    base = baseline_for(n, episodes, episodes, starts, loaded, p99)
    # THEN it is the quietest third of the run, all of them between the spikes
    assert base.sum() >= 20 and np.all(p99[base] < 6.0), base.sum()


def test_cores_busy_while_a_bursts_backlog_drains_are_not_cpu_saturation():
    from loadkit.analysis.causes import cpu_saturation

    n = 16
    sig = _signals(n)
    # GIVEN a 2-window burst of arrivals (3, 4) beyond capacity; its backlog keeps
    # requests piled up until window 10; the cores are busy and the server waits for
    # a CPU (its own threads) the whole time; and a starved window 13 of no burst
    sig.offered_rps = np.full(n, 150.0)
    sig.offered_rps[3:5] = 500.0
    sig.in_flight = np.full(n, 4.0)
    sig.in_flight[3:11] = 300.0
    busy = np.ones(n)
    wait = np.full(n, 100.0)
    wait[3:11] = 900.0
    wait[13] = 900.0
    sig.host = _preempted_host(n, busy, np.full(n, 300.0))
    sig.host.server_run_delay_ms_per_s = wait
    base = np.ones(n, dtype=bool)
    base[3:11] = base[13] = False  # the episodes
    s = cpu_saturation.signature(sig, base)
    # THEN only the starved window outside the burst and its backlog holds
    assert s.holds is not None and np.nonzero(s.holds > 0)[0].tolist() == [13]


def test_a_bursts_backlog_in_the_window_after_it_is_the_bursts():
    from loadkit.analysis.causes import arrival_burst
    from loadkit.analysis.telemetry import TritonSeries

    n = 16
    sig = _signals(n)
    sig.max_batch_size = 2
    # GIVEN 2 s windows: a 1.1 s burst at the end of windows 4 and 10 (their mean arrivals
    # under the capacity), its backlog filling the next window's batches at the usual
    # arrival rate; and full batches in window 14 after no rise in arrivals (a stall)
    sig.offered_rps = np.full(n, 65.0)
    sig.offered_rps[[4, 10]] = 440.0
    batch = np.ones(n)
    batch[[5, 11, 14]] = 2.0
    flat = np.full(n, 4.4)
    sig.triton = TritonSeries(
        model="m",
        executions_per_s=np.full(n, 60.0),
        inferences_per_s=np.full(n, 65.0),
        batch_size_mean=batch,
        batch_size_max=batch,
        batch_size_req_weighted=batch,
        queue_ms_per_request=np.full(n, 1.0),
        batch_compute_ms=flat,
        compute_ms_per_request=flat / batch,
        batch_sizes=None,
        counter_resets=0,
    )
    base = np.ones(n, dtype=bool)
    base[[4, 5, 10, 11, 14]] = False
    s = arrival_burst.signature(sig, base)
    # THEN the burst's backlog holds; the full batches after no rise do not
    assert s.holds is not None and np.nonzero(s.holds > 0)[0].tolist() == [5, 11]


def test_without_reason_bits_a_clock_drop_near_the_devices_own_slowdown_temperature_is_thermal():
    """A GPU that slows down at 80 °C throttles at 78 °C: thermal, though under the fixed 85."""
    from loadkit.analysis.causes._gpu_clock import throttle_classes
    from loadkit.analysis.model import CAUSE_GPU_CLOCK_OTHER, CAUSE_GPU_THERMAL
    from loadkit.analysis.telemetry import GpuSeries

    n = 4
    dropped = np.array([1.0, 0.6, 0.6, 1.0])  # busy clock at 60 % of max in windows 1-2

    def gpu(slowdown_c: np.ndarray | None) -> GpuSeries:
        return GpuSeries(
            sm_clock_mhz=1980.0 * dropped,
            sm_clock_max_mhz=np.full(n, 1980.0),
            clock_ratio_busy=dropped,
            temp_c=np.array([70.0, 78.0, 78.0, 70.0]),
            power_w=np.full(n, 300.0),
            power_limit_w=np.full(n, 700.0),
            util_pct=np.full(n, 90.0),
            mem_used_bytes=np.full(n, 1e9),
            mem_total_bytes=8e10,
            thermal_reason=np.full(n, np.nan),
            power_reason=np.full(n, np.nan),
            has_reasons=False,  # e.g. imported from nvidia-smi without the reason columns
            temp_slowdown_c=slowdown_c,
        )

    own = throttle_classes(gpu(np.full(n, 80.0)))
    assert own[CAUSE_GPU_THERMAL].tolist() == [False, True, True, False]
    fallback = throttle_classes(gpu(None))  # not recorded: 85 °C (90 - 5) as before
    assert not fallback[CAUSE_GPU_THERMAL].any()
    assert fallback[CAUSE_GPU_CLOCK_OTHER].tolist() == [False, True, True, False]


def test_a_throttle_filling_part_of_a_long_window_is_named_by_the_reason_bit_seen():
    """A 1.4 s thermal throttle in a 3 s window: the bit was on in 40 % of the samples."""
    from loadkit.analysis.causes._gpu_clock import throttle_classes
    from loadkit.analysis.model import CAUSE_GPU_CLOCK_OTHER, CAUSE_GPU_POWER, CAUSE_GPU_THERMAL
    from loadkit.analysis.telemetry import GpuSeries

    n = 5
    dropped = np.array([1.0, 0.78, 0.78, 0.78, 0.78])
    gpu = GpuSeries(
        sm_clock_mhz=1980.0 * dropped,
        sm_clock_max_mhz=np.full(n, 1980.0),
        clock_ratio_busy=dropped,
        temp_c=np.array([42.0, 88.0, 60.0, 70.0, 60.0]),
        power_w=np.full(n, 300.0),
        power_limit_w=np.full(n, 700.0),
        util_pct=np.full(n, 10.0),
        mem_used_bytes=np.full(n, 1e9),
        mem_total_bytes=8e10,
        thermal_reason=np.array([0.0, 0.4, 0.0, 0.3, 0.0]),
        power_reason=np.array([0.0, 0.0, 0.0, 0.5, 0.03]),
        has_reasons=True,
    )
    classes = throttle_classes(gpu)
    # THEN the drop with the thermal bit in 40 % of samples is thermal, the one with more
    # power-cap samples than thermal is power, and one bit seen once names nothing
    assert classes[CAUSE_GPU_THERMAL].tolist() == [False, True, False, False, False]
    assert classes[CAUSE_GPU_POWER].tolist() == [False, False, False, True, False]
    assert classes[CAUSE_GPU_CLOCK_OTHER].tolist() == [False, False, True, False, True]


def test_a_compute_slowdown_too_small_for_the_tail_is_no_residual():
    from loadkit.analysis.causes.unexplained import compute_signature

    # GIVEN compute per batch x1.4 in windows 5-6, under a P99 of 6 ms
    n = 20
    sig = _signals(n)
    sig.triton = _triton(n)
    baseline = np.ones(n, dtype=bool)
    baseline[[5, 6]] = False

    def holds(compute_ms: float) -> list[int]:
        sig.triton.batch_compute_ms = np.full(n, compute_ms)
        sig.triton.batch_compute_ms[[5, 6]] *= 1.4
        s = compute_signature(sig, baseline)
        assert s.holds is not None
        return list(np.flatnonzero(s.holds == 1))

    # THEN of a 4 ms compute (+1.6 ms) it is where the time went
    assert holds(4.0) == [5, 6]
    # ... of a 0.3 ms compute (+0.12 ms, clean doc_ranker seed 23 of the wide benchmark
    # read "moderate") it is host noise, not a P99 spike's milliseconds
    assert holds(0.3) == []


def test_service_capacity_fits_the_batch_size_per_batch_where_requests_are_not_weighted():
    from loadkit.analysis.causes.base import expected_batch_compute, service_capacity_rps

    # GIVEN Triton statistics with only the mean batch size (an import, an older run):
    # compute per batch 1 ms + 0.25 ms per request, at batch sizes 4 to 8
    n = 12
    sig = _signals(n)
    sig.triton = _triton(n)
    sig.triton.batch_size_req_weighted = np.full(n, np.nan)
    sig.triton.batch_size_mean = np.array([4.0, 5.0, 6.0, 7.0, 8.0, 4.0] * 2)
    sig.triton.batch_compute_ms = 1.0 + 0.25 * sig.triton.batch_size_mean
    base = np.ones(n, dtype=bool)
    # THEN the capacity comes from the same fit as the expected compute, not None
    assert expected_batch_compute(sig, base) == pytest.approx(sig.triton.batch_compute_ms)
    capacity = service_capacity_rps(sig, base)
    assert capacity is not None
    # max batch 32 in 1 + 0.25 * 32 = 9 ms, compute as fast as in the baseline
    assert capacity == pytest.approx(np.full(n, 32 / 9.0 * 1000.0))
